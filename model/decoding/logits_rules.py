"""Rules applied to next-token scores before a search chooses: repetition penalty, no repeated n-grams, banned
words, tokens banned at the first generated position, minimum length, Whisper's timestamps, allowed tokens, and
forced tokens (the target language, a decoder prompt) and a forced </s>.

They mirror transformers' RepetitionPenalty, NoRepeatNGram, NoBadWords (and SuppressTokens),
SuppressTokensAtBegin, MinLength/MinNewTokensLength, WhisperTimeStamp, ForcedBOSToken and ForcedEOSToken
processors, in that order; allowed tokens are Whisper's language detection (its argmax over language tokens). The
scores a search chooses from are the logits
(greedy, sampling) or the log-probabilities (beam search), as in transformers.

Each cache row's rules live on the device (`RowRules`): written when its request joins, moved with the row when
the batch is compacted, and its decoder input (`history`, the start token at position 0, as transformers'
input_ids) recorded by every step and copied with the self-attention cache when a beam continues another. A
step applies them to all rows at once with a fixed number of tensor operations, no Python loop over rows or
tokens, so nothing in it waits for the host; the host only tells which rules any live row uses (`ActiveRules`),
so that a step skips the others.

Dimensions: R rows (capacity), n live rows, T target capacity, T' positions read this step, V vocabulary,
W banned words per row, M tokens in the longest banned word.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .search import NEG_INF, DecodeParams, Search
from .speech_rules import TimestampRows, prefer_timestamps, timestamp_bans

POS_INF = float("inf")
NO_TOKEN = -1  # an unused forced-token or banned-word slot
BEFORE_START = -2  # what a row's decoder input reads before its start token: matches nothing
# Columns of RowRules.limits, one integer rule setting per row: the first five for every row, the others for
# Whisper's rules (TimestampRows' fields, and the first generated position).
NGRAM, MIN_NEW, FORCED_EOS, LAST_POSITION, BEGIN, STAMP_FIRST, NO_STAMPS, LAST_INITIAL, ON_LOGPROBS = range(9)


@dataclass(frozen=True)
class ActiveRules:
    """The rules some live row uses at this step; known on the host without reading the device."""

    repetition: bool = False
    ngram_sizes: tuple[int, ...] = ()
    banned_tokens: bool = False
    banned_words: bool = False
    min_length: bool = False
    forced: bool = False
    banned_at_begin: bool = False
    timestamps: bool = False
    allowed: bool = False

    @classmethod
    def of(cls, searches: list[Search]) -> "ActiveRules":
        params = [s.params for s in searches]
        return cls(repetition=any(p.repetition_penalty != 1.0 for p in params),
                   ngram_sizes=tuple(sorted({p.no_repeat_ngram_size for p in params} - {0})),
                   banned_tokens=any(p.bad_words_ids for p in params),
                   banned_words=any(len(w) > 1 for p in params for w in p.bad_words_ids),
                   min_length=any(s.eos_banned() for s in searches),
                   forced=any(s.forced_token() is not None for s in searches),
                   banned_at_begin=any(s.params.suppress_at_begin and s.generated() == 0 for s in searches),
                   timestamps=any(p.timestamps is not None for p in params),
                   allowed=any(p.allowed_tokens for p in params))


class RowRules:
    def __init__(self, rows: int, max_target_len: int, eos_id: int, device: torch.device | str):
        self.eos_id = eos_id
        self.history = torch.zeros(rows, max_target_len, dtype=torch.long, device=device)  # (R, T) decoder inputs
        self.penalty = torch.ones(rows, device=device)  # (R,) repetition penalty, 1 = none
        self.limits = torch.full((rows, 9), NO_TOKEN, dtype=torch.long, device=device)  # (R, 9): the columns above
        # Token lists per row, NO_TOKEN in unused slots, widened as requests join: the forced prefix by position
        # (R, F), the tokens banned at the first generated position (R, K'), the only tokens allowed (R, A).
        self.forced = torch.zeros(rows, 0, dtype=torch.long, device=device)
        self.banned_at_begin = torch.zeros(rows, 0, dtype=torch.long, device=device)
        self.allowed = torch.zeros(rows, 0, dtype=torch.long, device=device)
        # One-token banned words, applied in one scatter: (R, K) token ids and what they get (-inf on a banned
        # token, +inf in an unused slot, under a min-reduction). Longer words: (R, W, M) right-aligned, the banned
        # token last, NO_TOKEN before a word and in unused slots. K, W and M grow with the requests that join.
        self.banned_tokens = torch.zeros(rows, 0, dtype=torch.long, device=device)
        self.ban_values = torch.zeros(rows, 0, device=device)
        self.bad_words = torch.zeros(rows, 0, 2, dtype=torch.long, device=device)

    def admit(self, rows: list[int], params: list[DecodeParams]) -> None:
        """Rows of newly joined requests get their request's rules; params[i] is row rows[i]'s."""
        device = self.history.device
        index = torch.tensor(rows, device=device)
        self.penalty[index] = torch.tensor([p.repetition_penalty for p in params], device=device)
        self.limits[index] = torch.tensor([_limits(p, self.history.shape[1]) for p in params], device=device)
        self._admit_banned(index, params)
        for name, lists in (("forced", [p.forced_prefix for p in params]),
                            ("banned_at_begin", [p.suppress_at_begin for p in params]),
                            ("allowed", [p.allowed_tokens for p in params])):
            table = _widen_right(getattr(self, name), max(map(len, lists)))
            table[index] = torch.tensor([[*ids, *[NO_TOKEN] * (table.shape[1] - len(ids))] for ids in lists],
                                        dtype=torch.long).view(len(lists), -1).to(device)
            setattr(self, name, table)

    def _admit_banned(self, index: torch.Tensor, params: list[DecodeParams]) -> None:
        # transformers drops a one-token banned word that is </s>
        singles = [[w[0] for w in p.bad_words_ids if len(w) == 1 and w[0] != self.eos_id] for p in params]
        words = [[w for w in p.bad_words_ids if len(w) > 1] for p in params]
        self.banned_tokens = _widen(self.banned_tokens, (max(map(len, singles)),), 0)
        self.ban_values = _widen(self.ban_values, self.banned_tokens.shape[1:], POS_INF)
        longest = max((len(w) for row in words for w in row), default=2)
        self.bad_words = _widen(self.bad_words, (max(map(len, words)), longest), NO_TOKEN)
        rows, k, device = len(params), self.banned_tokens.shape[1], index.device
        width, longest = self.bad_words.shape[1:]
        self.banned_tokens[index] = torch.tensor([ids + [0] * (k - len(ids)) for ids in singles],
                                                 dtype=torch.long).view(rows, k).to(device)
        self.ban_values[index] = torch.tensor([[NEG_INF] * len(ids) + [POS_INF] * (k - len(ids))
                                               for ids in singles]).view(rows, k).to(device)
        self.bad_words[index] = torch.tensor(
            [[[NO_TOKEN] * (longest - len(w)) + list(w) for w in row] + [[NO_TOKEN] * longest] * (width - len(row))
             for row in words], dtype=torch.long).view(rows, width, longest).to(device)

    def move_rows(self, src: torch.Tensor, dst: torch.Tensor, target_len: int) -> None:
        """Rows dst take over rows src (the batch being compacted), their history up to target_len."""
        for table in (self.history[:, :target_len], self.penalty, self.limits, self.banned_tokens, self.ban_values,
                      self.bad_words, self.forced, self.banned_at_begin, self.allowed):
            table.index_copy_(0, dst, table.index_select(0, src))

    def reorder(self, src: torch.Tensor, dst: torch.Tensor, target_len: int) -> None:
        """Beams dst continue the hypotheses in rows src: they take over their decoder input (the rules are
        their request's, the same)."""
        history = self.history[:, :target_len]
        history.index_copy_(0, dst, history.index_select(0, src))

    def record(self, tokens: torch.Tensor, positions: torch.Tensor) -> None:
        """This step's decoder input: tokens (n,) at positions (n,) of live rows [0, n)."""
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        self.history[rows, positions] = tokens

    def apply(self, targets: tuple[torch.Tensor, ...], positions: torch.Tensor, target_len: int,
              active: ActiveRules) -> None:
        """targets: score tensors (n, V) of live rows [0, n) — the logits and the log-probabilities — each modified
        in place alike, what the rules read computed once; positions (n,) index each row's last input token,
        target_len = longest input (max position + 1)."""
        n = positions.shape[0]
        history = self.history[:n, :target_len]  # (n, T')
        limits = self.limits[:n]
        if active.repetition:
            tokens, penalty = _input_tokens(history, positions), self.penalty[:n, None]  # (n, T'), (n, 1)
            for scores in targets:
                seen = scores.gather(1, tokens)
                scores.scatter_(1, tokens, torch.where(seen < 0, seen * penalty, seen / penalty))
        bans = []  # (token ids (n, K), -inf where banned and +inf where not (n, K)), min-reduced into the scores
        for size in active.ngram_sizes:
            if size <= target_len:
                bans.append(_repeated_ngrams(history, positions, size, limits[:, NGRAM] == size))
        if active.banned_tokens:
            bans.append((self.banned_tokens[:n], self.ban_values[:n]))
        if active.banned_words:
            bans.append(_completed_words(history, positions, self.bad_words[:n]))
        if active.banned_at_begin:
            tokens = self.banned_at_begin[:n]
            bans.append((tokens.clamp(min=0), _ban_values((tokens != NO_TOKEN)
                                                          & (positions + 1 == limits[:, BEGIN])[:, None])))
        eos_banned = positions < limits[:, MIN_NEW] if active.min_length else None  # (n,)
        for scores in targets:
            for tokens, values in bans:
                scores.scatter_reduce_(1, tokens, values, "amin")
            if eos_banned is not None:
                scores[:, self.eos_id].masked_fill_(eos_banned, NEG_INF)
        if active.timestamps:
            rows = TimestampRows(limits[:, STAMP_FIRST], limits[:, NO_STAMPS], limits[:, LAST_INITIAL],
                                 limits[:, BEGIN], limits[:, ON_LOGPROBS].bool())
            banned = timestamp_bans(history, positions, rows, self.eos_id, targets[0].shape[1])
            for scores in targets:
                scores.masked_fill_(banned, NEG_INF)
            text = prefer_timestamps(targets[0], targets[-1], rows)
            for scores in targets:
                scores.masked_fill_(text, NEG_INF)
        if active.allowed:  # every other token -inf on the rows with a list
            allowed = self.allowed[:n]
            listed = allowed != NO_TOKEN
            for scores in targets:
                kept = scores.gather(1, allowed.clamp(min=0)).masked_fill_(~listed, NEG_INF)
                scores.masked_fill_(listed.any(1, keepdim=True), NEG_INF)
                scores.scatter_reduce_(1, allowed.clamp(min=0), kept, "amax")
        if active.forced:  # that token scores 0, every other -inf
            tokens, is_forced, values = _forced_tokens(positions, limits, self.forced[:n])
            for scores in targets:
                scores.masked_fill_(is_forced, NEG_INF)
                scores.scatter_reduce_(1, tokens, values, "amax")


def _or_none(token: int | None) -> int:
    return NO_TOKEN if token is None else token


def _limits(p: DecodeParams, target_capacity: int) -> list[int]:
    """A row's limits (the columns above). Positions past the decoder prompt count as generated; a row without the
    timestamp rule has NO_TOKEN as its first timestamp."""
    stamps = p.timestamps
    unlimited = stamps is None or stamps.max_initial is None
    last_initial = target_capacity if unlimited else stamps.first + stamps.max_initial
    return [p.no_repeat_ngram_size, p.min_new_tokens + p.prompt_steps, _or_none(p.forced_eos_token_id),
            p.max_new_tokens + p.prompt_steps - 1, p.prompt_steps + 1,
            NO_TOKEN if stamps is None else stamps.first, NO_TOKEN if stamps is None else stamps.no_timestamps,
            last_initial, int(p.num_beams > 1)]


def _widen_right(table: torch.Tensor, width: int) -> torch.Tensor:
    """A token list table (R, W) at least `width` wide, NO_TOKEN in the new slots (lists stay left-aligned)."""
    if width <= table.shape[1]:
        return table
    grown = table.new_full((table.shape[0], width), NO_TOKEN)
    grown[:, :table.shape[1]] = table
    return grown


def _widen(table: torch.Tensor, size: tuple[int, ...], fill) -> torch.Tensor:
    """table (R, ...) with its other dimensions at least `size`: the old entries at the end of each, `fill` before."""
    shape = (table.shape[0], *map(max, table.shape[1:], size))
    if shape == table.shape:
        return table
    grown = table.new_full(shape, fill)
    grown[(slice(None), *(slice(new - old, new) for new, old in zip(shape[1:], table.shape[1:])))] = table
    return grown


def _ban_values(banned: torch.Tensor) -> torch.Tensor:
    """-inf where banned, +inf elsewhere: under a min-reduction a token listed more than once, banned in one place
    and not in another, ends up banned, and a token not banned keeps its score."""
    return torch.full(banned.shape, POS_INF, device=banned.device).masked_fill_(banned, NEG_INF)


def _suffix(history: torch.Tensor, positions: torch.Tensor, length: int) -> torch.Tensor:
    """The last `length` decoder input tokens of each row up to its position, (n, length), BEFORE_START where
    the input is shorter."""
    index = positions[:, None] - length + 1 + torch.arange(length, device=history.device)  # (n, length)
    return history.gather(1, index.clamp(min=0)).masked_fill(index < 0, BEFORE_START)


def _input_tokens(history: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Every token of each row's decoder input, (n, T'): positions past a row's own read as its start token,
    which is in its input (repetition penalty: × penalty if negative, else ÷ penalty; 1 leaves a row alike)."""
    later = torch.arange(history.shape[1], device=history.device)[None, :] > positions[:, None]  # (n, T')
    return torch.where(later, history[:, :1], history)


def _repeated_ngrams(history: torch.Tensor, positions: torch.Tensor, size: int,
                     rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """On `rows` (n,) bool: each token that would complete a `size`-gram already in the row's decoder input."""
    windows = history.unfold(1, size, 1)  # (n, T' - size + 1, size): the n-gram starting at each position
    starts = torch.arange(windows.shape[1], device=history.device)
    complete = starts[None, :] + size - 1 <= positions[:, None]  # the n-gram lies within the row's input
    repeats = (windows[..., :-1] == _suffix(history, positions, size - 1)[:, None]).all(-1)
    return windows[..., -1], _ban_values(repeats & complete & rows[:, None])


def _completed_words(history: torch.Tensor, positions: torch.Tensor,
                     words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A word's last token where the row's decoder input ends with the rest of it; words (n, W, M) as
    RowRules.bad_words."""
    prefixes, last = words[..., :-1], words[..., -1]  # (n, W, M - 1), (n, W)
    suffix = _suffix(history, positions, prefixes.shape[-1])[:, None]  # (n, 1, M - 1)
    ends_with = ((prefixes == suffix) | (prefixes == NO_TOKEN)).all(-1)  # (n, W)
    return last.clamp(min=0), _ban_values(ends_with & (last != NO_TOKEN))


def _forced_tokens(positions: torch.Tensor, limits: torch.Tensor, prefix: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The token each row must produce: </s> at its last position (wins, as transformers applies it last), else
    its forced prefix's (n, F) at that position. → token ids (n, 1), which rows are forced (n, 1), and what the
    token gets under a max-reduction (0 on a forced row, -inf elsewhere) (n, 1)."""
    eos = limits[:, FORCED_EOS]
    within = positions < prefix.shape[1]
    forced = prefix.gather(1, positions.clamp(max=max(prefix.shape[1] - 1, 0))[:, None])[:, 0] if prefix.shape[1] \
        else torch.full_like(positions, NO_TOKEN)
    forced = torch.where(within, forced, NO_TOKEN)
    forced = torch.where((positions == limits[:, LAST_POSITION]) & (eos != NO_TOKEN), eos, forced)[:, None]
    is_forced = forced != NO_TOKEN
    values = torch.zeros(forced.shape, device=forced.device).masked_fill_(~is_forced, NEG_INF)
    return forced.clamp(min=0), is_forced, values
