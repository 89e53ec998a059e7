"""The host's share of a beam-search step: advance_beams for G searches of width 4 stepping together.

    python -m loadtests.bench_beam_search [--searches 8,32,64,128] [--steps 30] [--rounds 5]

On a GPU the decoder step of a few hundred rows takes a millisecond or two, and the beam searches choose on the
host between two steps: this is the time they take there, on random candidates (W = 8 per row, </s> among them
often, so that hypotheses finish and searches end), without the network. Each round runs every size from fresh
searches; the table gives the median step over rounds (the steps of one round: its median).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from model.decoding.search import BeamSearch, DecodeParams, advance_beams

BEAMS, CANDIDATES, EOS = 4, 8, 0


def step_times(searches: int, steps: int, seed: int) -> list[float]:
    """Seconds of each advance_beams call while the searches decode `steps` steps (or all end)."""
    generator = torch.Generator().manual_seed(seed)
    params = DecodeParams(max_new_tokens=steps, num_beams=BEAMS)
    live = [BeamSearch(params, EOS, 1, 20) for _ in range(searches)]
    seconds = []
    while live:
        rows = len(live) * BEAMS
        logprobs = torch.randn(rows, CANDIDATES, generator=generator).sort(-1, descending=True).values - 3
        tokens = torch.randint(0, 20, (rows, CANDIDATES), generator=generator)  # token 0 is </s>
        start = time.perf_counter()
        advance_beams(live, logprobs, tokens)
        seconds.append(time.perf_counter() - start)
        live = [s for s in live if not s.done]
    return seconds


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_beam_search", description=__doc__.splitlines()[0])
    p.add_argument("--searches", default="8,32,64,128", help="searches stepping together")
    p.add_argument("--steps", type=int, default=30, help="new tokens at most")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    sizes = [int(n) for n in args.searches.split(",")]
    medians = {n: [] for n in sizes}
    for round_ in range(args.rounds):
        for n in sizes:
            medians[n].append(statistics.median(step_times(n, args.steps, seed=round_)))
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} "
          f"threads; beam {BEAMS}, {CANDIDATES} candidates per row, up to {args.steps} steps, median of "
          f"{args.rounds} rounds\n")
    print("| searches | rows | ms per step | µs per search |")
    print("|---|---|---|---|")
    for n in sizes:
        ms = statistics.median(medians[n]) * 1000
        print(f"| {n} | {n * BEAMS} | {ms:.3f} | {ms * 1000 / n:.1f} |")


if __name__ == "__main__":
    main()
