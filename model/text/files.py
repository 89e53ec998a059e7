"""Document files → texts to translate (with their format), and the file rebuilt from the translated texts.

    parsed = read_file(data, ".docx")
    output = parsed.write(translate(parsed.texts, parsed.format, parsed.non_splitting_tags))

`.txt` is one plain text; `.html`/`.htm` one HTML text; `.srt` one plain text per cue (cue numbers and timings are
not translated); `.docx` one text per paragraph, its runs written as inline `<r i="n">` elements of an XML
fragment, so a sentence spanning runs is translated whole and each run keeps its formatting and gets the words
aligned with its own (python-docx reads and writes the file).

A .docx's zip directory is read before anything is inflated: entries whose uncompressed sizes add up past
`max_expanded_bytes`, or any entry inflating more than `max_ratio` times its compressed size, make the file
too large (FileTooLarge); entry names with `..` or a leading `/`, XML the parser rejects, and DTDs in its XML parts
make it damaged (FileError).
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass
from typing import Callable
from xml.sax.saxutils import escape

from .markup import MarkupError, pieces, text_content

_PARAGRAPH_BREAK = re.compile(r"(\n[ \t\r]*\n\s*)")
SUFFIXES = (".txt", ".html", ".htm", ".srt", ".docx")
_RUN = "r"


class FileError(ValueError):
    """A file that is damaged or of a kind not supported."""


class FileTooLarge(FileError):
    """A file whose contents would inflate past a limit (`limit`, in the unit the message names)."""

    def __init__(self, message: str, limit: int):
        super().__init__(message)
        self.limit = limit


@dataclass
class ParsedFile:
    texts: list[str]
    format: str  # how the texts are to be read: "text", "html", "xml"
    write: Callable[[list[str]], bytes]  # translated texts → the translated file
    characters: int  # what a reader sees, what is translated (and billed): no tags, no run markup
    non_splitting_tags: tuple[str, ...] = ()


def read_file(data: bytes, suffix: str, max_expanded_bytes: int = 4_000_000, max_ratio: int = 100) -> ParsedFile:
    suffix = suffix.lower()
    if suffix not in SUFFIXES:
        raise FileError(f"unsupported file type {suffix or '(none)'!r}; supported: {', '.join(SUFFIXES)}")
    if suffix == ".docx":
        return _docx(data, max_expanded_bytes, max_ratio)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise FileError(f"the {suffix} file is not UTF-8 text (byte {e.start})") from None
    if suffix == ".srt":
        return _srt(text)
    if suffix == ".txt":
        return _txt(text)
    try:
        return ParsedFile([text], "html", _utf8, characters=len(text_content(text, "html")))
    except MarkupError as e:
        raise FileError(f"the {suffix} file's markup: {e}") from None


def _utf8(translations: list[str]) -> bytes:
    return translations[0].encode("utf-8")


def _txt(text: str) -> ParsedFile:
    """One text per paragraph (lines up to a blank line), so a long file goes in parts; the blank lines between
    them are kept as they are."""
    pieces = _PARAGRAPH_BREAK.split(text)  # paragraph, break, paragraph, ...

    def write(translations: list[str]) -> bytes:
        pieces[::2] = translations
        return "".join(pieces).encode("utf-8")

    return ParsedFile(pieces[::2], "text", write, characters=len(text))


def _srt(text: str) -> ParsedFile:
    """Cues are separated by blank lines; in each, the lines after the number and the timing are the text."""
    lines = text.splitlines(keepends=True)
    cues, i = [], 0  # (first text line, end line) per cue
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        if i + 1 >= len(lines) or "-->" not in lines[i + 1]:
            raise FileError(f"not a valid .srt file: line {i + 2} should be a cue timing (00:00:01,000 --> ...)")
        end = i + 2
        while end < len(lines) and lines[end].strip():
            end += 1
        cues.append((i + 2, end))
        i = end

    def cue_text(start: int, end: int) -> str:
        return "".join(lines[start:end]).rstrip("\r\n")

    def write(translations: list[str]) -> bytes:
        out, position = [], 0
        for (start, end), translated in zip(cues, translations):
            original = "".join(lines[start:end])
            out += lines[position:start] + [translated + original[len(original.rstrip("\r\n")):]]
            position = end
        return "".join(out + lines[position:]).encode("utf-8")

    texts = [cue_text(s, e) for s, e in cues]
    return ParsedFile(texts, "text", write, characters=sum(map(len, texts)))


def _check_archive(data: bytes, max_expanded_bytes: int, max_ratio: int) -> None:
    """The zip directory's sizes and names, before any entry is inflated (zipfile stops an entry at the size its
    directory gives, so a lying header cannot inflate further)."""
    try:
        entries = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, ValueError) as e:
        raise FileError(f"not a valid .docx file: {e}") from None
    for entry in entries:
        if entry.filename.startswith("/") or ".." in entry.filename.split("/"):
            raise FileError(f"not a valid .docx file: entry name {entry.filename!r} leaves the archive")
        if entry.file_size > max_ratio * max(entry.compress_size, 1):
            raise FileTooLarge(f"the .docx entry {entry.filename!r} inflates {entry.file_size} bytes from "
                               f"{entry.compress_size}; at most {max_ratio} times", limit=max_ratio)
    expanded = sum(entry.file_size for entry in entries)
    if expanded > max_expanded_bytes:
        raise FileTooLarge(f"the .docx file inflates to {expanded} bytes; at most {max_expanded_bytes}",
                           limit=max_expanded_bytes)


def _docx(data: bytes, max_expanded_bytes: int, max_ratio: int) -> ParsedFile:
    import docx  # python-docx: only this format needs it
    from docx.opc.exceptions import PackageNotFoundError
    from lxml import etree

    _check_archive(data, max_expanded_bytes, max_ratio)
    try:
        document = docx.Document(io.BytesIO(data))
        for part in document.part.package.iter_parts():
            element = getattr(part, "element", None)  # XML parts (others are binary)
            if element is not None and element.getroottree().docinfo.doctype:
                raise FileError(f"{part.partname} carries a DTD (<!DOCTYPE>)")
        paragraphs = [p for p in _paragraphs(document) if p.runs]
        run_texts = [[run.text for run in p.runs] for p in paragraphs]
    # python-docx reads well-formed XML of the wrong structure (a root that is no w:document, a part without the
    # elements it expects, a vertical merge with no row above) with whatever error its code meets
    except (PackageNotFoundError, zipfile.BadZipFile, etree.LxmlError, AttributeError, IndexError, KeyError,
            TypeError, ValueError) as e:
        raise FileError(f"not a valid .docx file: {e}") from None

    def write(translations: list[str]) -> bytes:
        for paragraph, translated in zip(paragraphs, translations):
            for run, text in zip(paragraph.runs, _run_texts(translated, len(paragraph.runs))):
                run.text = text
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    texts = ["".join(f'<{_RUN} i="{i}">{escape(text)}</{_RUN}>' for i, text in enumerate(its)) for its in run_texts]
    return ParsedFile(texts, "xml", write, non_splitting_tags=(_RUN,),
                      characters=sum(len(text) for its in run_texts for text in its))


def _paragraphs(document):
    """Body paragraphs, then those in table cells (each cell once, though merged cells repeat)."""
    yield from document.paragraphs
    seen = set()
    for table in document.tables:
        for row in table.rows:
            for cell in row.cells:
                if id(cell._tc) not in seen:
                    seen.add(id(cell._tc))
                    yield from cell.paragraphs


def _run_texts(fragment: str, count: int) -> list[str]:
    """The text inside each run element of a translated paragraph; the elements come back once each and in
    order (inline marks keep their order), text outside them joins the run before."""
    texts, current = [""] * count, 0
    opened = 0
    for piece in pieces(fragment, "xml"):
        if piece.kind == "open" and piece.tag == _RUN:
            current, opened = min(opened, count - 1), opened + 1
        elif piece.kind == "text":
            texts[current] += piece.text
    return texts
