"""Continuous batching vs one request at a time vs request-level batching, on the engine loop.

    python -m loadtests.bench_batching [--model DIR] [--clients 1,8,32,64] [--requests-per-client 6]

N concurrent clients each send requests back to back (demo number words, mixed lengths and languages) to
one engine loop; prints requests/s, output tokens/s and latency percentiles per mode as a markdown table.
Modes: continuous (requests join and leave the running batch between decoder steps), one-at-a-time
(a batch of one row) and request-level (like a batched `generate` call: a batch is admitted only when the
previous one has finished, a finished sequence keeps its row busy until the whole batch is done, and every
response of a batch returns when its last sequence is done).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import platform
import random
import statistics
import time

import torch
from num2words import num2words

from model import DecodeParams, Translator
from server.engine.engine import Engine
from server.engine.loop import EngineLoop
from server.metrics import EngineStats
from server.engine.sequence import FinalOutput
from server.engine.scheduler import Plan, Scheduler

LANGS = ("de", "fr", "es", "it")
FILLER_IDS = itertools.count()


class RequestLevelScheduler(Scheduler):
    """Baseline: admit a new batch only when the running one has completely finished; tag its requests."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = 0

    def schedule(self) -> Plan:
        if self.running and not self.to_cancel:
            return Plan()
        plan = super().schedule()
        if plan.admit:
            self.batches += 1
            for request in plan.admit:
                request.batch = (self.batches, len(plan.admit))
        return plan


class StaticBatchEngine(Engine):
    """Request-level batching as a batched generate call runs it: the batch keeps its size until its last
    sequence finishes; a finished sequence's row decodes a one-token filler in its place."""

    def execute(self, plan: Plan):
        if plan.admit:
            self.batch_rows = sum(r.rows for r in plan.admit)
        events = super().execute(plan)
        searches = self.decoder.searches
        fillers = [key for key in searches if isinstance(key, tuple)]
        if len(fillers) == len(searches):
            for key in fillers:
                self.decoder.cancel(key)
        elif self.rows_in_use < self.batch_rows:
            filler = DecodeParams(max_new_tokens=self.max_new_tokens, min_new_tokens=self.max_new_tokens)
            need = self.batch_rows - self.rows_in_use
            self.decoder.admit([(("filler", next(FILLER_IDS)), [0], filler) for _ in range(need)])
        return events


class BatchBarrier:
    """Holds each response of a request-level batch until the batch's last sequence has finished."""

    def __init__(self):
        self.finished: dict[int, int] = {}
        self.done: dict[int, asyncio.Event] = {}

    async def wait(self, request) -> None:
        batch_id, size = request.batch
        event = self.done.setdefault(batch_id, asyncio.Event())
        self.finished[batch_id] = self.finished.get(batch_id, 0) + 1
        if self.finished[batch_id] == size:
            event.set()
        await event.wait()


def demo_texts(count: int, seed: int) -> list[tuple[str, str]]:
    """(English number words of mixed magnitudes, target language) pairs for the demo model."""
    rng = random.Random(seed)
    texts = []
    for i in range(count):
        n = rng.choice([rng.randint(0, 99), rng.randint(100, 9_999), rng.randint(10_000, 999_999)])
        texts.append((num2words(n, lang="en"), LANGS[i % len(LANGS)]))
    return texts


def workload(translator: Translator, count: int, seed: int) -> list[list[int]]:
    return [translator.bundle.tokenizer.encode(text, target_lang=lang) for text, lang in demo_texts(count, seed)]


async def drive(loop: EngineLoop, sources: list[list[int]], clients: int, params) -> tuple[list[float], int]:
    queue = list(sources)
    latencies, tokens = [], 0
    barrier = BatchBarrier() if isinstance(loop.scheduler, RequestLevelScheduler) else None

    async def client():
        nonlocal tokens
        while queue:
            ids = queue.pop()
            start = time.perf_counter()
            (request, outputs), = loop.submit([(ids, params)])
            async for output in loop.outputs(request, outputs):
                if isinstance(output, FinalOutput):
                    tokens += len(output.hypotheses[0].token_ids)
            if barrier:
                await barrier.wait(request)
            latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, tokens


def run_mode(translator: Translator, mode: str, clients: int, sources, params) -> dict:
    rows = 1 if mode == "one-at-a-time" else max(clients * params.num_beams, params.num_beams)
    static = mode == "request-level"
    scheduler_cls = RequestLevelScheduler if static else Scheduler
    engine = (StaticBatchEngine if static else Engine)(translator.bundle.network, rows, max_input_tokens=64,
                                                      max_new_tokens=params.max_new_tokens)
    loop = EngineLoop(engine, scheduler_cls(rows, max_batch_tokens=8192, max_waiting=10_000),
                      EngineStats(mode)).start()
    try:
        start = time.perf_counter()
        latencies, tokens = asyncio.run(drive(loop, sources, clients, params))
        elapsed = time.perf_counter() - start
    finally:
        loop.stop()
    latencies.sort()

    def pct(p):
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return {"mode": mode, "clients": clients, "req_s": len(latencies) / elapsed, "tok_s": tokens / elapsed,
            "p50": statistics.median(latencies) * 1000, "p95": pct(0.95), "p99": pct(0.99)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_batching", description=__doc__.splitlines()[0])
    p.add_argument("--model", help="checkpoint directory (default: the embedded demo model)")
    p.add_argument("--clients", default="1,8,32,64")
    p.add_argument("--requests-per-client", type=int, default=16)
    p.add_argument("--beam-size", type=int, default=1)
    p.add_argument("--modes", default="continuous,request-level,one-at-a-time")
    args = p.parse_args(argv)
    translator = Translator.from_pretrained(args.model)
    params = translator.bundle.decode_params(num_beams=args.beam_size, max_new_tokens=64)
    translator.translate(["one"], target_lang="de")  # warm-up
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
          f"torch {torch.__version__}; model {translator.bundle.name}; beams {params.num_beams}\n")
    print("| clients | mode | requests/s | output tokens/s | p50 ms | p95 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|")
    for clients in map(int, args.clients.split(",")):
        sources = workload(translator, clients * args.requests_per_client, seed=clients)
        for mode in args.modes.split(","):
            r = run_mode(translator, mode, clients, sources, params)
            print(f"| {clients} | {mode} | {r['req_s']:.1f} | {r['tok_s']:.0f} | {r['p50']:.0f} | {r['p95']:.0f} "
                  f"| {r['p99']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
