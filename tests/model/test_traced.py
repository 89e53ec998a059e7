"""The traced stacks (kernels.traced_step) against the eager network of the same checkpoint, every family, float32,
bfloat16 and int8: encoder passes, cross-attention keys and values and decoder steps bit-identical, at row counts on
both sides of the products' padding (and of bfloat16's blocks of rows) and at growing target lengths; a trace that
would keep a shape fixed fails."""

import functools
from collections import Counter

import pytest
import torch

from model import load
from model.kernels.cpu_kernels import BLOCK_ROWS
from model.kernels.traced_step import trace_stacks
from model.network.transformer import Seq2SeqTransformer
from server.runtime.process import load_weights
from server.settings import Settings

pytestmark = pytest.mark.slow

DTYPES = ["float32", "bfloat16", "int8"]


@pytest.fixture(scope="module")
def every_family(checkpoints, family_checkpoints, text2text_checkpoints):
    return {**checkpoints, **family_checkpoints, **text2text_checkpoints}


@pytest.fixture(scope="module", params=["shared-swish-safetensors", "gelu-untied", "nllb", "mbart50", "t5_v1_0",
                                        "t5_v1_1", "madlad", "bart"])
def networks(request, every_family):
    """dtype → (traced, eager) networks of one checkpoint, loaded at a test's first call (a format this CPU cannot
    run is skipped, never loaded: conftest)."""
    path = every_family[request.param]

    @functools.cache
    def of(dtype: str):
        return load(path, dtype=dtype).network, load(path, dtype=dtype, traced=False).network

    return of


def sources(network: Seq2SeqTransformer, count: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    low, high, eos = 4, network.config.vocab_size, network.config.eos_token_id
    lengths = torch.randint(1, 9, (count,), generator=generator).tolist()
    return [torch.randint(low, high, (n,), generator=generator).tolist() + [eos] for n in lengths]


@pytest.mark.parametrize("dtype,rows", [(dtype, rows) for dtype in DTYPES for rows in (1, 2, 3, 10)]
                         + [("bfloat16", BLOCK_ROWS + 1)])  # bfloat16's products in blocks of rows
def test_traced_decoding_computes_what_eager_decoding_does(networks, dtype, rows):
    traced, eager = networks(dtype)
    assert traced.traced is not None and eager.traced is None
    batch = sources(traced, rows, seed=rows)
    cfg, steps = traced.config, 6
    with torch.inference_mode():
        encoded = []
        for network in (traced, eager):
            memory, mask = network.encode_sources(batch)
            encoded.append((memory, *network.cross_kv(memory)))
        for got, expected in zip(*encoded):  # the encoder's output, the keys, the values
            assert torch.equal(got, expected)
        caches = [network.new_cache(rows, steps, mask.shape[1]) for network in (traced, eager)]
        for cache, (_, k, v) in zip(caches, encoded):
            cache.write_source(0, k, v, mask)
        tokens = torch.full((rows,), cfg.decoder_start_token_id)
        # rows at different positions, as in a running batch: row i starts i % 3 steps later
        for step in range(steps):
            positions = (step - torch.arange(rows) % 3).clamp(min=0)
            target_len = int(positions.max()) + 1
            outputs = [network.decode_step(cache, tokens, positions, target_len, mask.shape[1])
                       for network, cache in zip((traced, eager), caches)]
            for got, expected in zip(*outputs):  # the logits, the alignment layer's input
                assert torch.equal(got, expected), f"step {step}"
            tokens = outputs[0][0].argmax(-1)


def attention_kernels(network: Seq2SeqTransformer, rows: int) -> Counter:
    """How many times a decoder step of `rows` rows called each of attention's two kernels."""
    cache = network.new_cache(rows, max_target_len=4, max_source_len=5)
    tokens, positions = torch.full((rows,), network.config.decoder_start_token_id), torch.full((rows,), 2)
    with torch.inference_mode(), torch.profiler.profile() as profile:
        network.decode_step(cache, tokens, positions, target_len=3, source_len=5)
    return Counter(event.name for event in profile.events()
                   if event.name in ("aten::scaled_dot_product_attention", "aten::matmul"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_traced_step_attends_through_the_kernels_eager_code_chooses(networks, dtype):
    """Each row count runs the trace recorded with eager code's choice of attention kernel. The decoding test
    above sees a wrong choice only where the kernels' float32 results round to different bfloat16 numbers."""
    traced, eager = networks(dtype)
    for rows in (1, 2, 3, 8, BLOCK_ROWS + 1):
        assert attention_kernels(traced, rows) == attention_kernels(eager, rows), f"{rows} rows"


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_batch_of_one_token_sources_encodes_as_eager_code_does(networks, dtype):
    """Many one-token sources in one pass (padded: T5's path) encode as eager code does."""
    traced, eager = networks(dtype)
    batch = [[traced.config.eos_token_id]] * 9
    with torch.inference_mode():
        assert torch.equal(traced.encode_sources(batch)[0], eager.encode_sources(batch)[0])


def test_a_trace_that_would_keep_a_shape_fixed_fails(checkpoint, monkeypatch):
    network = load(checkpoint, traced=False).network
    eager_stack = Seq2SeqTransformer.encoder_stack

    def branching(self, x, attn_mask):
        return eager_stack(self, x if x.shape[1] > 2 else x * 2, attn_mask)  # a branch on the source length

    monkeypatch.setattr(Seq2SeqTransformer, "encoder_stack", branching)
    with pytest.raises(RuntimeError, match=r"would keep a shape fixed \(.*test_traced.py:\d+\).*might not generalize"):
        trace_stacks(network)
    assert network.traced is None


def test_the_server_setting_turns_tracing_off():
    assert Settings(dtype="float32").traced
    assert not Settings.from_env({"SERVER_TRACED": "false"}).traced
    assert load_weights(None, Settings(dtype="float32", device="cpu")).network.traced is not None
    assert load_weights(None, Settings(dtype="float32", device="cpu", traced=False)).network.traced is None
