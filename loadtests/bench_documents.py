"""Documents: a 2,000-sentence document through the server's service vs Translator.translate on the same sentences
in one call; p95 latency of 8 interactive clients with and without a document running; peak RSS for a 1 MB text
cut into sentences. In process, the demo model (python -m loadtests.bench_documents)."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import statistics
import time

from num2words import num2words

from model import Translator, prepare
from server.dispatch import translate
from server.domain import TranslationJob
from server.local import LocalModels, set_engine_threads
from server.registry import ModelRegistry
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


async def run(args) -> list[tuple[str, str]]:
    said = sentences(args.sentences)
    document = "\n".join(" ".join(said[i:i + 5]) for i in range(0, len(said), 5))
    settings = Settings(max_batch_rows=64, max_document_chars=len(document) + 1, request_timeout_s=600)
    translator = Translator.from_pretrained()
    translator.translate(said[:64], target_lang="de", batch_size=64)  # warm-up
    start = time.monotonic()
    translator.translate(said, target_lang="de", batch_size=64)
    direct = len(said) / (time.monotonic() - start)
    set_engine_threads(len(os.sched_getaffinity(0)), settings)  # as python -m server sets them
    models = LocalModels(settings, ModelRegistry.from_paths(None))
    job = TranslationJob(texts=(document,), fields=("text",), source_lang="en", target_lang="de")
    start = time.monotonic()
    await translate(models, job)
    served = len(said) / (time.monotonic() - start)
    quiet = await interactive(models, 8, args.seconds)
    running = asyncio.ensure_future(translate(models, job))
    await asyncio.sleep(0.5)
    busy = await interactive(models, 8, args.seconds)
    await running
    models.close()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    megabyte = "\n".join(" ".join(sentences(5, seed=i)) for i in range(8_000))[:1_000_000]
    units = len(prepare(megabyte, "en").units)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return [("document sentences/s (server)", f"{served:.0f}"), ("Translator.translate sentences/s", f"{direct:.0f}"),
            ("server / Translator", f"{served / direct:.0%}"),
            ("interactive p95 ms, no document", f"{p95(quiet):.0f}"),
            ("interactive p95 ms, document running", f"{p95(busy):.0f}"), ("p95 ratio", f"{p95(busy) / p95(quiet):.2f}"),
            ("1 MB text: units", str(units)), ("peak RSS MB before / after cutting 1 MB", f"{before / 1024:.0f} / "
                                                                                   f"{after / 1024:.0f}")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    rows = asyncio.run(run(parser.parse_args()))
    print("| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
