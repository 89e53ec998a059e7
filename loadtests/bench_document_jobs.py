"""A document job beside interactive clients, through a real server (python -m loadtests.bench_document_jobs): the p95
latency of `--clients` clients sending one short text each in a loop for `--seconds`, without and then with a
`--sentences`-sentence .txt document job translating (submitted to /v1/documents), and the job's progress at the end."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import httpx

from .server import served


async def p95(url: str, clients: int, seconds: float) -> tuple[float, int]:
    """The 95th percentile latency in seconds, and the requests answered."""
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=60) as client:
        async def loop():
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                start = time.monotonic()
                response = await client.post(url + "/v1/translate", json={"text": "forty-two", "target_lang": "de"})
                response.raise_for_status()
                latencies.append(time.monotonic() - start)

        await asyncio.gather(*(loop() for _ in range(clients)))
    latencies.sort()
    return latencies[int(0.95 * len(latencies))], len(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="http://127.0.0.1:8013")
    parser.add_argument("--server-args", default="--no-ray --max-body-bytes 2000000")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--sentences", type=int, default=3000)
    args = parser.parse_args()
    with served(args.host, args.server_args, Path("loadtests/out/bench_document_jobs.log")):
        asyncio.run(p95(args.host, args.clients, 3))  # warm-up
        alone, answered_alone = asyncio.run(p95(args.host, args.clients, args.seconds))
        text = "\n\n".join(["seven hundred and forty-two. nine."] * (args.sentences // 2))
        handle = httpx.post(args.host + "/v1/documents", files={"file": ("long.txt", text.encode())},
                            data={"target_lang": "de"}).raise_for_status().json()
        beside, answered_beside = asyncio.run(p95(args.host, args.clients, args.seconds))
        job = httpx.get(f"{args.host}/v1/documents/{handle['document_id']}",
                        headers={"X-Document-Key": handle["document_key"]}).json()
    print(f"{args.clients} clients, p95 alone {alone * 1000:.0f} ms ({answered_alone} requests), beside the job "
          f"{beside * 1000:.0f} ms ({answered_beside} requests): ratio {beside / alone:.2f}; the job "
          f"{job['status']}, {job['progress']:.0%} done")


if __name__ == "__main__":
    main()
