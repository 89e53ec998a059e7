"""Document files through POST /v1/translate/file (in process, the demo model): .srt cues and timings, .docx
paragraphs and run formatting, .txt; damaged, unsupported and oversize files get clear 4xx."""

import io

import docx
import pytest
from server_process import in_process_client

from server.settings import Settings

# 2 texts a job: files go in chunks
SETTINGS = Settings(dtype="float32", max_batch_rows=16, max_texts=2, max_body_bytes=50_000)


@pytest.fixture(scope="module")
def client():
    with in_process_client(SETTINGS) as c:
        yield c


def post(client, name: str, data: bytes, **form):
    return client.post("/v1/translate/file", files={"file": (name, data)}, data={"target_lang": "de", **form})


def test_srt_keeps_numbers_and_timings(client, alone):
    srt = ("1\n00:00:01,000 --> 00:00:02,500\nforty-two\n\n2\n00:00:03,000 --> 00:00:04,000\nseven\nnine\n\n"
           "3\n00:00:05,000 --> 00:00:06,000\none hundred\n")
    response = post(client, "talk.srt", srt.encode())
    assert response.status_code == 200, response.text
    assert response.text == (f"1\n00:00:01,000 --> 00:00:02,500\n{alone('forty-two')}\n\n"
                             f"2\n00:00:03,000 --> 00:00:04,000\n{alone('seven')}\n{alone('nine')}\n\n"
                             f"3\n00:00:05,000 --> 00:00:06,000\n{alone('one hundred')}\n")
    assert "talk.translated.srt" in response.headers["content-disposition"]


def test_docx_keeps_paragraphs_and_run_formatting(client, alone):
    source = docx.Document()
    first = source.add_paragraph("forty-two", style="Heading 1")
    styled = source.add_paragraph("three ")
    bold = styled.add_run("hundred")
    bold.bold = True
    styled.add_run(" and five").italic = True
    source.add_paragraph("seven")
    data = io.BytesIO()
    source.save(data)
    response = post(client, "in.docx", data.getvalue())
    assert response.status_code == 200, response.text
    out = docx.Document(io.BytesIO(response.content))
    assert [p.style.name for p in out.paragraphs] == ["Heading 1", "Normal", "Normal"]
    assert out.paragraphs[0].text == alone(first.text) and out.paragraphs[2].text == alone("seven")
    runs = out.paragraphs[1].runs
    assert [(r.bold, r.italic) for r in runs] == [(None, None), (True, None), (None, True)]
    assert "".join(r.text for r in runs) != "" and len(runs) == 3  # every run kept, each once


def test_txt(client, alone):
    response = post(client, "a.txt", "forty-two\n\nseven\n".encode())
    assert response.text == f"{alone('forty-two')}\n\n{alone('seven')}\n"


@pytest.mark.parametrize("name,data,status,words", [
    ("broken.docx", b"PK\x03\x04 not really a zip", 400, "not a valid .docx"),
    ("bad.srt", b"1\nno timing here\ntext\n", 400, "cue timing"),
    ("image.png", b"\x89PNG", 400, "unsupported file type"),
    ("latin1.txt", "caf\xe9".encode("latin-1"), 400, "not UTF-8"),
    ("big.txt", b"seven " * 10_000, 413, "larger than 50000 bytes"),
])
def test_damaged_unsupported_and_oversize_files(client, name, data, status, words):
    response = post(client, name, data)
    assert response.status_code == status and words in response.json()["error"]["message"]


@pytest.mark.slow
def test_the_command_line_translates_a_docx_file(tmp_path, alone):
    from model.cli import main

    source = docx.Document()
    source.add_paragraph("forty-two")
    source.save(tmp_path / "in.docx")
    assert main(["--dtype", "float32", "--target-lang", "de", "--input", str(tmp_path / "in.docx"),
                 "--output", str(tmp_path / "out.docx")]) == 0
    assert [p.text for p in docx.Document(tmp_path / "out.docx").paragraphs] == [alone("forty-two")]
    (tmp_path / "bad.docx").write_bytes(b"not a zip")
    assert main(["--target-lang", "de", "--input", str(tmp_path / "bad.docx"),
                 "--output", str(tmp_path / "x.docx")]) == 1
