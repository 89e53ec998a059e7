"""EPUB e-books: each XHTML document the package's manifest lists (chapters, the table of contents; found through
META-INF/container.xml) translated through the HTML path (block elements cut sentences, inline ones stay marks,
`<script>`/`<style>` untouched), in parts cut before its block elements (markup.block_parts), so a long chapter goes
in parts; every other entry (the package document, styles, images, fonts) copied as it was, the `mimetype` first and
stored."""

from __future__ import annotations

import posixpath
from urllib.parse import unquote

from lxml import etree

from .archive import open_archive, read_entry, rewrite
from .elements import parser
from .markup import MarkupError, block_parts, text_content
from .parsed import FileError, ParsedFile, reading

CONTAINER = "META-INF/container.xml"


def epub(data: bytes, suffix: str, max_expanded_bytes: int, max_ratio: int) -> ParsedFile:
    archive = open_archive(data, suffix, max_expanded_bytes, max_ratio)
    names = _xhtml_documents(archive, suffix)
    parts, characters = [], 0  # each document's parts (markup.block_parts)
    for name in names:
        try:
            text = read_entry(archive, name, suffix).decode("utf-8-sig")
            characters += len(text_content(text, "html"))
            parts.append(block_parts(text))
        except UnicodeDecodeError as e:
            raise FileError(f"not a valid {suffix} file: {name} is not UTF-8 (byte {e.start})") from None
        except MarkupError as e:
            raise FileError(f"not a valid {suffix} file: {name}: {e}") from None

    def write(translations: list[str]) -> bytes:
        translated, start = {}, 0
        for name, its in zip(names, parts):
            translated[name] = "".join(translations[start:start + len(its)]).encode("utf-8")
            start += len(its)
        return rewrite(archive, translated)

    return ParsedFile([part for its in parts for part in its], "html", write, characters=characters)


def _xhtml_documents(archive, suffix: str) -> list[str]:
    """The archive's names of the XHTML documents in the package's manifest."""
    def xml(name: str):
        if name not in archive.namelist():
            raise FileError(f"not a valid {suffix} file: it has no {name}")
        return reading(suffix, etree.fromstring, read_entry(archive, name, suffix), parser())

    rootfile = xml(CONTAINER).find(".//{*}rootfile")
    if rootfile is None or not rootfile.get("full-path"):
        raise FileError(f"not a valid {suffix} file: {CONTAINER} names no package document")
    package = rootfile.get("full-path")
    folder = posixpath.dirname(package)
    names = [posixpath.normpath(posixpath.join(folder, unquote(item.get("href", ""))))
             for item in xml(package).iter("{*}item") if item.get("media-type") == "application/xhtml+xml"]
    missing = [name for name in names if name not in archive.namelist()]
    if missing:
        raise FileError(f"not a valid {suffix} file: its manifest lists {missing[0]!r}, which it does not hold")
    return names
