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

Placement: a term should take the place of what the model would write for its source term, not stand beside it or
in another slot. Where the request says which source words each constraint translates (DecodeParams.source_words,
constraint_words; a term twice is two constraints), an occurrence counts as placed when its first token comes while
the hypothesis' row attends to those words most, or the word after them (the alignment layer's cross-attention, as
model.alignment aligns words; it runs a word ahead as often as not), before the hypothesis attended most to them or
past them or moved through them (the model wrote its own translation of the term already: the end of the source,
</s>, is a word after the last; _starts), and the term stands as whole words followed by </s> or by the translation
of another source word, not the model's own translation of the term going on beside it (Constraints._place). Banks
count placed tokens while a hypothesis can still place every term, and those that cannot come after all others;
results rank hypotheses placing every term before those with a term elsewhere (still complete: a model whose
attention never finds the source term keeps its terms).

When the request's own search ends with a best hypothesis that places every constraint (the model spells the terms
anyway), that hypothesis and its score are the result, exactly as without constraints; otherwise the best complete
hypotheses of either part. Scores are float32 sums of log-probabilities, as BeamSearch keeps them, over
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

# Per constraint, its tokens matched so far by an occurrence that began on its source term (placed; one more once
# the token after it is written away from that term), then per constraint by any occurrence (loose): once met it
# stays met.
State = tuple[int, ...]
ANYWHERE = -1  # a start mask with every bit set: every constraint may begin, no row is on a source term
# ids in no constraint: every token outside the constraints moves a state as one of these two, by whether it begins
# a word (` mille`, `,`, </s>) or continues the word before it (`-neuf`, `echs`: DecodeParams.glued)
OTHER_TOKEN, GLUED_TOKEN = -1, -2
# a hypothesis' tier: some constraint missing; all met, some not placed; all placed
PARTIAL, ELSEWHERE, PLACED = 0, 1, 2


class Constraints:
    """The token sequences a hypothesis must contain, each followed by two KMP automata: one counting only
    occurrences that begin where the hypothesis attends to the constraint's source term (placed), one counting any
    (loose: a term the model cannot place by its source still appears)."""

    def __init__(self, sequences: tuple[tuple[int, ...], ...], end: int | None = None, glued: bytes = b"",
                 last: frozenset[int] = frozenset()):
        self.sequences = sequences
        self.end = end  # the token that ends a hypothesis (</s>): it confirms a term just spelled
        self.glued = glued  # a bit per target token: it continues the word before it (DecodeParams.glued)
        self.last = last  # the constraints whose source term ends the source: no word after it to lag on
        # per constraint, the last before it with the same tokens (a term twice): an occurrence of it counts only
        # once that one is met, so one occurrence never meets both
        self.twin = [max((j for j in range(i) if sequences[j] == c), default=None) for i, c in enumerate(sequences)]
        self.fallback = [_failure(c) for c in sequences]
        self.start: State = (0,) * (2 * len(sequences))
        self.tokens = frozenset(token for c in sequences for token in c)
        # a search asks the same few transitions of every live hypothesis at each step: each computed once
        self.advance = functools.cache(self._advance)
        self.bank = functools.cache(self._bank)
        self.next_tokens = functools.cache(self._next_tokens)

    def _advance(self, state: State, token: int, starts: int = ANYWHERE) -> State:
        """`state` after `token`, chosen by a row with start mask `starts`: bit i, constraint i may begin here as
        placed (its source term is where the row attends); bit C + i, the row attends away from that term; bit
        2C, it attends the end of the source (</s>)."""
        count = len(self.sequences)
        beyond = starts >> (2 * count) & 1
        placed = [self._place(i, p, token, starts >> i & 1, starts >> (count + i) & 1, beyond)
                  for i, p in enumerate(state[:count])]
        loose = [p if p == len(c) else self._match(i, p, token, twin is None or state[count + twin] == len(c))
                 for i, (c, p, twin) in enumerate(zip(self.sequences, state[count:], self.twin))]
        return tuple(placed + loose)

    def continues(self, token: int) -> bool:
        """Whether `token` continues the word before it (GLUED_TOKEN does; OTHER_TOKEN and </s> do not)."""
        if token < 0 or token >> 3 >= len(self.glued):
            return token == GLUED_TOKEN
        return bool(self.glued[token >> 3] >> (token & 7) & 1)

    def _place(self, i: int, matched: int, token: int, may_begin: bool, away: bool, beyond: bool) -> int:
        """A placed occurrence once spelled (`matched` its length) must stand as whole words: a token glued to it
        is the model going on with its own word (`elf` forced for `ten`, then `ünf`; `vingt` for `nineteen`,
        then `-neuf`), and the occurrence is not placed. A token that begins a word confirms it (one more: placed)
        when it is </s> or written while the decoder attends away from the term's source words; written on them,
        it is excused once (pending, one less), as the attention lags a word as often as it runs ahead (`tres`,
        then ` mil` written on `forty-two`), tokens glued to it go on with that word, and the next word begun on
        another source word confirms it; one written on the term, while attending </s>, or </s> itself (nothing
        shows the decoder moved on) is the model's own translation of the term beside it (`quarante`, then ` neuf`
        for `thirty-nine`; `treinta`, then ` y nueve`), and the occurrence is not placed. A term whose source term
        ends the source (`last`) has no next word to lag on: only </s> or a word begun on an earlier source word
        confirms it (`treinta mil trescientos treinta`, then ` mil trescientos` again, or ` u n` on </s>).
        Confirmed stays so while the decoder keeps away (a token on the term after it: the same)."""
        spelled = len(self.sequences[i])
        if matched == spelled + 1:  # pending: the token after the term was written on the term's source words
            if away and not beyond and token != self.end:
                # a token glued to the excused word goes on with it (` `, then `y` of `treinta y nueve`): the word
                # after it decides
                return matched if self.continues(token) else spelled + 2
            return self._match(i, 0, token, may_begin)
        if matched == spelled + 2:
            return matched if away or token == self.end else self._match(i, 0, token, may_begin)
        if matched == spelled and not self.continues(token):
            if token == self.end or away and not (beyond and i in self.last):
                return spelled + 2
            return self._match(i, 0, token, may_begin) if i in self.last else spelled + 1
        return self._match(i, matched, token, may_begin)

    def _match(self, i: int, matched: int, token: int, may_begin: bool) -> int:
        c, fallback = self.sequences[i], self.fallback[i]
        while matched and (matched == len(c) or c[matched] != token):
            matched = fallback[matched - 1]
        matched += c[matched] == token
        return 0 if matched == 1 and not may_begin else matched  # matched == 1: an occurrence begins here

    def _parts(self, state: State) -> tuple[State, State]:
        return state[:len(self.sequences)], state[len(self.sequences):]

    def met(self, state: State) -> bool:
        """Every constraint occurs, placed or not."""
        return all(p == len(c) for c, p in zip(self.sequences, self._parts(state)[1]))

    def tier(self, state: State) -> int:
        placed, loose = self._parts(state)
        if all(p == len(c) + 2 for c, p in zip(self.sequences, placed)):
            return PLACED
        return ELSEWHERE if self.met(state) else PARTIAL

    def placing(self, state: State) -> bool:
        """Some constraint token met by a placed occurrence."""
        return any(self._parts(state)[0])

    def _bank(self, state: State) -> tuple[int, int]:
        """Constraint tokens met, placed and loose: whole constraints (a confirmed placed one counting one more) and
        the furthest progress inside an unmet one (a pending one counts as spelled: a bank ahead of a term spelled
        in its place would keep its row from that term, `quatre quatre cent` over `quatre cent quatre`)."""
        placed, loose = self._parts(state)
        confirmed = [p == len(c) + 2 for c, p in zip(self.sequences, placed)]
        done = sum(len(c) + 1 for c, met in zip(self.sequences, confirmed) if met)
        progress = max((min(p, len(c)) for c, p, met in zip(self.sequences, placed, confirmed) if not met), default=0)
        whole = sum(p for c, p in zip(self.sequences, loose) if p == len(c))
        return done + progress, whole + max((p for c, p in zip(self.sequences, loose) if p < len(c)), default=0)

    def may_progress(self, state: State) -> frozenset[int] | None:
        """The tokens that can leave `state` with some constraint token met: those of the unmet constraints (a
        fallback lands on one of them); None (every token) once a constraint is met, as that stays."""
        if any(p == len(c) for c, p in zip(self.sequences, self._parts(state)[1])):
            return None
        return self.tokens

    def _next_tokens(self, state: State) -> tuple[int, ...]:
        """Per constraint, the token that continues its placed occurrence, then its loose one (a met one's first
        token: a placeholder, never proposed); then the end token, which confirms a term just spelled where the
        model would go on with its own translation of it (not among its best tokens)."""
        tokens = tuple(c[p] if p < len(c) else c[0] for c, p in zip(self.sequences * 2, state))
        return tokens + (() if self.end is None else (self.end,))


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
    # (lost: some term can no longer be placed, ConstrainedBeamSearch.lost; constraint tokens met, placed ones
    # (Constraints.bank) unless lost, loose ones if so): rows go to these banks in turn
    bank: tuple[bool, int]

    @property
    def tokens(self) -> list[int]:
        return self.parent.tokens + [self.token]


class ConstrainedBeamSearch(Search):
    def __init__(self, params: DecodeParams, eos_id: int, start_id: int, source_len: int):
        super().__init__(params, eos_id, start_id, source_len)
        # per constraint, the source words of its source term (none: it may start anywhere)
        self.constraint_words = params.constraint_words or ((),) * len(params.constraints)
        self.end_word = max(params.source_words, default=0)  # the tokens after the last word (</s>)
        last = [i for i, words in enumerate(self.constraint_words) if words and max(words) + 1 == self.end_word]
        self.constraints = Constraints(params.constraints, eos_id, params.glued, frozenset(last))
        own = replace(params, constraints=(), source_words=(), constraint_words=(), glued=b"")
        self.own = (BeamSearch if own.num_beams > 1 else SingleSearch)(own, eos_id, start_id, source_len)
        self.own_states = [self.constraints.start] * own.num_beams  # each own row's hypothesis' progress
        self.beams: list[Beam] = []  # live constraint beams, in rows num_beams..
        self.finished: list[tuple[int, float, list[int]]] = []  # constraint beams': (tier, score, tokens)
        self.starts_at: dict[tuple[int, ...], int] = {}  # an own hypothesis' tokens → its start mask after them
        # a hypothesis' tokens → the source words its rows attended to most (a bit per word), itself included
        self.attended: dict[tuple[int, ...], int] = {}
        self.word_at: dict[tuple[int, ...], int] = {}  # a hypothesis' tokens → the word its last row attended most
        self.starts = functools.cache(self._starts)
        self.lost = functools.cache(self._lost)

    def _starts(self, word: int, before: int, last: int) -> int:
        """The start mask (Constraints.advance) of a row whose alignment-layer attention is highest on source word
        `word`, the rows of its hypothesis before the last having attended most to the words `before` (a bit
        each), the last row having attended most to `last` (-1: none). May begin: the constraints whose source
        term holds that word or ends just before it (attention often runs a word ahead: `cent` written while
        attending `forty-two`, `sept` of `seven hundred` while attending `hundred`) unless the last row was there
        already (it wrote the term's own translation running ahead: `sept` then `huit` for `seven thousand`) or
        it is </s> (after `douze` for `twelve` the decoder attends </s>), and unless the last row attended an
        earlier word of the term (the decoder moved through it: the last token was its own translation of that
        part, `cincuenta` on `fifty` of `fifty-nine`, then `sesenta` on `-`; `quatre` on `four`, then `cinq` on
        `thousand`), with no word of it or after it in `before` (the model translated it already, `douze` then
        `treize`, or passed it); the last row does not count, as it runs ahead, but for the first (which attends
        where the translation begins: `dix` for `nineteen`). Away: those whose source term does not hold `word`.
        Both for constraints without source words."""
        count = len(self.constraint_words)
        return sum(1 << i | 1 << (count + i) if not words else
                   ((word in words or last != word == max(words) + 1 < self.end_word)
                    and not min(words) <= last < word and before >> min(words) == 0)
                   << i
                   | (word not in words) << (count + i)
                   for i, words in enumerate(self.constraint_words)) | (word == self.end_word) << (2 * count)

    def _lost(self, state: State, passed: int) -> bool:
        """Whether some constraint with source words is not begun as placed (`state`) where the rows before the
        next one's last attended most to the words `passed` (a bit each) at or past its source term's first word:
        it may never begin there again (_starts), so the hypothesis can end only with that term elsewhere."""
        placed = state[:len(self.constraint_words)]
        return any(words and not p and passed >> min(words) for p, words in zip(placed, self.constraint_words))

    def row_starts(self, attended: list[int]) -> list[int]:
        """Per row, its start mask, from the source word each row attends to most (constrained_choices)."""
        masks = []
        for tokens, word in zip(self.sequences, attended):
            # idle rows read the start token after the first step: their masks go unused
            self.attended.setdefault(tuple(tokens), self.attended.get(tuple(tokens[:-1]), 0) | 1 << word)
            self.word_at.setdefault(tuple(tokens), word)
            before = self.attended[tuple(tokens[:max(len(tokens) - 2, 0)])] if tokens else 0
            masks.append(self.starts(word, before, self.word_at[tuple(tokens[:-1])] if tokens else -1))
        return masks

    def wanted_tokens(self) -> list[list[int]]:
        """(r, 2C + 1): per row, the tokens continuing each constraint, and </s> (Constraints.next_tokens), whose
        log-probabilities the step gathers."""
        states = self.own_states + [b.state for b in self.beams]
        states += [self.constraints.start] * (self.num_rows - len(states))
        return [self.constraints.next_tokens(state) for state in states]

    def live(self) -> list[Beam]:
        """The hypotheses that may grow: the own search's running ones and the constraint beams."""
        own = []
        if not self.own.done:
            if isinstance(self.own, BeamSearch):  # its step replaces its token lists
                sequences, scores = self.own.sequences, self.own.running_scores
            else:  # a copy: a greedy search appends to its list
                sequences, scores = [list(self.own.sequences[0])], [self.own.logprob]
            own = [Beam(tokens, score, state, row) for row, (tokens, score, state)
                   in enumerate(zip(sequences, scores, self.own_states)) if score > NEG_LARGE]
        return own + self.beams

    def propose(self, live: list[Beam], top_tokens: list[list[int]], top_totals: list[list[float]],
                wanted_totals: list[list[float]], starts: list[int]) -> list[Candidate]:
        """The first half of a step, before the own search advances: the constraint beams' candidates. Per live
        hypothesis (live()), its top W tokens, their totals (its score + their log-probabilities, float32) and
        the totals of its constraints' next tokens (wanted_tokens(); columns past 2C + 1 are padding); per row, its
        start mask. A candidate is a top or constraint token that meets some constraint token; </s> only with
        every constraint met (or at the limit)."""
        for tokens, row_starts in zip(self.own.sequences, starts):
            self.starts_at[tuple(tokens)] = row_starts
        at_limit = self.cur_len + 1 >= self.max_length
        rows = self.num_rows - self.params.num_beams
        candidates = []
        for beam, tokens, totals, wanted in zip(live, top_tokens, top_totals, wanted_totals):
            seen, useful = set(), self.constraints.may_progress(beam.state)
            # after a token of no constraint (those beginning a word alike, those continuing one alike): partial
            # matches broken, met ones kept
            other = {glued: self.constraints.advance(beam.state, GLUED_TOKEN if glued else OTHER_TOKEN,
                                                     starts[beam.row]) for glued in (False, True)}
            # Tokens come best first (the top W, then constraint tokens outside them), and _allocate keeps at most
            # `rows` of a bank that do not end: a beam's later ones in a bank it filled could not be kept (at the
            # limit every candidate finishes instead).
            in_bank = {}
            passed = self.attended[tuple(beam.tokens[:-1])] if beam.tokens else 0  # the next row's `before`
            for token, total in zip(itertools.chain(tokens, self.constraints.next_tokens(beam.state)),
                                    itertools.chain(totals, wanted)):
                if total == NEG_INF or token in seen or (useful is not None and token not in useful):
                    continue
                seen.add(token)
                ordinary = token != self.eos_id and token not in self.constraints.tokens
                state = (other[self.constraints.continues(token)] if ordinary
                         else self.constraints.advance(beam.state, token, starts[beam.row]))
                placed, loose = self.constraints.bank(state)
                if not loose or (token == self.eos_id and not at_limit and not self.constraints.met(state)):
                    continue
                lost = self.lost(state, passed)
                bank = lost, loose if lost else placed
                if token != self.eos_id and not at_limit:
                    if in_bank.get(bank, 0) == rows:
                        continue
                    in_bank[bank] = in_bank.get(bank, 0) + 1
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
        # the own search holds these: its new hypotheses, as (parent row, token) (own rows come first); none once it
        # is done, as its running hypotheses end there (`treinta ▁` of `treinta y uno`, dropped here, was lost)
        own = set() if self.own.done else {(p, tokens[-1]) for p, tokens in zip(own_parents, self.own.sequences)}
        candidates = [c for c in candidates if (c.parent.row, c.token) not in own]
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
        self.done = at_limit or (self.own.done and (self._own_best_placed or self._settled()))
        return parents

    def _allocate(self, candidates: list[Candidate]) -> list[Candidate]:
        """The constraint beams by dynamic beam allocation; </s> candidates among the first `rows` of their part
        (those that can still place every term, those that cannot) finish instead: a term elsewhere still ends
        where rows went to hypotheses that may yet place it."""
        rows, banks = self.num_rows - self.params.num_beams, {}
        for c in sorted(candidates, key=lambda c: -c.score):
            banks.setdefault(c.bank, []).append(c)
        # stripes: every bank's best (most constraint tokens met first, then the best score), then every bank's
        # second best, ... While every term can still be placed, only placed tokens count: a term met loosely
        # beside a placed one (`treinta treinta`) took the row of `treinta mil`. Hypotheses that lost a term's place
        # come after all others, ranked by the tokens they met anywhere: the fallback where no term can be placed
        # (`quatre mille quatre cent trois`, the model's own translation of the second `three`, took the row of
        # `quatre mille quatre cent quatre`).
        order = sorted(((lost, rank, -met, -c.score, c) for (lost, met), members in banks.items()
                        for rank, c in enumerate(members)), key=lambda item: item[:4])
        kept, finishing, position = [], [], {False: 0, True: 0}
        for lost, *_, c in order:
            if c.token == self.eos_id:
                if position[lost] < rows:
                    finishing.append(c)
            elif len(kept) < rows:
                kept.append(c)
            position[lost] += 1
        self._finish(finishing)
        return kept

    def _finish(self, candidates: list[Candidate]) -> None:
        """Candidates enter the best finished hypotheses: by tier (placed, elsewhere, partial), then by score."""
        if not candidates:
            return
        penalty = torch.tensor(self.cur_len ** self.params.length_penalty, dtype=torch.float32)
        scores = (torch.tensor([c.score for c in candidates], dtype=torch.float32) / penalty).tolist()
        for c, score in zip(candidates, scores):
            self.finished.append((self.constraints.tier(c.state), score, c.tokens))
        self.finished.sort(key=lambda f: f[:2], reverse=True)
        del self.finished[self.num_rows:]

    @functools.cached_property  # asked at every step once the own search is done, when its result is final
    def _own_best_placed(self) -> bool:
        return self.constraints.tier(self._state(self.own.results()[0].token_ids)) == PLACED

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
        Those with every term placed count; the others too once no live beam has begun a placed term. (Waiting
        for as many as the constraint rows, as a beam search waits for num_beams, took a fifth more steps and kept
        no more terms: loadtests/README.md.)"""
        p = self.params
        if not self.beams:
            return True
        complete = [score for tier, score, _ in self.finished if tier == PLACED]
        if len(complete) < p.num_return_sequences and not any(self.constraints.placing(b.state) for b in self.beams):
            complete = sorted((score for tier, score, _ in self.finished if tier != PARTIAL), reverse=True)
        if len(complete) < p.num_return_sequences:
            return False
        if p.early_stopping is True:
            return True
        generated = self.max_length - 1 if p.early_stopping == "never" and p.length_penalty > 0 else self.cur_len - 1
        best = max(b.score for b in self.beams) / generated ** p.length_penalty
        return best <= complete[p.num_return_sequences - 1]

    def results(self) -> list[Hypothesis]:
        """The own search's hypotheses when its best places every constraint; else the best complete hypotheses of
        both parts, those placing every term first (fewer than num_return_sequences when fewer are), or the best
        partial one when none is."""
        own = [(self.constraints.tier(self._state(h.token_ids)), h.score, h.token_ids) for h in self.own.results()]
        first = [f for f in own if f[0] == PLACED] if own[0][0] == PLACED else []
        rest = sorted((f for f in own + self.finished if f[0] != PARTIAL and f not in first), key=lambda f: f[:2],
                      reverse=True)
        unique = {}  # the first of the same tokens: the own search's, with its score, before a constraint beam's
        for tier, score, tokens in first + rest:
            unique.setdefault(tuple(tokens), (tier, score, tokens))
        ranked = list(unique.values()) or sorted(own + self.finished, key=lambda f: f[:2], reverse=True)[:1]
        return [Hypothesis(tokens, score, finish_reason(tokens, self.params, self.eos_id))
                for _, score, tokens in ranked[: self.params.num_return_sequences]]


def constrained_choices(searches: list[ConstrainedBeamSearch], logprobs: torch.Tensor, top: Callable,
                        alignment: Callable) -> list[torch.Tensor]:
    """What the constrained searches choose from, on the device: their rows' top W log-probabilities and tokens
    (m, W), the log-probabilities of the tokens that continue their constraints and </s> (m, 2C + 1), padded to the
    widest, and the source word each row attends to most (m,) (attended_words: alignment)."""
    rows = torch.tensor([r for s in searches for r in s.rows], device=logprobs.device)
    mine = logprobs.index_select(0, rows)  # (m, V)
    # 2·k for the own beam search, 2·(constraint rows) for the constraint beams
    width = 2 * max(max(s.params.num_beams, s.num_rows - s.params.num_beams) for s in searches)
    top_logprobs, top_tokens = top(mine, min(width, mine.shape[-1]))  # (m, W)
    wanted = [row for s in searches for row in s.wanted_tokens()]
    width = max(len(row) for row in wanted)
    wanted = torch.tensor([row + row[:1] * (width - len(row)) for row in wanted], device=logprobs.device)
    return [top_logprobs, top_tokens, mine.gather(1, wanted), attended_words(searches, alignment, logprobs.device)]


def attended_words(searches: list[ConstrainedBeamSearch], alignment: Callable, device: torch.device) -> torch.Tensor:
    """(m,): per row, the source word with the most attention (its tokens' weights summed; special tokens belong
    to none), as model.alignment aligns a target word; 0 where no search places its constraints by source.
    alignment(rows (G, R), S) → (G, R, S): the attention of each search's cache rows (padded with its first)."""
    if not any(s.params.constraint_words for s in searches):
        return torch.zeros(sum(s.num_rows for s in searches), dtype=torch.long, device=device)
    length = max(len(s.params.source_words) for s in searches)
    words = max(max(s.params.source_words, default=0) for s in searches) + 1
    # each source token's word, padding and special tokens in one more column that no row picks
    token_words = torch.tensor([[w if w >= 0 else words for w in s.params.source_words]
                                + [words] * (length - len(s.params.source_words)) for s in searches],
                               device=device)  # (G, S)
    widest = max(s.num_rows for s in searches)
    rows = torch.tensor([s.rows + s.rows[:1] * (widest - s.num_rows) for s in searches], device=device)  # (G, R)
    group = torch.tensor([g for g, s in enumerate(searches) for _ in s.rows], device=device)  # (m,): its search
    local = torch.tensor([r for s in searches for r in range(s.num_rows)], device=device)  # (m,): its row there
    weights = alignment(rows, length)[group, local]  # (m, S)
    per_word = weights.new_zeros(len(group), words + 1).scatter_add_(1, token_words[group], weights)
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
    starts = {id(s): s.row_starts(attended[first[id(s)]:first[id(s)] + s.num_rows]) for s in searches}
    lives = [(s, live) for s in searches if (live := alone(s, s.live)) is not None]
    rows = torch.tensor([first[id(s)] + b.row for s, live in lives for b in live], dtype=torch.long)
    running = torch.tensor([b.score for _, live in lives for b in live], dtype=torch.float32)[:, None]  # (live, 1)
    # float32 sums, as BeamSearch adds a row's score to its log-probabilities
    top_totals = (top_logprobs[rows] + running).tolist()  # (live, W)
    wanted_totals = (wanted_logprobs[rows] + running).tolist()  # (live, 2C + 1)
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
