"""Each packaged document format through POST /v1/translate/file (in process, the demo model; the same reading as
document jobs): its texts translated as each alone, what is no text untouched; and each format's hostile cases: a
zip bomb, an entry inflating past its ratio, an entry leaving the archive, a DTD, a damaged file, well-formed XML of
the wrong structure: a 4xx naming the format and the problem, never a 5xx."""

import pytest
import format_files as files
from hostile_files import with_entry
from server_process import in_process_client

from server.settings import Settings

SETTINGS = Settings(dtype="float32", max_batch_rows=16, max_body_bytes=200_000)
# format → a valid file, the XML entry holding its text, and the entry its reading starts from
FILES = {".xlsx": (files.xlsx_bytes, "xl/worksheets/sheet1.xml", "xl/workbook.xml"),
         ".pptx": (files.pptx_bytes, "ppt/slides/slide1.xml", "ppt/presentation.xml"),
         ".odt": (lambda: files.opendocument_bytes(".odt"), "content.xml", "content.xml"),
         ".odp": (lambda: files.opendocument_bytes(".odp"), "content.xml", "content.xml"),
         ".epub": (files.epub_bytes, "OEBPS/one.xhtml", "META-INF/container.xml")}


@pytest.fixture(scope="module")
def client():
    with in_process_client(SETTINGS) as c:
        yield c


def post(client, name: str, data: bytes):
    return client.post("/v1/translate/file", files={"file": (name, data)}, data={"target_lang": "de"})


def test_xlsx_translates_text_cells_only(client, alone):
    response = post(client, "book.xlsx", files.xlsx_bytes())
    assert response.status_code == 200, response.text
    first, second = files.xlsx_cells(response.content)
    assert first[0] == alone("forty-two") and first[1:3] == [42, "=B1*2"] and first[3].year == 2024
    assert [value for value in second if value] == [alone("seven")]


def test_pptx_translates_titles_bodies_tables_and_notes_keeping_runs(client, alone):
    response = post(client, "talk.pptx", files.pptx_bytes())
    assert response.status_code == 200, response.text
    texts = files.pptx_texts(response.content)
    assert texts["title"] == alone("forty-two") and texts["notes"] == alone("eleven")
    assert texts["table"] == [alone("seven"), alone("nine")]
    assert texts["body"] == alone("three hundred") and texts["bold"] == [False, True]


DTD = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "forty-two">]><x>&a;</x>'
# case → (which entry: 1 the text's, 2 the root's), what it is rewritten to, the status, words of the message
def test_odt_translates_headings_paragraphs_cells_and_notes_keeping_spans(client, alone):
    response = post(client, "letter.odt", files.opendocument_bytes(".odt"))
    assert response.status_code == 200, response.text
    texts = files.opendocument_texts(response.content)
    # a paragraph holding a footnote gives the footnote's paragraph only ("nine" stays)
    assert texts == {"paragraphs": [alone("forty-two"), alone("three hundred"), alone("seven"), "nine",
                                    alone("eleven")], "spans": 1, "first": ("mimetype", 0)}


def test_odp_translates_slides_and_notes(client, alone):
    response = post(client, "talk.odp", files.opendocument_bytes(".odp"))
    assert files.opendocument_texts(response.content)["paragraphs"] == [alone("forty-two"), alone("seven")]


def test_epub_translates_its_xhtml_through_the_html_path(client, alone):
    response = post(client, "book.epub", files.epub_bytes())
    assert response.status_code == 200, response.text
    chapter = files.CHAPTER
    for word in ("forty-two", "seven", "nine"):
        chapter = chapter.replace(f">{word}<", f">{alone(word)}<")
    assert files.epub_chapter(response.content) == (chapter, "mimetype")


def test_an_epub_chapter_not_utf8_is_a_400(client):
    response = post(client, "bad.epub", files.epub_bytes("seven".encode("utf-16")))
    assert response.status_code == 400 and "not UTF-8" in response.json()["error"]["message"]


def test_a_pdf_becomes_a_word_document_with_its_paragraphs_and_headings(client, alone):
    response = post(client, "report.pdf", files.pdf_bytes(*files.PDF_PAGES))
    assert response.status_code == 200, response.text
    assert "report.translated.docx" in response.headers["content-disposition"]
    assert files.docx_blocks(response.content) == [
        ("Heading 1", alone("forty-two")), ("Normal", alone("three hundred and five.")), ("Normal", alone("seven.")),
        ("Heading 2", alone("nine")), ("Normal", alone("eleven."))]


@pytest.mark.parametrize("data, status, words", [
    (files.pdf_bytes([], []), 400, "no text to translate: a scanned PDF"),
    (files.pdf_bytes(*files.PDF_PAGES)[:300], 400, "not a valid .pdf file"),
    (b"%!PS-Adobe-3.0", 400, "does not start with %PDF"),
    (files.pdf_bomb(50_000_000), 400, "Limit reached while decompressing"),  # at max_file_expanded_bytes
])
def test_hostile_pdfs(client, data, status, words):
    response = post(client, "evil.pdf", data)
    assert response.status_code == status and words in response.json()["error"]["message"], response.text


def test_xliff_12_fills_targets_keeping_inline_tags_and_native_code(client, alone):
    response = post(client, "app.xlf", files.XLIFF_12)
    assert response.status_code == 200, response.text
    seven = alone("seven")
    assert files.xliff_targets(response.content) == [("translated", alone("forty-two")),
                                               ("translated", f'{seven} <ph id="1">&lt;br/&gt;</ph>')]


def test_xliff_2_fills_targets_and_marks_segments(client, alone):
    response = post(client, "app.xliff", files.XLIFF_2)
    assert files.xliff_targets(response.content) == [("translated", alone("nine")), ("translated", alone("eleven"))]


@pytest.mark.parametrize("data, words", [
    (b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "seven">]><xliff version="1.2">&a;</xliff>', "carries a DTD"),
    (files.XLIFF_12[:200], "not a valid .xlf file"),
    (b"<html><body>seven</body></html>", "not an XLIFF 1.2 or 2.x"),
    (b"\xff\xfe<\x00", "not a valid .xlf file"),
])
def test_hostile_xliff(client, data, words):
    response = post(client, "evil.xlf", data)
    assert response.status_code == 400 and words in response.json()["error"]["message"], response.text


HOSTILE = {"bomb": (1, b"\0" * 4_100_000, 413, "inflates"), "dtd": (1, DTD, 400, "carries a DTD"),
           "dtd at the root": (2, DTD, 400, "carries a DTD"), "wrong structure": (2, b"<x/>", 400, "not a valid")}


@pytest.mark.parametrize("suffix", FILES)
@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_entries(client, suffix, case):
    which, content, status, words = HOSTILE[case]
    response = post(client, "evil" + suffix, with_entry(FILES[suffix][0](), FILES[suffix][which],
                                                        lambda f: f.write(content)))
    assert response.status_code == status, response.text
    assert words in response.json()["error"]["message"] and suffix in response.json()["error"]["message"]


@pytest.mark.parametrize("suffix", FILES)
def test_an_entry_leaving_the_archive_and_a_damaged_file(client, suffix):
    build = FILES[suffix][0]
    escaping = post(client, "evil" + suffix, with_entry(build(), "../evil.xml", lambda f: f.write(b"<x/>")))
    assert escaping.status_code == 400 and "leaves the archive" in escaping.json()["error"]["message"]
    damaged = post(client, "broken" + suffix, b"PK\x03\x04 not really a zip")
    assert damaged.status_code == 400 and f"not a valid {suffix} file" in damaged.json()["error"]["message"]
