"""int8 weights quantized a block of rows at a time (model.quantize.Int8Rows, how an untied output projection loads)
equal torch's quantization of the whole float32 matrix: the same int8 values, scales and bias."""

import torch
from safetensors import safe_open
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as Int8Linear
from torch.ao.quantization import per_channel_dynamic_qconfig

from model import load
from model.quantize import WIDE_ROWS, Int8Output, Int8Rows


def whole_matrix(weight: torch.Tensor, bias: torch.Tensor) -> Int8Linear:
    linear = nn.Linear(weight.shape[1], weight.shape[0])
    linear.weight, linear.bias = nn.Parameter(weight), nn.Parameter(bias)
    linear.qconfig = per_channel_dynamic_qconfig
    return Int8Linear.from_float(linear)


def assert_same_int8(got: Int8Linear, expected: Int8Linear) -> None:
    (weight, bias), (expected_weight, expected_bias) = got._weight_bias(), expected._weight_bias()
    assert torch.equal(weight.int_repr(), expected_weight.int_repr())
    assert torch.equal(weight.q_per_channel_scales(), expected_weight.q_per_channel_scales())
    assert torch.equal(weight.q_per_channel_zero_points(), expected_weight.q_per_channel_zero_points())
    assert torch.equal(bias, expected_bias)


def test_rows_quantized_in_blocks_equal_the_whole_matrix_quantized():
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(300, 64, generator=generator) * torch.logspace(-3, 1, 300)[:, None]  # rows far apart
    bias = torch.randn(300, generator=generator)
    rows = Int8Rows(300, 64)
    for first in range(0, 300, 7):  # blocks that do not divide the rows
        rows.quantize_rows(first, weight[first:first + 7])
    assert_same_int8(rows.linear(bias), whole_matrix(weight, bias))


def test_untied_output_projection_loads_as_its_whole_matrix_quantized(checkpoints):
    path = checkpoints["gelu-untied"]
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        weight, bias = f.get_tensor("lm_head.weight"), f.get_tensor("final_logits_bias")[0]
    output = load(path, dtype="int8", traced=False).network.lm_head
    for packing in (output.narrow, output.wide):
        assert_same_int8(packing, whole_matrix(weight, bias))


def test_tied_output_projection_quantizes_as_the_whole_embedding_matrix(checkpoint):
    with safe_open(str(checkpoint / "model.safetensors"), "pt") as f:
        bias = f.get_tensor("final_logits_bias")[0]
    network = load(checkpoint, dtype="int8", traced=False).network
    for packing in (network.lm_head.narrow, network.lm_head.wide):
        assert_same_int8(packing, whole_matrix(network.decoder_embed.weight.detach().clone(), bias))


def test_the_output_projection_takes_onednns_packing_from_wide_rows_on(checkpoint):
    """Both packings hold the same int8 weight; below WIDE_ROWS rows the x86 engine's multiplies, from there on
    oneDNN's, and the two agree to float32 rounding."""
    output = load(checkpoint, dtype="int8", traced=False).network.lm_head
    assert isinstance(output, Int8Output)
    generator = torch.Generator().manual_seed(0)
    for rows, chosen in ((WIDE_ROWS - 1, output.narrow), (WIDE_ROWS, output.wide), (3 * WIDE_ROWS, output.wide)):
        x = torch.randn(rows, output.narrow.in_features, generator=generator)
        assert torch.equal(output(x), chosen(x))
        torch.testing.assert_close(output.wide(x), output.narrow(x), atol=1e-5, rtol=1e-5)
