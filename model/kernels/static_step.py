"""The decoder step at fixed shapes, so that it can be captured once and replayed: CUDA graphs on a GPU.

A step over n live rows runs over a bucket of rows (the next power of two from cuda_kernels.DECODER_ROWS, at most
the capacity: a GPU's products take that many rows at a time, so the smallest bucket is one block) and attends
over the cache's whole target and source capacity, per-row positions and the source mask doing the masking: its
shapes depend on the bucket only. The rows past n in the bucket are free cache rows; each decodes some token at
position 0 of its own cache row, which nothing reads (a row that joins writes position 0 before reading it).

On a GPU every bucket's step is captured as a CUDA graph at start-up and replayed, one launch instead of ≈250
kernel launches per step; graphs share one memory pool, and what the cache and the graphs hold is reserved
then (`reserved_bytes`). Without CUDA the same fixed-shape step runs eagerly (tests compare it with the dynamic
step); the CPU engine keeps the dynamic step, which reads only as far as the longest live row
(`python -m loadtests.bench_step` measured both).
"""

from __future__ import annotations

import gc
import logging
import time

import torch

from ..network.kv_cache import KVCache
from .cuda_kernels import DECODER_ROWS

log = logging.getLogger(__name__)


def row_buckets(capacity: int, smallest: int = DECODER_ROWS) -> list[int]:
    """smallest, 2 × smallest, … and the capacity itself (the capacity alone when it is smaller)."""
    buckets = [min(smallest, capacity)]
    while buckets[-1] < capacity:
        buckets.append(min(2 * buckets[-1], capacity))
    return buckets


class StaticStep:
    def __init__(self, model, cache: KVCache, capture: bool):
        self.model, self.cache = model, cache
        self.tokens = torch.full((cache.rows,), model.config.pad_token_id, dtype=torch.long,
                                 device=model.device)  # (R,): the step's inputs; rows past n keep any token
        self.positions = torch.zeros(cache.rows, dtype=torch.long, device=model.device)  # (R,)
        self.buckets = row_buckets(cache.rows)
        # rows → graph, its outputs: logits (rows, V) and the alignment layer's input (rows, D) (decode_step)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, torch.Tensor]]] = {}
        self.reserved_bytes = 0
        self.graph_bytes: dict[int, int] = {}  # rows → GPU memory its graph's capture added to the shared pool
        if capture:
            self._capture()

    def _forward(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model.decode_step(self.cache, self.tokens[:rows], self.positions[:rows],
                                      self.cache.max_target_len, self.cache.max_source_len)  # (rows, V), (rows, D)

    @torch.inference_mode()
    def _capture(self) -> None:
        start = time.perf_counter()
        side = torch.cuda.Stream()  # warm-up (kernel selection, workspaces) off the default stream, as CUDA asks
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for rows in self.buckets:
                self._forward(rows)
        torch.cuda.current_stream().wait_stream(side)
        # Destroying a graph during a capture invalidates the capture, and an earlier decoder's graphs can be in
        # cyclic garbage that a collection would free at any allocation: collected first, then none till the end.
        gc.collect()
        gc.disable()
        try:
            self._capture_buckets()
        finally:
            gc.enable()
        torch.cuda.synchronize()
        self.reserved_bytes = torch.cuda.memory_reserved(self.model.device)
        log.info("decoder step captured as %d CUDA graphs (rows %s) in %.1f s; GPU memory reserved %.2f GiB",
                 len(self.graphs), self.buckets, time.perf_counter() - start, self.reserved_bytes / 2**30)

    def _capture_buckets(self) -> None:
        pool = None
        for rows in reversed(self.buckets):  # largest first: the smaller graphs fit in the memory it reserved
            graph = torch.cuda.CUDAGraph()
            torch.cuda.empty_cache()  # as the capture itself does first: what it frees is not the graph's
            before = torch.cuda.memory_reserved(self.model.device)
            # thread_local: the engine's encoder thread may use the GPU meanwhile (after a reset)
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                outputs = self._forward(rows)
            pool = graph.pool()
            self.graphs[rows] = (graph, outputs)
            self.graph_bytes[rows] = torch.cuda.memory_reserved(self.model.device) - before

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens, positions (n,) of live rows [0, n) → logits (n, V) and the alignment layer's input (n, D)."""
        n = tokens.shape[0]
        rows = next(b for b in self.buckets if b >= n)
        self.tokens[:n] = tokens
        self.positions[:n] = positions
        self.positions[n:rows] = 0  # free rows: position 0 of their own cache row
        if rows in self.graphs:
            graph, outputs = self.graphs[rows]
            graph.replay()
        else:
            outputs = self._forward(rows)
        return tuple(output[:n] for output in outputs)
