"""Position embeddings, one kind per family: token ids and step indices → position vectors.

Dimensions: B batch rows, T sequence length, n live decoder rows, D model size, P table rows.
Every kind answers two questions: the positions of a whole sequence (`forward`, the encoder and the
teacher-forced decoder) and the position of one new decoder token per row (`step`, the KV-cached decoder).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from .architecture import ModelConfig, Positions


def marian_sinusoids(num_positions: int, dim: int) -> torch.Tensor:
    """Marian's layout: sin of all frequencies in the first half, cos in the second (not interleaved).

    Computed in float64 like transformers, then rounded once to float32.
    """
    pos = np.arange(num_positions)[:, None]
    angles = pos / np.power(10000, 2 * (np.arange(dim) // 2) / dim)  # (P, D)
    sentinel = (dim + 1) // 2
    out = np.empty((num_positions, dim))
    out[:, :sentinel] = np.sin(angles[:, 0::2])
    out[:, sentinel:] = np.cos(angles[:, 1::2])
    return torch.tensor(out, dtype=torch.float32)


def fairseq_sinusoids(num_positions: int, dim: int, padding_idx: int) -> torch.Tensor:
    """fairseq's (tensor2tensor's) table as transformers builds it for M2M100/NLLB, in float32, op for op;
    the padding row is zero."""
    half = dim // 2
    scale = math.log(10000) / (half - 1)
    freqs = torch.exp(torch.arange(half, dtype=torch.int64).float() * -scale)
    angles = torch.arange(num_positions, dtype=torch.int64).float().unsqueeze(1) * freqs.unsqueeze(0)  # (P, D/2)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).view(num_positions, -1)  # (P, D)
    if dim % 2:
        table = torch.cat([table, torch.zeros(num_positions, 1)], dim=1)
    table[padding_idx, :] = 0
    return table


class IndexPositions(nn.Module):
    """Position = index + offset, read from a table: Marian's sinusoids (offset 0, fixed) or a learned table
    (mBART, BART: offset 2)."""

    def __init__(self, table: torch.Tensor | None, num_positions: int, dim: int, offset: int):
        super().__init__()
        self.offset = offset
        if table is None:
            self.weight = nn.Parameter(torch.zeros(num_positions + offset, dim))  # (P, D), from the checkpoint
        else:
            self.register_buffer("weight", table, persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[torch.arange(ids.shape[1], device=ids.device) + self.offset]  # (T, D), broadcast over B

    def step(self, tokens: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        return self.weight[steps + self.offset]  # (n, D)


class FairseqPositions(nn.Module):
    """M2M100/NLLB: non-pad tokens are numbered from pad_id + 1; a pad token gets the zero row. Without a cache
    transformers counts non-pad tokens (cumsum); with one it counts steps and zeroes only a pad token itself —
    `forward` and `step` follow each, so both match transformers (they differ only after a generated pad)."""

    def __init__(self, num_positions: int, dim: int, pad_id: int):
        super().__init__()
        self.pad_id = pad_id
        rows = num_positions + max(2, pad_id + 1)
        self.register_buffer("weight", fairseq_sinusoids(rows, dim, pad_id), persistent=False)  # (P, D)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        real = ids.ne(self.pad_id).int()  # (B, T)
        return self.weight[torch.cumsum(real, dim=1) * real + self.pad_id]  # (B, T, D)

    def step(self, tokens: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        return self.weight[(steps + 1) * tokens.ne(self.pad_id) + self.pad_id]  # (n, D)


def relative_buckets(relative: torch.Tensor, bidirectional: bool, num_buckets: int,
                     max_distance: int) -> torch.Tensor:
    """T5's bucket of each relative position (key - query), as transformers computes it: half the buckets for
    exact small distances, the rest logarithmic up to max_distance; the encoder splits them by direction, the
    decoder sees only the past."""
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0).long() * num_buckets
        distance = relative.abs()
    else:
        distance = -torch.min(relative, torch.zeros_like(relative))
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).long()
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(distance < max_exact, distance, large)


class RelativePositionBias(nn.Module):
    """T5: a learned bias per (bucket, head) added to the self-attention scores of every layer; no position
    embeddings. Buckets for query/key positions up to `num_positions` are computed once."""

    def __init__(self, num_buckets: int, max_distance: int, num_heads: int, bidirectional: bool, num_positions: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_buckets, num_heads))  # (buckets, H)
        positions = torch.arange(num_positions)
        table = relative_buckets(positions[None, :] - positions[:, None], bidirectional, num_buckets, max_distance)
        self.register_buffer("buckets", table, persistent=False)  # (P query, P key)

    def forward(self, length: int) -> torch.Tensor:
        """The bias of a whole sequence against itself: (1, H, T, T)."""
        return self.weight[self.buckets[:length, :length]].permute(2, 0, 1)[None]

    def step(self, positions: torch.Tensor, key_length: int) -> torch.Tensor:
        """The bias row of each live row's current position against keys [0, key_length): (n, H, 1, K)."""
        return self.weight[self.buckets[positions, :key_length]].permute(0, 2, 1)[:, :, None]


def position_embeddings(config: ModelConfig) -> tuple[nn.Module | None, nn.Module | None]:
    """(encoder positions, decoder positions); the fixed kinds share one table; None for relative positions and
    for an audio encoder's."""
    kind, n, d = config.architecture.positions, config.max_position_embeddings, config.d_model
    if kind is Positions.RELATIVE:
        return None, None
    if kind is Positions.LEARNED:
        return IndexPositions(None, n, d, offset=2), IndexPositions(None, n, d, offset=2)
    if kind is Positions.AUDIO:  # the encoder's table is the audio front's (network.audio_front)
        return None, IndexPositions(None, n, d, offset=0)
    shared = (IndexPositions(marian_sinusoids(n, d), n, d, offset=0) if kind is Positions.MARIAN_SINUSOIDAL
              else FairseqPositions(n, d, config.pad_token_id))
    return shared, shared
