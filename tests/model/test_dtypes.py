"""`--dtype auto` and the dtypes a device refuses (model.kernels.dtypes), as the CLI and the server apply them."""

import pytest

import model.kernels.dtypes as dtypes
from model import instruction_sets, resolve_dtype
from model.kernels.int8_native import int8_products
from server.front.registry import ModelRegistry, model_info
from server.settings import Settings


@pytest.mark.parametrize("native, expected", [(True, "bfloat16"), (False, "float32")])
def test_auto_picks_bfloat16_only_on_a_cpu_that_has_it(monkeypatch, native, expected):
    monkeypatch.setattr(dtypes, "bfloat16_by_default", lambda: native)
    assert resolve_dtype("auto", "cpu") == expected
    assert resolve_dtype("auto", "cuda") == "float16"
    assert resolve_dtype("float32", "cpu") == "float32"  # an explicit choice wins
    assert resolve_dtype("bfloat16", "cuda") == "bfloat16"


def test_dtypes_a_device_cannot_run_are_refused():
    with pytest.raises(ValueError, match="float16 runs on a GPU only"):
        resolve_dtype("float16", "cpu")
    with pytest.raises(ValueError, match="int8 runs on the CPU only"):
        resolve_dtype("int8", "cuda:0")
    with pytest.raises(ValueError, match="dtype must be one of auto, float32"):
        resolve_dtype("fp8", "cpu")


def test_models_list_says_the_dtype_chosen():
    entry = next(iter(ModelRegistry.from_paths(None).entries.values()))
    assert model_info(entry, Settings(device="cpu", dtype="auto")).dtype == resolve_dtype("auto", "cpu")
    assert model_info(entry, Settings(device="cpu", dtype="int8")).dtype == "int8"
    assert model_info(entry, Settings(device="cpu")).kernels == instruction_sets()  # which kernels it got
    assert model_info(entry, Settings(device="cpu", dtype="int8")).kernels == (
        f"{instruction_sets()}, int8 products {int8_products()}")  # and whose int8 products


def test_server_refuses_float16_on_the_cpu(capsys):
    from server.__main__ import main
    assert main(["--device", "cpu", "--dtype", "float16", "--no-ray", "--port", "0"]) == 1
    assert "float16 runs on a GPU only" in capsys.readouterr().err
