"""Preallocated KV cache for incremental decoding, one row per decoded sequence.

Dimensions: L layers, R rows (capacity), H heads, T target capacity, S source capacity, Dh head size.
Rows [0, n) are the live sequences; the decoding loop keeps them compact so a step reads contiguous views.
"""

from __future__ import annotations

from itertools import groupby

import torch


class KVCache:
    def __init__(self, num_layers: int, rows: int, num_heads: int, head_dim: int,
                 max_target_len: int, max_source_len: int, dtype: torch.dtype, device: torch.device | str):
        self.rows, self.max_target_len, self.max_source_len = rows, max_target_len, max_source_len
        self_shape = (num_layers, rows, num_heads, max_target_len, head_dim)
        cross_shape = (num_layers, rows, num_heads, max_source_len, head_dim)
        self.self_k = torch.zeros(self_shape, dtype=dtype, device=device)  # (L, R, H, T, Dh)
        self.self_v = torch.zeros(self_shape, dtype=dtype, device=device)
        self.cross_k = torch.zeros(cross_shape, dtype=dtype, device=device)  # (L, R, H, S, Dh)
        self.cross_v = torch.zeros(cross_shape, dtype=dtype, device=device)
        self.source_mask = torch.zeros((rows, max_source_len), dtype=torch.bool, device=device)  # (R, S)
        self.source_mask[:, 0] = True  # a free row a static-shape step runs over attends somewhere: no NaN

    def write_source(self, first: int, cross_k: torch.Tensor, cross_v: torch.Tensor, source_mask: torch.Tensor,
                     copies: list[int] | None = None) -> None:
        """Store cross-attention K/V (L, n, H, S', Dh) and the source mask (n, S') of n new sources in the rows from
        `first` on: copies[i] rows for source i (its beams; one each by default), in order. Each run of sources
        with as many copies is one broadcast copy: an index_select over the row dimension instead ran
        element by element, through a large intermediate."""
        n, s = source_mask.shape
        copies = copies or [1] * n
        rows = slice(first, first + sum(copies))
        self.source_mask[rows] = False
        self.source_mask[rows, :s] = source_mask.repeat_interleave(torch.tensor(copies, device=source_mask.device), 0)
        row, source = first, 0
        for count, run in groupby(copies):
            sources = len(list(run))
            for buffer, values in ((self.cross_k, cross_k), (self.cross_v, cross_v)):
                buffer[:, row:row + sources * count, :, :s].unflatten(1, (sources, count)).copy_(
                    values[:, source:source + sources, None])
            row, source = row + sources * count, source + sources

    def step_views(self, n: int, target_len: int, source_len: int) -> tuple[torch.Tensor, ...]:
        """What a decoder step over live rows [0, n) reads: self-attention keys and values (L, n, H, target_len,
        Dh), cross-attention keys and values (L, n, H, source_len, Dh). Views: writing the step's key and value
        into them writes the cache."""
        return (self.self_k[:, :n, :, :target_len], self.self_v[:, :n, :, :target_len],
                self.cross_k[:, :n, :, :source_len], self.cross_v[:, :n, :, :source_len])

    @staticmethod
    def _copy_rows(buffer: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, length: int) -> None:
        """buffer (L, R, H, T, Dh): rows dst get rows src over the first `length` positions. A layer at a time
        with index_select + index_copy_: faster on the CPU than one indexed assignment over all layers."""
        for layer in buffer[:, :, :, :length]:  # (R, H, length, Dh)
            layer.index_copy_(0, dst, layer.index_select(0, src))

    def _copy_self(self, src: torch.Tensor, dst: torch.Tensor, target_len: int) -> None:
        self._copy_rows(self.self_k, src, dst, target_len)
        self._copy_rows(self.self_v, src, dst, target_len)

    def move_rows(self, src: torch.Tensor, dst: torch.Tensor, target_len: int, source_len: int) -> None:
        """Copy whole rows src → dst (dst[i] gets src[i]); keeps live rows compact when requests leave.

        Only the first `target_len`/`source_len` positions are copied: nothing beyond them is ever read.
        """
        self._copy_self(src, dst, target_len)
        self._copy_rows(self.cross_k, src, dst, source_len)
        self._copy_rows(self.cross_v, src, dst, source_len)
        self.source_mask[dst] = self.source_mask[src]

    def reorder(self, src: torch.Tensor, dst: torch.Tensor, target_len: int) -> None:
        """Beam search: rows dst continue the hypotheses that lived in rows src (the rows whose parent changed).

        Only the self-attention cache is copied: beams of one request share a source, so their cross-attention
        rows are already equal.
        """
        self._copy_self(src, dst, target_len)
