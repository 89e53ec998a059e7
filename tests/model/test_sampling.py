"""Sampling: seeds, and temperature / top-k / top-p against transformers' logits warpers (the oracle)."""

import pytest
import torch
from marian_fixtures import SENTENCES
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from model import DecodeParams, Translator
from model.decoding.search import SingleSearch

NEG_INF = float("-inf")


@pytest.fixture(scope="module")
def translator(checkpoint):
    return Translator.from_pretrained(checkpoint)


def sampled(translator, texts, seed, **kw) -> list[list[int]]:
    kw = {"max_new_tokens": 12, "do_sample": True, "temperature": 1.5, **kw}
    return [t.token_ids for t in translator.translate(texts, seed=seed, **kw)]


def test_different_seeds_give_different_outputs_and_a_seed_repeats(translator):
    texts = SENTENCES[:4]
    runs = {seed: sampled(translator, texts, seed) for seed in range(5)}
    assert len({repr(run) for run in runs.values()}) > 1  # not all 5 seeds agree
    assert sampled(translator, texts, 3) == runs[3]
    greedy = [t.token_ids for t in translator.translate(texts, beam_size=1, max_new_tokens=12)]
    assert any(run != greedy for run in runs.values())  # it samples, it does not take the argmax


def test_a_seeded_request_samples_the_same_alone_and_in_a_batch(translator):
    """Each request draws from its own generator: its neighbours in the batch do not change its tokens."""
    texts = SENTENCES[:4]
    in_batch = sampled(translator, texts, 11, batch_size=len(texts))
    assert [sampled(translator, [text], 11, batch_size=1)[0] for text in texts] == in_batch


def test_sampling_with_a_tiny_top_p_is_greedy(translator):
    greedy = [t.token_ids for t in translator.translate(SENTENCES[:3], beam_size=1, max_new_tokens=20)]
    assert sampled(translator, SENTENCES[:3], 5, max_new_tokens=20, top_p=1e-9) == greedy


def _scores() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    banned = torch.randn(12, generator=gen) * 2
    banned[[0, 5, 9]] = NEG_INF  # tokens a rule removed (bad words, </s> before min_new_tokens)
    return {"random": torch.randn(12, generator=gen) * 2, "banned": banned}


# Tied groups {2, 4}, {1, 3, 6} and {5, 8}; softmax ≈ .429 | .158 .158 | .058 ×3 | .035 ×2 | .008 | .003, so
# cumulative .429 | .587 .745 | .803 .861 .919 | .954 .989 | .997 | 1.
TIES = torch.tensor([3.0, 1.0, 2.0, 1.0, 2.0, 0.5, 1.0, -1.0, 0.5, -2.0])

# (temperature, top_k, top_p): top_k 0 and top_p 1.0 are "off", as in transformers' generate.
WARPS = [
    (1.0, 0, 1.0),
    (1.0, 1, 1.0),  # argmax only
    (1.0, 2, 1.0),
    (0.7, 3, 1.0),
    (1.0, 12, 1.0),  # k = the vocabulary
    (1.0, 50, 1.0),  # k larger than the vocabulary
    (1.0, 0, 1e-6),  # tiny top_p: only the argmax
    (1.0, 0, 0.5),
    (2.0, 0, 0.9),
    (0.5, 0, 0.9),
    (1.0, 0, 0.999),
    (1.5, 4, 0.8),
    (0.3, 6, 0.95),
]
# On TIES: top-k cutting inside a tied group keeps the whole group (as transformers); top-p cuts between groups
# (ties at a top-p cut: see test_top_p_ties_at_the_boundary_keep_the_tokens_transformers_keeps).
TIE_WARPS = [
    (1.0, 2, 1.0),
    (1.0, 4, 1.0),
    (2.0, 5, 1.0),
    (1.0, 10, 1.0),
    (1.0, 0, 1e-6),
    (1.0, 0, 0.4),
    (1.0, 0, 0.7),
    (1.0, 0, 0.9),
    (1.0, 0, 0.97),
    (1.0, 4, 0.7),
]
CASES = [(name, warp) for name in _scores() for warp in WARPS] + [("ties", warp) for warp in TIE_WARPS]
SCORES = {**_scores(), "ties": TIES}


def hf_warped(scores: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """transformers' warpers in generate's order (temperature, top-k, top-p) on one row of scores."""
    x = scores[None].float().clone()
    if temperature != 1.0:
        x = TemperatureLogitsWarper(temperature)(None, x)
    if top_k:
        x = TopKLogitsWarper(top_k)(None, x)
    if top_p < 1.0:
        x = TopPLogitsWarper(top_p)(None, x)
    return x[0]


def allowed(scores, temperature, top_k, top_p) -> set[int]:
    return set(torch.isfinite(hf_warped(scores, temperature, top_k, top_p)).nonzero().flatten().tolist())


def sampler(seed: int, temperature: float, top_k: int, top_p: float) -> SingleSearch:
    params = DecodeParams(max_new_tokens=4, do_sample=True, seed=seed, temperature=temperature, top_k=top_k,
                          top_p=top_p)
    return SingleSearch(params, eos_id=0, start_id=1, source_len=1)


def drawn_distribution(monkeypatch, scores, temperature, top_k, top_p) -> torch.Tensor:
    """The probabilities SingleSearch.sample hands to torch.multinomial for these scores."""
    seen = []
    multinomial = torch.multinomial

    def spy(probs, *args, **kwargs):
        seen.append(probs.clone())
        return multinomial(probs, *args, **kwargs)

    monkeypatch.setattr(torch, "multinomial", spy)
    token = sampler(0, temperature, top_k, top_p).sample(scores.clone())
    monkeypatch.undo()
    assert len(seen) == 1, "SingleSearch.sample no longer draws with torch.multinomial: update this test"
    assert seen[0][token] > 0
    return seen[0].double()


@pytest.mark.parametrize("name,warp", CASES, ids=str)
def test_sampling_distribution_equals_transformers_warpers(monkeypatch, name, warp):
    """Support and probabilities of the sampler equal softmax of transformers' warped scores."""
    scores = SCORES[name]
    probs = drawn_distribution(monkeypatch, scores, *warp)
    expected = hf_warped(scores, *warp).double().softmax(-1)
    assert set(probs.nonzero().flatten().tolist()) == allowed(scores, *warp)
    assert torch.allclose(probs, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("name,warp", CASES, ids=str)
def test_sampled_tokens_stay_in_the_allowed_set(name, warp):
    """Black box: over many draws and generator seeds, every token is in transformers' allowed set, and every
    allowed token with probability ≥ 2 % shows up (miss chance ≤ 0.98^1000 ≈ 2e-9 each; the seeds are fixed)."""
    scores = SCORES[name]
    ok = allowed(scores, *warp)
    probs = hf_warped(scores, *warp).double().softmax(-1)
    drawn = set()
    for seed in range(20):
        search = sampler(seed, *warp)
        drawn.update(search.sample(scores.clone()) for _ in range(50))
    assert drawn <= ok
    assert {t for t in ok if probs[t] >= 0.02} <= drawn


# Exact ties at the top-p boundary (or at the top with a tiny top_p): transformers sorts ascending and keeps the
# tied token that sorts last (the higher index); SingleSearch.sample sorts descending and keeps the lower index.
TOP_P_TIES = [
    (torch.tensor([1.0, 1.0, 0.0]), 0.3),  # the minimal case: transformers allows {1}, SingleSearch {0}
    (torch.tensor([2.0, 2.0, 1.0]), 1e-6),
    (torch.tensor([1.0, 1.0, 1.0, 1.0]), 0.5),
    (torch.tensor([2.0, 1.0, 1.0, 0.0]), 0.7),
    (TIES, 0.5),
    (TIES, 0.8),
    (torch.zeros(2), 0.5),  # cumulative probability exactly top_p: that token is not needed
    (torch.zeros(4), 0.5),
]


def _case_id(value) -> str:
    return f"{value:g}" if isinstance(value, float) else "_".join(f"{x:g}" for x in value.tolist())


@pytest.mark.parametrize("scores,top_p", TOP_P_TIES, ids=_case_id)
def test_top_p_ties_at_the_boundary_keep_the_tokens_transformers_keeps(monkeypatch, scores, top_p):
    probs = drawn_distribution(monkeypatch, scores, 1.0, 0, top_p)
    assert set(probs.nonzero().flatten().tolist()) == allowed(scores, 1.0, 0, top_p)


@pytest.mark.parametrize("scores,top_p", TOP_P_TIES, ids=_case_id)
def test_top_p_ties_at_the_boundary_keep_as_many_tokens_as_transformers(monkeypatch, scores, top_p):
    """Which tied token survives aside (above), the cut is in the same place: the same number of tokens, and
    every token scored above the cut's tied value."""
    probs = drawn_distribution(monkeypatch, scores, 1.0, 0, top_p)
    ours, theirs = set(probs.nonzero().flatten().tolist()), allowed(scores, 1.0, 0, top_p)
    assert len(ours) == len(theirs)
    cut = min(scores[t].item() for t in theirs)
    above = {t for t in range(len(scores)) if scores[t] > cut}
    assert above <= ours and above <= theirs
