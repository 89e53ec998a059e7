"""HTML and XML: a real parser (html.parser; expat with byte offsets) cuts a document into its exact source pieces;
only text is translated.

Every tag, attribute, comment, declaration, `<script>`/`<style>` body and `ignore_tags` element comes back as
its source bytes. Block elements (and `splitting_tags`) end a run of text; inline elements (`<b>`, `<a>`,
`<span>`, ..., and `non_splitting_tags`) stay inside it as marks (see inline.py), so a sentence with a link is
translated as one sentence and the link's tags are put back around the aligned target words. In XML an element
is inline when its parent holds text of its own (mixed content), unless the tag lists say otherwise.

An XML document whose DOCTYPE declares anything (an internal subset: entities, elements) is refused before expat reads
the declarations: entity expansion would make text the request's character limits never saw (a 6 KB document of
6 MB, or billion laughs), so the text translated is never more than the text sent.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from html.parser import HTMLParser
from xml.parsers import expat
from xml.sax.saxutils import escape

from .inline import Mark, Run

FORMATS = ("text", "html", "xml")
INLINE_HTML = frozenset("a abbr acronym b bdi bdo big cite code data del dfn em font i img ins kbd label mark q s "
                        "samp small span strike strong sub sup time tt u var wbr".split())
VOID_HTML = frozenset("area base br col embed hr img input link meta param source track wbr".split())
RAW_HTML = frozenset(("script", "style"))  # bodies never translated
_ROOT = "s2s-fragment"  # wraps an XML fragment for expat


class MarkupError(ValueError):
    """A document the parser rejects (XML that is not well-formed, or that declares a DTD)."""


def _refuse_declarations(name, system_id, public_id, has_internal_subset) -> None:
    if has_internal_subset:
        raise MarkupError(f"the DOCTYPE {name!r} declares a DTD (entities, elements); DTD declarations are not "
                          f"accepted")


@dataclass(frozen=True)
class Piece:
    """A source piece: text (decoded), a tag (open, close, empty) or something opaque (comment, declaration)."""

    raw: str
    kind: str  # "text" | "open" | "close" | "empty" | "opaque"
    tag: str | None = None
    text: str = ""


class _HTMLPieces(HTMLParser):
    """Pieces by source position; each piece's source is the text up to the next one's start."""

    def __init__(self, document: str):
        super().__init__(convert_charrefs=False)
        self.document, self.found = document, []
        self.line_starts = [0] + [i + 1 for i, c in enumerate(document) if c == "\n"]

    def _add(self, kind: str, tag: str | None = None) -> None:
        line, column = self.getpos()
        self.found.append((self.line_starts[line - 1] + column, kind, tag))

    def handle_starttag(self, tag, attrs):
        self._add("empty" if tag in VOID_HTML else "open", tag)

    def handle_startendtag(self, tag, attrs):
        self._add("empty", tag)

    def handle_endtag(self, tag):
        self._add("close", tag)

    def handle_data(self, data):
        self._add("text")

    def handle_entityref(self, name):
        self._add("entity")

    def handle_charref(self, name):
        self._add("entity")

    def handle_comment(self, data):
        self._add("opaque")

    handle_decl = handle_pi = unknown_decl = handle_comment

    def pieces(self) -> list[Piece]:
        try:
            self.feed(self.document)
            self.close()
        except AssertionError as e:  # how _markupbase refuses a declaration it cannot read (`<!ELEMENT<![`)
            raise MarkupError(f"not readable HTML: {e}") from None
        ends = [start for start, _, _ in self.found[1:]] + [len(self.document)]
        out = []
        for (start, kind, tag), end in zip(self.found, ends):
            raw = self.document[start:end]
            out.append(Piece(raw, "text", None, html.unescape(raw)) if kind in ("text", "entity")
                       else Piece(raw, kind, tag))
        return out


def _xml_pieces(document: str) -> list[Piece]:
    wrapped = not document.lstrip().startswith(("<?xml", "<!DOCTYPE"))
    data = (f"<{_ROOT}>{document}</{_ROOT}>" if wrapped else document).encode("utf-8")
    parser, found = expat.ParserCreate(), []

    def add(kind, tag=None, text=""):
        found.append((parser.CurrentByteIndex, kind, tag, text))

    parser.StartElementHandler = lambda name, attrs: add("open", name)
    parser.EndElementHandler = lambda name: add("close", name)
    parser.CharacterDataHandler = lambda text: add("text", None, text)
    parser.CommentHandler = parser.ProcessingInstructionHandler = lambda *_: add("opaque")
    parser.StartCdataSectionHandler = parser.EndCdataSectionHandler = lambda: add("cdata")
    parser.DefaultHandlerExpand = lambda _: add("opaque")
    parser.StartDoctypeDeclHandler = _refuse_declarations
    try:
        parser.Parse(data, True)
    except expat.ExpatError as e:
        raise MarkupError(f"not well-formed XML: {expat.ErrorString(e.code)} at line {e.lineno}, "
                          f"column {e.offset}") from None
    pieces, in_cdata = [], False
    ends = [start for start, *_ in found[1:]] + [len(data)]
    for (start, kind, tag, text), end in zip(found, ends):
        raw = data[start:end].decode("utf-8")
        if kind == "close" and not raw:  # <x/>: expat reports its close where the tag ends
            pieces[-1] = Piece(pieces[-1].raw, "empty", tag)
        elif kind == "cdata":  # CDATA contents are kept, not translated
            in_cdata = raw.startswith("<![CDATA[")
            pieces.append(Piece(raw, "opaque"))
        else:
            pieces.append(Piece(raw, "opaque") if kind == "text" and in_cdata else Piece(raw, kind, tag, text))
    return pieces[1:-1] if wrapped else pieces


def pieces(document: str, markup: str) -> list[Piece]:
    """The document's source pieces in order; their raw texts join to the document exactly."""
    if markup == "html":
        return _HTMLPieces(document).pieces()
    return _xml_pieces(document)


def _inline_elements(found: list[Piece], markup: str, non_splitting: frozenset, splitting: frozenset) -> list[bool]:
    """Per piece: does this tag stay inside a run of text? HTML: by tag name; XML: when its parent element holds
    text of its own. The tag lists override both."""
    if markup == "html":
        by_name = [p.tag in INLINE_HTML for p in found]
    else:
        parents, open_parents, mixed = [], [None], set()
        for i, p in enumerate(found):
            parents.append(open_parents[-1] if p.kind != "close" else open_parents[-2] if len(open_parents) > 1
                           else None)
            if p.kind == "open":
                open_parents.append(i)
            elif p.kind == "close" and len(open_parents) > 1:
                open_parents.pop()
            elif p.kind == "text" and p.text.strip():
                mixed.add(open_parents[-1])
        by_name = [parent in mixed for parent in parents]
    return [p.kind == "opaque" or (p.tag not in splitting and (p.tag in non_splitting or inline))
            for p, inline in zip(found, by_name)]


def _ignored(found: list[Piece], start: int, ignore: frozenset) -> int:
    """The index after the element opened at `start` when its contents are to be kept (else start + 1)."""
    tag = found[start].tag
    if found[start].kind != "open" or tag not in ignore:
        return start + 1
    depth = 0
    for i in range(start, len(found)):
        depth += {"open": 1, "close": -1}.get(found[i].kind, 0) if found[i].tag == tag else 0
        if depth == 0:
            return i + 1
    return start + 1  # never closed (HTML allows it): only the tag is kept


def parts(document: str, markup: str, ignore_tags=(), non_splitting_tags=(), splitting_tags=()) -> list[str | Run]:
    """The document as source kept as it is (block tags, ignored elements) and runs of text to translate."""
    found = pieces(document, markup)
    ignore = frozenset(ignore_tags) | (RAW_HTML if markup == "html" else frozenset())
    inline = _inline_elements(found, markup, frozenset(non_splitting_tags), frozenset(splitting_tags))
    out, run, i = [], Run("", sources=[]), 0
    while i < len(found):
        end = _ignored(found, i, ignore)
        piece, raw = found[i], "".join(p.raw for p in found[i:end])
        if piece.kind == "text":
            run.sources.append((len(run.text), raw, piece.text))
            run.text += piece.text
        elif inline[i]:
            run.marks.append(Mark(len(run.text), raw, opens=piece.kind != "close"))
        else:
            out += [run, raw]
            run = Run("", sources=[])
        i = end
    return [p for p in out + [run] if not isinstance(p, Run) or p.text or p.marks]


def block_parts(document: str) -> list[str]:
    """An HTML document cut before its block elements' tags, where no inline element is open: parts that translate
    as the whole does (a block tag ends a run of text anyway), so a long page goes in parts of any size."""
    parts, current, inline_open = [], "", 0
    for piece in pieces(document, "html"):
        inline = piece.tag in INLINE_HTML
        if piece.kind in ("open", "empty") and not inline and not inline_open and current:
            parts.append(current)
            current = ""
        if inline and piece.tag not in VOID_HTML:
            inline_open = inline_open + 1 if piece.kind == "open" else max(0, inline_open - (piece.kind == "close"))
        current += piece.raw
    return parts + [current]


def text_content(document: str, markup: str) -> str:
    """The text a reader sees (for language detection): runs joined by line breaks."""
    if markup == "text":
        return document
    return "\n".join(p.text for p in parts(document, markup) if isinstance(p, Run))


def escaper(markup: str):
    return escape if markup in ("html", "xml") else str
