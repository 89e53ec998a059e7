"""Document files → texts to translate (with their format), and the file rebuilt from the translated texts.

    parsed = read_file(data, ".docx")
    output = parsed.write(translate(parsed.texts, parsed.format, parsed.non_splitting_tags))

`.txt` is one plain text per paragraph; `.html`/`.htm` HTML texts, cut before block elements; `.srt` one plain text
per cue (cue numbers and timings are not translated); `.xlf`/`.xliff` one XML text per source (xliff.py). The
packaged formats (office.py, opendocument.py, epub.py: zip archives of XML) are checked before anything is inflated
(archive.py): a file that would inflate past `max_expanded_bytes`, or an entry past `max_ratio` times its compressed
size, is too large (FileTooLarge); entry names leaving the archive, XML declaring a DTD, and anything its library
cannot read make it damaged (FileError). A `.pdf` (pdf.py) is read within the same byte limit and written as a
`.docx` (written_as).
"""

from __future__ import annotations

import re

from . import office
from .epub import epub
from .markup import MarkupError, block_parts, text_content
from .opendocument import opendocument
from .parsed import FileError, ParsedFile
from .pdf import pdf
from .xliff import xliff

_PARAGRAPH_BREAK = re.compile(r"(\n[ \t\r]*\n\s*)")
# suffix → its reader, given the file, its suffix and the limits on what it inflates to
PACKAGED = {".docx": office.docx, ".pptx": office.pptx, ".xlsx": office.xlsx, ".odt": opendocument,
            ".odp": opendocument, ".epub": epub, ".pdf": pdf}
# what a file is written as where it cannot be written in its own format: a PDF's translation is a Word document
WRITTEN_AS = {".pdf": ".docx"}
SUFFIXES = (".txt", ".html", ".htm", ".srt", ".xlf", ".xliff", *PACKAGED)


def written_as(suffix: str) -> str:
    return WRITTEN_AS.get(suffix.lower(), suffix.lower())


def read_file(data: bytes, suffix: str, max_expanded_bytes: int = 4_000_000, max_ratio: int = 100) -> ParsedFile:
    suffix = suffix.lower()
    if suffix not in SUFFIXES:
        raise FileError(f"unsupported file type {suffix or '(none)'!r}; supported: {', '.join(SUFFIXES)}")
    if suffix in PACKAGED:
        return PACKAGED[suffix](data, suffix, max_expanded_bytes, max_ratio)
    if suffix in (".xlf", ".xliff"):
        return xliff(data, suffix)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise FileError(f"the {suffix} file is not UTF-8 text (byte {e.start})") from None
    if suffix == ".srt":
        return _srt(text)
    if suffix == ".txt":
        return _txt(text)
    try:
        return ParsedFile(block_parts(text), "html", _joined, characters=len(text_content(text, "html")))
    except MarkupError as e:
        raise FileError(f"the {suffix} file's markup: {e}") from None


def _joined(translations: list[str]) -> bytes:
    return "".join(translations).encode("utf-8")


def _txt(text: str) -> ParsedFile:
    """One text per paragraph (lines up to a blank line), so a long file goes in parts; the blank lines between
    them are kept as they are."""
    pieces = _PARAGRAPH_BREAK.split(text)  # paragraph, break, paragraph, ...

    def write(translations: list[str]) -> bytes:
        pieces[::2] = translations
        return "".join(pieces).encode("utf-8")

    return ParsedFile(pieces[::2], "text", write, characters=sum(map(len, pieces[::2])))


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


