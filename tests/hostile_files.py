"""Hostile and large documents the in-process and the real-server tests both send: a .docx built in memory, one with
an entry rewritten, XML entity amplification, the billion laughs, a subtitle file of many cues."""

import io
import zipfile

import docx


def docx_bytes(*paragraphs: str) -> bytes:
    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def with_entry(data: bytes, name: str, write) -> bytes:
    """The .docx with entry `name` replaced by what `write(file)` writes (the others copied)."""
    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            if info.filename != name:
                archive.writestr(info.filename, source.read(info.filename))
        with archive.open(name, "w", force_zip64=True) as entry:
            write(entry)
    return out.getvalue()


DOCUMENT = zipfile.ZipFile(io.BytesIO(docx_bytes("forty-two"))).read("word/document.xml").decode()
AMPLIFIED = ('<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "' + "forty-two. " * 2000 + '">]><r>' + "&a;" * 300
             + "</r>")
BILLION_LAUGHS = ('<?xml version="1.0"?><!DOCTYPE l [<!ENTITY l0 "forty-two ">'
                  + "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10)) + "]><l>&l9;</l>")


def srt(cues: int, text: str = "forty-two") -> bytes:
    return "".join(f"{i + 1}\n00:00:01,000 --> 00:00:02,000\n{text}\n\n" for i in range(cues)).encode()
