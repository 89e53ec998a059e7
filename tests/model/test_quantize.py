"""int8 (model.kernels.quantize): weights quantized a block of rows at a time (Int8Rows, how an untied output projection
loads) equal the whole float32 matrix quantized; every Linear of an int8 load is int8; an int8 product is the
exact int32 product of the rounded rows, scaled back."""

import torch
from safetensors import safe_open
from torch import nn

from model import load
from model.kernels.quantize import INT8_MAX, Int8Linear, Int8Rows, quantize_rows


def whole_matrix(weight: torch.Tensor, bias: torch.Tensor) -> Int8Linear:
    values, scales = quantize_rows(weight.float())
    return Int8Linear(values, scales[:, 0], bias)


def assert_same_int8(got: Int8Linear, expected: Int8Linear) -> None:
    """The same scales and bias, and the same int8 values: the same products, bit for bit."""
    assert torch.equal(got.scales, expected.scales) and torch.equal(got.bias, expected.bias)
    probe = torch.randn(9, got.in_features, generator=torch.Generator().manual_seed(0))
    assert torch.equal(got(probe), expected(probe))


def test_rows_quantized_in_blocks_equal_the_whole_matrix_quantized():
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(300, 64, generator=generator) * torch.logspace(-3, 1, 300)[:, None]  # rows far apart
    bias = torch.randn(300, generator=generator)
    rows = Int8Rows(300, 64)
    for first in range(0, 300, 7):  # blocks that do not divide the rows
        rows.quantize_rows(first, weight[first:first + 7])
    assert_same_int8(rows.linear(bias), whole_matrix(weight, bias))


def test_rows_round_to_int8_on_a_scale_of_their_own():
    x = torch.tensor([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [300.0, 1.0, -150.0]])
    values, scales = quantize_rows(x)
    assert values.dtype == torch.int8 and scales.shape == (3, 1)
    assert values.abs().amax(-1).tolist() == [INT8_MAX, 0, INT8_MAX]  # an all-zero row stays zero, no NaN
    assert ((values * scales - x).abs() <= scales * 0.501).all()  # within half a step of its own scale


def test_an_int8_product_is_the_exact_product_of_the_rounded_rows():
    generator = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(40, 24, generator=generator), torch.randn(40, generator=generator)
    weight_values, weight_scales = quantize_rows(weight)
    linear = Int8Linear(weight_values, weight_scales[:, 0], bias)
    x = torch.randn(5, 3, 24, generator=generator)
    values, scales = quantize_rows(x.reshape(-1, 24), linear.activation_limit)  # the range this CPU sums exactly
    exact = (values.long() @ weight_values.long().t()).float() * linear.scales * scales + bias
    assert torch.equal(linear(x), exact.view(5, 3, 40))


def test_untied_output_projection_loads_as_its_whole_matrix_quantized(checkpoints):
    path = checkpoints["gelu-untied"]
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        weight, bias = f.get_tensor("lm_head.weight"), f.get_tensor("final_logits_bias")[0]
    assert_same_int8(load(path, dtype="int8", traced=False).network.lm_head, whole_matrix(weight, bias))


def test_tied_output_projection_quantizes_as_the_whole_embedding_matrix(checkpoint):
    with safe_open(str(checkpoint / "model.safetensors"), "pt") as f:
        bias = f.get_tensor("final_logits_bias")[0]
    network = load(checkpoint, dtype="int8", traced=False).network
    assert_same_int8(network.lm_head, whole_matrix(network.decoder_embed.weight.detach().clone(), bias))


def test_every_linear_of_an_int8_load_is_int8(checkpoint):
    """load_network quantizes each layer as its weights come in: nothing float is left for a later pass."""
    network = load(checkpoint, dtype="int8", traced=False).network
    assert not [name for name, module in network.named_modules() if isinstance(module, nn.Linear)]
    assert sum(isinstance(module, Int8Linear) for module in network.modules()) > 10
