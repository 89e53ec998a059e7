"""An adversarial suite against `python -m server --no-ray` on 127.0.0.1 (the demo model): every hostile request
gets the status its API's error shape promises, within a few seconds, without growing the server's peak memory by
more than 200 MB or holding up a client sending small requests beside it for more than a second; afterwards the
server is healthy and its answers correct."""

import io
import json
import socket
import threading
import time
import zipfile
from pathlib import Path

import httpx
import pytest
import format_files as files
from hostile_files import AMPLIFIED, BILLION_LAUGHS, DOCUMENT, docx_bytes, srt, with_entry
from server_process import running_server

PEAK_GROWTH_KB = 200_000


@pytest.fixture(scope="module")
def server():
    with running_server("--no-ray", "--max-batch-rows", "16", timeout=120) as s:
        yield s


def peak_kb(pid: int) -> int:
    """The peak resident memory (VmHWM) of the server process and its children (the engine process), in KiB."""
    pids = [pid] + [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                    for c in (task / "children").read_text().split()]
    return sum(int(line.split()[1]) for p in pids for line in Path(f"/proc/{p}/status").read_text().splitlines()
               if line.startswith("VmHWM:"))


class Beside:
    """A client sending one small translation after another while a hostile request runs: its latencies (one still
    unanswered when it stops counts with the time it has waited) and answers; `alone`: its slowest of three sent
    just before, the box's own pace (a busy CI box answers "seven" in over a second)."""

    def __init__(self, url: str):
        self.url, self.latencies, self.answers, self.stop = url, [], set(), threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.client = httpx.Client(timeout=30)
        self.alone = max(self._send() for _ in range(3))
        self.latencies.clear()
        self.sent_at: float | None = None

    def _send(self) -> float:
        self.sent_at = start = time.monotonic()
        response = self.client.post(f"{self.url}/v1/translate", json={"text": "seven", "target_lang": "de"})
        self.sent_at = None
        self.latencies.append(time.monotonic() - start)
        self.answers.add((response.status_code, response.text))
        return self.latencies[-1]

    def _run(self):
        while not self.stop.is_set():
            self._send()
            time.sleep(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(15)
        if (sent_at := self.sent_at) is not None:
            self.latencies.append(time.monotonic() - sent_at)
        self.client.close()

    def unharmed(self) -> bool:
        """Every answer a 200, none slower than a second more than twice the box's own pace."""
        return {code for code, _ in self.answers} == {200} and max(self.latencies) < 1.0 + 2 * self.alone


def multipart(name: str, data: bytes) -> dict:
    return {"files": {"file": (name, data)}, "data": {"target_lang": "de"}}


def entity_deepl(text: str) -> dict:
    return {"json": {"text": [text], "target_lang": "DE", "tag_handling": "xml"}}


ZIP_BOMB = with_entry(docx_bytes("forty-two"), "word/document.xml", lambda f: (
    f.write(DOCUMENT[:DOCUMENT.index("</w:p>") + 6].encode()),
    [f.write(b" " * (1 << 20)) for _ in range(64)], f.write(b"</w:body></w:document>")))


def renamed(kind: str) -> bytes:
    """An OpenDocument text or a PowerPoint file: a zip, but not a Word document."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        if kind == "odt":
            archive.writestr("mimetype", "application/vnd.oasis.opendocument.text")
            archive.writestr("content.xml", "<office:document-content/>")
        else:
            archive.writestr("[Content_Types].xml", '<Types xmlns="http://schemas.openxmlformats.org/package/2006/'
                             'content-types"><Override PartName="/ppt/presentation.xml" ContentType="application/'
                             'vnd.openxmlformats-officedocument.presentationml.presentation.main+xml"/></Types>')
            archive.writestr("ppt/presentation.xml", "<p:presentation/>")
    return out.getvalue()


def document(name: str, data: bytes) -> dict:
    """A DeepL document job's upload: checked, and refused, before the job exists."""
    return {"files": {"file": (name, data)}, "data": {"target_lang": "DE"}}


def inflating(build, entry: str) -> bytes:
    """The file `build()` gives with `entry` inflating 64 MiB of spaces."""
    return with_entry(build(), entry, lambda f: [f.write(b" " * (1 << 20)) for _ in range(64)])


DTD = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "forty-two">]><x>&a;</x>'
CASES = {  # name: (path, request arguments, status, words in the error)
    "zip bomb": ("/v1/translate/file", multipart("bomb.docx", ZIP_BOMB), 413, "at most 100 times"),
    "malformed docx": ("/v1/translate/file", multipart("bad.docx", with_entry(
        docx_bytes("forty-two"), "word/document.xml", lambda f: f.write(DOCUMENT[:DOCUMENT.index("<w:body>")].encode()
                                                                        + b"<w:body><w:p>"))), 400, "not a valid"),
    "odt renamed": ("/v1/translate/file", multipart("a.docx", renamed("odt")), 400, "not a valid .docx"),
    "pptx renamed": ("/v1/translate/file", multipart("a.docx", renamed("pptx")), 400, "not a valid .docx"),
    "dot-dot entry": ("/v1/translate/file", multipart("a.docx", with_entry(
        docx_bytes("forty-two"), "../x.xml", lambda f: f.write(b"<x/>"))), 400, "leaves the archive"),
    "xlsx bomb": ("/v2/document", document("bomb.xlsx", inflating(files.xlsx_bytes, "xl/worksheets/sheet1.xml")),
                  413, "at most 100 times"),
    "pptx with a DTD": ("/v2/document", document("evil.pptx", with_entry(files.pptx_bytes(), "ppt/slides/slide1.xml",
                                                                         lambda f: f.write(DTD))), 400, "DTD"),
    "odt bomb": ("/v1/documents", multipart("bomb.odt", inflating(lambda: files.opendocument_bytes(".odt"),
                                                                  "content.xml")), 413, "at most 100 times"),
    "odp with a DTD": ("/v1/documents", multipart("evil.odp", with_entry(files.opendocument_bytes(".odp"),
                                                                         "content.xml", lambda f: f.write(DTD))),
                       400, "DTD"),
    "epub dot-dot entry": ("/v2/document", document("evil.epub", with_entry(files.epub_bytes(), "../x.xhtml",
                                                                            lambda f: f.write(b"<x/>"))),
                           400, "leaves the archive"),
    "xliff billion laughs": ("/v2/document", document("evil.xlf", BILLION_LAUGHS.encode()), 400, "DTD"),
    "pdf bomb": ("/v2/document", document("bomb.pdf", files.pdf_bomb(50_000_000)), 400, "Limit reached"),
    "scanned pdf": ("/v2/document", document("scan.pdf", files.pdf_bytes([])), 400, "scanned"),
    "broken xlsx": ("/v1/documents", multipart("broken.xlsx", b"PK\x03\x04 not a zip"), 400, "not a valid .xlsx"),
    "20,000 cues": ("/v1/translate/file", multipart("big.srt", srt(20_000)), 422, "at most 50000"),
    "entity amplification": ("/v1/translate", {"json": {"text": AMPLIFIED, "target_lang": "de", "format": "xml"}},
                             400, "declares a DTD"),
    "deepl amplification": ("/v2/translate", entity_deepl(AMPLIFIED[:5_000] + "</r>"), 400, "declares a DTD"),
    "billion laughs": ("/v1/translate", {"json": {"text": BILLION_LAUGHS, "target_lang": "de", "format": "xml"}},
                       400, "declares a DTD"),
    "100,000-character word": ("/v1/translate", {"json": {"text": "a" * 100_000, "target_lang": "de"}}, 422,
                               "at most 50000"),
    "40,000-character word": ("/v1/translate", {"json": {"text": "a" * 40_000, "target_lang": "de"}}, 422,
                              "at most 8"),
    "50 texts of 18,000 characters": ("/v1/translate", {"json": {"text": ["forty-two. " * 1_636] * 50,
                                                                 "target_lang": "de"}}, 422, "at most 50000"),
    "nested JSON": ("/v1/translate", {"content": b"[" * 100_000 + b"]" * 100_000,
                                      "headers": {"content-type": "application/json"}}, 400, "could not be parsed"),
    "NaN length_penalty": ("/v1/translate", {"content": b'{"text": "seven", "target_lang": "de", '
                                                        b'"length_penalty": NaN}',
                                             "headers": {"content-type": "application/json"}}, 422, ""),
    "Infinity beam_size": ("/v1/translate", {"content": b'{"text": "seven", "target_lang": "de", '
                                                        b'"beam_size": Infinity}',
                                             "headers": {"content-type": "application/json"}}, 422, ""),
    "10^4 repeated form fields": ("/translate", {"data": {"q": ["seven"] * 10_000, "target": "de"}}, 400, ""),
    "10^4 multipart fields": ("/v1/translate/file", {"files": {"file": ("a.txt", b"seven")},
                                                     "data": {"target_lang": ["de"] * 10_000}}, 400, "multipart"),
    "10^4 multipart fields, LibreTranslate": ("/translate_file", {"files": {"file": ("a.txt", b"seven")},
                                                                  "data": {"target": ["de"] * 10_000}}, 400, ""),
    "LibreTranslate wrong type": ("/translate", {"json": {"q": {"a": 1}, "target": "de"}}, 400, ""),
    "DeepL out of range": ("/v2/translate", {"json": {"text": ["seven"], "target_lang": "DE",
                                                      "split_sentences": "7"}}, 400, ""),
}


@pytest.mark.parametrize("case", CASES)
def test_hostile_request_is_refused_bounded(server, case):
    path, arguments, status, words = CASES[case]
    before = peak_kb(server.proc.pid)
    with Beside(server.url) as beside:
        time.sleep(0.2)
        start = time.monotonic()
        response = httpx.post(server.url + path, timeout=30, **arguments)
        took = time.monotonic() - start
    assert response.status_code == status, response.text[:500]
    body = response.json()
    message = body["error"]["message"] if path.startswith("/v1") else body.get("error") or body.get("message")
    assert words in message
    assert took < 5, took
    assert peak_kb(server.proc.pid) - before < PEAK_GROWTH_KB
    assert beside.unharmed(), (beside.alone, beside.latencies, beside.answers)


def test_duplicate_keys_take_the_last_value(server, alone):
    response = httpx.post(server.url + "/v1/translate", content=b'{"text": "nine", "text": "seven", '
                          b'"target_lang": "de"}', headers={"content-type": "application/json"}, timeout=30)
    assert response.status_code == 200 and response.json()["translations"][0]["text"] == alone("seven")


def raw(server, request: bytes, wait: float = 3.0) -> bytes:
    """What the server answers on one connection to `request` (sent as is) within `wait` seconds."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as conn:
        try:
            conn.sendall(request)
        except ConnectionError:  # the server answered and closed before taking the rest
            pass
        out = b""
        try:
            while chunk := conn.recv(65536):
                out += chunk
        except (socket.timeout, ConnectionError):
            pass
        return out


def test_a_megabyte_query_string_is_a_4xx(server):
    answer = raw(server, b"POST /translate?q=" + b"a" * 1_000_000 + b"&target=de HTTP/1.1\r\nHost: x\r\n"
                 b"Connection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]  # uvicorn's answer to an over-long request line
    assert httpx.get(server.url + "/healthz").status_code == 200


POST = b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"


def test_chunked_and_lying_content_length_bodies(server):
    body = json.dumps({"text": "seven", "target_lang": "de"}).encode()
    chunked = raw(server, POST + b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(body):x}\r\n".encode() + body
                  + b"\r\n0\r\n\r\n")
    assert chunked.startswith(b"HTTP/1.1 200")
    short = raw(server, POST + b"Content-Length: 1000\r\n\r\n" + body)  # the client stops sending: no answer
    assert not short.startswith(b"HTTP/1.1 5")
    long = raw(server, POST + b"Content-Length: 5\r\n\r\n" + body)  # what follows the 5 bytes is no request
    assert long.startswith(b"HTTP/1.1 4")
    assert httpx.get(server.url + "/healthz").status_code == 200


def test_bad_and_good_requests_interleaved(server, alone):
    expected = alone("forty-two")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for i in range(50):
            bad = client.post("/v1/translate", json={"text": "a" * 40_000 if i % 2 else AMPLIFIED,
                                                     "target_lang": "de", "format": "text" if i % 2 else "xml"})
            assert bad.status_code in (400, 422)
            good = client.post("/v1/translate", json={"text": "forty-two", "target_lang": "de"})
            assert good.status_code == 200 and good.json()["translations"][0]["text"] == expected
        assert client.get("/healthz").status_code == 200
