"""OpenDocument text and presentations (.odt, .odp), read and written as their XML: `content.xml`'s paragraphs and
headings (`text:p`, `text:h`: body text, table cells, slides' text boxes, speaker notes), each one XML text whose
spans, links, spaces, tabs and line breaks stay inline marks. A paragraph holding paragraphs of its own (a footnote,
a frame) gives only those. Every other entry of the archive, and every other part of content.xml, is copied as it
was; the archive keeps its `mimetype` first and stored (archive.rewrite).
"""

from __future__ import annotations

from lxml import etree

from .archive import open_archive, read_entry, rewrite
from .elements import fill, inner_xml, parser
from .markup import text_content
from .parsed import FileError, ParsedFile, reading

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
PARAGRAPHS = (f"{{{TEXT}}}p", f"{{{TEXT}}}h")
CONTENT = "content.xml"
ROOT = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}document-content"


def opendocument(data: bytes, suffix: str, max_expanded_bytes: int, max_ratio: int) -> ParsedFile:
    archive = open_archive(data, suffix, max_expanded_bytes, max_ratio)
    if CONTENT not in archive.namelist():
        raise FileError(f"not a valid {suffix} file: it has no {CONTENT}")
    root = reading(suffix, etree.fromstring, read_entry(archive, CONTENT, suffix), parser())
    if root.tag != ROOT:
        raise FileError(f"not a valid {suffix} file: {CONTENT}'s root is {root.tag}, not office:document-content")
    leaves = [p for p in root.iter(*PARAGRAPHS) if next(_nested(p), None) is None]
    texts = [inner_xml(p) for p in leaves]
    kept = [(p, text) for p, text in zip(leaves, texts) if text_content(text, "xml").strip()]

    def write(translations: list[str]) -> bytes:
        for (paragraph, _), translated in zip(kept, translations):
            fill(paragraph, translated)
        return rewrite(archive, {CONTENT: etree.tostring(root, xml_declaration=True, encoding="UTF-8")})

    return ParsedFile([text for _, text in kept], "xml", lambda t: reading(suffix, write, t),
                      characters=sum(len(text_content(text, "xml")) for _, text in kept))


def _nested(paragraph):
    """The paragraphs inside `paragraph` (not itself)."""
    return (p for p in paragraph.iter(*PARAGRAPHS) if p is not paragraph)
