"""The code paths of the CPUs users have, on this one: one process per oneDNN instruction-set cap (and ATen's),
each running tests/kernel_probe.py. Under every cap no product takes a reference kernel, every number format the
process can run keeps a row's numbers whatever its batch, `auto` picks a format that runs there, and a format that
cannot run is refused with one line. Caps above this CPU change nothing; they still run."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from model.kernels import int8_native
from model.kernels.isa import LADDER, cpu_isa

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# oneDNN's cap → ATen's (its own vectorised kernels), as a CPU of that kind would have them.
# (AVX512_CORE_VNNI runs the int8 kernel of AVX512_CORE_BF16 and the bfloat16 one of AVX512_CORE: both covered.)
CAPS = {"AVX2": "avx2", "AVX512_CORE": "avx512", "AVX512_CORE_BF16": "avx512", "DEFAULT": None}
IMPLEMENTATION = re.compile(r"^onednn_verbose,(?:v1,)?(?:primitive,)?exec,cpu,(\w+),([^,]+),")


def run_capped(cap: str, args: list[str], verbose: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": cap, "ONEDNN_VERBOSE": "1" if verbose else "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    env.pop("ATEN_CPU_CAPABILITY", None)
    if CAPS.get(cap) and within_this_cpu(cap):  # ATen runs the kernels it is told to: above the CPU, SIGILL
        env["ATEN_CPU_CAPABILITY"] = CAPS[cap]
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def within_this_cpu(cap: str) -> bool:
    return LADDER.index(cap) <= LADDER.index(cpu_isa())


def implementations(verbose_output: str) -> set[str]:
    """(primitive, implementation) of every primitive oneDNN executed, as ONEDNN_VERBOSE names them."""
    return {f"{m[1]},{m[2]}" for m in map(IMPLEMENTATION.match, verbose_output.splitlines()) if m}


@pytest.fixture(scope="module", params=list(CAPS))
def probed(request):
    done = run_capped(request.param, ["tests/kernel_probe.py"])
    assert done.returncode == 0, done.stderr[-3000:]
    summary = next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{"))  # among oneDNN's
    return request.param, json.loads(summary), implementations(done.stdout)


def test_no_product_takes_a_reference_kernel(probed):
    cap, summary, kernels = probed
    assert any(k.startswith(("matmul", "inner_product")) for k in kernels), (cap, kernels)
    assert not [k for k in kernels if "ref" in k.split(",")[1]], (cap, summary["isa"], kernels)


def test_every_format_keeps_a_rows_numbers_whatever_its_batch(probed):
    cap, summary, _ = probed
    assert summary["failures"] == [], (cap, summary)
    assert "int8" in summary["formats"] and "float32" in summary["formats"]


def test_int8_runs_our_kernel_where_the_cap_has_no_vnni(probed):
    """Below VNNI oneDNN's u8 × s8 kernel is slow at a few rows (model.kernels.int8_native): ours runs there, and
    oneDNN's where one instruction sums int8 products exactly."""
    cap, summary, _ = probed
    expected = int8_native.OWN if summary["int8_limit"] <= int8_native.LIMIT else int8_native.ONEDNN
    assert summary["int8_products"] == expected, (cap, summary)


def test_auto_picks_a_format_that_runs_under_the_cap(probed):
    cap, summary, _ = probed
    assert summary["auto"] in summary["formats"]
    assert summary["auto"] == ("bfloat16" if summary["isa"].startswith("AVX512_CORE_AMX") else "float32"), summary
    assert summary["isa"] == (cpu_isa() if cap == "DEFAULT" else min(cap, cpu_isa(), key=LADDER.index)), summary


def test_a_format_the_cap_cannot_run_is_refused_in_one_line():
    done = run_capped("AVX2", ["-m", "model", "--dtype", "bfloat16"], verbose=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "bfloat16 needs AVX-512" in done.stderr and "avx2" in done.stderr
    auto = run_capped("AVX2", ["-m", "model"], verbose=False)
    assert auto.returncode == 0 and "dtype: float32" in auto.stderr, auto.stderr


NEGATIVE_CONTROL = """
import torch
w = torch.full((64, 512), 127, dtype=torch.int8)
x = torch.full((2, 512), {value}, dtype=torch.{dtype})
y = torch.ops.onednn.qlinear_pointwise(x, 1.0, {zero_point}, torch.ops.onednn.qlinear_prepack(w, None), torch.ones(64),
                                       torch.zeros(64, dtype=torch.long), None, 1.0, 0, torch.float32, "none", [], "")
print(int(y[0, 0]) == ({value} - {zero_point}) * 127 * 512)
"""


@pytest.mark.skipif(not within_this_cpu("AVX512_CORE_BF16"), reason=f"{cpu_isa()}: gemm:jit multiplies s8 × s8")
def test_the_check_sees_a_reference_kernel():
    """Negative control: s8 × s8 (what Int8Linear sent before) takes the reference kernel from AVX-512 up to
    below AMX (on AVX2 it takes a JIT kernel)."""
    s8 = run_capped("AVX512_CORE_BF16", ["-c", NEGATIVE_CONTROL.format(value=100, dtype="int8", zero_point=0)])
    assert any("ref" in k for k in implementations(s8.stdout)), s8.stdout[-2000:]


def test_the_check_sees_a_saturated_sum():
    """Negative control: activations of the full 8-bit range saturate oneDNN's sums below VNNI; Int8Linear's 7 bits
    there do not."""
    full = run_capped("AVX2", ["-c", NEGATIVE_CONTROL.format(value=255, dtype="uint8", zero_point=128)], verbose=False)
    seven_bits = run_capped("AVX2", ["-c", NEGATIVE_CONTROL.format(value=128, dtype="uint8", zero_point=64)],
                            verbose=False)
    assert (full.stdout.split(), seven_bits.stdout.split()) == (["False"], ["True"]), (full.stderr, seven_bits.stderr)
