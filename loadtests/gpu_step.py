"""The one-row decoder step on a GPU against its kernels: how much of a step is launch and host work.

    python -m loadtests.gpu_step [--dtype float16] [--steps 50]

On the opus-mt-en-de- and NLLB-600M-shaped random checkpoints of loadtests.bench_engine (decoder of 128 rows, so
CUDA graphs for 64 and 128 rows), one live greedy row:

- kernels: the device time of the kernels of one eager step over the 64-row bucket (torch.profiler), and how many;
- replay: that bucket's captured CUDA graph, replayed (ms, median);
- step: BatchDecoder.step() for the one search: the replay, the log-softmax and the search's host work (ms, median).

The targets (the GPU issue): replay within 1.5× the kernels, the step within 1.2× the replay. `--device cpu`
walks the script without graphs or a profiler (a check of the script, not a measurement).
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

import torch

from loadtests.bench_engine import build_checkpoint, build_nllb_checkpoint
from loadtests.gpu_invariance import timed_ms
from model import BatchDecoder, DecodeParams, load


def kernel_time(fn, runs: int) -> tuple[float, float]:
    """fn's kernels on the device: ms per call and kernels per call, summed over `runs` profiled calls."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in profile.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.time_range.elapsed_us() for e in kernels) / 1e3 / runs, len(kernels) / runs


def measure(name: str, path: Path, device: str, dtype: str, runs: int) -> str:
    network = load(path, device=device, dtype=dtype, traced=False).network
    tokens = runs + 16  # the timed steps and their warm-up, with room
    decoder = BatchDecoder(network, capacity=128, max_source_len=64, max_new_tokens=tokens, static_shapes=True)
    step = decoder.static_step
    rows = step.buckets[0]
    eos = network.config.eos_token_id
    # a search that cannot end early: its source long, the end token forbidden until the last step
    decoder.admit([("one", list(range(5, 29)) + [eos], DecodeParams(max_new_tokens=tokens, min_new_tokens=tokens))])
    with torch.inference_mode():
        step_ms = timed_ms(decoder.step, device, runs)
        eager = partial(step._forward, rows)
        if device == "cuda":
            replay_ms = timed_ms(step.graphs[rows][0].replay, device, runs)
            kernels_ms, kernels = kernel_time(eager, runs)
        else:
            replay_ms, (kernels_ms, kernels) = timed_ms(eager, device, runs), (float("nan"), float("nan"))
    line = (f"| {name} | {dtype} | {rows} | {kernels:.0f} | {kernels_ms:.3f} | {replay_ms:.3f} | "
            f"{replay_ms / kernels_ms:.2f} | {step_ms:.3f} | {step_ms / replay_ms:.2f} |")
    print(line, flush=True)
    return line


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtests.gpu_step", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--steps", type=int, default=50, help="steps timed (median)")
    p.add_argument("--out", default="runs/bench", help="where the random checkpoints are built (bench_engine's)")
    args = p.parse_args(argv)
    out = Path(args.out)
    shapes = [("opus-mt-en-de", build_checkpoint(out / "opus-mt-en-de-shape", None if args.device == "cuda" else
                                                 {"d_model": 64, "encoder_layers": 1, "decoder_layers": 1,
                                                  "encoder_ffn_dim": 128, "decoder_ffn_dim": 128}))]
    if args.device == "cuda":
        shapes.append(("NLLB-600M", build_nllb_checkpoint(out / "nllb-600m-shape")))
    lines = [("| model | dtype | bucket rows | kernels | kernels ms | replay ms | replay / kernels | step ms | "
              "step / replay |"), "|---|---|---|---|---|---|---|---|---|"]
    lines += [measure(name, path, args.device, args.dtype, args.steps) for name, path in shapes]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
