"""The device-side generation rules against transformers' logits processors (the oracle), row by row: many rows
with different rules and decoder inputs of different lengths in one batch, as a step applies them."""

import random

import pytest
import torch
from transformers import (ForcedBOSTokenLogitsProcessor, ForcedEOSTokenLogitsProcessor, LogitsProcessorList,
                          MinNewTokensLengthLogitsProcessor, NoBadWordsLogitsProcessor, NoRepeatNGramLogitsProcessor,
                          RepetitionPenaltyLogitsProcessor)

from model.decoding.kinds import new_search
from model.decoding.logits_rules import ActiveRules, RowRules
from model.decoding.search import DecodeParams

VOCAB, START, EOS, ROWS, CAPACITY = 12, 0, 2, 40, 16


def random_row(rng: random.Random) -> tuple[list[int], DecodeParams]:
    """A decoder input (the start token first) over a small vocabulary, so n-grams and banned prefixes recur,
    and a random mix of rules."""
    length = rng.randint(1, CAPACITY)
    inputs = [START] + [rng.randrange(3, 8) for _ in range(length - 1)]
    words = [(rng.randrange(3, VOCAB),) for _ in range(rng.randint(0, 2))] + [(EOS,)] * rng.randint(0, 1)
    words += [tuple(rng.randrange(3, 8) for _ in range(rng.randint(2, 4))) for _ in range(rng.randint(0, 3))]
    words += [(START, rng.randrange(3, 8))] * rng.randint(0, 1)  # a prefix that starts with the start token
    params = DecodeParams(
        max_new_tokens=rng.choice([length, length + 1, CAPACITY]), min_new_tokens=rng.choice([0, 2, 9]),
        repetition_penalty=rng.choice([1.0, 1.3, 0.7]), no_repeat_ngram_size=rng.choice([0, 0, 1, 2, 3]),
        bad_words_ids=tuple(words), forced_bos_token_id=rng.choice([None, 9]),
        forced_eos_token_id=rng.choice([None, EOS]))
    return inputs, params


def transformers_rules(params: DecodeParams) -> LogitsProcessorList:
    """The processors generate builds for these params, in its order."""
    rules = LogitsProcessorList()
    if params.repetition_penalty != 1.0:
        rules.append(RepetitionPenaltyLogitsProcessor(params.repetition_penalty))
    if params.no_repeat_ngram_size:
        rules.append(NoRepeatNGramLogitsProcessor(params.no_repeat_ngram_size))
    if params.bad_words_ids:
        rules.append(NoBadWordsLogitsProcessor([list(w) for w in params.bad_words_ids], eos_token_id=EOS))
    if params.min_new_tokens:
        rules.append(MinNewTokensLengthLogitsProcessor(1, params.min_new_tokens, EOS))
    if params.forced_bos_token_id is not None:
        rules.append(ForcedBOSTokenLogitsProcessor(params.forced_bos_token_id))
    if params.forced_eos_token_id is not None:
        rules.append(ForcedEOSTokenLogitsProcessor(params.max_new_tokens + 1, params.forced_eos_token_id))
    return rules


@pytest.mark.parametrize("seed", range(5))
def test_rules_equal_transformers_processors_row_by_row(seed):
    rng = random.Random(seed)
    rows = [random_row(rng) for _ in range(ROWS)]
    rules = RowRules(ROWS + 3, CAPACITY, EOS, "cpu")  # more rows than live, as a decoder's capacity
    rules.admit(list(range(ROWS)), [params for _, params in rows])
    lengths = torch.tensor([len(inputs) for inputs, _ in rows])
    for position in range(CAPACITY):  # the inputs recorded as steps record them, rows of different lengths
        at = lengths.clamp(max=position + 1) - 1
        rules.record(torch.tensor([inputs[p] for (inputs, _), p in zip(rows, at.tolist())]), at)

    scores = torch.randn(ROWS, VOCAB, generator=torch.Generator().manual_seed(seed))
    expected = scores.clone()
    searches = []
    for i, (inputs, params) in enumerate(rows):
        expected[i: i + 1] = transformers_rules(params)(torch.tensor([inputs]), expected[i: i + 1].clone())
        search = new_search(params, EOS, START, source_len=1)
        search.sequences, search.cur_len = [inputs[1:]], len(inputs)
        searches.append(search)
    rules.apply((scores,), lengths - 1, int(lengths.max()), ActiveRules.of(searches))
    assert torch.equal(scores, expected)


def test_rows_keep_their_rules_when_moved_and_reordered():
    rng = random.Random(7)
    rows = [random_row(rng) for _ in range(6)]
    rules = RowRules(6, CAPACITY, EOS, "cpu")
    rules.admit(list(range(6)), [params for _, params in rows])
    moved = RowRules(6, CAPACITY, EOS, "cpu")
    moved.admit([5, 4, 3, 2, 1, 0], [params for _, params in rows])  # row i's rules in row 5 - i
    moved.move_rows(torch.tensor([5, 4, 3, 2, 1, 0]), torch.tensor([0, 1, 2, 3, 4, 5]), CAPACITY)
    for name in ("penalty", "limits", "banned_tokens", "ban_values", "bad_words"):
        assert torch.equal(getattr(moved, name), getattr(rules, name)), name
    rules.history[:] = torch.arange(6)[:, None]
    rules.reorder(torch.tensor([0, 0]), torch.tensor([1, 2]), 4)  # beams 1 and 2 continue beam 0
    assert rules.history[:3, :4].tolist() == [[0] * 4] * 3 and rules.history[1, 4:].eq(1).all()
