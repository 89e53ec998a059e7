"""One Linear layer in float32 (oneDNN on its packed weight, as the engine runs it) against int8 (model.kernels.quantize's
Int8Linear: ours or oneDNN's, whichever this process runs), at the product shapes of a decoder step and an encoder pass.

    python -m loadtests.bench_linear [--shapes 1x512x58101,8x512x2048,...] [--repeats 5]

Prints a markdown table: µs per call, best of `--repeats`, the two formats taking turns within each repeat (this
machine's speed drifts within minutes), and float32 ÷ int8.
"""

from __future__ import annotations

import argparse
import time

import torch

from model import instruction_sets
from model.kernels.cpu_kernels import use_onednn_linears
from model.kernels.int8_native import int8_products
from model.kernels.quantize import quantize_in_blocks

SHAPES = "1x512x58101,8x512x58101,1x512x2048,8x512x2048,8x2048x512,32x512x2048,128x512x2048,192x512x512"


def seconds_per_call(call, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=SHAPES, help="rows x in_features x out_features, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"kernels: {instruction_sets()}, int8 products {int8_products()}, {torch.get_num_threads()} threads\n")
    print("| rows × in → out | float32 µs | int8 µs | float32 ÷ int8 |\n|---|---|---|---|")
    generator = torch.Generator().manual_seed(0)
    for shape in args.shapes.split(","):
        rows, d_in, d_out = map(int, shape.split("x"))
        linear = torch.nn.Linear(d_in, d_out).requires_grad_(False)
        x = torch.randn(rows, d_in, generator=generator)
        layers = {"int8": quantize_in_blocks(linear), "float32": use_onednn_linears(linear)}
        calls = max(3, int(2e8 / (rows * d_in * d_out + 1e6)))  # about 0.1-1 s per repeat
        best = dict.fromkeys(layers, float("inf"))
        with torch.inference_mode():
            for _ in range(args.repeats):
                for name, layer in layers.items():
                    layer(x)  # warm
                    best[name] = min(best[name], seconds_per_call(lambda: layer(x), calls))
        print(f"| {rows} × {d_in:,} → {d_out:,} | {best['float32'] * 1e6:,.0f} | {best['int8'] * 1e6:,.0f} | "
              f"{best['float32'] / best['int8']:.2f} |")


if __name__ == "__main__":
    main()
