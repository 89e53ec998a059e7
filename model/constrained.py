"""Lexically constrained beam search: every returned hypothesis contains each of the request's constraints (target
token sequences, a glossary's terms).

A constrained sequence holds its num_beams rows, where the request's own search (greedy or beam) runs untouched,
and up to CONSTRAINT_ROWS more, where constraint beams spell the constraints. The constraint beams follow Post &
Vilar 2018's dynamic beam allocation, as fairseq's LexicallyConstrainedBeamSearch does: every live hypothesis (the
search's and the constraint beams') proposes its top 2·k tokens and the next token of every constraint it has not
met; candidates with some constraint token met are grouped in banks by how many, and the rows go to the banks in turn
(the best of every bank, most met first, then the second best of every bank, ...). </s> is allowed there only once
every constraint is met; at the length limit every candidate finishes, and results rank complete hypotheses before
partial ones (max_new_tokens bounds the work: a constraint that cannot fit ends with the best partial).

When the request's own search ends with a best hypothesis that contains every constraint (the model spells the
terms anyway), that hypothesis and its score are the result, exactly as without constraints; otherwise the best
complete hypotheses of either part. Scores are float32 sums of log-probabilities, as BeamSearch keeps them, over
generated_len ** length_penalty. Progress inside each constraint is a KMP automaton, so a partial match that breaks
falls back to the longest prefix still matching. The search's greedy part takes the best log-probability (a greedy
search alone takes the best logit: the same token but for ties that log_softmax's rounding creates).

Dimensions: k beams (num_beams), r rows (k + constraint rows), W candidates per row (2·max(k, r - k)),
C constraints, m constrained rows in the batch.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, replace
from typing import Callable

import torch

from .search import (NEG_INF, NEG_LARGE, BeamSearch, DecodeParams, Hypothesis, Search, SingleSearch, advance_beams,
                     finish_reason)

State = tuple[int, ...]  # per constraint: its tokens matched so far; its length once met (it stays met)
ANYWHERE = -1  # a start mask with every bit set: every constraint may start


class Constraints:
    """The token sequences a hypothesis must contain, each followed by a KMP automaton."""

    def __init__(self, sequences: tuple[tuple[int, ...], ...]):
        self.sequences = sequences
        self.fallback = [_failure(c) for c in sequences]
        self.start: State = (0,) * len(sequences)
        self.tokens = frozenset(token for c in sequences for token in c)
        # a search asks the same few transitions of every live hypothesis at each step: each computed once
        self.advance = functools.cache(self._advance)
        self.bank = functools.cache(self._bank)

    def _advance(self, state: State, token: int, starts: int = ANYWHERE) -> State:
        """`state` after `token`. starts: a bit per constraint that may begin at this token (its source term is
        where the hypothesis attends); a constraint whose first token comes elsewhere stays unmatched."""
        out = []
        for i, (c, p) in enumerate(zip(self.sequences, state)):
            if p < len(c):
                p = self._match(i, p, token)
                p = 0 if p == 1 and not starts >> i & 1 else p
            out.append(p)
        return tuple(out)

    def _match(self, i: int, matched: int, token: int) -> int:
        c, fallback = self.sequences[i], self.fallback[i]
        while matched and c[matched] != token:
            matched = fallback[matched - 1]
        return matched + (c[matched] == token)

    def met(self, state: State) -> bool:
        return all(p == len(c) for c, p in zip(self.sequences, state))

    def _bank(self, state: State) -> int:
        """Constraint tokens met: whole constraints, and the furthest progress inside an unmet one."""
        done = sum(p for c, p in zip(self.sequences, state) if p == len(c))
        return done + max((p for c, p in zip(self.sequences, state) if p < len(c)), default=0)

    def may_progress(self, state: State) -> frozenset[int] | None:
        """The tokens that can leave `state` with some constraint token met: those of the unmet constraints (a
        fallback lands on one of them); None (every token) once a constraint is met, as that stays."""
        if any(p == len(c) for c, p in zip(self.sequences, state)):
            return None
        return self.tokens

    def next_tokens(self, state: State) -> list[int]:
        """Per constraint, the token that continues it (a met one's first token: a placeholder, never proposed)."""
        return [c[p] if p < len(c) else c[0] for c, p in zip(self.sequences, state)]


def _failure(c: tuple[int, ...]) -> list[int]:
    """KMP: fallback[i] is the length of the longest proper prefix of c[:i + 1] that is also its suffix."""
    fallback, matched = [0] * len(c), 0
    for i in range(1, len(c)):
        while matched and c[i] != c[matched]:
            matched = fallback[matched - 1]
        matched += c[i] == c[matched]
        fallback[i] = matched
    return fallback


@dataclass
class Beam:
    tokens: list[int]
    score: float  # float32 sum of the tokens' log-probabilities
    state: State
    row: int  # its local cache row


@dataclass
class Candidate:
    score: float
    parent: Beam
    token: int
    state: State
    bank: int  # constraint tokens met (Constraints.bank)

    @property
    def tokens(self) -> list[int]:
        return self.parent.tokens + [self.token]


class ConstrainedBeamSearch(Search):
    def __init__(self, params: DecodeParams, eos_id: int, start_id: int, source_len: int):
        super().__init__(params, eos_id, start_id, source_len)
        self.constraints = Constraints(params.constraints)
        own = replace(params, constraints=(), source_words=(), constraint_words=())
        self.own = (BeamSearch if own.num_beams > 1 else SingleSearch)(own, eos_id, start_id, source_len)
        self.own_states = [self.constraints.start] * own.num_beams  # each own row's hypothesis' progress
        self.beams: list[Beam] = []  # live constraint beams, in rows num_beams..
        self.finished: list[tuple[bool, float, list[int]]] = []  # constraint beams': (all met, score, tokens)
        # per constraint, the source words of its source term (none: it may start anywhere)
        self.constraint_words = params.constraint_words or ((),) * len(params.constraints)
        self.starts_at: dict[tuple[int, ...], int] = {}  # an own hypothesis' tokens → its start mask after them

    def starts(self, word: int) -> int:
        """The start mask of a row whose alignment-layer attention is highest on source word `word`: the
        constraints whose source term holds that word, and those without source words."""
        return sum(1 << i for i, words in enumerate(self.constraint_words) if not words or word in words)

    def wanted_tokens(self) -> list[list[int]]:
        """(r, C): per row, the token continuing each constraint, whose log-probability the step gathers."""
        states = self.own_states + [b.state for b in self.beams]
        states += [self.constraints.start] * (self.num_rows - len(states))
        return [self.constraints.next_tokens(state) for state in states]

    def live(self) -> list[Beam]:
        """The hypotheses that may grow: the own search's running ones and the constraint beams."""
        own = []
        if not self.own.done:
            scores = self.own.running_scores if isinstance(self.own, BeamSearch) else [self.own.logprob]
            # a copy of the tokens: a greedy search appends to its own list
            own = [Beam(list(tokens), score, state, row) for row, (tokens, score, state)
                   in enumerate(zip(self.own.sequences, scores, self.own_states)) if score > NEG_LARGE]
        return own + self.beams

    def propose(self, live: list[Beam], top_tokens: list[list[int]], top_totals: list[list[float]],
                wanted_totals: list[list[float]], starts: list[int]) -> list[Candidate]:
        """The first half of a step, before the own search advances: the constraint beams' candidates. Per live
        hypothesis (live()), its top W tokens, their totals (its score + their log-probabilities, float32) and
        the totals of its constraints' next tokens (wanted_tokens(); columns past C are padding); per row, its
        start mask. A candidate is a top or constraint token that meets some constraint token; </s> only with
        every constraint met (or at the limit)."""
        for tokens, row_starts in zip(self.own.sequences, starts):
            self.starts_at[tuple(tokens)] = row_starts
        at_limit = self.cur_len + 1 >= self.max_length
        candidates = []
        for beam, tokens, totals, wanted in zip(live, top_tokens, top_totals, wanted_totals):
            seen, useful = set(), self.constraints.may_progress(beam.state)
            for token, total in zip(tokens + self.constraints.next_tokens(beam.state), totals + wanted):
                if total == NEG_INF or token in seen or (useful is not None and token not in useful):
                    continue
                seen.add(token)
                state = self.constraints.advance(beam.state, token, starts[beam.row])
                bank = self.constraints.bank(state)
                if bank == 0 or (token == self.eos_id and not at_limit and not self.constraints.met(state)):
                    continue
                candidates.append(Candidate(total, beam, token, state, bank))
        return candidates

    def own_advance(self, token: int, logprob: float) -> list[int]:
        """A greedy own search's step (own beam searches step together: advance_constrained) → its parent rows."""
        self.own.advance(token, logprob)
        return [0]

    def settle(self, own_parents: list[int], candidates: list[Candidate]) -> list[int]:
        """The second half, once the own search has stepped (own_parents: its rows' parents; none once it is done):
        the constraint beams from the proposed candidates → every row's parent."""
        k = self.params.num_beams
        at_limit = self.cur_len + 1 >= self.max_length
        parents = list(range(self.num_rows))
        if own_parents:
            parents[:k] = own_parents
            self.own_states = [self.constraints.advance(self.own_states[p], tokens[-1],
                                                        self.starts_at[tuple(tokens[:-1])])
                               for p, tokens in zip(own_parents, self.own.sequences)]
        own = {tuple(tokens) for tokens in self.own.sequences} if own_parents else set()
        candidates = [c for c in candidates if tuple(c.tokens) not in own]  # the own search holds these
        if at_limit:
            self._finish(candidates)
            kept = []
        else:
            kept = self._allocate(candidates)
        for row, c in enumerate(kept, start=k):
            parents[row] = c.parent.row
        self.beams = [Beam(c.tokens, c.score, c.state, row) for row, c in enumerate(kept, start=k)]
        self.cur_len += 1
        self.sequences = list(self.own.sequences) + [b.tokens for b in self.beams]
        self.sequences += [[]] * (self.num_rows - len(self.sequences))  # idle rows read the start token
        self.done = at_limit or (self.own.done and (self._own_best_complete() or self._settled()))
        return parents

    def _allocate(self, candidates: list[Candidate]) -> list[Candidate]:
        """The constraint beams by dynamic beam allocation; </s> candidates among the first `rows` finish instead."""
        rows, banks = self.num_rows - self.params.num_beams, {}
        for c in sorted(candidates, key=lambda c: -c.score):
            banks.setdefault(c.bank, []).append(c)
        # stripes: every bank's best (most constraint tokens met first), then every bank's second best, ...
        order = sorted(((rank, -bank, c) for bank, members in banks.items() for rank, c in enumerate(members)),
                       key=lambda item: item[:2])
        kept, finishing = [], []
        for position, (_, _, c) in enumerate(order):
            if c.token == self.eos_id:
                if position < rows:
                    finishing.append(c)
            elif len(kept) < rows:
                kept.append(c)
        self._finish(finishing)
        return kept

    def _finish(self, candidates: list[Candidate]) -> None:
        """Candidates enter the best finished hypotheses: complete ones before partial ones, then by score."""
        if not candidates:
            return
        penalty = torch.tensor(self.cur_len ** self.params.length_penalty, dtype=torch.float32)
        scores = (torch.tensor([c.score for c in candidates], dtype=torch.float32) / penalty).tolist()
        for c, score in zip(candidates, scores):
            self.finished.append((self.constraints.met(c.state), score, c.tokens))
        self.finished.sort(key=lambda f: f[:2], reverse=True)
        del self.finished[self.num_rows:]

    def _own_best_complete(self) -> bool:
        return self.constraints.met(self._state(self.own.results()[0].token_ids))

    def _state(self, tokens: list[int]) -> State:
        """An own hypothesis' progress: its tokens through the automaton, each with the start mask its prefix's
        row had."""
        state = self.constraints.start
        for end, token in enumerate(tokens):
            state = self.constraints.advance(state, token, self.starts_at[tuple(tokens[:end])])
        return state

    def _settled(self) -> bool:
        """transformers' stop rule over the constraint beams' complete hypotheses, for the ones returned: as many as
        num_return_sequences, and (unless early_stopping) no live beam that could still beat the last of those.
        (Waiting for as many as the constraint rows, as a beam search waits for num_beams, took a fifth more steps
        and kept no more terms: loadtests/README.md.)"""
        p = self.params
        complete = [score for met, score, _ in self.finished if met]
        if not self.beams:
            return True
        if len(complete) < p.num_return_sequences:
            return False
        if p.early_stopping is True:
            return True
        generated = self.max_length - 1 if p.early_stopping == "never" and p.length_penalty > 0 else self.cur_len - 1
        best = max(b.score for b in self.beams) / generated ** p.length_penalty
        return best <= complete[p.num_return_sequences - 1]

    def results(self) -> list[Hypothesis]:
        """The own search's hypotheses when its best meets every constraint; else the best complete hypotheses
        of both parts (fewer than num_return_sequences when fewer are), or the best partial one when none is."""
        own = [(self.constraints.met(self._state(h.token_ids)), h.score, h.token_ids) for h in self.own.results()]
        if own[0][0]:
            ranked = [f for f in own if f[0]] + sorted((f for f in self.finished if f[0] and f not in own),
                                                       key=lambda f: -f[1])
        else:
            ranked = sorted((f for f in own + self.finished if f[0]), key=lambda f: -f[1])
        ranked = ranked or sorted(own + self.finished, key=lambda f: f[:2], reverse=True)[:1]
        return [Hypothesis(tokens, score, finish_reason(tokens, self.params, self.eos_id))
                for _, score, tokens in ranked[: self.params.num_return_sequences]]


def constrained_choices(searches: list[ConstrainedBeamSearch], logprobs: torch.Tensor, top: Callable,
                        alignment: Callable) -> list[torch.Tensor]:
    """What the constrained searches choose from, on the device: their rows' top W log-probabilities and tokens
    (m, W), the log-probabilities of the tokens that continue their constraints (m, C), padded to the widest, and
    the source word each row attends to most (m,). alignment(rows, S): the rows' alignment-layer attention over the
    first S source tokens (m, S)."""
    rows = torch.tensor([r for s in searches for r in s.rows], device=logprobs.device)
    mine = logprobs.index_select(0, rows)  # (m, V)
    # 2·k for the own beam search, 2·(constraint rows) for the constraint beams
    width = 2 * max(max(s.params.num_beams, s.num_rows - s.params.num_beams) for s in searches)
    top_logprobs, top_tokens = top(mine, min(width, mine.shape[-1]))  # (m, W)
    wanted = [row for s in searches for row in s.wanted_tokens()]
    width = max(len(row) for row in wanted)
    wanted = torch.tensor([row + [row[0]] * (width - len(row)) for row in wanted], device=logprobs.device)
    return [top_logprobs, top_tokens, mine.gather(1, wanted), attended_words(searches, rows, alignment)]


def attended_words(searches: list[ConstrainedBeamSearch], rows: torch.Tensor, alignment: Callable) -> torch.Tensor:
    """(m,): per row, the source word with the most attention (its tokens' weights summed; special tokens belong
    to none), as model.alignment aligns a target word; 0 where no search places its constraints by source."""
    if not any(s.params.constraint_words for s in searches):
        return torch.zeros(len(rows), dtype=torch.long, device=rows.device)
    length = max(len(s.params.source_words) for s in searches)
    words = max(max(s.params.source_words, default=0) for s in searches) + 1
    # each source token's word, padding and special tokens in one more column that no row picks
    token_words = torch.tensor([[w if w >= 0 else words for w in s.params.source_words]
                                + [words] * (length - len(s.params.source_words))
                                for s in searches for _ in s.rows], device=rows.device)  # (m, S)
    weights = alignment(rows, length)  # (m, S)
    per_word = weights.new_zeros(len(rows), words + 1).scatter_add_(1, token_words, weights)
    return per_word[:, :words].argmax(1)


def advance_constrained(searches: list[ConstrainedBeamSearch], top_logprobs: torch.Tensor, top_tokens: torch.Tensor,
                        wanted_logprobs: torch.Tensor, attended: torch.Tensor, alone: Callable,
                        together: Callable) -> list[tuple[Search, list[int]]]:
    """Every constrained search takes its next tokens (its rows in turn in the (m, ·) inputs) → (search, local
    parents) for each that did not fail. They step together: one gather gives every live hypothesis' totals, their
    own beam searches step as one (advance_beams, as the batch's others), then each settles. What one search
    raises fails it alone: `alone(search, fn, *args)` is fn(*args), or None when it raised; `together(searches,
    advance, *inputs, rows=)` steps searches whose rows(search) rows lie in turn in `inputs`, each alone if it
    raises (the batch decoder's). attended (m,): constrained_choices' source word per row."""
    first = dict(zip(map(id, searches), itertools.accumulate((s.num_rows for s in searches), initial=0)))
    attended = attended.tolist()
    starts = {id(s): [s.starts(word) for word in attended[first[id(s)]:first[id(s)] + s.num_rows]] for s in searches}
    lives = [(s, live) for s in searches if (live := alone(s, s.live)) is not None]
    rows = torch.tensor([first[id(s)] + b.row for s, live in lives for b in live], dtype=torch.long)
    running = torch.tensor([b.score for _, live in lives for b in live], dtype=torch.float32)[:, None]  # (live, 1)
    # float32 sums, as BeamSearch adds a row's score to its log-probabilities
    top_totals = (top_logprobs[rows] + running).tolist()  # (live, W)
    wanted_totals = (wanted_logprobs[rows] + running).tolist()  # (live, C)
    tokens = top_tokens[rows].tolist()
    proposed = []  # (search, its candidates)
    for (s, live), start in zip(lives, itertools.accumulate((len(live) for _, live in lives), initial=0)):
        part = slice(start, start + len(live))
        candidates = alone(s, s.propose, live, tokens[part], top_totals[part], wanted_totals[part], starts[id(s)])
        if candidates is not None:
            proposed.append((s, candidates))

    stepping = [s for s, _ in proposed if not s.own.done]
    beams = [s for s in stepping if isinstance(s.own, BeamSearch)]
    own_parents = {}
    if beams:
        own_rows = torch.tensor([first[id(s)] + r for s in beams for r in range(s.params.num_beams)])
        stepped = together(beams, lambda group, *inputs: advance_beams([s.own for s in group], *inputs),
                           top_logprobs[own_rows], top_tokens[own_rows], rows=lambda s: s.params.num_beams)
        own_parents.update((id(s), parents) for s, parents in stepped)
    for s in stepping:
        if not isinstance(s.own, BeamSearch):
            parents = alone(s, s.own_advance, int(top_tokens[first[id(s)], 0]), float(top_logprobs[first[id(s)], 0]))
            if parents is not None:
                own_parents[id(s)] = parents
    failed = {id(s) for s in stepping} - own_parents.keys()  # their own search's step raised
    settled = []
    for s, candidates in proposed:
        if id(s) not in failed and (parents := alone(s, s.settle, own_parents.get(id(s), []), candidates)) is not None:
            settled.append((s, parents))
    return settled
