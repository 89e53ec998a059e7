"""A decoded segment's words with their times (SpeechOptions.word_timestamps), grouped as openai-whisper groups them.

A segment's text tokens (its timestamp tokens left out) are cut into pieces of whole UTF-8 characters (a
character's bytes may span tokens); a piece that starts with a space or is punctuation starts a word, any other
joins the word before (in a language written without spaces every piece is a word). A word starts where the token
before its first one ends and ends where its last token ends (model.decoding.token_timing: transformers' pipeline
reads token_timestamps so, openai-whisper's jump times are the same boundaries); its probability is the mean of its
tokens'. Then openai-whisper's merge_punctuations: an opening mark joins the word after it, a closing one the word
before, whose times and probability stand. Not done: openai-whisper's later trims of words longer than twice the
median word and its moves of segment bounds onto the words.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Callable

from .decoding.token_timing import TokenTimes

PREPENDED = "\"'“¿([{-"  # openai-whisper's prepend_punctuations
APPENDED = "\"'.。,，!！?？:：”)]}、"  # and append_punctuations
SPACELESS = frozenset({"zh", "ja", "th", "lo", "my", "yue"})  # the languages it splits on characters alone


@dataclass(frozen=True)
class Word:
    start: float  # seconds from the audio's start
    end: float
    word: str  # as the segment's text spells it, its leading space included
    probability: float  # the mean of its tokens' probabilities (openai-whisper's)


def segment_words(spelled: list[bytes], indices: list[int], times: TokenTimes, seconds: Callable[[int], float],
                  spaceless: bool) -> tuple[Word, ...]:
    """A segment's text tokens, as what each spells and its index among its window's generated tokens (which
    `times` time) → its words; `seconds`: an encoder position of the window → seconds from the audio's start."""
    pieces = characters(spelled)
    groups = pieces if spaceless else spaced(pieces)
    words = []  # [text, start position, end position, probability]
    for text, members in groups:
        first, last = indices[members[0]], indices[members[-1]]
        probability = sum(times.probabilities[indices[m]] for m in members) / len(members)
        words.append([text, times.ends[first - 1] if first else 0, times.ends[last], probability])
    merge_punctuations(words)
    return tuple(Word(seconds(start), seconds(end), text, probability) for text, start, end, probability in words
                 if text)


def characters(spelled: list[bytes]) -> list[tuple[str, list[int]]]:
    """Tokens' bytes → pieces of whole characters: (text, the tokens' indexes). Bytes that can never be a
    character end their piece (as U+FFFD), as do bytes left incomplete at the end."""
    pieces, held, members = [], b"", []
    for k, data in enumerate(spelled):
        held, members = held + data, members + [k]
        try:
            text = held.decode("utf-8")
        except UnicodeDecodeError as e:
            if e.reason == "unexpected end of data":  # a character continued in the next token
                continue
            text = held.decode("utf-8", errors="replace")
        pieces.append((text, members))
        held, members = b"", []
    if members:
        pieces.append((held.decode("utf-8", errors="replace"), members))
    return pieces


def spaced(pieces: list[tuple[str, list[int]]]) -> list[tuple[str, list[int]]]:
    """Pieces → words: a piece that starts with a space or is punctuation starts one (openai-whisper's
    split_tokens_on_spaces)."""
    words = []
    for text, members in pieces:
        if not words or text.startswith(" ") or text.strip() in string.punctuation:
            words.append((text, members))
        else:
            words[-1] = (words[-1][0] + text, words[-1][1] + members)
    return words


def merge_punctuations(words: list[list]) -> None:
    """openai-whisper's merge_punctuations over [text, start, end, probability] words, in place: a word left
    empty has joined another."""
    i = len(words) - 2
    j = len(words) - 1
    while i >= 0:
        if words[i][0].startswith(" ") and words[i][0].strip() in PREPENDED:
            words[j][0], words[i][0] = words[i][0] + words[j][0], ""
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(words):
        if not words[i][0].endswith(" ") and words[j][0] in APPENDED:
            words[i][0], words[j][0] = words[i][0] + words[j][0], ""
        else:
            i = j
        j += 1
