"""XLIFF, the format CAT and localisation tools exchange: 1.2 (`<trans-unit>`'s `<source>`) and 2.x (`<segment>`'s
`<source>`). Each source is one XML text, its inline tags (`<g>`, `<x/>`, `<pc>`, `<ph/>`, ...) kept as inline marks
around the words they enclose; its `<target>` is filled (made after the source where there is none) and marked
`state="translated"` (1.2: on the target; 2.x: on the segment). The native code inside 1.2's `<ph>`, `<bpt>`, `<ept>`
and `<it>` is never translated. Everything else of the file comes back as it was.
"""

from __future__ import annotations

from lxml import etree

from .archive import declares_entities
from .elements import fill, inner_xml, parser
from .markup import text_content
from .parsed import FileError, ParsedFile, reading

VERSIONS = {"urn:oasis:names:tc:xliff:document:1.2": "1.2", "urn:oasis:names:tc:xliff:document:2.0": "2",
            "urn:oasis:names:tc:xliff:document:2.1": "2", "urn:oasis:names:tc:xliff:document:2.2": "2"}
NATIVE_CODE = ("ph", "bpt", "ept", "it")  # 1.2: elements holding the original format's code, not text


def xliff(data: bytes, suffix: str) -> ParsedFile:
    if declares_entities(data):
        raise FileError(f"not a valid {suffix} file: it carries a DTD (<!DOCTYPE [...]> or <!ENTITY>)")
    root = reading(suffix, etree.fromstring, data, parser())
    namespace = etree.QName(root).namespace
    if etree.QName(root).localname != "xliff" or namespace not in VERSIONS:
        raise FileError(f"not a valid {suffix} file: the root is {root.tag}, not an XLIFF 1.2 or 2.x <xliff>")
    units = root.iter(f"{{{namespace}}}trans-unit" if VERSIONS[namespace] == "1.2" else f"{{{namespace}}}segment")
    sources = [(unit, source) for unit in units if (source := unit.find(f"{{{namespace}}}source")) is not None]
    texts = [inner_xml(source) for _, source in sources]
    kept = [(pair, text) for pair, text in zip(sources, texts) if text_content(text, "xml").strip()]

    def write(translations: list[str]) -> bytes:
        for ((unit, source), _), translated in zip(kept, translations):
            target = unit.find(f"{{{namespace}}}target")
            if target is None:
                target = source.makeelement(f"{{{namespace}}}target")
                source.addnext(target)
                target.tail, source.tail = source.tail, source.tail
            fill(target, translated)
            (target if VERSIONS[namespace] == "1.2" else unit).set("state", "translated")
        etree.cleanup_namespaces(root)
        return etree.tostring(root, xml_declaration=True, encoding="UTF-8")

    return ParsedFile([text for _, text in kept], "xml", lambda t: reading(suffix, write, t),
                      characters=sum(len(text_content(text, "xml")) for _, text in kept),
                      ignore_tags=NATIVE_CODE if VERSIONS[namespace] == "1.2" else ())
