"""On a GPU (skipped without one): the CUDA-graphed static-shape step against the eager step and against CPU
float32, on the demo model's held-out numbers and a busy mixed batch."""

import pytest
import torch
from num2words import num2words

from model import BatchDecoder, DecodeParams, load
from model.demo.data import LANGUAGES, held_out_numbers

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def decode_all(bundle, sources: list[str], static_shapes: bool, capacity: int = 16, beams=(1, 4)) -> list[list[int]]:
    """Every source through one decoder of `capacity` rows, joining as rows free up (greedy and beam requests
    alternate) → token ids in input order."""
    decoder = BatchDecoder(bundle.network, capacity=capacity, max_source_len=64, max_new_tokens=48,
                           static_shapes=static_shapes)
    assert bool(decoder.static_step and decoder.static_step.graphs) == static_shapes
    jobs = [(i, bundle.source(text).ids, bundle.decode_params(num_beams=beams[i % len(beams)], max_new_tokens=48))
            for i, text in enumerate(sources)]
    results = {}
    while jobs or decoder.searches:
        while jobs and decoder.free_rows >= jobs[0][2].num_beams:
            decoder.admit([jobs.pop(0)])
        for event in decoder.step():
            if event.results:
                results[event.key] = event.results[0].token_ids
    return [results[i] for i in range(len(sources))]


@pytest.fixture(scope="module")
def sources() -> list[str]:
    return [f">>{LANGUAGES[i % 4]}<< {num2words(n, lang='en')}" for i, n in enumerate(held_out_numbers(40, seed=5))]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_graphed_step_equals_the_eager_step(sources, dtype):
    bundle = load(device="cuda", dtype=dtype)
    assert decode_all(bundle, sources, static_shapes=True) == decode_all(bundle, sources, static_shapes=False)


def test_gpu_float32_and_float16_translate_like_cpu_float32(sources):
    expected = decode_all(load(), sources, static_shapes=False)
    for dtype in ("float32", "float16"):
        assert decode_all(load(device="cuda", dtype=dtype), sources, static_shapes=True) == expected, dtype


def test_capture_reserves_memory_and_covers_every_row_count():
    bundle = load(device="cuda", dtype="float16")
    decoder = BatchDecoder(bundle.network, capacity=12, max_source_len=16, max_new_tokens=8, static_shapes=True)
    assert sorted(decoder.static_step.graphs) == [1, 2, 4, 8, 12] and decoder.static_step.reserved_bytes > 0
    params = DecodeParams(max_new_tokens=8)
    decoder.admit([(i, bundle.source("seven").ids, params) for i in range(12)])
    while decoder.searches:
        decoder.step()
