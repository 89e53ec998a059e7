"""Documents: a 2,000-sentence document through the server's service vs Translator.translate on the same sentences
in one call; p95 latency of 8 interactive clients with and without a document running; peak RSS for a 1 MB text
cut into sentences. In process, the demo model, settings from SERVER_* variables (python -m
loadtests.bench_documents)."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import statistics
import time

import torch
from num2words import num2words

from model import Translator, prepare
from server.front.dispatch import translate
from server.domain import TranslationJob
from server.runtime.local import LocalModels
from server.runtime.process import set_engine_threads
from server.front.registry import ModelRegistry
from server.settings import Settings


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [num2words(rng.randint(0, 999_999)) + "." for _ in range(n)]


async def interactive(models, clients: int, seconds: float) -> list[float]:
    latencies, stop = [], time.monotonic() + seconds

    async def client(i: int):
        rng = random.Random(i)
        while time.monotonic() < stop:
            job = TranslationJob(texts=(num2words(rng.randint(0, 9999)),), fields=("text",), source_lang="en",
                                 target_lang="de")
            start = time.monotonic()
            await translate(models, job)
            latencies.append(time.monotonic() - start)

    await asyncio.gather(*(client(i) for i in range(clients)))
    return latencies


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[18] * 1000


async def run(args) -> list[tuple[str, list[str]]]:
    """Rounds of: Translator.translate on the sentences, the same sentences as one document through the service,
    8 interactive clients alone, then beside the document; side by side, so a slow spell of the machine hits
    both sides of a ratio."""
    said = sentences(args.sentences)
    document = "\n".join(" ".join(said[i:i + 5]) for i in range(0, len(said), 5))
    settings = Settings.from_env(max_batch_rows=64, max_document_chars=len(document) + 1,
                                 max_request_chars=len(document) + 1, max_request_units=2 * len(said),
                                 request_timeout_s=600)
    translator = Translator.from_pretrained()
    default_threads = torch.get_num_threads()
    engine_threads = set_engine_threads(len(os.sched_getaffinity(0)), settings)  # as python -m server sets them
    models = LocalModels(settings, ModelRegistry.from_paths(None))
    job = TranslationJob(texts=(document,), fields=("text",), source_lang="en", target_lang="de")
    warm_up = TranslationJob(texts=(" ".join(said[:64]),), fields=("text",), source_lang="en", target_lang="de")
    await translate(models, warm_up)

    def direct_rate(texts: list[str]) -> float:
        """Translator.translate at torch's default threads; then the server's setting again (OpenMP's count is
        per thread, MKL's is not: the service is measured at the setting it runs with)."""
        torch.set_num_threads(default_threads)
        start = time.monotonic()
        translator.translate(texts, target_lang="de", batch_size=64)
        rate = len(texts) / (time.monotonic() - start)
        torch.set_num_threads(engine_threads)
        return rate

    direct_rate(said[:64])  # warm-up
    rows: dict[str, list[float]] = {name: [] for name in ROWS}
    for _ in range(args.rounds):
        direct = direct_rate(said)
        start = time.monotonic()
        await translate(models, job)
        served = len(said) / (time.monotonic() - start)
        quiet = p95(await interactive(models, 8, args.seconds))
        running = asyncio.ensure_future(translate(models, job))
        await asyncio.sleep(0.5)
        busy = p95(await interactive(models, 8, args.seconds))
        await running
        for name, value in zip(ROWS, (served, direct, served / direct, quiet, busy, busy / quiet)):
            rows[name].append(value)
    models.close()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    megabyte = "\n".join(" ".join(sentences(5, seed=i)) for i in range(8_000))[:1_000_000]
    units = len(prepare(megabyte, "en").units)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    table = [(name, [FORMATS[name].format(v) for v in values] + [FORMATS[name].format(statistics.median(values))])
             for name, values in rows.items()]
    return table + [("1 MB text: units", [str(units)]),
                    ("peak RSS MB before / after cutting 1 MB", [f"{before / 1024:.0f} / {after / 1024:.0f}"])]


ROWS = ("document sentences/s (server)", "Translator.translate sentences/s", "server / Translator",
        "interactive p95 ms, no document", "interactive p95 ms, document running", "p95 ratio")
FORMATS = dict(zip(ROWS, ("{:.0f}", "{:.0f}", "{:.0%}", "{:.0f}", "{:.0f}", "{:.2f}")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0, help="interactive clients' time per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = asyncio.run(run(args))
    print("| measure | " + " | ".join(f"round {i + 1}" for i in range(args.rounds)) + " | median |")
    print("|---" * (args.rounds + 2) + "|")
    for name, values in rows:
        print(f"| {name} | " + " | ".join(values) + " |")


if __name__ == "__main__":
    main()
