"""The LibreTranslate API through a real server (python -m server --no-ray, demo model): the client packages
unchanged, requests shaped as Mastodon, Weblate and Misskey send them, LibreTranslate's errors and CORS."""

import io

import docx
import format_files as files_
import httpx
import pytest
from deep_translator import LibreTranslator
from libretranslatepy import LibreTranslateAPI
from num2words import num2words
from server_process import running_server

from server.front.downloads import Downloads
from server.front.served_languages import ServedLanguages, canonical, public_code
from server.domain import LanguageInfo, ModelInfo

MAX_CHARS = 400


def words(n: int, lang: str = "en") -> str:
    return num2words(n, lang=lang)


@pytest.fixture(scope="module")
def url():
    with running_server("--no-ray", "--max-request-chars", str(MAX_CHARS), "--max-body-bytes", "100000") as server:
        yield server.url


def test_libretranslatepy_translate_languages_detect(url):
    client = LibreTranslateAPI(url)  # form-encoded POSTs; /languages as a GET with a form body
    assert client.translate(words(42), "en", "de") == words(42, "de")
    assert client.translate(words(365), "auto", "it") == words(365, "it")
    languages = {entry["code"]: entry for entry in client.languages()}
    assert languages["en"] == {"code": "en", "name": "English", "targets": ["de", "fr", "es", "it"]}
    assert set(languages) == {"en", "de", "fr", "es", "it"}
    assert client.detect(words(2024)) == [{"confidence": 100.0, "language": "en"}]


def test_deep_translator_sends_everything_in_the_query_string(url):
    translator = LibreTranslator(source="en", target="fr", api_key="any key", custom_url=url + "/")
    assert translator.translate(words(101)) == words(101, "fr")
    assert translator.translate_batch([words(7), words(18)]) == [words(7, "fr"), words(18, "fr")]


def test_mastodon_json_list_auto_html(url):
    texts = [f"<p>{words(42)}</p>", f"<p>{words(999)}</p><p>{words(7)}</p>", words(18)]
    r = httpx.post(f"{url}/translate", json={"q": texts, "source": "auto", "target": "es", "format": "html",
                                             "api_key": ""})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["translatedText"] == [f"<p>{words(42, 'es')}</p>", f"<p>{words(999, 'es')}</p><p>{words(7, 'es')}</p>",
                                      words(18, "es")]
    assert [d["language"] for d in body["detectedLanguage"]] == ["en"] * 3  # one per item
    assert all(0 < d["confidence"] <= 100 for d in body["detectedLanguage"])


def test_weblate_json_list_with_source(url):
    r = httpx.post(f"{url}/translate", json={"api_key": "", "q": [words(18), words(2024)], "source": "en",
                                             "target": "de"})
    assert r.json() == {"translatedText": [words(18, "de"), words(2024, "de")]}  # no detectedLanguage
    assert [entry["code"] for entry in httpx.get(f"{url}/languages").json()][0] == "en"


def test_misskey_single_text_auto_empty_key(url):
    r = httpx.post(f"{url}/translate", json={"q": words(365), "source": "auto", "target": "fr", "format": "text",
                                             "api_key": ""})
    assert r.status_code == 200, r.text
    assert r.json()["translatedText"] == words(365, "fr")
    assert r.json()["detectedLanguage"] == {"confidence": 100.0, "language": "en"}


def test_alternatives_come_from_n_best(url):
    r = httpx.post(f"{url}/translate", json={"q": words(42), "source": "en", "target": "it", "alternatives": 2})
    body = r.json()
    assert body["translatedText"] == words(42, "it")
    assert len(body["alternatives"]) == 2 and words(42, "it") not in body["alternatives"]
    listed = httpx.post(f"{url}/translate", json={"q": [words(7)], "source": "en", "target": "it",
                                                  "alternatives": 1}).json()
    assert len(listed["alternatives"]) == 1 and len(listed["alternatives"][0]) == 1


def test_frontend_settings_and_health(url):
    settings = httpx.get(f"{url}/frontend/settings").json()
    assert settings["charLimit"] == MAX_CHARS and settings["keyRequired"] is False
    assert settings["language"]["target"]["code"] in ("de", "fr", "es", "it")
    assert httpx.get(f"{url}/health").json() == {"status": "ok"}


def test_translate_file_then_download_it(url):
    r = httpx.post(f"{url}/translate_file", data={"source": "en", "target": "de"},
                   files={"file": ("numbers.txt", f"{words(42)}\n{words(7)}\n".encode(), "text/plain")})
    file_url = r.json()["translatedFileUrl"]
    assert file_url.startswith(f"{url}/download_file/") and file_url.endswith(".numbers.txt")
    download = httpx.get(file_url)
    assert download.text == f"{words(42, 'de')}\n{words(7, 'de')}\n"
    assert "numbers.txt" in download.headers["content-disposition"]


def test_translate_a_docx_file_keeps_run_formatting(url):
    document = docx.Document()
    document.add_paragraph(words(365))
    document.add_paragraph().add_run(words(18)).bold = True
    data = io.BytesIO()
    document.save(data)
    r = httpx.post(f"{url}/translate_file", data={"source": "auto", "target": "fr"},
                   files={"file": ("report.docx", data.getvalue())})
    translated = docx.Document(io.BytesIO(httpx.get(r.json()["translatedFileUrl"]).content))
    assert [p.text for p in translated.paragraphs] == [words(365, "fr"), words(18, "fr")]
    assert translated.paragraphs[1].runs[0].bold


@pytest.mark.parametrize("name, data, read, expected", [
    ("talk.odp", files_.opendocument_bytes(".odp"), lambda d: files_.opendocument_texts(d)["paragraphs"],
     lambda alone: [alone("forty-two"), alone("seven")]),
    ("report.pdf", files_.pdf_bytes(*files_.PDF_PAGES), files_.docx_blocks,
     lambda alone: [("Heading 1", alone("forty-two")), ("Normal", alone("three hundred and five.")),
                    ("Normal", alone("seven.")), ("Heading 2", alone("nine")), ("Normal", alone("eleven."))]),
])
def test_translate_file_in_the_new_formats(url, alone, name, data, read, expected):
    r = httpx.post(f"{url}/translate_file", data={"source": "en", "target": "de"}, files={"file": (name, data)},
                   timeout=60)
    assert r.status_code == 200, r.text
    download = httpx.get(r.json()["translatedFileUrl"])
    assert read(download.content) == expected(alone)


def test_frontend_settings_list_every_format(url):
    formats = httpx.get(f"{url}/frontend/settings").json()["supportedFilesFormat"]
    assert {".txt", ".docx", ".pptx", ".xlsx", ".odt", ".odp", ".epub", ".xlf", ".pdf"} <= set(formats)


@pytest.mark.parametrize("files, status, message", [
    ({"file": ("slides.key", b"x")}, 400, "Invalid request: file format not supported"),
    (None, 400, "Invalid request: missing file parameter"),
])
def test_file_errors(url, files, status, message):
    r = httpx.post(f"{url}/translate_file", data={"source": "en", "target": "de"}, files=files)
    assert (r.status_code, r.json()) == (status, {"error": message})
    missing = httpx.get(f"{url}/download_file/0123.nothing.txt")
    assert missing.status_code == 404 and set(missing.json()) == {"error"}


def test_downloads_are_bounded_and_expire():
    clock = type("Clock", (), {"now": 0.0, "__call__": lambda self: self.now})()
    store = Downloads(max_files=2, ttl_s=10, clock=clock)
    first, second = store.put("a.txt", b"a"), store.put("../b.txt", b"b")
    assert second.endswith(".b.txt") and store.get(second).filename == "b.txt"
    third = store.put("c.txt", b"c")  # full: the oldest goes
    assert store.get(first) is None and store.get(third).content == b"c"
    clock.now = 10
    assert store.get(second) is None and store.get(third) is None


@pytest.mark.parametrize("request_kwargs, message", [
    (dict(json={"source": "en", "target": "de"}), "Invalid request: missing q parameter"),
    (dict(data={"q": words(7), "target": "de"}), "Invalid request: missing source parameter"),
    (dict(json={"q": words(7), "source": "en", "target": "xx"}), "xx is not supported"),
    (dict(json={"q": words(7), "source": "ja", "target": "de"}), "ja is not supported"),
    (dict(content=b"[1, 2]", headers={"content-type": "application/json"}), "Invalid JSON format"),
    (dict(content=b"{", headers={"content-type": "application/json"}), "Invalid JSON format"),
    (dict(json={"q": ["x" * 300, "y" * 200], "source": "en", "target": "de"}),
     f"Invalid request: request (500) exceeds text limit ({MAX_CHARS})"),
])
def test_errors_are_400_with_libretranslates_messages(url, request_kwargs, message):
    r = httpx.post(f"{url}/translate", **request_kwargs)
    assert (r.status_code, r.json()) == (400, {"error": message})


def test_body_too_large_and_invalid_utf8_in_libretranslates_shape(url):
    r = httpx.post(f"{url}/translate", data={"q": "x" * 120_000, "source": "en", "target": "de"})
    assert r.status_code == 413 and set(r.json()) == {"error"}
    r = httpx.post(f"{url}/detect", content=b"q=\xff", headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 400 and set(r.json()) == {"error"}


def test_cors_as_libretranslate_sends_it(url):
    assert httpx.get(f"{url}/languages").headers["access-control-allow-origin"] == "*"
    preflight = httpx.options(f"{url}/translate", headers={"Origin": "https://example.org",
                                                           "Access-Control-Request-Method": "POST",
                                                           "Access-Control-Request-Headers": "content-type"})
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-origin" not in httpx.get(f"{url}/v1/models").headers  # native API unchanged


def info(sources: list[tuple[str, str]], targets: list[tuple[str, str]]) -> ModelInfo:
    return ModelInfo(id="m", family="m2m_100", source_languages=tuple(LanguageInfo(*s) for s in sources),
                     target_languages=tuple(LanguageInfo(*t) for t in targets), default_beam_size=1, max_texts=8,
                     max_input_tokens=8, max_new_tokens=8, max_beams=1, max_request_chars=100,
                     max_document_chars=100, max_generate_chars=100)


def test_libretranslate_codes_old_and_new_any_case():
    nllb_like = [("eng_Latn", "en"), ("zho_Hans", "zh"), ("zho_Hant", "zh"), ("por_Latn", "pt")]
    served = ServedLanguages((info(nllb_like, nllb_like),))
    assert served.targets == ["en", "zh-Hans", "zh-Hant", "pt"]
    assert served.targets_of("en") == ["zh-Hans", "zh-Hant", "pt"]
    for code in ("zh-Hans", "ZH-HANT", "zh", "zt", "ZT", "pt-BR", "pb", "PB", "pt", "EN"):
        assert served.supports(code, "target"), code
    assert not served.supports("de", "target")
    assert canonical("zt") == "zh-Hant" and canonical("PB") == "pt-BR" and canonical("zh") == "zh-Hans"
    assert public_code(LanguageInfo("pt_BR", "pt")) == "pt-BR" and public_code(LanguageInfo("zh", "zh")) == "zh-Hans"
