"""The GPU's fixed-row products and row buckets, checked where they need no GPU: the blocks, the padding and the
module switch (whether cuBLAS then gives a row the same numbers at every row count is test_cuda's and
loadtests.gpu_invariance's, on a GPU)."""

import pytest
import torch
from torch import nn

from model import load
from model.kernels import cuda_kernels
from model.kernels.cpu_kernels import use_onednn_linears
from model.kernels.cuda_kernels import FixedRowsLinear, use_fixed_row_products
from model.kernels.static_step import row_buckets


@pytest.mark.parametrize("shape", [(1, 48), (63, 48), (64, 48), (65, 48), (3, 100, 48)])
def test_fixed_row_products_equal_the_plain_product(shape):
    torch.manual_seed(0)
    plain = nn.Linear(48, 40)
    fixed = nn.Linear(48, 40)
    fixed.load_state_dict(plain.state_dict())
    fixed.__class__, fixed.rows_at_a_time = FixedRowsLinear, 64
    x = torch.randn(shape)
    with torch.inference_mode():
        got, expected = fixed(x), plain(x)
    assert got.shape == expected.shape and torch.allclose(got, expected, atol=1e-6)


def test_the_encoders_products_take_more_rows_at_a_time_than_the_decoders():
    network = load(dtype="float32", traced=False).network
    use_onednn_linears(network, enable=False)  # the CPU's Linears back to nn.Linear, as on a GPU
    use_fixed_row_products(network)
    rows = {name: m.rows_at_a_time for name, m in network.named_modules() if isinstance(m, FixedRowsLinear)}
    assert rows and all(type(m) is not nn.Linear for m in network.modules())
    assert {rows[n] for n in rows if n.startswith("encoder_layers.") or n.endswith("encoder_attn.kv_proj")} == {
        cuda_kernels.ENCODER_ROWS}
    assert {rows[n] for n in rows if n.startswith("decoder_layers.") and not n.endswith("kv_proj")} | {
        rows["lm_head"]} == {cuda_kernels.DECODER_ROWS}
    use_fixed_row_products(network, enable=False)
    assert not any(isinstance(m, FixedRowsLinear) for m in network.modules())


def test_the_smallest_row_bucket_is_one_block_of_products():
    assert row_buckets(200) == [64, 128, 200]
    assert row_buckets(256) == [64, 128, 256]
    assert row_buckets(12) == [12] and row_buckets(64) == [64]
    assert row_buckets(12, smallest=1) == [1, 2, 4, 8, 12]
