"""On a GPU (skipped without one): the CUDA-graphed static-shape step against the eager step and against CPU
float32, on the demo model's held-out numbers and a busy mixed batch; a source alone against inside a busy batch."""

import random
import sys
from pathlib import Path

import pytest
import torch
from num2words import num2words

sys.path.insert(0, str(Path(__file__).parents[1]))  # run with --noconftest (gpu_check): the tests' helpers
from batch_decoding import decodings, differences
from marian_fixtures import WORDS_EN, build_checkpoint

from model import BatchDecoder, DecodeParams, load
from model.kernels import cuda_kernels
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
    decoder = BatchDecoder(bundle.network, capacity=200, max_source_len=16, max_new_tokens=8, static_shapes=True)
    assert sorted(decoder.static_step.graphs) == [64, 128, 200] and decoder.static_step.reserved_bytes > 0
    params = DecodeParams(max_new_tokens=8)
    decoder.admit([(i, bundle.source("seven").ids, params) for i in range(200)])
    while decoder.searches:
        decoder.step()


@pytest.fixture(scope="module")
def wide_checkpoint(tmp_path_factory):
    """A Marian checkpoint of a realistic width: d_model 512, 8 heads of 64, FFN 2048 (2 + 2 layers)."""
    return build_checkpoint(tmp_path_factory.mktemp("wide") / "wide", d_model=512, encoder_layers=2,
                            decoder_layers=2, encoder_heads=8, decoder_heads=8, init_std=0.05)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_sources_decoding_on_the_gpu_does_not_depend_on_its_batch(sources, wide_checkpoint, dtype):
    """Each source alone against inside a running batch of up to 40 searches, on the captured step of a 200-row
    decoder (CUDA graphs of 64, 128 and 200 rows; beam searches fill 96 rows at most): results and every step's
    log-probabilities bit-identical, greedy, beam 4 with n-best, sampling."""
    rng = random.Random(0)
    demo, wide = load(device="cuda", dtype=dtype), load(wide_checkpoint, device="cuda", dtype=dtype)
    english = wide.resolve_languages(None, None, translating=False)
    texts = [" ".join(rng.choice(WORDS_EN) for _ in range(rng.randint(1, 14))) for _ in range(24)]
    for bundle, ids in ((demo, [demo.source(text).ids for text in sources[:24]]),
                        (wide, [wide.source(text, *english).ids for text in texts])):
        for mode, params in decodings(12).items():
            assert differences(bundle.network, ids, params, static_shapes=True, sequences_at_once=40,
                               join_at_most=4, capacity=200) == [], mode


def test_a_rows_log_probabilities_do_not_depend_on_where_it_sits_in_the_batch():
    """Over an opus-mt-sized vocabulary (58,101 tokens: rows 4 bytes apart from a 16-byte boundary), a row's
    log-softmax alone against at each index of an 8-row batch."""
    logits = torch.randn(8, 58101, device="cuda")
    alone = cuda_kernels.log_softmax(logits[:1], torch.empty(1, 58101, device="cuda"))[0]
    for at in range(8):
        batch = logits.roll(at, 0)  # row 0 at index `at`
        assert torch.equal(cuda_kernels.log_softmax(batch, torch.empty_like(batch))[at], alone), at
