"""The decoder step on the CPU: eager, traced (what the engine runs) and torch.compile, per number of rows.

    python -m loadtests.bench_step [--rows 1,8,32] [--target-capacity 64] [--steps 32]

On the opus-mt-en-de-shaped random checkpoint of loadtests.bench_engine, one decoder step over `rows` live rows
with a 24-token source, for target positions 0..steps-1 (median step time over the positions, best of 3 passes):

- eager: `decode_step` as the engine calls it, reading the cache up to the current target length, float32
  linears through oneDNN (model.kernels.cpu_kernels), its layers run from Python (`load(traced=False)`);
- eager, static shape: the same step reading the whole target capacity (masked beyond each row's position): what a
  static-shape (graph-capturable) step reads;
- traced: the eager step with its layers as a TorchScript trace (model.kernels.traced_step), as the engine runs it;
- compiled static / dynamic: `torch.compile` (inductor, weights frozen) of the static-shape step, and of the
  eager step with dynamic shapes. Inductor does not trace oneDNN's linear op, so compiled steps use nn.Linear and
  inductor's own matmul lowering; compile time is printed.

Prints a table of milliseconds per step and the ratio to eager (< 1 = faster than eager).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from loadtests.bench_engine import SOURCE_TOKENS, build_checkpoint, cpu_name
from model import load
from model.kernels.cpu_kernels import use_onednn_linears
from model.kernels.traced_step import trace_stacks


def median_step(step, rows: int, steps: int, passes: int = 3) -> float:
    """Best of `passes` medians of one step's seconds, feeding each step's argmax back as the next token."""
    best = float("inf")
    for _ in range(passes):
        tokens, times = torch.full((rows,), 5), []
        for position in range(steps):
            start = time.perf_counter()
            tokens = step(tokens, torch.full((rows,), position), position + 1).argmax(-1)
            times.append(time.perf_counter() - start)
        best = min(best, statistics.median(times))
    return best


def measure(path: Path, rows: int, capacity: int, steps: int) -> list[tuple[str, float, float | None]]:
    """(variant, seconds per step, compile seconds) for one row count."""
    import torch._inductor.config as inductor_config

    network = load(path, dtype="float32", traced=False).network.eval()
    cache = network.new_cache(rows, capacity, SOURCE_TOKENS)
    source_mask = torch.ones(rows, SOURCE_TOKENS, dtype=torch.bool)
    memory = network.encode(torch.randint(3, 1000, (rows, SOURCE_TOKENS)), source_mask)
    cache.write_source(0, *network.cross_kv(memory), source_mask)

    def eager(tokens, positions, target_len):
        return network.decode_step(cache, tokens, positions, target_len, SOURCE_TOKENS)[0]

    def static(tokens, positions, target_len):
        return network.decode_step(cache, tokens, positions, capacity, SOURCE_TOKENS)[0]

    results = [("eager", median_step(eager, rows, steps), None),
               ("eager, static shape", median_step(static, rows, steps), None)]
    trace_stacks(network)
    results.append(("traced", median_step(eager, rows, steps), None))
    network.traced = None  # the traces hold the oneDNN weights, switched back to nn.Linear's for inductor below
    use_onednn_linears(network, False)
    inductor_config.freezing = True
    for name, fn, dynamic in (("compiled static", static, False), ("compiled dynamic", eager, True)):
        torch._dynamo.reset()
        compiled = torch.compile(fn, dynamic=dynamic)
        start = time.perf_counter()
        median_step(compiled, rows, 2, passes=1)  # compiles
        results.append((name, median_step(compiled, rows, steps), time.perf_counter() - start))
    return results


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_step", description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="1,8,32", help="live rows per step, comma-separated")
    p.add_argument("--target-capacity", type=int, default=64, help="target positions the static step reads")
    p.add_argument("--steps", type=int, default=32, help="target positions timed (at most the capacity)")
    p.add_argument("--out", default="runs/bench", help="where the random checkpoint is built (bench_engine's, reused)")
    args = p.parse_args(argv)
    if args.steps > args.target_capacity:
        p.error("--steps must be at most --target-capacity")
    path = build_checkpoint(Path(args.out) / "opus-mt-en-de-shape")
    print(f"{cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"target capacity {args.target_capacity}, {args.steps} steps, source {SOURCE_TOKENS} tokens")
    print("| rows | variant | ms per step | ÷ eager | compile s |\n|---|---|---|---|---|")
    with torch.no_grad():  # inductor freezes weights under no_grad (not inference_mode)
        for rows in (int(r) for r in args.rows.split(",")):
            results = measure(path, rows, args.target_capacity, args.steps)
            eager = results[0][1]
            for name, seconds, compile_seconds in results:
                compiled = "" if compile_seconds is None else f"{compile_seconds:.1f}"
                print(f"| {rows} | {name} | {seconds * 1e3:.2f} | {seconds / eager:.2f} | {compiled} |", flush=True)


if __name__ == "__main__":
    main()
