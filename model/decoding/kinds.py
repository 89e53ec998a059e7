"""The kinds of search a batch steps together: greedy, beam, constrained beam and sampling. Each `Kind` says what
its searches choose from on the device (every kind's choices reach the host in one copy) and how they then advance
on the host, so the batch decoder steps whatever kinds it holds through this one interface.

Dimensions: n live rows, V target vocabulary, g greedy rows, m beam rows, W top-k candidates per row.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

import torch

from ..kernels import cuda_kernels
from .constrained import ConstrainedBeamSearch, advance_constrained, constrained_choices
from .search import BeamSearch, DecodeParams, Search, SingleSearch, advance_beams
from .vocabulary import select_rows, vocabulary_argmax, vocabulary_topk

Parents = list[tuple[Search, list[int]]]  # (search, the local parent row of each of its rows)


@dataclass(frozen=True)
class StepInputs:
    """What a step's searches choose from: the rows' scores and log-probabilities after the rules, (n, V) each,
    and `alignment`: rows (G, R), S → (G, R, S), the alignment layer's attention of those cache rows."""

    scores: torch.Tensor
    logprobs: torch.Tensor
    alignment: Callable[[torch.Tensor, int], torch.Tensor]


class Isolation:
    """What advancing one search raises fails that search alone (the batch decoder reports it and releases its
    rows), never the step of every request in the batch. `failures`: id(search) → what it raised this step."""

    def __init__(self):
        self.failures: dict[int, Exception] = {}

    def alone(self, search: Search, advance: Callable, *args):
        """advance(*args) for one search; None when it raised."""
        try:
            return advance(*args)
        except Exception as error:
            self.failures[id(search)] = error
            return None

    def together(self, searches: list, advance: Callable, *inputs: torch.Tensor,
                 rows: Callable[[Search], int] = lambda s: s.num_rows) -> Parents:
        """advance(searches, *inputs) → (search, local parents) pairs; `inputs` hold each search's rows(search)
        rows in turn. If it raises, each search advances alone, so only the one that raises fails: `advance` must
        change no search before every search has chosen (advance_beams), and a search chooses the same tokens
        alone as beside others."""
        try:
            return list(zip(searches, advance(searches, *inputs)))
        except Exception:
            firsts = itertools.accumulate(map(rows, searches), initial=0)
            alone = [(s, self.alone(s, lambda s, part: advance([s], *(t[part] for t in inputs))[0], s,
                                    slice(first, first + rows(s))))
                     for s, first in zip(searches, firsts)]
            return [(s, local) for s, local in alone if local is not None]


class Kind:
    """One kind of search's share of a step. `choices`: what its searches choose from, on the device; `advance`:
    those tensors on the host → the searches' new tokens, and the parents of the rows that take another's state."""

    search: type[Search]  # the search it starts for a request

    def choices(self, searches: list, step: StepInputs) -> list[torch.Tensor]:
        return []

    def advance(self, searches: list, chosen: list[torch.Tensor], step: StepInputs,
                isolation: Isolation) -> Parents:
        raise NotImplementedError


class Greedy(Kind):
    search = SingleSearch

    def choices(self, searches: list[SingleSearch], step: StepInputs) -> list[torch.Tensor]:
        rows = [s.rows[0] for s in searches]
        scores = select_rows(step.scores, rows)
        best = vocabulary_argmax(scores)  # (g, 1)
        return [best, chosen_logprobs(searches, scores, select_rows(step.logprobs, rows), best)]

    def advance(self, searches: list[SingleSearch], chosen: list[torch.Tensor], step: StepInputs,
                isolation: Isolation) -> Parents:
        tokens, logprobs = chosen
        for s, token, logprob in zip(searches, tokens[:, 0].tolist(), logprobs[:, 0].tolist()):
            isolation.alone(s, s.advance, token, logprob)
        return []


class Beam(Kind):
    search = BeamSearch

    def choices(self, searches: list[BeamSearch], step: StepInputs) -> list[torch.Tensor]:
        rows = [row for s in searches for row in s.rows]
        width = min(2 * max(s.params.num_beams for s in searches), step.logprobs.shape[-1])
        top_logprobs, top_tokens = vocabulary_topk(select_rows(step.logprobs, rows), width)  # (m, W) each
        return [top_tokens, top_logprobs]

    def advance(self, searches: list[BeamSearch], chosen: list[torch.Tensor], step: StepInputs,
                isolation: Isolation) -> Parents:
        top_tokens, top_logprobs = chosen
        return isolation.together(searches, advance_beams, top_logprobs, top_tokens)


class Constrained(Kind):
    search = ConstrainedBeamSearch

    def choices(self, searches: list[ConstrainedBeamSearch], step: StepInputs) -> list[torch.Tensor]:
        # (m, W) × 2, (m, 2C + 1) and (m,)
        return constrained_choices(searches, step.logprobs, vocabulary_topk, step.alignment)

    def advance(self, searches: list[ConstrainedBeamSearch], chosen: list[torch.Tensor], step: StepInputs,
                isolation: Isolation) -> Parents:
        return advance_constrained(searches, *chosen, alone=isolation.alone, together=isolation.together)


class Sampling(Kind):
    """One row at a time, each with its own generator (reproducible per seed)."""

    search = SingleSearch

    def advance(self, searches: list[SingleSearch], chosen: list[torch.Tensor], step: StepInputs,
                isolation: Isolation) -> Parents:
        for s in searches:
            isolation.alone(s, self._sample, s, step.scores, step.logprobs)
        return []

    @staticmethod
    def _sample(s: SingleSearch, scores: torch.Tensor, logprobs: torch.Tensor) -> None:
        row = s.rows[0]
        token = s.sample(scores[row])
        chosen_from = renormalized(scores[row:row + 1])[0] if s.params.renormalized_logprobs else logprobs[row]
        s.advance(token, float(chosen_from[token]))


def chosen_logprobs(searches: list[SingleSearch], scores: torch.Tensor, logprobs: torch.Tensor,
                    tokens: torch.Tensor) -> torch.Tensor:
    """The log-probabilities (g, 1) of the tokens (g, 1) that one-row searches chose from their rows' scores (g, V):
    the model's own, from logprobs (g, V), or renormalized where the search's params ask."""
    own = logprobs.gather(1, tokens)
    asked = [s.params.renormalized_logprobs for s in searches]
    if not any(asked):
        return own
    after = renormalized(scores).gather(1, tokens)
    return after if all(asked) else torch.where(torch.tensor(asked, device=own.device)[:, None], after, own)


def renormalized(scores: torch.Tensor) -> torch.Tensor:
    """Log-probabilities (g, V) over what the rules left of the scores (g, V) (DecodeParams.renormalized_logprobs),
    through the log-softmax kernel the step's own go through."""
    return cuda_kernels.log_softmax(scores, out=torch.empty_like(scores))


GREEDY, BEAM, CONSTRAINED, SAMPLING = Greedy(), Beam(), Constrained(), Sampling()
KINDS = (GREEDY, BEAM, CONSTRAINED, SAMPLING)  # the order a step chooses and advances in


def new_search(params: DecodeParams, eos_id: int, start_id: int, source_len: int) -> Search:
    """The search `params` ask for, of its kind."""
    kind = CONSTRAINED if params.constraints else BEAM if params.num_beams > 1 else \
        SAMPLING if params.do_sample else GREEDY
    search = kind.search(params, eos_id, start_id, source_len)
    search.kind = kind
    return search
