"""Our int8 product (model.kernels.int8_native, CPUs without VNNI): the same numbers as oneDNN's product of the same
rounded rows, bit for bit, at every shape (rows, and in/out features off the kernel's blocks); exact int32 sums at the
extremes of the 7-bit range; a row's numbers the same alone and inside any batch."""

import pytest
import torch

from model.kernels import int8_native
from model.kernels.quantize import Int8Linear, _int8_product, quantize_rows, shifted_rows

pytestmark = pytest.mark.skipif(not int8_native.own_kernel(), reason="oneDNN's int8 kernels run here (VNNI or AMX)")


def onednn_linear(linear: Int8Linear, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """What Int8Linear computes where oneDNN's kernel runs: the row rounded by shifted_rows, oneDNN's u8 × s8 product,
    then the row's scale and the bias."""
    rows, row_scales = shifted_rows(x, linear.activation_limit)
    packed = torch.ops.onednn.qlinear_prepack(values, None)
    y = _int8_product(rows, linear.activation_limit, packed, linear.scales,
                      torch.zeros(linear.out_features, dtype=torch.long)) * row_scales
    return y if linear.bias is None else y + linear.bias


@pytest.mark.parametrize("in_features,out_features", [(64, 48), (37, 45), (512, 2048), (5, 1), (128, 131)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_same_numbers_as_onednns_product(in_features, out_features, with_bias):
    generator = torch.Generator().manual_seed(in_features * out_features)
    weight = torch.randn(out_features, in_features, generator=generator)
    values, scales = quantize_rows(weight)
    bias = torch.randn(out_features, generator=generator) if with_bias else None
    linear = Int8Linear(values, scales[:, 0], bias)
    assert linear.own_kernel
    for rows in (1, 2, 3, 4, 5, 9, 33):
        x = torch.randn(rows, in_features, generator=generator) * torch.logspace(-3, 3, rows)[:, None]
        x[rows // 2] = 0  # an all-zero row: scale tiny, values 0
        assert torch.equal(linear(x), onednn_linear(linear, values, x)), (rows, in_features, out_features)


def test_sums_are_exact_at_the_ends_of_the_range():
    """Weights of ±127 against activations at ±limit: the largest pair sums vpmaddubsw adds in 16 bits, and int32
    sums far past float32's exact integers, equal the int64 product."""
    values = torch.full((24, 1000), 127, dtype=torch.int8)
    values[1::2] = -127
    values[2, ::3] = 0
    linear = Int8Linear(values, torch.ones(24), None)
    x = torch.ones(3, 1000)
    x[1, ::2] = -1
    x[2] = torch.linspace(-1, 1, 1000)
    q, row_scales = quantize_rows(x, linear.activation_limit)
    exact = (q.long() @ values.long().t()).float() * row_scales
    assert torch.equal(linear(x), exact)


def test_a_rows_numbers_are_the_same_alone_and_in_any_batch():
    generator = torch.Generator().manual_seed(1)
    values, scales = quantize_rows(torch.randn(200, 96, generator=generator))
    linear = Int8Linear(values, scales[:, 0], torch.randn(200, generator=generator))
    batch = torch.randn(40, 96, generator=generator)
    whole = linear(batch)
    for rows in (slice(0, 1), slice(7, 8), slice(3, 6), slice(1, 40), slice(39, 40)):
        assert torch.equal(linear(batch[rows]), whole[rows])


@pytest.mark.slow
def test_the_library_is_built_once_and_loaded_from_the_cache(tmp_path, monkeypatch):
    """A second build request finds the file the first left (named by the source and torch's version)."""
    monkeypatch.setenv("SEQ2SEQ_KERNEL_CACHE", str(tmp_path))
    built = int8_native._library()
    assert built.parent == tmp_path and built.stat().st_size > 0
    modified = built.stat().st_mtime_ns
    assert int8_native._library() == built and built.stat().st_mtime_ns == modified
    assert [p.name for p in tmp_path.iterdir()] == [built.name]  # no scratch or lock left behind


@pytest.fixture
def fresh_choice():
    """own_kernel() decided anew in the test, and again after it (the process's choice is cached)."""
    int8_native.own_kernel.cache_clear()
    yield
    int8_native.own_kernel.cache_clear()


@pytest.mark.parametrize("compiler", ["/nonexistent/c++", "false"])  # none; one that fails
def test_without_a_build_onednns_product_runs_and_the_log_says_so(fresh_choice, tmp_path, monkeypatch, caplog,
                                                                    compiler):
    monkeypatch.setenv("CXX", compiler)
    monkeypatch.setenv("SEQ2SEQ_KERNEL_CACHE", str(tmp_path))
    assert not int8_native.own_kernel() and int8_native.int8_products() == "oneDNN"
    assert [r.levelname for r in caplog.records if "oneDNN's runs" in r.getMessage()] == ["WARNING"]  # once
    values, scales = quantize_rows(torch.randn(16, 32, generator=torch.Generator().manual_seed(0)))
    linear = Int8Linear(values, scales[:, 0], None)
    x = torch.randn(3, 32, generator=torch.Generator().manual_seed(1))
    assert not linear.own_kernel and torch.equal(linear(x), onednn_linear(linear, values, x))
