"""Rules applied to next-token scores before a search chooses: banned words, minimum length, forced first
token (the target language) and forced </s>.

They mirror transformers' NoBadWords, MinNewTokensLength, ForcedBOSToken and ForcedEOSToken processors and are
applied to a whole batch of rows at once.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from .search import NEG_INF, Search


def apply_rules(scores: torch.Tensor, searches: list[Search]) -> None:
    """scores (n, V), modified in place; row r belongs to the search whose `rows` contain r."""
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
