"""A whole command-line run against transformers' whole run of the same work, start-up and loading included.

    python -m loadtests.bench_cli [--lines 128] [--rounds 3] [--out runs/bench]

On bench_engine's random opus-mt-en-de-shaped checkpoint: `python -m model` translating --lines lines (22 words
each) greedy, batch 32, 32 new tokens per line, in float32 and with its default `--dtype auto` (bfloat16 on a CPU
with native bfloat16, else float32 again), against a fresh Python process that imports transformers, loads
MarianTokenizer and MarianMTModel and runs `generate` on the same lines in batches of 32 with the same settings.
Each is a new process timed from start to exit; the runs take turns, `--rounds` times. Prints a markdown table of
the seconds of each round, the medians, the ratios and how many output lines agree with transformers'.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from model import resolve_dtype

from .bench_engine import NEW_TOKENS, build_checkpoint, cpu_name

BATCH = 32
TRANSFORMERS_RUN = """
import sys
import torch
from transformers import MarianMTModel, MarianTokenizer
path, source, output, batch, new_tokens = sys.argv[1:6]
tokenizer = MarianTokenizer.from_pretrained(path)
model = MarianMTModel.from_pretrained(path, dtype=torch.float32).eval()
lines = open(source, encoding="utf-8").read().splitlines()
out = []
with torch.inference_mode():
    for start in range(0, len(lines), int(batch)):
        inputs = tokenizer(lines[start:start + int(batch)], return_tensors="pt", padding=True)
        ids = model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=int(new_tokens))
        out += tokenizer.batch_decode(ids, skip_special_tokens=True)
open(output, "w", encoding="utf-8").write("\\n".join(out) + "\\n")
"""


def commands(path: Path, source: Path, out: Path) -> dict[str, list[str]]:
    """name → command; each writes its translations to out / f"{name}.txt"."""
    ours = [sys.executable, "-m", "model", "--model", str(path), "--input", str(source), "--beam-size", "1",
            "--max-new-tokens", str(NEW_TOKENS), "--batch-size", str(BATCH)]
    return {
        "ours float32": ours + ["--dtype", "float32", "--output", str(out / "ours float32.txt")],
        f"ours auto ({resolve_dtype('auto', 'cpu')})": ours + ["--output", str(out / "ours auto.txt")],
        "transformers": [sys.executable, "-c", TRANSFORMERS_RUN, str(path), str(source),
                         str(out / "transformers.txt"), str(BATCH), str(NEW_TOKENS)],
    }


def timed_run(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_cli", description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default="runs/bench", help="where the checkpoint (bench_engine's) and outputs go")
    args = p.parse_args(argv)
    out = Path(args.out)
    path = build_checkpoint(out / "opus-mt-en-de-shape")
    rng = random.Random(0)
    source = out / "cli-lines.txt"
    source.write_text("\n".join(" ".join(rng.choice("abcdefgh") for _ in range(22)) for _ in range(args.lines))
                      + "\n", encoding="utf-8")
    runs = commands(path, source, out)
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(args.rounds):
        for name in (list(runs) if i % 2 == 0 else list(runs)[::-1]):  # the order reversed every other round
            seconds[name].append(timed_run(runs[name]))
    print(f"machine: {cpu_name()}; opus-mt-en-de shape, {args.lines} lines of 22 words, greedy, batch {BATCH}, "
          f"{NEW_TOKENS} new tokens per line; each run a new process (imports, loading, translating, writing); "
          f"the runs take turns, {args.rounds} rounds\n")
    print("| run | " + " | ".join(f"round {i + 1} s" for i in range(args.rounds)) + " | median s |")
    print("|---|" + "---|" * (args.rounds + 1))
    for name, times in seconds.items():
        print(f"| {name} | " + " | ".join(f"{t:.1f}" for t in times) + f" | {statistics.median(times):.1f} |")
    theirs = (out / "transformers.txt").read_text(encoding="utf-8").splitlines()
    for name in [n for n in runs if n != "transformers"]:
        ratios = [t / o for t, o in zip(seconds["transformers"], seconds[name])]
        ours = runs[name][-1]
        same = sum(a == b for a, b in zip(Path(ours).read_text(encoding="utf-8").splitlines(), theirs))
        print(f"\ntransformers ÷ {name}: {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}–"
              f"{max(ratios):.2f}); output lines equal to transformers': {same}/{len(theirs)}")


if __name__ == "__main__":
    main()
