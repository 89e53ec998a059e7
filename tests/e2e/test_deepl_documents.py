"""DeepL's document API through real servers (python -m server --no-ray, demo model, an API key configured), with the
official `deepl` client unchanged: translate_document_from_filepath for each format (run side by side: the client
polls every 5 s), its status calls, DocumentNotReadyException and 404s; a job submitted to a second server whose
process is killed mid-translation, taken over and fetched through the module's server, which shares its store."""

import datetime
import io
import signal
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import deepl
import docx
import httpx
import pytest
import format_files as files
from hostile_files import docx_bytes
from server_process import eventually, running_server

KEY = "deepl-documents-key"
SERVER = ("--no-ray", "--max-body-bytes", "300000", "--job-chunk-chars", "200")


def docx_paragraphs(data: bytes) -> list[str]:
    return [p.text for p in docx.Document(io.BytesIO(data)).paragraphs]


# name → (the file, what the translated file holds, the expected holding built from `alone`)
FORMATS = {
    "notes.txt": (b"forty-two.\n\nseven hundred.\n", bytes.decode,
                  lambda alone: f"{alone('forty-two.')}\n\n{alone('seven hundred.')}\n"),
    "page.html": (b"<html><body><h1>forty-two</h1><p>seven</p></body></html>", bytes.decode,
                  lambda alone: f"<html><body><h1>{alone('forty-two')}</h1><p>{alone('seven')}</p></body></html>"),
    "talk.srt": (b"1\n00:00:01,000 --> 00:00:02,000\nninety-nine\n", bytes.decode,
                 lambda alone: f"1\n00:00:01,000 --> 00:00:02,000\n{alone('ninety-nine')}\n"),
    "letter.docx": (docx_bytes("forty-two", "three hundred"), docx_paragraphs,
                    lambda alone: [alone("forty-two"), alone("three hundred")]),
    "book.xlsx": (files.xlsx_bytes(), files.xlsx_cells,
                  lambda alone: [[alone("forty-two"), 42, "=B1*2", datetime.datetime(2024, 1, 2)],
                                 [None] * 5 + [alone("seven")]]),
    "talk.pptx": (files.pptx_bytes(), files.pptx_texts,
                  lambda alone: {"title": alone("forty-two"), "body": alone("three hundred"), "bold": [False, True],
                                 "table": [alone("seven"), alone("nine")], "notes": alone("eleven")}),
    "strings.xlf": (files.XLIFF_12, files.xliff_targets,
                    lambda alone: [("translated", alone("forty-two")),
                                   ("translated", f'{alone("seven")} <ph id="1">&lt;br/&gt;</ph>')]),
    "letter.odt": (files.opendocument_bytes(".odt"), lambda data: files.opendocument_texts(data)["paragraphs"],
                   lambda alone: [alone("forty-two"), alone("three hundred"), alone("seven"), "nine",
                                  alone("eleven")]),
    "book.epub": (files.epub_bytes(), lambda data: files.epub_chapter(data)[0],
                  lambda alone: files.CHAPTER.replace(">forty-two<", f">{alone('forty-two')}<")
                  .replace(">seven<", f">{alone('seven')}<").replace(">nine<", f">{alone('nine')}<")),
    "report.pdf": (files.pdf_bytes(*files.PDF_PAGES), files.docx_blocks,
                   lambda alone: [("Heading 1", alone("forty-two")), ("Normal", alone("three hundred and five.")),
                                  ("Normal", alone("seven.")), ("Heading 2", alone("nine")),
                                  ("Normal", alone("eleven."))]),
}
# a PDF's translation is asked for as a Word document (the client sends output_format docx)
OUTPUT = {"report.pdf": "de-report.docx"}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> dict:
    """The environment of servers sharing one key store and its document jobs; a job whose process gave no sign of
    life for a second is taken over."""
    folder = tmp_path_factory.mktemp("store")
    return {"SERVER_API_KEYS": KEY, "SERVER_KEY_STORE": str(folder / "keys.sqlite"), "SERVER_JOB_STALE_S": "1"}


@pytest.fixture(scope="module")
def url(store):
    with running_server(*SERVER, env=store, timeout=120) as server:
        yield server.url


@pytest.fixture(scope="module")
def translator(url):
    return deepl.Translator(KEY, server_url=url)


@pytest.fixture(scope="module")
def translated(translator, tmp_path_factory):
    """Every format through translate_document_from_filepath at once: name → (its DocumentStatus, the output's
    bytes)."""
    folder = tmp_path_factory.mktemp("documents")

    def translate(name: str):
        source, out = folder / name, folder / OUTPUT.get(name, f"de-{name}")
        source.write_bytes(FORMATS[name][0])
        status = translator.translate_document_from_filepath(source, out, source_lang="EN", target_lang="DE")
        return status, out.read_bytes()

    with ThreadPoolExecutor(len(FORMATS)) as pool:
        return dict(zip(FORMATS, pool.map(translate, FORMATS)))


@pytest.mark.parametrize("name", FORMATS)
def test_translate_document_from_filepath(translated, alone, name):
    status, output = translated[name]
    _, read, expected = FORMATS[name]
    assert status.done and status.ok
    assert read(output) == expected(alone)
    assert status.billed_characters > 0


def test_status_calls_then_the_download(translator, alone):
    handle = translator.translate_document_upload(b"forty-two", filename="a.txt", target_lang="DE")
    first = translator.translate_document_get_status(handle)
    assert first.status.value in ("queued", "translating", "done")
    done = eventually(lambda: (s := translator.translate_document_get_status(handle)).done and s, 30)
    assert done.billed_characters == len("forty-two")
    assert translator.translate_document_download(handle).content.decode() == alone("forty-two")


def test_not_ready_and_not_found(translator, url, monkeypatch):
    monkeypatch.setattr(deepl.http_client, "max_network_retries", 0)  # the client's own setting: no retry of a 503
    long = "\n\n".join(["seven hundred and seventy-seven."] * 300)
    handle = translator.translate_document_upload(long.encode(), filename="long.txt", target_lang="DE")
    with pytest.raises(deepl.DocumentNotReadyException):
        translator.translate_document_download(handle)
    wrong = deepl.DocumentHandle(handle.document_id, "0" * 64)
    with pytest.raises(deepl.DeepLException) as raised:
        translator.translate_document_get_status(wrong)
    assert raised.value.http_status_code == 404
    with pytest.raises(deepl.DeepLException) as raised:
        translator.translate_document_download(deepl.DocumentHandle("NO-SUCH-DOCUMENT", handle.document_key))
    assert raised.value.http_status_code == 404


def test_an_unsupported_format_is_a_deepl_error(translator, tmp_path):
    source = tmp_path / "a.key"
    source.write_bytes(b"seven")
    with pytest.raises(deepl.DeepLException) as raised:
        translator.translate_document_from_filepath(source, tmp_path / "b.key", target_lang="DE")
    assert raised.value.http_status_code == 400 and "a.key" in str(raised.value)


def test_a_job_whose_server_died_is_taken_over_and_fetched_through_another(store, url, alone):
    lines = [f"{n} hundred and forty-two." for n in ("one", "two", "three", "four", "five", "six")] * 20
    # its engine in the server's process: a SIGKILL leaves nothing behind
    with running_server(*SERVER, "--max-batch-rows", "4", "--no-engine-process", env=store, timeout=120) as first:
        handle = deepl.Translator(KEY, server_url=first.url).translate_document_upload(
            "\n\n".join(lines).encode(), filename="long.txt", target_lang="DE")
        poll = {"document_key": handle.document_key}
        headers = {"Authorization": f"DeepL-Auth-Key {KEY}"}
        progress = eventually(lambda: httpx.post(f"{first.url}/v2/document/{handle.document_id}", json=poll,
                                                 headers=headers).json().get("seconds_remaining") is not None, 30)
        assert progress  # measured, mid-translation
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    translator = deepl.Translator(KEY, server_url=url)  # the module's server, sharing the store
    status = eventually(lambda: (s := translator.translate_document_get_status(handle)).done and s, 60)
    assert status.done
    jobs = sqlite3.connect(Path(store["SERVER_KEY_STORE"]).parent / "documents" / "jobs.sqlite")
    assert jobs.execute("SELECT attempts FROM jobs WHERE id = ?", (handle.document_id,)).fetchone() == (2,)
    each = {line: alone(line) for line in set(lines)}
    assert translator.translate_document_download(handle).content.decode() == "\n\n".join(each[x] for x in lines)
