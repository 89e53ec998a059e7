"""Rules applied to next-token scores before a search chooses: repetition penalty, no repeated n-grams, banned
words, minimum length, forced first token (the target language) and forced </s>.

They mirror transformers' RepetitionPenalty, NoRepeatNGram, NoBadWords, MinLength/MinNewTokensLength,
ForcedBOSToken and ForcedEOSToken processors, in that order, and are applied to a whole batch of rows at once:
the scores a search chooses from are the logits (greedy, sampling) or the log-probabilities (beam search), as in
transformers. The decoder input a rule reads includes the start token, as transformers' input_ids do.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from .search import NEG_INF, Search


def apply_rules(scores: torch.Tensor, searches: list[Search]) -> None:
    """scores (n, V), modified in place; row r belongs to the search whose `rows` contain r."""
    _penalize_repetitions(scores, [s for s in searches if s.params.repetition_penalty != 1.0])
    _ban_repeated_ngrams(scores, [s for s in searches if s.params.no_repeat_ngram_size > 0])
    banned_groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    eos_banned: list[int] = []
    forced: dict[int, list[int]] = defaultdict(list)
    for search in searches:
        singles = tuple(w[0] for w in search.params.bad_words_ids if len(w) == 1 and w[0] != search.eos_id)
        if singles:
            banned_groups[singles].extend(search.rows)
        for word in search.params.bad_words_ids:
            if len(word) > 1:
                _ban_completions(scores, search, word)
        if search.eos_banned():
            eos_banned.extend((row, search.eos_id) for row in search.rows)
        if (token := search.forced_token()) is not None:
            forced[token].extend(search.rows)
    for token_ids, rows in banned_groups.items():
        scores[torch.tensor(rows)[:, None], torch.tensor(token_ids)[None, :]] = NEG_INF
    if eos_banned:
        rows, ids = zip(*eos_banned)
        scores[list(rows), list(ids)] = NEG_INF
    for token_id, rows in forced.items():
        scores[rows] = NEG_INF
        scores[rows, token_id] = 0.0


def _ban_completions(scores: torch.Tensor, search: Search, word: tuple[int, ...]) -> None:
    """Ban the last token of `word` on rows whose decoder input ends with the rest of it; like transformers,
    the decoder input includes the start token."""
    prefix, n = list(word[:-1]), len(word) - 1
    for row, seq in zip(search.rows, search.sequences):
        ends_with = seq[len(seq) - n:] == prefix if n <= len(seq) else (
            n == len(seq) + 1 and prefix[0] == search.start_id and prefix[1:] == seq)
        if ends_with:
            scores[row, word[-1]] = NEG_INF


def _penalize_repetitions(scores: torch.Tensor, searches: list[Search]) -> None:
    """Every token already in a row's decoder input: its score × penalty if negative, else ÷ penalty. One gather
    and one scatter over (rows, longest input); shorter inputs are padded with their start token (a repeat)."""
    if not searches:
        return
    inputs = [[s.start_id] + seq for s in searches for seq in s.sequences]
    rows = torch.tensor([row for s in searches for row in s.rows], device=scores.device)
    width = max(map(len, inputs))
    tokens = torch.tensor([seq + [seq[0]] * (width - len(seq)) for seq in inputs], device=scores.device)  # (r, L)
    penalty = torch.tensor([s.params.repetition_penalty for s in searches for _ in s.rows],
                           device=scores.device, dtype=scores.dtype)[:, None]  # (r, 1)
    selected = scores.index_select(0, rows)  # (r, V)
    seen = selected.gather(1, tokens)
    selected.scatter_(1, tokens, torch.where(seen < 0, seen * penalty, seen / penalty))
    scores.index_copy_(0, rows, selected)


def _ban_repeated_ngrams(scores: torch.Tensor, searches: list[Search]) -> None:
    """Ban each token that would complete an n-gram already in the row's decoder input."""
    banned_rows, banned_tokens = [], []
    for search in searches:
        n = search.params.no_repeat_ngram_size
        for row, seq in zip(search.rows, search.sequences):
            tokens = [search.start_id] + seq
            if len(tokens) + 1 < n:
                continue
            prefix = tokens[len(tokens) - n + 1:]
            for start in range(len(tokens) - n + 1):
                if tokens[start:start + n - 1] == prefix:
                    banned_rows.append(row)
                    banned_tokens.append(tokens[start + n - 1])
    if banned_rows:
        scores[banned_rows, banned_tokens] = NEG_INF
