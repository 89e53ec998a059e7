"""Batch invariance: a sequence's tokens and scores are bit-identical whatever else shares its steps, in float32,
bfloat16 and int8.

Operation level: row r of every product, norm, attention and log-softmax computed alone and inside M rows at a
random position, beside neighbours 100× larger (they expose any scale or blocking shared across rows), compared
with torch.equal. End to end: every family's tiny checkpoint and one of a realistic width (d_model 512), each
source decoded alone and inside a running batch of sources of mixed lengths that join at different steps, greedy,
beam search with n-best and seeded sampling: the log-probabilities of every step and the results bit-identical. A
negative control runs the same comparison on per-tensor int8 activation scales (torch's dynamic quantization) and
must find a difference.
"""

import random

import pytest
import torch
from batch_decoding import ROW_COUNTS, assert_rows_invariant, decodings, differences, linear, sources
from marian_fixtures import WORDS_EN, build_checkpoint

from model import Translator, load
from model.kernels import int8_native, quantize
from model.network.layers import RMSNorm, attended_length, attention

pytestmark = pytest.mark.slow

DTYPES = ("float32", "bfloat16", "int8")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d_in,d_out", [(32, 96), (512, 2048), (2048, 512)])
def test_a_products_row_does_not_depend_on_the_other_rows(dtype, d_in, d_out):
    layer = linear(dtype, d_in, d_out)
    rows = torch.randn(40, d_in).to(torch.float32 if dtype == "int8" else getattr(torch, dtype))
    with torch.inference_mode():
        assert_rows_invariant(layer, rows)
        assert_rows_invariant(lambda x: layer(x[:, None])[:, 0], rows)  # (n, 1, D): a decoder step's input


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("width", [32, 512])
def test_norms_and_log_softmax_of_a_row_do_not_depend_on_the_other_rows(dtype, width):
    torch.manual_seed(0)
    rows = torch.randn(40, width, dtype=getattr(torch, dtype))
    with torch.inference_mode():
        for op in (torch.nn.LayerNorm(width).to(rows.dtype), RMSNorm(width, eps=1e-6).to(rows.dtype),
                   lambda x: torch.log_softmax(x.float(), dim=-1)):
            assert_rows_invariant(op, rows)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("heads,head_dim", [(2, 16), (8, 64)])
def test_a_decoder_steps_attention_does_not_depend_on_the_other_rows_or_their_lengths(dtype, heads, head_dim):
    """One query per row over keys of its own length, masked beyond it; the batch reads as many keys as its
    longest row needs (attended_length), the row alone as many as it needs."""
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 70, (40,), generator=generator)
    longest = int(lengths.max())
    q = torch.randn(40, heads, 1, head_dim, generator=generator).to(getattr(torch, dtype))
    kv = torch.randn(2, 40, heads, attended_length(longest, head_dim), head_dim, generator=generator)  # float32

    def attend(index: torch.Tensor, at: int) -> torch.Tensor:
        """Row `at` of attention over the rows `index`, every other row 100x larger."""
        keys = attended_length(int(lengths[index].max()), head_dim)
        mask = (torch.arange(keys)[None, :] < lengths[index][:, None])[:, None, None, :]  # (n, 1, 1, keys)
        scale = torch.full((len(index), 1, 1, 1), 100.0)
        scale[at] = 1.0
        k, v = (t[index, :, :keys] * scale for t in kv)
        return attention(q[index] * scale.to(q.dtype), k, v, mask, None)[at]

    for m in ROW_COUNTS:
        for r in torch.randint(0, 40, (3,), generator=generator).tolist():
            index = torch.randint(0, 40, (m,), generator=generator)
            at = int(torch.randint(0, m, (1,), generator=generator))
            index[at] = r
            assert torch.equal(attend(index, at), attend(torch.tensor([r]), 0)), f"row {r} inside {m} rows"


# End to end

@pytest.fixture(scope="module")
def wide_checkpoint(tmp_path_factory):
    """A Marian checkpoint of a realistic width: d_model 512, 8 heads of 64, FFN 2048 (2 + 2 layers)."""
    return build_checkpoint(tmp_path_factory.mktemp("wide") / "wide", d_model=512, encoder_layers=2,
                            decoder_layers=2, encoder_heads=8, decoder_heads=8, init_std=0.05)


@pytest.fixture(scope="module")
def every_checkpoint(checkpoints, family_checkpoints, text2text_checkpoints, wide_checkpoint):
    return {**{name: checkpoints[name] for name in ("shared-swish-safetensors", "gelu-untied")},
            **family_checkpoints, **text2text_checkpoints, "wide-marian": wide_checkpoint}


NEW_TOKENS = 10
MODES = decodings(NEW_TOKENS)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["shared-swish-safetensors", "gelu-untied", "nllb", "m2m100", "mbart50", "t5_v1_0",
                                  "t5_v1_1", "madlad", "bart", "wide-marian"])
def test_a_sources_decoding_does_not_depend_on_its_batch(every_checkpoint, name, dtype):
    bundle = load(every_checkpoint[name], dtype=dtype)
    ids = sources(bundle, 4, seed=len(name))
    for mode, params in MODES.items():
        assert differences(bundle.network, ids, params) == [], mode


def test_the_comparison_sees_per_tensor_int8_scales(checkpoint, monkeypatch):
    """Negative control: with one activation scale for a whole step (the largest value of every row, as torch's
    dynamic quantization scales), the same comparison finds sources whose decoding moved with their batch."""
    def per_tensor(x, limit):
        scale = x.abs().amax().float().clamp_min(torch.finfo(torch.float32).tiny) / limit
        return torch.round(x / scale).add_(limit).to(torch.uint8), scale.expand(x.shape[0], 1)

    monkeypatch.setattr(quantize, "shifted_rows", per_tensor)
    monkeypatch.setattr(int8_native, "own_kernel", lambda: False)  # ours rounds each row inside its product
    bundle = load(checkpoint, dtype="int8", traced=False)
    assert differences(bundle.network, sources(bundle, 6, seed=0), MODES["greedy"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_translating_one_at_a_time_equals_translating_32_at_a_time(checkpoint, dtype):
    """The Python API (and the CLI's --batch-size): every translation, its score and its alternatives alike."""
    translator = Translator(load(checkpoint, dtype=dtype))
    rng = random.Random(1)
    texts = [" ".join(rng.choice(WORDS_EN) for _ in range(rng.randint(1, 14))) for _ in range(12)]
    for beams in (1, 4):
        alone, batched = (translator.translate(texts, target_lang="de", beam_size=beams, n_best=beams,
                                               batch_size=size) for size in (1, 32))
        assert alone == batched
