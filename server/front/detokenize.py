"""Incremental detokenization for streaming: emit only text that later tokens cannot change, up to a stop string."""

from __future__ import annotations

from typing import Callable

REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    """Decodes the whole prefix each time and emits what was added since the last emission.

    Text is held back while it ends in a replacement character (half of a UTF-8 character spread over
    byte pieces) or while it does not extend what was already sent (SentencePiece may rewrite the tail).
    """

    def __init__(self, decode: Callable[[list[int]], str]):
        self.decode = decode
        self.tokens: list[int] = []
        self.sent = ""

    def add(self, token: int) -> str:
        self.tokens.append(token)
        text = self.decode(self.tokens)
        if text.endswith(REPLACEMENT_CHAR) or not text.startswith(self.sent):
            return ""
        piece, self.sent = text[len(self.sent):], text
        return piece

    def flush(self) -> str:
        """At the end: whatever remains of the final text."""
        text = self.decode(self.tokens)
        piece = text[len(self.sent):] if text.startswith(self.sent) else ""
        self.sent = text
        return piece


def cut_at_stop(text_so_far: str, piece: str, stops: list[str]) -> tuple[bool, str]:
    """Whether a stop string appears in the text now that `piece` ended it, and the piece up to the first one."""
    before = text_so_far[: len(text_so_far) - len(piece)]
    hits = [text_so_far.find(s, max(0, len(before) - len(s) + 1)) for s in stops]
    hits = [h for h in hits if h != -1]
    if not hits:
        return False, piece
    return True, text_so_far[len(before): min(hits)]
