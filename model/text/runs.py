"""A paragraph of formatted runs (a .docx or .pptx paragraph, an OpenDocument paragraph's spans) as one XML text:
each run an inline `<r i="n">` element, so a sentence spanning runs is translated whole and each run keeps its
formatting and gets the words aligned with its own."""

from __future__ import annotations

from xml.sax.saxutils import escape

from .markup import pieces

RUN = "r"  # the element each run is written as: never cuts a sentence (non_splitting_tags)


def runs_text(texts: list[str]) -> str:
    return "".join(f'<{RUN} i="{i}">{escape(text)}</{RUN}>' for i, text in enumerate(texts))


def run_texts(fragment: str, count: int) -> list[str]:
    """The text inside each run element of a translated paragraph; the elements come back once each and in
    order (inline marks keep their order), text outside them joins the run before."""
    texts, current = [""] * count, 0
    opened = 0
    for piece in pieces(fragment, "xml"):
        if piece.kind == "open" and piece.tag == RUN:
            current, opened = min(opened, count - 1), opened + 1
        elif piece.kind == "text":
            texts[current] += piece.text
    return texts
