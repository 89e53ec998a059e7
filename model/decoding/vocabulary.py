"""The best tokens of each row over the vocabulary: torch's top-k and argmax, on the CPU through block maxima.

Dimensions: R rows, V target vocabulary, b blocks kept.
"""

from __future__ import annotations

import torch

TOP_K_BLOCK = 64


def vocabulary_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk(scores, k) over the vocabulary of (R, V) scores → values, indices (R, k). On the CPU through
    block maxima: the k best lie in the k blocks (of TOP_K_BLOCK tokens) with the best maxima, so one max-reduction
    over the scores and a top-k over k blocks replace a top-k over V (faster, the same values and indices). A row
    whose k-th best is -inf (fewer than k tokens allowed) takes torch.topk's own choice among the ties."""
    maxima = block_maxima(scores, 4 * k)
    if maxima is None:
        return torch.topk(scores, k)
    values, indices = _within(scores, torch.topk(maxima, k).indices, lambda c: torch.topk(c, k))
    tied = values[:, -1] == float("-inf")
    if tied.any():
        values[tied], indices[tied] = torch.topk(scores[tied], k)
    return values, indices


def vocabulary_argmax(scores: torch.Tensor) -> torch.Tensor:
    """scores.argmax(-1, keepdim=True) of (R, V) scores → (R, 1), the first maximum's index as argmax gives it. On
    the CPU through block maxima, as vocabulary_topk: torch's argmax keeps an index per element and runs about 15x
    slower than a max-reduction over a large vocabulary. The first block holding the maximum holds its first index."""
    maxima = block_maxima(scores, 4)
    if maxima is None:
        return scores.argmax(-1, keepdim=True)
    return _within(scores, maxima.argmax(-1, keepdim=True), lambda c: (None, c.argmax(-1, keepdim=True)))[1]


def block_maxima(scores: torch.Tensor, min_blocks: int) -> torch.Tensor | None:
    """(R, V) scores → each block's maximum (R, ⌈V / TOP_K_BLOCK⌉); None where blocks do not pay (a GPU, fewer
    than min_blocks blocks)."""
    rows, vocab = scores.shape
    if scores.device.type != "cpu" or vocab < min_blocks * TOP_K_BLOCK:
        return None
    whole = vocab // TOP_K_BLOCK * TOP_K_BLOCK
    maxima = scores[:, :whole].reshape(rows, -1, TOP_K_BLOCK).amax(-1)  # (R, V / block)
    if whole < vocab:
        maxima = torch.cat([maxima, scores[:, whole:].amax(-1, keepdim=True)], dim=1)
    return maxima


def _within(scores: torch.Tensor, blocks: torch.Tensor, choose) -> tuple[torch.Tensor, torch.Tensor]:
    """`choose` (values, positions) over the scores of the given blocks (R, b), in block order → values and the
    vocabulary indices of those positions. Positions past the vocabulary (the last block's) read -inf."""
    rows, vocab = scores.shape
    index = (blocks[:, :, None] * TOP_K_BLOCK + torch.arange(TOP_K_BLOCK)).reshape(rows, -1)  # (R, b · block)
    candidates = scores.gather(1, index.clamp(max=vocab - 1)).masked_fill_(index >= vocab, float("-inf"))
    values, best = choose(candidates)
    return values, index.gather(1, best)


def select_rows(scores: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """scores[rows] without a copy when rows are all live rows in order (a whole batch of one kind)."""
    if rows == list(range(scores.shape[0])):
        return scores
    return scores.index_select(0, torch.tensor(rows, device=scores.device))
