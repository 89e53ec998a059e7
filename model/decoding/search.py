"""Per-request search state: greedy, sampling and beam search, each owning one or more cache rows.

A search never runs the model: the batch decoder hands it the processed scores of its rows and it picks
the next tokens. Beam search follows transformers' algorithm step for step (top 2·k candidates, a finished
set of k hypotheses scored by sum_logprob / generated_len ** length_penalty, the same early-stop heuristic),
so that translations are identical.

Dimensions: k a search's beams (its cache rows), W candidates per row (≥ 2·k), G beam searches of one width
stepping together, V target vocabulary. Candidates reach the searches on the host.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import torch

from .speech_rules import NoSpeechProbe, TimestampRules
from .token_timing import TokenTimes, TokenTiming

NEG_INF = float("-inf")
START_TOKENS = 1  # the decoder start token: transformers' max_length counts it, max_new_tokens does not


def target_length(max_new_tokens: int) -> int:
    """Decoder positions a sequence of up to max_new_tokens generated tokens takes (transformers' max_length)."""
    return max_new_tokens + START_TOKENS


def new_tokens_within(length: int) -> int:
    """Generated tokens that fit in `length` decoder positions (a max_length, a model's positions)."""
    return length - START_TOKENS

NEG_LARGE = -1.0e9  # transformers' "impossible" score for beams
# Rows a constrained sequence adds to its beams: one per constraint token up to this many (more tokens share them)
CONSTRAINT_ROWS = 4


@dataclass(frozen=True)
class DecodeParams:
    max_new_tokens: int
    min_new_tokens: int = 0
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return_sequences: int = 1
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    forced_bos_token_id: int | None = None  # the first generated token (a target language), as transformers
    forced_eos_token_id: int | None = None
    repetition_penalty: float = 1.0  # scores of tokens already in the decoder input: × it if < 0, else ÷ it
    no_repeat_ngram_size: int = 0  # an n-gram of the decoder input (start token included) never occurs twice
    # token sequences every returned hypothesis contains (a glossary's target terms): the constrained search
    constraints: tuple[tuple[int, ...], ...] = ()
    # where each may begin: the word of each source token (-1: a special token) and, per constraint, the source
    # words of its source term; a constraint begins only where the decoder attends to its source term most
    source_words: tuple[int, ...] = ()
    constraint_words: tuple[tuple[int, ...], ...] = ()
    # The decoder's input before the first generated token (transformers' decoder_input_ids; Whisper's
    # <|startoftranscript|><|en|><|transcribe|>...): its first token in place of the model's start token, the others
    # forced one per step and not generated (not in max_new_tokens, the length penalty or the hypotheses).
    decoder_prompt: tuple[int, ...] = ()
    suppress_at_begin: tuple[int, ...] = ()  # tokens banned as the first generated one (Whisper's begin_suppress)
    timestamps: TimestampRules | None = None  # Whisper's timestamp rule (model.decoding.speech_rules)
    # Whisper's word timestamps: the returned hypotheses' tokens timed (model.decoding.token_timing)
    token_timing: TokenTiming | None = None
    no_speech: NoSpeechProbe | None = None  # Whisper's no-speech probability, read into the hypotheses
    # One-row searches (greedy, sampling): a token's log-probability over the tokens the rules leave, renormalized
    # (Whisper's avg_logprob, in transformers and openai-whisper), not the model's own; beams keep their scores.
    renormalized_logprobs: bool = False
    allowed_tokens: tuple[int, ...] = ()  # the only tokens a row may choose (Whisper's language detection); (): all
    # a bit per target token (token t: byte t // 8, bit t % 8), set where it continues the word before it: a term
    # followed by one is not placed, glued into a longer word (glossary.glued_tokens)
    glued: bytes = b""

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if self.num_beams < 1 or not 1 <= self.num_return_sequences <= self.num_beams:
            raise ValueError(f"need 1 <= num_return_sequences ({self.num_return_sequences}) <= num_beams "
                             f"({self.num_beams})")
        if self.do_sample and self.num_beams > 1:
            raise ValueError("sampling with num_beams > 1 is not supported")
        if not self.repetition_penalty > 0 or self.no_repeat_ngram_size < 0:
            raise ValueError(f"need repetition_penalty > 0 and no_repeat_ngram_size >= 0; got "
                             f"{self.repetition_penalty} and {self.no_repeat_ngram_size}")
        if not self.temperature > 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError(f"sampling needs temperature > 0, 0 < top_p <= 1 and top_k >= 0; got temperature "
                             f"{self.temperature}, top_p {self.top_p}, top_k {self.top_k}")
        if self.constraints and (self.do_sample or not all(self.constraints)):
            raise ValueError(f"constraints need greedy or beam search (no sampling) and non-empty token sequences; got "
                             f"do_sample {self.do_sample}, constraints {self.constraints}")
        if self.constraint_words and (len(self.constraint_words) != len(self.constraints) or not self.source_words):
            raise ValueError(f"constraint_words needs one entry per constraint and the source_words; got "
                             f"{len(self.constraint_words)} for {len(self.constraints)} constraints")

    @property
    def prompt_steps(self) -> int:
        """Steps that only force the decoder prompt."""
        return max(len(self.decoder_prompt) - 1, 0)

    @property
    def forced_prefix(self) -> tuple[int, ...]:
        """The tokens forced at the first steps: the decoder prompt after its first token, else the forced first
        token (ForcedBOS applies only to a one-token input, so never beside a longer prompt)."""
        if self.decoder_prompt:
            return self.decoder_prompt[1:]
        return () if self.forced_bos_token_id is None else (self.forced_bos_token_id,)

    @functools.cached_property  # read for every row at every step
    def rows(self) -> int:
        """Cache rows a sequence takes: its beams, and with constraints one more per constraint token (a row for each
        count of constraint tokens met, model.decoding.constrained), up to CONSTRAINT_ROWS."""
        return self.num_beams + min(sum(map(len, self.constraints)), CONSTRAINT_ROWS)


@dataclass
class Hypothesis:
    token_ids: list[int]  # generated tokens, </s> included when produced
    score: float  # sum of log-probabilities / len(token_ids) ** length_penalty
    finish_reason: str  # "eos" or "length"
    times: TokenTimes | None = None  # where DecodeParams.token_timing asked
    no_speech_prob: float | None = None  # read where params.no_speech asks


def finish_reason(tokens: list[int], params: DecodeParams, eos_id: int) -> str:
    """"length" when the limit was reached — also when </s> was only forced there (Marian's default)."""
    at_limit = len(tokens) >= params.max_new_tokens
    if tokens and tokens[-1] == eos_id and not (at_limit and params.forced_eos_token_id is not None):
        return "eos"
    return "length"


class Search:
    """State shared by all strategies. cur_len counts the decoder start token, as in transformers."""

    def __init__(self, params: DecodeParams, eos_id: int, start_id: int, source_len: int):
        self.params, self.eos_id, self.source_len = params, eos_id, source_len
        self.rows: list[int] = []
        self.cur_len = 1
        self.done = False
        self.prompt_steps = params.prompt_steps
        self.max_length = target_length(params.max_new_tokens) + self.prompt_steps
        self.sequences: list[list[int]] = [[] for _ in range(self.num_rows)]
        self.start_id = params.decoder_prompt[0] if params.decoder_prompt else start_id
        self.kind = None  # how a batch steps it (kinds.Kind; set by kinds.new_search)
        self.no_speech_prob: float | None = None  # read by the batch decoder where params.no_speech asks

    @property
    def num_rows(self) -> int:
        return self.params.rows

    def input_tokens(self) -> list[int]:
        return [seq[-1] if seq else self.start_id for seq in self.sequences]

    def generated(self) -> int:
        """Tokens generated so far, the decoder prompt not counted."""
        return self.cur_len - 1 - self.prompt_steps

    def forced_token(self) -> int | None:
        """The token this step must produce: </s> at the last step (wins, as transformers applies it last),
        else the forced prefix's (DecodeParams.forced_prefix) at the first steps."""
        p = self.params
        if p.forced_eos_token_id is not None and self.cur_len == self.max_length - 1:
            return p.forced_eos_token_id
        prefix = p.forced_prefix
        return prefix[self.cur_len - 1] if self.cur_len - 1 < len(prefix) else None

    def eos_banned(self) -> bool:
        return self.generated() < self.params.min_new_tokens

    def streamed_token(self) -> int | None:
        """The token this step produced, for streaming: only a search of one row has one."""
        return None


class SingleSearch(Search):
    """Greedy (argmax) or sampling: one row, one token per step."""

    def __init__(self, params: DecodeParams, eos_id: int, start_id: int, source_len: int):
        super().__init__(params, eos_id, start_id, source_len)
        self.logprob = 0.0
        self.generator = None
        if params.do_sample:
            self.generator = torch.Generator(device="cpu")
            self.generator.manual_seed(params.seed if params.seed is not None else torch.seed())

    def sample(self, scores: torch.Tensor) -> int:
        """scores (V,) processed logits of this row → a token drawn with temperature, top-k and top-p."""
        p = self.params
        # Shifted by the maximum and in float64 (a float32 scalar rounds a tiny temperature to 0): the same
        # distribution, and no inf/NaN for any positive temperature.
        scores = (scores.double() - scores.max()) / p.temperature
        if 0 < p.top_k < scores.shape[-1]:
            kth = torch.topk(scores, p.top_k).values[-1]
            scores = scores.masked_fill(scores < kth, NEG_INF)
        if p.top_p < 1.0:
            # transformers' TopPLogitsWarper op for op (ascending order, so ties at the cut resolve alike): drop
            # the least likely tokens while their mass stays within 1 - top_p, never the most likely one.
            sorted_scores, order = torch.sort(scores, descending=False)
            drop = sorted_scores.softmax(-1).cumsum(-1) <= 1 - p.top_p
            drop[-1:] = False
            scores = scores.masked_fill(drop.scatter(0, order, drop), NEG_INF)
        probs = scores.softmax(-1).cpu()
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def streamed_token(self) -> int | None:
        return self.sequences[0][-1] if self.generated() > 0 else None  # not a decoder prompt's token

    def advance(self, token: int, logprob: float) -> None:
        self.sequences[0].append(token)
        self.logprob += logprob
        self.cur_len += 1
        self.done = token == self.eos_id or self.cur_len >= self.max_length

    def results(self) -> list[Hypothesis]:
        tokens = self.sequences[0][self.prompt_steps:]
        score = self.logprob / max(len(tokens), 1) ** self.params.length_penalty
        return [Hypothesis(tokens, score, finish_reason(tokens, self.params, self.eos_id),
                           no_speech_prob=self.no_speech_prob)]


class BeamSearch(Search):
    """Beam search over num_beams rows; a port of transformers' vectorized beam search for one sentence. The
    searches of a batch step together (advance_beams), and keep their scores and flags between steps as a row of
    the table their step made (`states`, state_columns), so that a step reads them with one tensor operation rather
    than from Python lists."""

    def __init__(self, params: DecodeParams, eos_id: int, start_id: int, source_len: int):
        super().__init__(params, eos_id, start_id, source_len)
        # its finished set's hypotheses, each as where it ends: (steps before it, its parent beam, its token);
        # (0, 0, None) for the empty ones it starts with
        self.finished_ends: list[tuple[int, int, int | None]] = [(0, 0, None)] * params.num_beams
        self.states: torch.Tensor | None = None  # (G, 3k + 4) float64: this search's is row `index`; None: initial
        self.index = 0

    # Its running hypotheses as back-pointers: per step, each beam's parent beam and token. A step only appends
    # those (the tokens of a hypothesis are gathered when read: its input token, a finished one, the results).
    @property
    def sequences(self) -> list[list[int]]:
        """Every running hypothesis' tokens (gathered once a step: a constrained search reads them a few times)."""
        if self._gathered[0] != len(self.steps):
            self._gathered = len(self.steps), [self.sequence(beam) for beam in range(self.params.num_beams)]
        return self._gathered[1]

    @sequences.setter
    def sequences(self, empty: list[list[int]]) -> None:  # Search.__init__'s: every beam starts empty
        self.steps: list[tuple[list[int], list[int]]] = []
        self._gathered = 0, empty

    def sequence(self, beam: int, steps: int | None = None) -> list[int]:
        """The tokens of a running beam, or of the beam it was after the first `steps` steps."""
        tokens = []
        for parents, step_tokens in reversed(self.steps[:steps]):
            tokens.append(step_tokens[beam])
            beam = parents[beam]
        return tokens[::-1]

    def input_tokens(self) -> list[int]:
        return self.steps[-1][1] if self.steps else [self.start_id] * self.params.num_beams

    def state(self) -> list[float]:
        """Its row of the state table (layout: state_columns)."""
        if self.states is not None:
            return self.states[self.index].tolist()
        k = self.params.num_beams
        # running scores (only the first beam live), finished scores, finished flags, improvable (transformers'
        # is_early_stop_heuristic_unsatisfied), and three constants
        return ([0.0] + [NEG_LARGE] * (k - 1) + [NEG_LARGE] * k + [0.0] * k +
                [1.0, self.eos_id, self.max_length, self.params.early_stopping is True])

    @property
    def running_scores(self) -> list[float]:
        """Each beam's sum of log-probabilities (float32 values)."""
        return self.state()[:self.params.num_beams]

    @property
    def finished_scores(self) -> list[float]:
        k = self.params.num_beams
        return self.state()[k:2 * k]

    def results(self) -> list[Hypothesis]:
        out = []
        for (steps, parent, token), score in zip(self.finished_ends[: self.params.num_return_sequences],
                                                 self.finished_scores):
            seq = [] if token is None else (self.sequence(parent, steps) + [token])[self.prompt_steps:]
            out.append(Hypothesis(seq, score, finish_reason(seq, self.params, self.eos_id),
                                  no_speech_prob=self.no_speech_prob))
        return out


def state_columns(k: int) -> dict[str, slice]:
    """The columns of a width-k state table: float32 scores, flags and integers, all exact in float64."""
    return dict(running=slice(0, k), finished=slice(k, 2 * k), is_finished=slice(2 * k, 3 * k),
                improvable=slice(3 * k, 3 * k + 1), eos=slice(3 * k + 1, 3 * k + 2),
                max_length=slice(3 * k + 2, 3 * k + 3), stop_early=slice(3 * k + 3, 3 * k + 4))


def gather_states(searches: list[BeamSearch]) -> torch.Tensor:
    """The state rows of searches of one width, in order, (G, 3k + 4): the table their last step made when they
    stepped together in this order (most steps), else its rows and new searches' initial rows gathered."""
    table = searches[0].states
    if table is not None and table.shape[0] == len(searches) and all(
            s.states is table and s.index == i for i, s in enumerate(searches)):
        return table
    tables, offsets, rows = [], {}, 0  # the tables holding their rows, each one's first row once concatenated
    for s in searches:
        if s.states is not None and id(s.states) not in offsets:
            offsets[id(s.states)], rows = rows, rows + s.states.shape[0]
            tables.append(s.states)
    fresh = [s for s in searches if s.states is None]  # their initial rows follow the tables'
    if fresh:
        tables.append(torch.tensor([s.state() for s in fresh], dtype=torch.float64))
    new_rows = iter(range(rows, rows + len(fresh)))
    index = [next(new_rows) if s.states is None else offsets[id(s.states)] + s.index for s in searches]
    return torch.cat(tables).index_select(0, torch.tensor(index))


def advance_beams(searches: list[BeamSearch], top_logprobs: torch.Tensor,
                  top_tokens: torch.Tensor) -> list[list[int]]:
    """Every beam search takes its next tokens. top_logprobs, top_tokens: (sum of num_beams, W) on the CPU, the
    best W ≥ 2·k processed log-probabilities of each search's rows in turn and their tokens, sorted descending
    → the parent row (local) of each beam, per search.

    transformers takes the top 2·k of all k·V sums beam score + log-probability; adding a row's beam score
    keeps the order within the row, so those 2·k are among the rows' own top 2·k. Searches of the same width k
    step as one (G, k, W) batch: one set of tensor operations per step instead of one per search, which on a
    GPU replica would otherwise dominate the step.
    """
    parents: list[list[int]] = [[] for _ in searches]
    by_width: dict[int, list[int]] = {}
    for i, s in enumerate(searches):
        by_width.setdefault(s.params.num_beams, []).append(i)
    firsts = None  # each search's first row in the inputs, needed only when widths differ
    for k, group in by_width.items():
        if len(group) == len(searches):
            logprobs, tokens = top_logprobs, top_tokens
        else:
            firsts = firsts or list(itertools.accumulate((s.params.num_beams for s in searches), initial=0))
            rows = torch.tensor([r for i in group for r in range(firsts[i], firsts[i] + k)])
            logprobs, tokens = top_logprobs[rows], top_tokens[rows]
        for i, local in zip(group, _advance_width(k, [searches[i] for i in group], logprobs, tokens)):
            parents[i] = local
    return parents


def _best_length(s: BeamSearch) -> int:
    """The length transformers' early-stop heuristic divides the best running score by."""
    never = s.params.early_stopping == "never" and s.params.length_penalty > 0
    return s.max_length - 1 if never else s.cur_len


def _advance_width(k: int, searches: list[BeamSearch], top_logprobs: torch.Tensor,
                   top_tokens: torch.Tensor) -> list[list[int]]:
    """advance_beams for G searches of width k; top_logprobs, top_tokens (G·k, W)."""
    g, width = len(searches), top_logprobs.shape[-1]
    states, column = gather_states(searches), state_columns(k)  # (G, 3k + 4) float64
    eos, max_length, stop_early = states[:, column["eos"]], states[:, column["max_length"]], \
        states[:, column["stop_early"]].bool()
    improvable = states[:, column["improvable"]].bool()
    # Length penalties computed in Python floats and rounded once to float32, as a search alone divides by them:
    # this step's, and the best generated length's.
    # Lengths past the decoder prompt, as transformers counts from its decoder_prompt_len; at least 1 while the
    # prompt is forced (nothing finishes then, and no length may turn a score's sign).
    penalties = torch.tensor([[max(s.cur_len - s.prompt_steps, 1) ** s.params.length_penalty,
                               max(_best_length(s) - s.prompt_steps, 1) ** s.params.length_penalty]
                              for s in searches]).float()  # (G, 2)
    penalty, best_penalty = penalties[:, 0:1], penalties[:, 1:2]
    cur_len = torch.tensor([[s.cur_len] for s in searches], dtype=torch.float64)  # (G, 1)
    totals = top_logprobs.view(g, k, width) + states[:, column["running"]].float()[:, :, None]
    cand_scores, cand_index = torch.topk(totals.view(g, k * width), 2 * k)  # (G, 2k) each
    cand_parent, cand_token = cand_index // width, top_tokens.view(g, k * width).gather(1, cand_index)
    hits = (cand_token == eos) | (cur_len + 1 >= max_length)  # (G, 2k)

    # Beams that go on: the best k candidates that did not stop.
    running = cand_scores + hits.float() * NEG_LARGE
    keep = torch.topk(running, k).indices  # (G, k)
    running_scores = running.gather(1, keep)

    # Finished hypotheses: only stopped candidates among the top k may enter the finished set.
    just_finished = hits & (torch.arange(2 * k) < k)
    scored = cand_scores / penalty
    finished_scores = states[:, column["finished"]].float()  # (G, k)
    is_finished = states[:, column["is_finished"]].bool()
    closed = (stop_early & is_finished.all(1, keepdim=True)) | ~improvable
    scored = scored + closed.float() * NEG_LARGE
    scored = scored + (~just_finished) * NEG_LARGE
    merged = torch.cat((finished_scores, scored), 1)  # (G, 3k)
    best = torch.topk(merged, k).indices
    finished_scores = merged.gather(1, best)
    is_finished = torch.cat((is_finished, just_finished), 1).gather(1, best)

    # transformers' early-stop heuristic: can the best running beam still beat the worst finished one?
    best_possible = running_scores[:, :1] / best_penalty
    worst_finished = torch.where(is_finished, finished_scores.amin(1, keepdim=True), NEG_LARGE)
    improvable = improvable & (best_possible > worst_finished).any(1, keepdim=True)  # (G, 1)
    open_beam = ~(is_finished.all(1) & stop_early[:, 0])
    going_on = improvable[:, 0] & open_beam & ~hits.all(1)

    states = torch.cat((running_scores.double(), finished_scores.double(), is_finished.double(),
                        improvable.double(), states[:, column["eos"].start:]), 1)
    # what the host needs, in one copy to Python: candidate parents and tokens (2k each), the kept candidates'
    # parents and tokens (k each), the finished set's choice (k), going on (1)
    chosen = torch.cat((cand_parent, cand_token, cand_parent.gather(1, keep), cand_token.gather(1, keep), best,
                        going_on[:, None].long()), 1).tolist()
    out, updates = [], []
    for s, row in zip(searches, chosen):
        parent, token, picked = row[:2 * k], row[2 * k:4 * k], row[6 * k:7 * k]
        finished, steps = s.finished_ends, len(s.steps)  # candidate i ends with parent[i], token[i]
        updates.append((s, (row[4 * k:5 * k], row[5 * k:6 * k]),
                        [finished[i] if i < k else (steps, parent[i - k], token[i - k]) for i in picked], row[-1]))
        out.append(row[4 * k:5 * k])
    for index, (s, step, finished, go) in enumerate(updates):  # none changes before every one has chosen
        s.steps.append(step)
        s.finished_ends = finished
        s.states, s.index = states, index
        s.cur_len += 1
        s.done = not go
    return out
