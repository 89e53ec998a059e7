"""Continuous batching at the model level: requests join and leave a running batch between decoder steps.

The decoder owns a preallocated KV cache of `capacity` rows and the generation rules of each row. Live rows are
kept compact in [0, n): when a request finishes, rows from the tail are moved into its holes, so a step always
reads contiguous views. A step copies its inputs to the device once and the choices of every kind of search
(model.decoding.kinds: greedy tokens, beam candidates) back once; everything between stays on the device. With
static_shapes the network runs at fixed shapes (model.kernels.static_step), captured as CUDA graphs on a GPU.

Dimensions: n live rows, R capacity (rows), L decoder layers, B new sources, S source length, H heads, Dh head size,
V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Hashable

import torch

from ..kernels import cuda_kernels
from ..kernels.static_step import StaticStep
from ..network.transformer import Seq2SeqTransformer
from ..network.kv_cache import KVCache
from .kinds import KINDS, Isolation, StepInputs, new_search
from .logits_rules import ActiveRules, RowRules
from .search import DecodeParams, Hypothesis, Search, target_length
from .token_timing import time_tokens


@dataclass
class StepEvent:
    key: Hashable
    new_token: int | None  # the token a one-row search produced this step (for streaming)
    results: list[Hypothesis] | None  # set when the request finished
    error: Exception | None = None  # set when choosing the request's next tokens raised: it failed alone


@dataclass
class Encoded:
    """New requests after their encoder pass, waiting to join the batch: one source per entry, which takes its
    cache rows (params.rows, in a block, entries in order) when it joins."""

    entries: list[tuple[Hashable, list[int] | torch.Tensor, DecodeParams]]  # ids, or an audio window's features
    cross_k: torch.Tensor  # (L, B, H, S, Dh): cross-attention keys of every decoder layer, one row per entry
    cross_v: torch.Tensor  # (L, B, H, S, Dh)
    mask: torch.Tensor  # (B, S) True on real source tokens

    @property
    def copies(self) -> list[int]:
        """The cache rows each entry takes: its beams."""
        return [params.rows for _, _, params in self.entries]

    @property
    def rows(self) -> int:
        return sum(self.copies)

    def without(self, dropped: frozenset) -> "Encoded":
        """The entries whose keys are not in `dropped` (cancelled while they were encoded), and their sources."""
        kept = [i for i, (key, _, _) in enumerate(self.entries) if key not in dropped]
        if len(kept) == len(self.entries):
            return self
        index = torch.tensor(kept, dtype=torch.long, device=self.mask.device)
        return Encoded([self.entries[i] for i in kept], self.cross_k.index_select(1, index),
                       self.cross_v.index_select(1, index), self.mask.index_select(0, index))


class BatchDecoder:
    def __init__(self, model: Seq2SeqTransformer, capacity: int, max_source_len: int, max_new_tokens: int,
                 static_shapes: bool = False):
        config = model.config
        if model.audio_front is not None:  # every audio window is encoded to the same length
            max_source_len = config.source_positions
        max_target_len = target_length(max_new_tokens)
        if max_source_len > config.source_positions or max_target_len > config.max_position_embeddings:
            raise ValueError(f"source length {max_source_len} or {max_new_tokens} new tokens exceed the model's "
                             f"{config.source_positions} or {config.max_position_embeddings} positions")
        self.model = model
        self.capacity, self.max_source_len, self.max_new_tokens = capacity, max_source_len, max_new_tokens
        self.cache = model.new_cache(capacity, max_target_len, max_source_len)
        # Written every step; allocated once because a fresh (n, V) tensor each step costs page faults on the
        # CPU (loadtests/README.md).
        self.logprobs = torch.empty(capacity, model.config.target_vocab_size, device=model.device)
        self.rules = RowRules(capacity, max_target_len, model.config.eos_token_id, model.device)
        self.rows = RowState(self.cache, self.rules)
        self.static_step = (StaticStep(model, self.cache, capture=model.device.type == "cuda") if static_shapes
                            else None)
        self.searches: dict[Hashable, Search] = {}
        self.isolation = Isolation()
        self.speech = model.audio_front is not None  # only a speech model's rows read a no-speech probability

    @property
    def live_rows(self) -> int:
        # a snapshot of the searches: other threads read this (metrics) while the decoding thread changes them
        return sum(len(s.rows) for s in tuple(self.searches.values()))

    @property
    def free_rows(self) -> int:
        return self.capacity - self.live_rows

    def check(self, source: list[int] | torch.Tensor, params: DecodeParams) -> None:
        """A source's ids (an audio window's features: the network checks their shape) and its params fit."""
        if isinstance(source, list) and not 0 < len(source) <= self.max_source_len:
            raise ValueError(f"source has {len(source)} tokens; allowed 1..{self.max_source_len}")
        if params.max_new_tokens + params.prompt_steps > self.max_new_tokens:
            raise ValueError(f"max_new_tokens {params.max_new_tokens} after a decoder prompt of "
                             f"{len(params.decoder_prompt)} tokens exceeds {self.max_new_tokens}")
        if params.rows > self.capacity:
            raise ValueError(f"num_beams {params.num_beams} with {len(params.constraints)} constraints takes "
                             f"{params.rows} rows; the batch capacity is {self.capacity}")

    def admit(self, entries: list[tuple[Hashable, list[int] | torch.Tensor, DecodeParams]]) -> None:
        """Encode new requests together (one padded encoder pass) and give each its cache rows."""
        self.join(self.encode(entries))

    @torch.inference_mode()
    def encode(self, entries: list[tuple[Hashable, list[int] | torch.Tensor, DecodeParams]]) -> Encoded:
        """The encoder pass for new requests (token ids, or an audio model's log-mel windows). Reads the weights
        only, never the batch, so it may run in another thread while step() runs; join() then gives the requests
        their rows."""
        for _, source, params in entries:
            self.check(source, params)
        memory, mask = self.model.encode_sources([source for _, source, _ in entries])  # (B, S, D), (B, S)
        return Encoded(entries, *self.model.cross_kv(memory), mask)  # (L, B, H, S, Dh) × 2, (B, S)

    @torch.inference_mode()
    def join(self, encoded: Encoded, dropped: frozenset = frozenset()) -> None:
        """Encoded requests join the batch (all but the keys in `dropped`: cancelled while they were encoded)."""
        encoded = encoded.without(dropped)
        keys = [key for key, _, _ in encoded.entries]
        if len(set(keys)) < len(keys) or any(key in self.searches for key in keys):
            raise ValueError("admit needs keys that are not already decoding")
        if encoded.rows > self.free_rows:
            raise RuntimeError(f"admit needs {encoded.rows} rows, {self.free_rows} free")
        if not keys:
            return
        cfg = self.model.config
        first_free = row = self.live_rows
        row_params = []
        lengths = encoded.mask.sum(1).tolist()  # each source's encoder positions
        for (key, _, params), length in zip(encoded.entries, lengths):
            search = new_search(params, cfg.eos_token_id, cfg.decoder_start_token_id, length)
            search.rows = list(range(row, row + params.rows))
            row += params.rows
            row_params += [params] * params.rows
            self.searches[key] = search
        self.cache.write_source(first_free, encoded.cross_k, encoded.cross_v, encoded.mask, encoded.copies)
        self.rules.admit(list(range(first_free, row)), row_params)

    @torch.inference_mode()
    def step(self) -> list[StepEvent]:
        """One decoder step for every live row; returns what each request produced."""
        searches = list(self.searches.values())
        if not searches:
            return []
        target_len = max(s.cur_len for s in searches)
        step = self._scores(searches, target_len)
        self.rows.reorder(self._advance(searches, step), target_len)

        events, leaving = [], []
        for key, s in list(self.searches.items()):
            error = self.isolation.failures.pop(id(s), None)
            if error is not None:
                events.append(StepEvent(key, None, None, error))
            else:
                events.append(StepEvent(key, s.streamed_token(), self._results(s) if s.done else None))
            if error is not None or s.done:
                leaving.append(key)
        self._release(leaving)
        return events

    def _results(self, search: Search) -> list[Hypothesis]:
        """A finished search's hypotheses, their tokens timed where its params ask (token_timing): a pass each on
        its source's cross-attention keys and values, read in its cache rows before they are freed."""
        results, timing = search.results(), search.params.token_timing
        if timing is None:
            return results
        row, length, cache = search.rows[0], search.source_len, self.cache
        cross_k, cross_v = (kv[:, row:row + 1, :, :length] for kv in (cache.cross_k, cache.cross_v))  # (L, 1, H, S, Dh)
        mask = cache.source_mask[row:row + 1, None, None, :length]  # (1, 1, 1, S)
        prompt = list(search.params.decoder_prompt or (search.start_id,))
        return [replace(h, times=time_tokens(self.model, cross_k, cross_v, mask, prompt, h.token_ids, timing))
                for h in results]

    def _scores(self, searches: list[Search], target_len: int) -> StepInputs:
        """The network's next-token logits and log-probabilities of the live rows, each (n, V), after the rules,
        and the alignment layer's attention over them (from decode_step's query)."""
        n = self.live_rows
        tokens, positions = [0] * n, [0] * n
        for s in searches:
            for row, token in zip(s.rows, s.input_tokens()):
                tokens[row], positions[row] = token, s.cur_len - 1
        step_tokens, step_positions = torch.tensor([tokens, positions], device=self.model.device)  # one copy
        if self.static_step is not None:
            logits, queried = self.static_step(step_tokens, step_positions)
        else:
            source_len = max(s.source_len for s in searches)
            logits, queried = self.model.decode_step(self.cache, step_tokens, step_positions, target_len, source_len)
        self.rules.record(step_tokens, step_positions)
        scores = logits.float()  # (n, V)
        logprobs = cuda_kernels.log_softmax(scores, out=self.logprobs[:n])
        if self.speech:
            self._read_no_speech(searches, logprobs)  # the model's own, before the rules change them
        self.rules.apply((scores, logprobs), step_positions, target_len, ActiveRules.of(searches))

        def alignment(rows: torch.Tensor, source_len: int) -> torch.Tensor:  # (G, R) → (G, R, S)
            return self.model.alignment(self.cache, queried[rows], rows[:, 0], source_len)
        return StepInputs(scores, logprobs, alignment)

    @staticmethod
    def _read_no_speech(searches: list[Search], logprobs: torch.Tensor) -> None:
        """Each search whose input this step is the position its params' no-speech probe names takes the probe
        token's probability (its rows are alike in the decoder prompt: the first one's)."""
        due = [s for s in searches if s.params.no_speech is not None and s.cur_len - 1 == s.params.no_speech.position]
        if not due:
            return
        rows, tokens = torch.tensor([[s.rows[0], s.params.no_speech.token] for s in due], device=logprobs.device).T
        for s, prob in zip(due, logprobs[rows, tokens].double().exp().tolist()):
            s.no_speech_prob = prob

    def _advance(self, searches: list[Search], step: StepInputs) -> list[int]:
        """Every search takes its next tokens, the searches of each kind together → the parent row of each live
        row (itself but for beams)."""
        kinds = [(kind, group) for kind in KINDS if (group := [s for s in searches if s.kind is kind])]
        chosen = [kind.choices(group, step) for kind, group in kinds]  # on the device
        on_host = iter(_to_host([t for tensors in chosen for t in tensors]))  # every kind's in one copy
        parents = list(range(step.scores.shape[0]))
        for (kind, group), tensors in zip(kinds, chosen):
            for s, local in kind.advance(group, [next(on_host) for _ in tensors], step, self.isolation):
                for row, parent in zip(s.rows, local):
                    parents[row] = s.rows[parent]
        return parents

    @torch.inference_mode()  # moving rows writes tables that join replaced in inference mode
    def cancel(self, key: Hashable) -> None:
        if key in self.searches:
            self._release([key])

    def _release(self, keys: list[Hashable]) -> None:
        """Drop finished or cancelled requests and move tail rows into the holes they leave."""
        if not keys:
            return
        n_before = self.live_rows
        freed = set()
        for key in keys:
            freed.update(self.searches.pop(key).rows)
        n_after = n_before - len(freed)
        holes = sorted(r for r in freed if r < n_after)
        tail = [r for r in range(n_after, n_before) if r not in freed]
        if not holes:
            return
        target_len = max((s.cur_len for s in self.searches.values()), default=1)
        source_len = max((s.source_len for s in self.searches.values()), default=1)
        self.rows.move(tail, holes, target_len, source_len)
        owners = {row: s for s in self.searches.values() for row in s.rows if row >= n_after}
        for old_row, new_row in zip(tail, holes):
            rows = owners[old_row].rows
            rows[rows.index(old_row)] = new_row


def _to_host(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors on the CPU, in one device-to-host copy (one wait for the device instead of one per tensor):
    flattened into float64, which holds token ids and float32 values exactly, and restored. CPU tensors are
    there already."""
    if not tensors or tensors[0].device.type == "cpu":
        return tensors
    packed = torch.cat([t.reshape(-1).double() for t in tensors]).cpu()
    sizes = [t.numel() for t in tensors]
    return [part.view(t.shape).to(t.dtype) for part, t in zip(packed.split(sizes), tensors)]


class RowState:
    """What a live row holds besides its search, moved together by its one owner: its KV cache and its generation
    rules' history (a row's cache and rules never part)."""

    def __init__(self, cache: KVCache, rules: RowRules):
        self.cache, self.rules = cache, rules

    def reorder(self, parents: list[int], target_len: int) -> None:
        """Each row takes its parent row's state (a beam continuing another's hypothesis)."""
        continued = [(parent, row) for row, parent in enumerate(parents) if parent != row]
        if continued:
            src, dst = torch.tensor(continued, device=self.rules.history.device).T
            self.cache.reorder(src, dst, target_len)
            self.rules.reorder(src, dst, target_len)

    def move(self, rows: list[int], to: list[int], target_len: int, source_len: int) -> None:
        """Rows move to other rows (tail rows into the holes that requests leaving made)."""
        src, dst = (torch.tensor(r, device=self.rules.history.device) for r in (rows, to))
        self.cache.move_rows(src, dst, target_len, source_len)
        self.rules.move_rows(src, dst, target_len)
