"""What the key check costs a request: Keys.caller + admit + spending (the charge) on the SQLite key store, as a
keyed server does per work request, one process or several sharing the file (workers, replicas of a node).

    python -m loadtests.bench_keys --requests 20000 --processes 1,2
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from server.api.keys import Keys
from server.keystore import KeyStore
from server.settings import Settings


def per_request_us(path: str, key: str, requests: int) -> float:
    """Microseconds per request of one process's Keys over the store at `path`."""
    keys = Keys(Settings(rate_limit_per_minute=10**9, character_quota=10**12), KeyStore(path))
    start = time.perf_counter()
    for _ in range(requests):
        caller = keys.caller(key, "127.0.0.1")
        keys.admit(caller)
        with keys.spending(caller, 42):
            pass
    return (time.perf_counter() - start) / requests * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--processes", default="1,2", help="processes sharing the store, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "keys.sqlite")
        key = KeyStore(path).add("bench")
        for processes in map(int, args.processes.split(",")):
            rounds = []
            for _ in range(args.rounds):
                with ProcessPoolExecutor(processes) as pool:
                    rounds.append(max(pool.map(per_request_us, [path] * processes, [key] * processes,
                                               [args.requests] * processes)))
            print(f"{processes} process(es) sharing the store: {statistics.median(rounds):.1f} µs per request "
                  f"(median of {args.rounds} rounds; the slowest process's mean)")


if __name__ == "__main__":
    main()
