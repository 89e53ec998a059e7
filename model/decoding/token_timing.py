"""Whisper's token timestamps from its alignment heads, as transformers' generate(return_token_timestamps=True)
computes them (_extract_token_timestamps, after openai-whisper's find_alignment): the first half of word timestamps.

After a window is decoded, one teacher-forced decoder pass over its decoder prompt and tokens, on the source's
cross-attention keys and values still in the cache, gives the alignment heads' attention over the encoder positions
(Seq2SeqTransformer.heads_attention; the cached step computes no weights). Its rows whose input is a generated
token, over the positions of real audio: each position's weights standardized across the rows, median-filtered
along the positions, averaged over the heads. Dynamic time warping walks the rows against the positions, both
forward, at the least total of -weight; a generated token's time is the first position of its row, the row that
predicts the token after it: where that one begins, so where this one ends (transformers' token_timestamps; the
last token repeats the one before, the first row is always position 0). The same pass's logits give each token's
probability among the text tokens (openai-whisper's word probabilities).

Dimensions: A alignment heads, T decoder inputs, R rows timed, S encoder positions, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..network.transformer import Seq2SeqTransformer

MEDIAN_FILTER_WIDTH = 7  # transformers' WhisperConfig.median_filter_width, openai-whisper's medfilt_width


@dataclass(frozen=True)
class TokenTiming:
    """What DecodeParams.token_timing asks: each returned hypothesis's tokens timed on these heads."""

    heads: tuple[tuple[int, int], ...]  # (decoder layer, head), 0-based: the checkpoint's alignment heads
    positions: int  # encoder positions of real audio in the window (the rest is its padding to 30 s)
    text_tokens: int  # ids below this are text (Whisper's: every special token follows <|endoftext|>)


@dataclass(frozen=True)
class TokenTimes:
    """Per generated token of a Hypothesis (token_ids), in order."""

    ends: tuple[int, ...]  # the encoder position it ends at (× 0.02 s: transformers' token_timestamps)
    probabilities: tuple[float, ...]  # its probability among the text tokens; 0 for a special token


def time_tokens(network: Seq2SeqTransformer, cross_k: torch.Tensor, cross_v: torch.Tensor, cross_mask: torch.Tensor,
                prompt: list[int], tokens: list[int], timing: TokenTiming) -> TokenTimes:
    """One source's generated `tokens` after the decoder `prompt` (its first token the start token) timed, on
    its cached cross-attention keys and values (2 × (L, 1, H, S, Dh)) and mask (1, 1, 1, S)."""
    if not tokens:
        return TokenTimes((), ())
    ids = torch.tensor([[*prompt, *tokens[:-1]]], device=network.device)  # (1, T): the last token predicts nothing
    logits, weights = network.heads_attention(ids, cross_k, cross_v, cross_mask, timing.heads)
    first = len(prompt) - 1  # the row that predicts the first generated token
    chosen = torch.tensor(tokens, device=ids.device)  # (N,)
    text = chosen < timing.text_tokens
    probabilities = logits[0, first:, :timing.text_tokens].float().softmax(-1)  # (N, V')
    probabilities = probabilities.gather(1, chosen.where(text, 0)[:, None])[:, 0].where(text, 0.0)  # (N,)
    return TokenTimes(tuple(token_ends(weights[0, :, first + 1:, :timing.positions])),
                      tuple(probabilities.tolist()))


def token_ends(weights: torch.Tensor) -> list[int]:
    """The heads' attention (A, R, S) of the rows whose inputs are the generated tokens but the last → each
    generated token's end position (R + 1 of them)."""
    if weights.shape[1] == 0:  # one token generated: no row, as transformers' zeros
        return [0]
    weights = weights.float()[None]  # (1, A, R, S)
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)  # (1, A, 1, S): per position
    # a position where all rows attend alike (one row) stands at 0 instead of transformers' NaN
    normalized = torch.where(std > 0, (weights - mean) / std, 0.0)
    matrix = median_filter(normalized, MEDIAN_FILTER_WIDTH).mean(1)[0]  # (R, S)
    rows, positions = dynamic_time_warping(-matrix.cpu().numpy())
    starts = np.diff(rows, prepend=-1) > 0  # each row's first step on the path
    ends = positions[starts].tolist()
    return ends + ends[-1:]


def median_filter(x: torch.Tensor, width: int) -> torch.Tensor:
    """The median over a window of `width` (odd) along the last dimension of x (B, A, R, S), the edges reflected;
    x as it is when S is too short to reflect (transformers' _median_filter)."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = F.pad(x, (pad, pad, 0, 0), mode="reflect")  # (B, A, R, S + 2·pad)
    return padded.unfold(-1, width, 1).sort()[0][..., pad]


def dynamic_time_warping(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The path of least total cost through cost (R, S) from (0, 0) to (R - 1, S - 1), each step one row down,
    one column right or both → its (row, column) pairs as two arrays in order. Totals add in float32 and ties break
    as transformers' _dynamic_time_warping (and openai-whisper's dtw) break them, so the path is theirs. Cells are
    filled an anti-diagonal at a time (each needs the two before), held skewed so that a diagonal is one row of
    memory: cell (i, j) of the (R + 1, S + 1) totals at [i + j, i]."""
    rows, cols = cost.shape
    i, j = np.indices((rows, cols))
    skewed = np.zeros((rows + cols + 1, rows + 1), dtype=np.float32)
    skewed[i + j + 2, i + 1] = cost  # the cost of total (i + 1, j + 1)
    total = np.full_like(skewed, np.inf)
    total[0, 0] = 0
    trace = np.zeros(skewed.shape, dtype=np.int8)  # 0: from the diagonal, 1: from above, 2: from the left
    for diagonal in range(2, rows + cols + 1):
        first, last = max(1, diagonal - cols), min(rows, diagonal - 1)  # its rows i
        both, above = total[diagonal - 2, first - 1:last], total[diagonal - 1, first - 1:last]
        left = total[diagonal - 1, first:last + 1]
        from_both, from_above = (both < above) & (both < left), (above < both) & (above < left)
        total[diagonal, first:last + 1] = skewed[diagonal, first:last + 1] + np.where(
            from_both, both, np.where(from_above, above, left))
        trace[diagonal, first:last + 1] = np.where(from_both, 0, np.where(from_above, 1, 2))
    path, i, j = [], rows, cols
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        move = 2 if i == 0 else 1 if j == 0 else trace[i + j, i]
        i, j = i - (move != 2), j - (move != 1)
    return tuple(np.array(side[::-1]) for side in zip(*path))
