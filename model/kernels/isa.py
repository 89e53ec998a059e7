"""Which x86 instruction sets oneDNN may use in this process: the CPU's, capped by ONEDNN_MAX_CPU_ISA.

The number formats hang on it, not on the CPU alone (a cap makes one machine run another's code paths, and a
hypervisor may hide what the CPU has):
- bfloat16 weights pack for oneDNN only with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT; bfloat16 products are native
  from AVX512-BF16 on, and fast enough to beat float32 under load only with AMX (loadtests/README.md, "Number
  formats per instruction set").
- int8 sums are exact in one instruction with VNNI. Without it oneDNN adds pairs of u8 × s8 products in 16 bits,
  which saturate unless the activations keep to 7 bits (`int8_activation_range`).
oneDNN reads the cap once, from the environment, when torch first calls it; this reads the same variable, so the
choice follows the kernels the process will get.
"""

from __future__ import annotations

import os
from functools import lru_cache

import torch

# oneDNN's instruction-set ladder (its cpu_isa_t order), each rung a superset of the ones before for what we use.
LADDER = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI", "AVX512_CORE_BF16",
          "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16")
_ALIASES = {"AVX10_1_512": "AVX512_CORE_FP16", "AVX10_1_512_AMX": "AVX512_CORE_AMX",
            "AVX10_1_512_AMX_FP16": "AVX512_CORE_AMX_FP16"}
_VNNI_RUNGS = {"AVX2_VNNI", "AVX2_VNNI_2"}  # below AVX512_CORE on the ladder, but with VNNI's exact int8 sums
_CORE = ("avx512_f", "avx512_bw", "avx512_vl", "avx512_dq")
_NEEDS = (("AVX512_CORE_AMX", _CORE + ("amx_tile", "amx_int8", "amx_bf16")),  # the CPU flags of each rung
          ("AVX512_CORE_FP16", _CORE + ("avx512_vnni", "avx512_bf16", "avx512_fp16")),
          ("AVX512_CORE_BF16", _CORE + ("avx512_vnni", "avx512_bf16")), ("AVX512_CORE_VNNI", _CORE + ("avx512_vnni",)),
          ("AVX512_CORE", _CORE), ("AVX2_VNNI", ("avx2", "avx_vnni")), ("AVX2", ("avx2",)), ("AVX", ("avx",)))


def cpu_isa() -> str:
    """The highest rung this CPU has, by its flags."""
    flags = torch.cpu.get_capabilities()
    for rung, needs in _NEEDS:
        if all(flags.get(name, False) for name in needs):
            return rung
    return "SSE41"


def isa_cap() -> str | None:
    """The rung ONEDNN_MAX_CPU_ISA (or its older name DNNL_MAX_CPU_ISA) caps oneDNN at; None when unset or ALL."""
    value = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    value = _ALIASES.get(value, value)
    if value in ("", "ALL", "DEFAULT"):
        return None
    if value not in LADDER:
        return LADDER[-1] if "AMX" in value or value.startswith("AVX10") else None  # a newer rung: above ours
    return value


@lru_cache(maxsize=1)
def onednn_isa() -> str:
    """The rung oneDNN may use in this process: the CPU's, or the cap where that is lower."""
    rung, cap = cpu_isa(), isa_cap()
    return rung if cap is None else min(rung, cap, key=LADDER.index)


def at_least(rung: str) -> bool:
    return LADDER.index(onednn_isa()) >= LADDER.index(rung)


def bfloat16_packs() -> bool:
    """Whether oneDNN can pack bfloat16 weights here (torch refuses the packing below AVX512_CORE)."""
    return at_least("AVX512_CORE") or onednn_isa() == "AVX2_VNNI_2"


def native_bfloat16() -> bool:
    """Whether oneDNN multiplies bfloat16 in hardware here (AVX512-BF16 or AMX)."""
    return at_least("AVX512_CORE_BF16")


def int8_activation_range() -> int:
    """The largest magnitude an int8 activation may take so that oneDNN's int32 sums are exact: 127 with VNNI (or
    AMX); 64 without, where the kernel adds two u8 × s8 products in 16 bits (activations shifted to 1..129 times
    weights of at most 127, twice, stay within 32,767)."""
    return 127 if at_least("AVX512_CORE_VNNI") or onednn_isa() in _VNNI_RUNGS else 64


def instruction_sets() -> str:
    """One line for logs and /v1/models: the rung oneDNN may use (and the CPU's, where a cap lowers it) and ATen's."""
    rung, cpu = onednn_isa(), cpu_isa()
    capped = f" (capped from {cpu.lower()})" if rung != cpu else ""
    return f"oneDNN {rung.lower()}{capped}, ATen {torch.backends.cpu.get_cpu_capability().lower()}"
