"""Whisper's timestamp rule on a step's scores, all rows at once: transformers' WhisperTimeStampLogitsProcessor; and
what a window's decoding reads to say it heard no speech (NoSpeechProbe).

A row that asks for timestamps: <|notimestamps|> never; timestamps in pairs (after one timestamp another or </s>,
after two text); never a timestamp below the last one (nor the same one again once a pair closed); the first
generated token a timestamp at most `max_initial` steps in; and text banned wherever the timestamps' summed
probability beats every single text token's.

Dimensions: n live rows, T' positions read this step, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

NEG_INF = float("-inf")


@dataclass(frozen=True)
class TimestampRules:
    """The checkpoint's timestamp tokens: <|notimestamps|> and the first timestamp <|0.00|> right after it."""

    no_timestamps: int
    max_initial: int | None = None  # max_initial_timestamp_index: the latest first timestamp, in steps past 0.00

    @property
    def first(self) -> int:
        return self.no_timestamps + 1


@dataclass(frozen=True)
class NoSpeechProbe:
    """Where a row reads its no-speech probability: <|nospeech|>'s probability after <|startoftranscript|>, from the
    model's own logits before any rule (transformers' WhisperNoSpeechDetection, openai-whisper's `no_speech_prob`).
    Read at the step whose input is that position, during the decoder prompt's forced steps when language and task
    tokens follow it."""

    position: int  # of <|startoftranscript|> in the decoder prompt (after <|startofprev|> and the previous text)
    token: int  # <|nospeech|>


@dataclass(frozen=True)
class TimestampRows:
    """The rule's settings of live rows, each (n,) long: the first timestamp token (-1: the row has no timestamp
    rule), <|notimestamps|>, the latest allowed first timestamp, the first generated position (the decoder
    prompt's length), and whether the row's search decides on log-probabilities (beams) or on logits."""

    first: torch.Tensor
    no_timestamps: torch.Tensor
    last_initial: torch.Tensor
    begin: torch.Tensor
    on_logprobs: torch.Tensor


def timestamp_bans(history: torch.Tensor, positions: torch.Tensor, rows: TimestampRows, eos_id: int,
                   vocab: int) -> torch.Tensor:
    """What the rule bans before it looks at the scores, (n, V) bool. history (n, T'): each row's decoder input,
    positions (n,): its last input token's index."""
    device = positions.device
    first, active = rows.first[:, None], (rows.first >= 0)[:, None]  # (n, 1)
    index = torch.arange(history.shape[1], device=device)[None, :]  # (1, T')
    generated = (index >= rows.begin[:, None]) & (index <= positions[:, None])  # (n, T')
    stamps = generated & (history >= first)
    last = history.gather(1, positions[:, None])  # (n, 1)
    before = history.gather(1, (positions - 1).clamp(min=0)[:, None])
    last_stamp = (positions[:, None] >= rows.begin[:, None]) & (last >= first)
    before_stamp = (positions[:, None] - 1 < rows.begin[:, None]) | (before >= first)
    latest_at = torch.where(stamps, index, -1).amax(1, keepdim=True)  # (n, 1): where the last timestamp is, or -1
    latest = history.gather(1, latest_at.clamp(min=0))
    lowest = torch.where(latest_at < 0, first, torch.where(last_stamp & ~before_stamp, latest, latest + 1))
    token = torch.arange(vocab, device=device)[None, :]  # (1, V)
    banned = token == rows.no_timestamps[:, None]
    banned |= last_stamp & before_stamp & (token >= first)  # a pair closed: text (or </s>) next
    banned |= last_stamp & ~before_stamp & (token < eos_id)  # a pair open: a timestamp or </s> next
    banned |= (token >= first) & (token < lowest)
    at_begin = (positions + 1 == rows.begin)[:, None]
    banned |= at_begin & ((token < first) | (token > rows.last_initial[:, None]))
    return banned & active


def prefer_timestamps(scores: torch.Tensor, logprobs: torch.Tensor, rows: TimestampRows) -> torch.Tensor:
    """Rows whose timestamps together are likelier than any one text token (n, V) bool: their text is banned.
    Read from what the row's search chooses from, after the bans (transformers' rule sees its processed input)."""
    chosen = torch.where(rows.on_logprobs[:, None], logprobs, scores)
    normalized = torch.log_softmax(chosen.float(), dim=-1)  # (n, V)
    token = torch.arange(scores.shape[1], device=scores.device)[None, :]
    is_stamp = token >= rows.first[:, None]
    stamps = normalized.masked_fill(~is_stamp, NEG_INF).logsumexp(-1)  # (n,)
    best_text = normalized.masked_fill(is_stamp, NEG_INF).amax(-1)
    return ((stamps > best_text) & (rows.first >= 0))[:, None] & ~is_stamp
