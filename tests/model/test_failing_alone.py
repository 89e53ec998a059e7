"""One bad sequence fails alone: an error raised while one request's next tokens are chosen (greedy, a beam search
stepping with others of its width, sampling, a constrained search) fails that request, and every other request in
the running batch finishes with the outputs it has without the failure, bit for bit."""

import pytest

from model import BatchDecoder, DecodeParams, load
from model.decoding.constrained import ConstrainedBeamSearch
from model.decoding.search import BeamSearch

NEW_TOKENS = 12
FAIL_AFTER_STEPS = 3
SOURCES = ["the cat sat on the mat", "a dog runs", "we go home now", "seven birds", "she reads a long book today",
           "it rains", "the old man and the sea", "the cat and the dog"]


class Injected(Exception):
    """What the test hook raises."""


def raising(*_):
    raise Injected("injected")


class BeamWithBrokenHypotheses(BeamSearch):
    """A beam search whose finished hypotheses cannot be read: advance_beams raises while it steps the group it
    is in."""

    finished_ends = property(raising, lambda self, value: None)


def inject(search) -> None:
    """The test hook: from now on, choosing this search's next tokens raises."""
    if isinstance(search, ConstrainedBeamSearch):
        search.propose = raising
    elif isinstance(search, BeamSearch):
        search.__class__ = BeamWithBrokenHypotheses
    else:
        search.advance = raising  # greedy and sampled searches


@pytest.fixture(scope="module")
def bundle(checkpoint):
    return load(checkpoint, dtype="float32")


def entries(bundle) -> list:
    term = tuple(bundle.tokenizer.encode_target("cat"))[:2]
    params = {0: DecodeParams(NEW_TOKENS), 1: DecodeParams(NEW_TOKENS), 2: DecodeParams(NEW_TOKENS, num_beams=4),
              3: DecodeParams(NEW_TOKENS, num_beams=4), 4: DecodeParams(NEW_TOKENS, num_beams=4),
              5: DecodeParams(NEW_TOKENS, do_sample=True, seed=3),
              6: DecodeParams(NEW_TOKENS, num_beams=2, constraints=(term,)),
              7: DecodeParams(NEW_TOKENS, num_beams=2, constraints=(term,))}
    languages = bundle.resolve_languages(None, None, translating=False)
    return [(key, bundle.source(text, *languages).ids, p)
            for (key, p), text in zip(params.items(), SOURCES)]


def decode(bundle, victim: int | None, part=lambda search: search) -> dict:
    """{key: hypotheses or the error it failed with}, every entry in one running batch; `victim` fails after
    FAIL_AFTER_STEPS steps (the `part` of its search breaks)."""
    decoder = BatchDecoder(bundle.network, capacity=32, max_source_len=64, max_new_tokens=NEW_TOKENS)
    decoder.admit(entries(bundle))
    out, steps = {}, 0
    while decoder.searches:
        if steps == FAIL_AFTER_STEPS and victim is not None:
            inject(part(decoder.searches[victim]))
        for event in decoder.step():
            if event.error is not None or event.results is not None:
                out[event.key] = event.error or [(h.token_ids, h.score) for h in event.results]
        steps += 1
    return out


@pytest.fixture(scope="module")
def clean(bundle) -> dict:
    outputs = decode(bundle, None)
    assert all(isinstance(v, list) for v in outputs.values())
    return outputs


def own_search(search):
    return search.own


@pytest.mark.parametrize("victim,kind,part", [(0, "greedy", None), (3, "a beam search of a group of three", None),
                                              (5, "sampling", None), (6, "constrained, beside another", None),
                                              (7, "the own beam search of a constrained search", own_search)])
def test_one_failing_search_fails_alone(bundle, clean, victim, kind, part):
    faulty = decode(bundle, victim, part or (lambda search: search))
    assert isinstance(faulty.pop(victim), Injected), kind
    assert faulty == {key: value for key, value in clean.items() if key != victim}
