"""Run by tests/model/test_instruction_sets.py in a process whose instruction sets are capped (ONEDNN_MAX_CPU_ISA,
ATEN_CPU_CAPABILITY), with ONEDNN_VERBOSE=1 so that every oneDNN primitive names its kernel: each number format the
process can run, its products row by row (alone and inside M rows) and the demo model's decodings (alone and in a
running batch, greedy and beam 4 with n-best). It prints a JSON summary on a line of its own."""

import json
import sys

import torch
from batch_decoding import assert_rows_invariant, decodings, differences, linear

from model import instruction_sets, load, resolve_dtype
from model.demo.data import LANGUAGES, held_out_numbers, source_text
from model.kernels import isa
from model.kernels.int8_native import int8_products

SHAPES = ((512, 2048), (2048, 512))  # the product shapes of a d_model 512 model (opus-mt), both directions


def check(dtype: str) -> list[str]:
    failures = []
    for d_in, d_out in SHAPES:
        layer = linear(dtype, d_in, d_out)
        rows = torch.randn(40, d_in, generator=torch.Generator().manual_seed(d_in))
        try:
            with torch.inference_mode():
                assert_rows_invariant(layer, rows if dtype == "int8" else rows.to(getattr(torch, dtype)))
        except AssertionError as e:
            failures.append(f"{dtype} {d_in}→{d_out}: {e}")
    # the demo model (English number words into four languages), its layers eager: the same kernels as traced
    # (test_traced), without a trace's warm-up at every new shape
    bundle = load(None, dtype=dtype, traced=False)
    ids = [bundle.source(source_text(n, lang)).ids for n, lang in zip(held_out_numbers(4), LANGUAGES)]
    for mode, params in decodings(6).items():
        if mode != "sampling":
            failures += [f"{dtype} {mode}: source {i} differs" for i in differences(bundle.network, ids, params)]
    return failures


def main() -> None:
    formats = ["float32", "int8"] + (["bfloat16"] if isa.bfloat16_packs() else [])
    failures = [failure for dtype in formats for failure in check(dtype)]
    print(json.dumps({"isa": isa.onednn_isa(), "instruction_sets": instruction_sets(), "formats": formats,
                      "auto": resolve_dtype("auto", "cpu"), "int8_limit": isa.int8_activation_range(),
                      "int8_products": int8_products(),
                      "failures": failures}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
