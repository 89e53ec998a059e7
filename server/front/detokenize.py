"""Incremental detokenization for streaming: emit only text that later tokens cannot change."""

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
