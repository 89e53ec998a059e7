"""Lexically constrained beam search (decoding.constrained): constraints appear in every hypothesis, a constraint the
model spells anyway changes nothing, the cache follows the beams, and a constrained sequence shares decoder steps
with others without changing theirs or its own outputs."""

import random
from functools import partial

import pytest
import torch

from batch_decoding import decode_joining
from family_fixtures import build_nllb
from marian_fixtures import WORDS_EN
from text2text_fixtures import build_bart, build_t5

from dataclasses import replace

from model import DecodeParams, load
from model.decoding.constrained import ELSEWHERE, PARTIAL, PLACED, ConstrainedBeamSearch, Constraints

pytestmark = pytest.mark.slow

NEW_TOKENS = 12
decode = partial(decode_joining, max_new_tokens=NEW_TOKENS)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory, checkpoint):
    """(family, dtype) → a loaded tiny checkpoint, loaded once; untraced (tracing each shape costs seconds)."""
    root = tmp_path_factory.mktemp("constrained")
    paths = {"marian": checkpoint, "nllb": build_nllb(root / "nllb"), "t5": build_t5(root / "t5"),
             "bart": build_bart(root / "bart")}
    loaded = {}

    def bundle(family: str, dtype: str = "float32"):
        if (family, dtype) not in loaded:
            loaded[family, dtype] = load(paths[family], dtype=dtype, traced=False)
        return loaded[family, dtype]
    return bundle


def sources(bundle, count: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    languages = bundle.resolve_languages(None, None, translating=False)
    texts = [" ".join(rng.choice(WORDS_EN) for _ in range(rng.randint(2, 10))) for _ in range(count)]
    return [bundle.source(text, *languages).ids for text in texts]


def word_ids(bundle, rng: random.Random, count: int) -> list[tuple[int, ...]]:
    """`count` target terms: the first (up to) 3 ids of ordinary words as the target tokenizer spells them, so that
    two fit in NEW_TOKENS whatever the vocabulary (a tiny one spells a word in letters)."""
    return [tuple(bundle.tokenizer.encode_target(rng.choice(WORDS_EN)))[:3] for _ in range(count)]




def contains(tokens: list[int], part: tuple[int, ...]) -> bool:
    return any(tuple(tokens[i:i + len(part)]) == part for i in range(len(tokens) - len(part) + 1))


def test_a_broken_partial_match_falls_back_to_the_longest_prefix_still_matching():
    constraints = Constraints(((1, 1, 2), (1, 2, 1, 3)))

    def after(tokens, state=constraints.start):
        for token in tokens:
            state = constraints.advance(state, token)
        return state

    # (placed progress of each constraint, then loose: where every constraint may begin anywhere and every row
    # attends away from its source term, a placed occurrence is the loose one, confirmed by the token after it)
    # 1 1 1 2: (1, 1, 2) broken at the third 1 keeps 1 1 and is met by the 2; (1, 2, 1, 3) holds 1 2
    assert after([1, 1, 1, 2]) == (3, 2) * 2 and constraints.next_tokens((3, 2) * 2) == (1, 1) * 2
    # placed: (1, 1, 2) spelled, not yet confirmed, counts as progress
    assert constraints.bank((3, 2) * 2) == (3, 3 + 2) and not constraints.met((3, 2) * 2)
    # 1 2 1 then 2: falls back to 1 2, not to nothing ((1, 1, 2) confirmed by the 1: two more)
    assert after([1, 2], (3, 3) * 2) == (5, 2, 3, 2)
    assert constraints.met(after([1, 1, 1, 2, 1, 2, 1, 3]))
    assert after([1, 2, 1, 3]) == (0, 4) * 2 and not constraints.met((0, 4) * 2)


def test_a_constraint_is_placed_where_its_source_term_is_attended_and_stands_as_whole_words():
    end, glued = 9, 6
    constraints = Constraints(((1, 2), (3,)), end, bytes([1 << glued]))  # token 6 continues the word before it
    # states: placed progress of each constraint (spelled, then one more pending, two more confirmed), then loose;
    # start masks: bit i, constraint i may begin; bit 2 + i, the row attends away from constraint i's source term;
    # bit 4, it attends </s>
    assert constraints.advance(constraints.start, 1, 0b1110) == (0, 0, 1, 0)  # (1, 2) may not begin placed here
    assert constraints.advance(constraints.start, 1, 0b0001) == (1, 0, 1, 0)
    assert constraints.advance((1, 0, 1, 0), 2, 0) == (2, 0, 2, 0)  # once begun, it goes on anywhere
    assert constraints.advance((1, 0, 1, 0), 1, 0b10) == (0, 0, 1, 0)  # beginning again is a beginning
    # spelled: a token beginning a word written away from its source term, or </s>, confirms it; a token glued to
    # it (the model's own word going on) leaves it unplaced
    assert constraints.advance((2, 0, 2, 0), 5, 0b0100) == (4, 0, 2, 0)
    assert constraints.advance((2, 0, 2, 0), end, 0) == (4, 0, 2, 0)
    assert constraints.advance((2, 0, 2, 0), glued, 0b0100) == (0, 0, 2, 0)
    # a token written on the term is excused once (the attention lags a word): the next one written on another
    # source word confirms it; on the term, while attending </s>, or </s> itself leaves it unplaced
    assert constraints.advance((2, 0, 2, 0), 5, 0) == (3, 0, 2, 0)
    assert constraints.advance((3, 0, 2, 0), 5, 0b0100) == (4, 0, 2, 0)
    assert constraints.advance((3, 0, 2, 0), 5, 0) == (0, 0, 2, 0)
    assert constraints.advance((3, 0, 2, 0), 5, 0b10100) == (0, 0, 2, 0)
    assert constraints.advance((3, 0, 2, 0), end, 0b0100) == (0, 0, 2, 0)
    # confirmed, it stays so while the decoder keeps away from its source term; back on it, the model is writing
    # its own translation of the term beside it
    assert constraints.advance((4, 0, 2, 0), 3, 0b0101) == (4, 0, 2, 1)
    assert constraints.advance((4, 0, 2, 0), 5, 0) == (0, 0, 2, 0)
    spelled = constraints.advance((4, 0, 2, 0), 3, 0b0110)
    assert spelled == (4, 1, 2, 1) and constraints.tier(spelled) == ELSEWHERE and constraints.met(spelled)
    both = constraints.advance(spelled, end, 0)
    assert both == (4, 3, 2, 1) and constraints.tier(both) == PLACED and constraints.bank(both) == (5, 3)
    assert constraints.tier((2, 0, 2, 1)) == ELSEWHERE and constraints.met((2, 0, 2, 1))
    assert constraints.tier((2, 0, 2, 0)) == PARTIAL and not constraints.met((2, 0, 2, 0))


def test_a_term_ending_the_source_is_confirmed_by_the_end_or_an_earlier_word_and_an_excused_word_goes_on():
    end, glued = 9, 6
    constraints = Constraints(((1, 2), (3,)), end, bytes([1 << glued]), last=frozenset({1}))
    # (3,) translates the last source word: a word after it written on that word or on </s> is the model going on
    # past it, not a lagging translation of a next word (there is none); on an earlier source word, or </s>
    # itself, confirms it
    assert constraints.advance((4, 1, 2, 1), 5, 0b00100) == (4, 0, 2, 1)
    assert constraints.advance((4, 1, 2, 1), 5, 0b11100) == (4, 0, 2, 1)
    assert constraints.advance((4, 1, 2, 1), 5, 0b01100) == (4, 3, 2, 1)
    assert constraints.advance((4, 1, 2, 1), end, 0b11100) == (4, 3, 2, 1)
    # (1, 2) does not: the word after it on its source term is excused, and a token glued to that word written
    # away goes on with it (the word after decides); glued on the term, it is the model's own translation
    assert constraints.advance((2, 0, 2, 0), 5, 0) == (3, 0, 2, 0)
    assert constraints.advance((3, 0, 2, 0), glued, 0b0100) == (3, 0, 2, 0)
    assert constraints.advance((3, 0, 2, 0), glued, 0) == (0, 0, 2, 0)


def test_a_term_begins_neither_once_the_decoder_moved_through_or_past_it_and_then_its_place_is_lost():
    # source words 0-3, </s> word 4; the term translates words 1 and 2
    params = DecodeParams(max_new_tokens=8, constraints=((7,),), source_words=(0, 1, 2, 3, 4),
                          constraint_words=((1, 2),))
    search = ConstrainedBeamSearch(params, eos_id=0, start_id=1, source_len=5)

    def may_begin(word, before, last):
        return bool(search.starts(word, before, last) & 1)

    assert may_begin(1, 0b1, 0) and may_begin(3, 0b1, 0)  # on the term, or the word after it (running ahead)
    assert may_begin(2, 0b1, 2)  # the last row on the same word: it ran ahead while writing the word before
    # the last row on an earlier word of the term, or on the term before the word after it: the last token was
    # the model's own translation of (part of) the term
    assert not may_begin(2, 0b1, 1) and not may_begin(3, 0b1, 2)
    assert not may_begin(1, 0b11, 1)  # attended before: translated already
    # a hypothesis whose earlier rows reached the term without beginning it can never place it
    assert not search.lost((0, 0), 0b1) and search.lost((0, 0), 0b10) and not search.lost((1, 1), 0b110)


@pytest.mark.parametrize("placed", [False, True], ids=["anywhere", "placed by source"])
@pytest.mark.parametrize("family", ["marian", "nllb", "t5", "bart"])
def test_every_hypothesis_contains_every_constraint_with_beams_and_greedy(bundles, family, placed):
    """Also where each constraint should begin on a source word: these random networks rarely attend there, and
    the terms appear all the same (counting placed occurrences alone, they appeared in 1 of 40 such searches on the
    NLLB shape)."""
    bundle = bundles(family)
    rng = random.Random(len(family))
    for ids in sources(bundle, 2, seed=1):
        terms = word_ids(bundle, rng, 2)
        words = {"source_words": tuple(range(len(ids) - 1)) + (-1,),
                 "constraint_words": tuple((rng.randrange(len(ids) - 1),) for _ in terms)} if placed else {}
        for base in (DecodeParams(max_new_tokens=NEW_TOKENS), DecodeParams(max_new_tokens=NEW_TOKENS, num_beams=4,
                                                                           num_return_sequences=3)):
            params = replace(base, constraints=tuple(terms), **words)
            (hypotheses, _), = decode(bundle.network, [(0, ids, params)], params.rows).values()
            assert 1 <= len(hypotheses) <= base.num_return_sequences
            for h in hypotheses:
                assert all(contains(h.token_ids, term) for term in terms), (h.token_ids, terms)


def test_a_constrained_request_takes_its_beams_and_a_row_per_constraint_token_up_to_four():
    greedy = DecodeParams(max_new_tokens=8)
    assert replace(greedy, constraints=((5,),)).rows == 2
    assert replace(greedy, num_beams=4, constraints=((5,), (6, 7))).rows == 7
    assert replace(greedy, constraints=((5,),) * 20).rows == 5
    with pytest.raises(ValueError, match="constraints need greedy or beam search"):
        DecodeParams(max_new_tokens=8, do_sample=True, constraints=((5,),))


@pytest.mark.parametrize("family", ["marian", "nllb", "t5", "bart"])
def test_a_constraint_the_model_spells_anyway_changes_nothing(bundles, family):
    """Greedy and beam search: the same tokens and score as without the constraint."""
    bundle = bundles(family)
    compared = 0
    for key, ids in enumerate(sources(bundle, 2, seed=2)):
        for params in (DecodeParams(max_new_tokens=NEW_TOKENS), DecodeParams(max_new_tokens=NEW_TOKENS, num_beams=4)):
            (plain, _), = decode(bundle.network, [(key, ids, params)], params.rows).values()
            tokens = [t for t in plain[0].token_ids if t != bundle.config.eos_token_id]
            if len(tokens) < 3:
                continue
            constrained = replace(params, constraints=(tuple(tokens[1:3]),))
            (got, _), = decode(bundle.network, [(key, ids, constrained)], constrained.rows).values()
            assert got == plain
            compared += 1
    assert compared >= 2, "too few outputs long enough to take a constraint from"


def test_a_constraint_longer_than_the_limit_ends_with_the_best_partial_hypothesis(bundles):
    bundle = bundles("marian")
    ids, = sources(bundle, 1, seed=3)
    term = tuple(range(10, 10 + NEW_TOKENS + 2))  # cannot fit in NEW_TOKENS
    params = replace(DecodeParams(max_new_tokens=NEW_TOKENS, num_beams=4), constraints=(term,))
    (hypotheses, steps), = decode(bundle.network, [(0, ids, params)], params.rows).values()
    assert len(hypotheses) == 1 and len(hypotheses[0].token_ids) == NEW_TOKENS and len(steps) == NEW_TOKENS
    assert hypotheses[0].finish_reason == "length"


def test_the_cache_follows_the_beams_a_teacher_forced_pass_gives_the_same_scores(bundles):
    """The scores of constrained hypotheses (many beam reorders: constraint tokens the model would not choose)
    equal a full teacher-forced pass over their tokens."""
    bundle = bundles("marian")
    network, rng = bundle.network, random.Random(4)
    for key, ids in enumerate(sources(bundle, 3, seed=4)):
        params = DecodeParams(max_new_tokens=NEW_TOKENS, num_beams=4, num_return_sequences=3,
                              constraints=tuple(word_ids(bundle, rng, 2)))
        (hypotheses, _), = decode(network, [(key, ids, params)], params.rows).values()
        for h in hypotheses:
            src = torch.tensor([ids])
            target = torch.tensor([[bundle.config.decoder_start_token_id] + h.token_ids[:-1]])
            with torch.inference_mode():
                logprobs = torch.log_softmax(network(src, src != bundle.config.pad_token_id, target).float(), -1)
            total = logprobs[0].gather(1, torch.tensor(h.token_ids)[:, None]).sum()
            expected = float(total) / len(h.token_ids) ** params.length_penalty
            assert h.score == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_a_constrained_sequence_shares_steps_without_changing_its_own_or_the_others_outputs(bundles, dtype):
    bundle = bundles("marian", dtype)
    rng = random.Random(5)
    ids = sources(bundle, 7, seed=5)
    modes = [DecodeParams(max_new_tokens=NEW_TOKENS), DecodeParams(max_new_tokens=NEW_TOKENS, num_beams=4,
                                                                   num_return_sequences=2)]
    others = [(key, source, modes[key % 2]) for key, source in enumerate(ids[:5])]
    # the first constrained, placed by source: each source token a word, the first terms translating words 0 and 1
    constrained = [(f"c{i}", source, replace(modes[i], constraints=tuple(word_ids(bundle, rng, 2)),
                                             source_words=tuple(range(len(source) - 1)) + (-1,) if i == 0 else (),
                                             constraint_words=((0,), (1,)) if i == 0 else ()))
                   for i, source in enumerate(ids[5:])]
    mixed = others[:2] + constrained[:1] + others[2:4] + constrained[1:] + others[4:]
    without = decode(bundle.network, others, capacity=12)
    together = decode(bundle.network, mixed, capacity=12)
    for key, (results, steps) in without.items():
        assert together[key][0] == results
        assert len(together[key][1]) == len(steps) and all(map(torch.equal, together[key][1], steps))
    for entry in constrained:
        (results, steps), = decode(bundle.network, [entry], entry[2].rows).values()
        assert together[entry[0]][0] == results
        assert all(map(torch.equal, together[entry[0]][1], steps))
