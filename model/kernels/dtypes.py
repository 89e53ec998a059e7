"""Where a model runs and in which number format: what `auto` picks for the device and the dtype.

On a CPU the choice follows what oneDNN may use in this process (isa: the CPU's instruction sets, capped by
ONEDNN_MAX_CPU_ISA), not the CPU's flags alone, since the kernels follow the cap. bfloat16 is the default only with
AMX: with AVX512-BF16 alone its products are native, yet a loaded server's steps ran slower than in float32
(loadtests/README.md, "Number formats per instruction set"), and below that oneDNN emulates it or cannot pack it.
float16 is for GPUs only: the CPU has no fast float16 products, and T5's activations overflow it.
"""

from __future__ import annotations

import torch

from . import int8_native, isa

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
CHOICES = ("auto", *DTYPES, "int8")  # int8: dynamic quantization of the Linear layers, CPU only


def bfloat16_by_default() -> bool:
    """Whether `auto` picks bfloat16 on this CPU: where oneDNN may use AMX."""
    return isa.at_least("AVX512_CORE_AMX")


def kernels_for(dtype: str) -> str:
    """One line for logs and /v1/models: the instruction sets this process may use, and for int8 whose products
    run (ours builds at the first call where it is the one)."""
    line = isa.instruction_sets()
    return f"{line}, int8 products {int8_native.int8_products()}" if dtype == "int8" else line


def resolve_placement(device: str, dtype: str) -> tuple[str, str]:
    """(device, dtype) as a model loads: an `auto` device is the GPU when torch sees one, else the CPU, and the dtype
    is resolve_dtype's there."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return device, resolve_dtype(dtype, device)


def resolve_dtype(dtype: str, device: str | torch.device) -> str:
    """`dtype` as a model loads it on `device`: `auto` is float16 on a GPU, bfloat16 on a CPU with AMX and float32 on
    any other; an explicit choice stays, but a format the device (or this process's kernels) cannot run is refused
    with a line that says why."""
    if dtype not in CHOICES:
        raise ValueError(f"dtype must be one of {', '.join(CHOICES)}, got {dtype!r}")
    on_cpu = torch.device(device).type == "cpu"
    if dtype == "auto":
        return "float16" if not on_cpu else "bfloat16" if bfloat16_by_default() else "float32"
    if dtype == "float16" and on_cpu:
        raise ValueError("dtype float16 runs on a GPU only; on the CPU use bfloat16, float32 or int8")
    if dtype == "int8" and not on_cpu:
        raise ValueError("dtype int8 runs on the CPU only; on a GPU use float16 or bfloat16")
    if dtype == "bfloat16" and on_cpu and not isa.bfloat16_packs():
        raise ValueError(f"dtype bfloat16 needs AVX-512 (BW, VL, DQ) on the CPU, and this process may use "
                         f"{isa.instruction_sets()}; use float32 or int8")
    return dtype
