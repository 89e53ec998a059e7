"""Continuous batching at the model level: requests join and leave a running batch between decoder steps.

The decoder owns a preallocated KV cache of `capacity` rows and the generation rules of each row. Live rows are
kept compact in [0, n): when a request finishes, rows from the tail are moved into its holes, so a step always
reads contiguous views. A step copies its inputs to the device once and its choices (greedy tokens, beam
candidates) back once; everything between stays on the device. With static_shapes the network runs at fixed
shapes (model.kernels.static_step), captured as CUDA graphs on a GPU.

Dimensions: n live rows, R capacity (rows), L decoder layers, B new sources, S source length, H heads, Dh head size,
V target vocabulary, W top-k candidates per beam row, g greedy rows, m beam rows.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Hashable

import torch

from ..kernels import cuda_kernels
from ..kernels.static_step import StaticStep
from ..network.transformer import Seq2SeqTransformer
from .constrained import ConstrainedBeamSearch, advance_constrained, constrained_choices
from .logits_rules import ActiveRules, RowRules
from .search import BeamSearch, DecodeParams, Hypothesis, Search, SingleSearch, advance_beams, target_length


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
        self.static_step = (StaticStep(model, self.cache, capture=model.device.type == "cuda") if static_shapes
                            else None)
        self.searches: dict[Hashable, Search] = {}
        self.failures: dict[int, Exception] = {}  # id(search) → what advancing it raised this step (see _alone)

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
        scores, logprobs, queried = self._scores(searches, target_len)
        parents = self._advance(searches, scores, logprobs, queried)
        continued = [(parent, row) for row, parent in enumerate(parents) if parent != row]
        if continued:
            src, dst = torch.tensor(continued, device=self.model.device).T
            self.cache.reorder(src, dst, target_len)
            self.rules.reorder(src, dst, target_len)

        events, leaving = [], []
        for key, s in list(self.searches.items()):
            error = self.failures.pop(id(s), None)
            if error is not None:
                events.append(StepEvent(key, None, None, error))
            else:
                single = isinstance(s, SingleSearch) and s.generated() > 0  # not a decoder prompt's token
                events.append(StepEvent(key, s.sequences[0][-1] if single else None, s.results() if s.done else None))
            if error is not None or s.done:
                leaving.append(key)
        self._release(leaving)
        return events

    def _scores(self, searches: list[Search], target_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The network's next-token logits and log-probabilities of the live rows, each (n, V), after the rules,
        and the alignment layer's input (n, D) (decode_step)."""
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
        self.rules.apply((scores, logprobs), step_positions, target_len, ActiveRules.of(searches))
        return scores, logprobs, queried

    def _advance(self, searches: list[Search], scores: torch.Tensor, logprobs: torch.Tensor,
                 queried: torch.Tensor) -> list[int]:
        """Every search takes its next tokens → the parent row of each live row (itself but for beams)."""
        greedy = [s for s in searches if isinstance(s, SingleSearch) and not s.params.do_sample]
        beams = [s for s in searches if isinstance(s, BeamSearch)]
        constrained = [s for s in searches if isinstance(s, ConstrainedBeamSearch)]
        chosen = []  # on the device: what the searches choose from, copied to the host together
        if greedy:
            greedy_rows = [s.rows[0] for s in greedy]
            best = vocabulary_argmax(_select_rows(scores, greedy_rows))  # (g, 1)
            chosen += [best, _select_rows(logprobs, greedy_rows).gather(1, best)]
        if beams:
            beam_rows = [row for s in beams for row in s.rows]
            width = min(2 * max(s.params.num_beams for s in beams), logprobs.shape[-1])
            top_logprobs, top_tokens = vocabulary_topk(_select_rows(logprobs, beam_rows), width)  # (m, W) each
            chosen += [top_tokens, top_logprobs]
        if constrained:  # (m, W) × 2, (m, 2C) and (m,): only when some search has constraints
            def alignment(rows: torch.Tensor, source_len: int) -> torch.Tensor:  # (G, R) → (G, R, S)
                return self.model.alignment(self.cache, queried[rows], rows[:, 0], source_len)
            chosen += constrained_choices(constrained, logprobs, vocabulary_topk, alignment)
        on_host = iter(_to_host(chosen))

        parents = list(range(scores.shape[0]))
        if greedy:
            greedy_tokens, greedy_logprobs = next(on_host), next(on_host)
            for s, token, lp in zip(greedy, greedy_tokens[:, 0].tolist(), greedy_logprobs[:, 0].tolist()):
                self._alone(s, s.advance, token, lp)
        chosen_parents = []  # (search, the local parent row of each of its rows)
        if beams:
            top_tokens, top_logprobs = next(on_host), next(on_host)
            chosen_parents += self._together(beams, advance_beams, top_logprobs, top_tokens)
        if constrained:
            chosen_parents += advance_constrained(constrained, *on_host, alone=self._alone, together=self._together)
        for s, local in chosen_parents:
            for row, parent in zip(s.rows, local):
                parents[row] = s.rows[parent]
        for s in searches:  # sampling: one row at a time, each with its own generator (reproducible per seed)
            if isinstance(s, SingleSearch) and s.params.do_sample:
                self._alone(s, self._sample, s, scores, logprobs)
        return parents

    @staticmethod
    def _sample(s: SingleSearch, scores: torch.Tensor, logprobs: torch.Tensor) -> None:
        token = s.sample(scores[s.rows[0]])
        s.advance(token, float(logprobs[s.rows[0], token]))

    def _alone(self, search: Search, advance: Callable, *args):
        """advance(*args) for one search; what it raises fails that search alone (step() reports it and releases
        its rows) rather than the step of every request in the batch."""
        try:
            return advance(*args)
        except Exception as error:
            self.failures[id(search)] = error
            return None

    def _together(self, searches: list, advance: Callable, *inputs: torch.Tensor,
                  rows: Callable[[Search], int] = lambda s: s.num_rows) -> list[tuple[Search, list[int]]]:
        """advance(searches, *inputs) → (search, local parents) pairs; `inputs` hold each search's rows(search)
        rows in turn. If it raises, each search advances alone (_each_alone), so only the one that raises fails:
        `advance` must change no search before every search has chosen (advance_beams), and a search chooses the
        same tokens alone as beside others."""
        try:
            return list(zip(searches, advance(searches, *inputs)))
        except Exception:
            return self._each_alone(searches, advance, *inputs, rows=rows)

    def _each_alone(self, searches: list, advance: Callable, *inputs: torch.Tensor,
                    rows: Callable[[Search], int] = lambda s: s.num_rows) -> list[tuple[Search, list[int]]]:
        """advance([search], *its rows of inputs) for each search in turn; one that raises fails alone."""
        firsts = itertools.accumulate(map(rows, searches), initial=0)
        alone = [(s, self._alone(s, lambda s, part: advance([s], *(t[part] for t in inputs))[0], s,
                                 slice(first, first + rows(s))))
                 for s, first in zip(searches, firsts)]
        return [(s, local) for s, local in alone if local is not None]

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
        device = self.model.device
        src, dst = torch.tensor(tail, device=device), torch.tensor(holes, device=device)
        self.cache.move_rows(src, dst, target_len, source_len)
        self.rules.move_rows(src, dst, target_len)
        owners = {row: s for s in self.searches.values() for row in s.rows if row >= n_after}
        for old_row, new_row in zip(tail, holes):
            rows = owners[old_row].rows
            rows[rows.index(old_row)] = new_row


def new_search(params: DecodeParams, eos_id: int, start_id: int, source_len: int) -> Search:
    cls = ConstrainedBeamSearch if params.constraints else BeamSearch if params.num_beams > 1 else SingleSearch
    return cls(params, eos_id, start_id, source_len)


def _to_host(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors on the CPU, in one device-to-host copy (one wait for the device instead of one per tensor):
    flattened into float64, which holds token ids and float32 values exactly, and restored. CPU tensors are
    there already."""
    if not tensors or tensors[0].device.type == "cpu":
        return tensors
    packed = torch.cat([t.reshape(-1).double() for t in tensors]).cpu()
    sizes = [t.numel() for t in tensors]
    return [part.view(t.shape).to(t.dtype) for part, t in zip(packed.split(sizes), tensors)]


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
    """(R, V) scores → each block's maximum (R, ⌈V / TOP_K_BLOCK⌉); None where blocks do not pay (a GPU, fewer than
    min_blocks blocks)."""
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


def _select_rows(scores: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """scores[rows] without a copy when rows are all live rows in order (a whole batch of one kind)."""
    if rows == list(range(scores.shape[0])):
        return scores
    return scores.index_select(0, torch.tensor(rows, device=scores.device))
