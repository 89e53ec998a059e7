"""The DeepL API v2 through a real server (python -m server --no-ray, demo model, an API key configured): the
official `deepl` client unchanged with server_url, raw JSON and urlencoded requests, DeepL's errors."""

import deepl
import httpx
import pytest
from num2words import num2words
from server_process import running_server

KEY = "deepl-test-key"
AUTH = {"Authorization": f"DeepL-Auth-Key {KEY}"}


def words(n: int, lang: str = "en") -> str:
    return num2words(n, lang=lang)


@pytest.fixture(scope="module")
def url():
    with running_server("--no-ray", "--max-body-bytes", "20000", env={"SERVER_API_KEYS": KEY}) as server:
        yield server.url


@pytest.fixture(scope="module")
def translator(url):
    return deepl.Translator(KEY, server_url=url)


def test_one_text_detects_the_source(translator):
    result = translator.translate_text(words(42), target_lang="DE")
    assert (result.text, result.detected_source_lang, result.billed_characters) == (words(42, "de"), "EN", 9)


def test_a_list_with_and_without_source_lang(translator):
    numbers = [101, 7, 2024]
    for source_lang in ("EN", None):
        results = translator.translate_text([words(n) for n in numbers], source_lang=source_lang, target_lang="fr")
        assert [r.text for r in results] == [words(n, "fr") for n in numbers]
        assert {r.detected_source_lang for r in results} == {"EN"}
        assert [r.billed_characters for r in results] == [len(words(n)) for n in numbers]


def test_languages(translator):
    assert [(lang.code, lang.name) for lang in translator.get_source_languages()] == [("EN", "English")]
    targets = translator.get_target_languages()  # a GET with a form body type=target
    assert [lang.code for lang in targets] == ["DE", "FR", "ES", "IT"]
    assert {lang.supports_formality for lang in targets} == {False}


def test_usage_counts_this_keys_characters(translator):
    before = translator.get_usage().character.count
    translator.translate_text([words(999), words(18)], target_lang="IT")
    usage = translator.get_usage()
    assert usage.character.count == before + len(words(999)) + len(words(18))
    assert not usage.any_limit_reached


def test_a_wrong_key_is_an_authorization_error(url):
    with pytest.raises(deepl.AuthorizationException):
        deepl.Translator("not-the-key", server_url=url).translate_text(words(7), target_lang="DE")


@pytest.mark.parametrize("target", ["JA", "EN-US", "ZH-HANS"])
def test_an_unsupported_target_is_a_deepl_error_not_a_server_error(translator, target):
    with pytest.raises(deepl.DeepLException) as raised:
        translator.translate_text(words(7), target_lang=target)
    assert raised.value.http_status_code == 400


def test_urlencoded_repeated_text_and_the_legacy_auth_key(url):
    r = httpx.post(f"{url}/v2/translate", data={"auth_key": KEY, "text": [words(7), words(365)],
                                                "target_lang": "es", "source_lang": "en"})
    assert r.status_code == 200, r.text
    assert [t["text"] for t in r.json()["translations"]] == [words(7, "es"), words(365, "es")]
    assert {t["detected_source_language"] for t in r.json()["translations"]} == {"EN"}


def test_options_accepted(url):
    body = {"text": [words(18)], "target_lang": "de", "split_sentences": 0, "preserve_formatting": True,
            "formality": "prefer_more", "context": "numbers", "model_type": "quality_optimized",
            "show_billed_characters": True}
    r = httpx.post(f"{url}/v2/translate", json=body, headers=AUTH)
    assert r.json() == {"translations": [{"detected_source_language": "EN", "text": words(18, "de"),
                                          "billed_characters": len(words(18)), "model_type_used": "latency_optimized"}]}


def test_model_type_is_answered_with_the_model_type_used(translator):
    for model_type in deepl.ModelType:
        result = translator.translate_text(words(42), target_lang="DE", model_type=model_type)
        assert (result.text, result.model_type_used) == (words(42, "de"), "latency_optimized")
    assert translator.translate_text(words(42), target_lang="DE").model_type_used is None


def test_context_is_accepted_and_neither_translated_nor_billed(translator):
    before = translator.get_usage().character.count
    result = translator.translate_text(words(7), target_lang="FR", context=f"{words(12)} apples. " * 20)
    assert (result.text, result.billed_characters) == (words(7, "fr"), len(words(7)))
    assert translator.get_usage().character.count == before + len(words(7))


def test_tag_handling_version_two_parses_xml_strictly(translator):
    for version in ("v1", "v2"):
        good = translator.translate_text(f"<b>{words(7)}</b>", target_lang="DE", tag_handling="xml",
                                         tag_handling_version=version)
        assert good.text == f"<b>{words(7, 'de')}</b>"
        with pytest.raises(deepl.DeepLException) as raised:  # an unclosed element: DeepL's v2 answer
            translator.translate_text(f"<p>{words(7)}</a>", target_lang="DE", tag_handling="xml",
                                      tag_handling_version=version)
        assert raised.value.http_status_code == 400
        assert "Tag handling parsing failed, please check input." in str(raised.value)


@pytest.mark.parametrize("guidance, field", [({"custom_instructions": ["Use a formal tone"]}, "custom_instructions"),
                                             ({"style_rule": "a-style-rule-id"}, "style_id")])
def test_instructions_and_style_rules_are_refused_not_ignored(translator, guidance, field):
    with pytest.raises(deepl.DeepLException) as raised:
        translator.translate_text(words(7), target_lang="DE", **guidance)
    assert raised.value.http_status_code == 400
    assert f"Value for '{field}' not supported: this server's models translate the text alone" in str(raised.value)


def test_v3_languages_per_resource(url):
    def get(**params):
        return httpx.get(f"{url}/v3/languages", params=params, headers=AUTH)

    stable = {"status": "stable"}
    text = get(resource="translate_text").json()
    assert [(lang["lang"], lang["name"], lang["usable_as_source"], lang["usable_as_target"]) for lang in text] == [
        ("en", "English", True, False), ("de", "German", False, True), ("fr", "French", False, True),
        ("es", "Spanish", False, True), ("it", "Italian", False, True)]
    assert text[0]["features"] == {"tag_handling": stable, "glossary": stable, "auto_detection": stable}
    assert {str(lang["features"]) for lang in text[1:]} == {str({"tag_handling": stable, "glossary": stable})}
    assert {lang["status"] for lang in text} == {"stable"}
    assert [lang["features"] for lang in get(resource="glossary").json()] == [{}] * 5
    assert get(resource="voice").json() == [] and get(product="translate_text").json() == text
    assert get().status_code == 400 and get().json() == {"message": "Parameter 'resource' not specified."}
    assert get(resource="speech").status_code == 400


def test_weblate_xml_placeholders_come_back_intact(url):
    body = {"text": [f'{words(42)} <x id="1"></x>', f"<g>{words(7)}</g>"], "target_lang": "DE",
            "source_lang": "EN", "tag_handling": "xml", "ignore_tags": ["x"]}
    texts = [t["text"] for t in httpx.post(f"{url}/v2/translate", json=body, headers=AUTH).json()["translations"]]
    assert texts[0].startswith(words(42, "de")) and texts[0].endswith('<x id="1"></x>')
    assert texts[1] == f"<g>{words(7, 'de')}</g>"


def test_html_and_sentences(url):
    body = {"text": [f"<p>{words(365)}<br>{words(18)}</p>"], "target_lang": "it", "tag_handling": "html"}
    html = httpx.post(f"{url}/v2/translate", json=body, headers=AUTH).json()["translations"][0]["text"]
    assert html == f"<p>{words(365, 'it')}<br>{words(18, 'it')}</p>"
    form = {"text": f"{words(101)}.\n{words(7)}.", "target_lang": "it", "split_sentences": "1"}
    one = httpx.post(f"{url}/v2/translate", data=form, headers=AUTH).json()["translations"][0]["text"]
    assert one.splitlines() == [words(101, "it"), words(7, "it")]


def test_languages_type_in_the_query_string_and_the_glossary_pairs(url):
    targets = httpx.get(f"{url}/v2/languages?type=target", headers=AUTH).json()
    assert [t["language"] for t in targets] == ["DE", "FR", "ES", "IT"]
    pairs = httpx.get(f"{url}/v2/glossary-language-pairs", headers=AUTH).json()["supported_languages"]
    assert pairs == [{"source_lang": "en", "target_lang": t} for t in ("de", "fr", "es", "it")]


@pytest.mark.parametrize("body, status, message", [
    ({"target_lang": "DE"}, 400, "Parameter 'text' not specified."),
    ({"text": [words(7)]}, 400, "Parameter 'target_lang' not specified."),
    ({"text": [words(7)], "target_lang": "DE", "source_lang": "XX"}, 400, "Value for 'source_lang' not supported."),
    ({"text": [words(7)], "target_lang": "DE", "tag_handling": "markdown"}, 400, None),
    ({"text": [words(7)], "target_lang": "DE", "tag_handling_version": "v3"}, 400, None),
    ({"text": [words(7)], "target_lang": "DE", "model_type": "fastest"}, 400, None),
    ({"text": [words(7)], "target_lang": "DE", "custom_instructions": "Be formal"}, 400,
     "Value for 'custom_instructions' not supported: this server's models translate the text alone and do not "
     "follow free-text instructions"),
    ({"text": [words(7)], "target_lang": "DE", "glossary_id": "g1"}, 400,
     "Use of a glossary requires the source_lang parameter to be specified"),
    ({"text": [words(7)] * 51, "target_lang": "DE"}, 413, "Too many texts: 51; at most 50"),
    ({"text": ["x" * 25_000], "target_lang": "DE"}, 413, None),  # body over --max-body-bytes
])
def test_errors_in_deepls_shape(url, body, status, message):
    r = httpx.post(f"{url}/v2/translate", json=body, headers=AUTH)
    assert r.status_code == status and set(r.json()) == {"message"}, r.text
    assert message is None or r.json()["message"] == message


def test_missing_key_is_403_on_every_route(url):
    for method, path in (("POST", "/v2/translate"), ("GET", "/v2/languages"), ("GET", "/v2/usage"),
                         ("GET", "/v2/glossary-language-pairs"), ("GET", "/v3/languages?resource=translate_text")):
        r = httpx.request(method, f"{url}{path}")
        assert r.status_code == 403 and set(r.json()) == {"message"}, path
