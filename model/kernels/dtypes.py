"""Where a model runs and in which number format: what `auto` picks for the device and the dtype.

bfloat16 on a CPU pays only where the CPU multiplies bfloat16 in hardware (AVX512-BF16: AMD Zen 4 and later, Intel
Cooper Lake; AMX-BF16: Intel Sapphire Rapids and later): oneDNN then runs its products at about twice float32's
throughput and a step reads half the weight bytes. Elsewhere oneDNN emulates it, slower than float32. float16 is for
GPUs only: the CPU has no fast float16 products, and T5's activations overflow it.
"""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
CHOICES = ("auto", *DTYPES, "int8")  # int8: dynamic quantization of the Linear layers, CPU only


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX-BF16)."""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def resolve_placement(device: str, dtype: str) -> tuple[str, str]:
    """(device, dtype) as a model loads: an `auto` device is the GPU when torch sees one, else the CPU, and the dtype
    is resolve_dtype's there."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return device, resolve_dtype(dtype, device)


def resolve_dtype(dtype: str, device: str | torch.device) -> str:
    """`dtype` as a model loads it on `device`: `auto` is float16 on a GPU, bfloat16 on a CPU with native bfloat16
    and float32 on any other; an explicit choice stays, but float16 and int8 are refused where they cannot run."""
    if dtype not in CHOICES:
        raise ValueError(f"dtype must be one of {', '.join(CHOICES)}, got {dtype!r}")
    on_cpu = torch.device(device).type == "cpu"
    if dtype == "auto":
        return "float16" if not on_cpu else "bfloat16" if native_bfloat16() else "float32"
    if dtype == "float16" and on_cpu:
        raise ValueError("dtype float16 runs on a GPU only; on the CPU use bfloat16, float32 or int8")
    if dtype == "int8" and not on_cpu:
        raise ValueError("dtype int8 runs on the CPU only; on a GPU use float16 or bfloat16")
    return dtype
