"""What the key check costs a request: Keys.caller + admit + spending (the charge) on the SQLite key store, as a
keyed server does per work request, one process or several sharing the file (workers, replicas of a node), and
with --cluster from a Ray task on the worker node of a two-node loopback cluster, through the head node's key
store actor (runtime.head_store), as a replica off the head node checks keys.

    python -m loadtests.bench_keys --requests 20000 --processes 1,2 [--cluster]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from server.front.access import Keys
from server.key_store import KeyStore
from server.settings import Settings


def per_request_us(path: str, key: str, requests: int) -> float:
    """Microseconds per request of one process's Keys over the store file at `path`."""
    return checks_us(KeyStore(path), key, requests)


def checks_us(store, key: str, requests: int) -> float:
    keys = Keys(Settings(rate_limit_per_minute=10**9, character_quota=10**12), store)

    async def checks() -> float:
        start = time.perf_counter()
        for _ in range(requests):
            caller = keys.caller(key, "127.0.0.1")
            await keys.admit(caller)
            async with keys.spending(caller, 42):
                pass
        return (time.perf_counter() - start) / requests * 1e6

    return asyncio.run(checks())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--processes", default="1,2", help="processes sharing the store, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cluster", action="store_true", help="also through the head node's actor (a tenth as many "
                                                           "requests)")
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
        if args.cluster:
            rounds = through_head_actor(path, key, args.requests // 10, args.rounds)
            print(f"a worker node's process through the head node's actor: {statistics.median(rounds):.1f} µs per "
                  f"request (median of {args.rounds} rounds)")


def through_head_actor(path: str, key: str, requests: int, rounds: int) -> list[float]:
    """checks_us in a Ray task on the worker node of a two-node loopback cluster, each round."""
    from server.runtime.ray_main import LOCAL_RAY_ENV, local_runtime_env

    os.environ.update(LOCAL_RAY_ENV)
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from server.runtime.head_store import RemoteStore, head_store

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1",
                                                            "include_dashboard": False})
    worker = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    try:
        ray.init(address=cluster.address, log_to_driver=False, runtime_env=local_runtime_env(tempfile.mkdtemp()))

        @ray.remote(num_cpus=1, scheduling_strategy=NodeAffinitySchedulingStrategy(worker.node_id, soft=False))
        def on_worker_node() -> list[float]:
            store = head_store(KeyStore, path)
            assert isinstance(store, RemoteStore), "the task ran on the head node"
            return [checks_us(store, key, requests) for _ in range(rounds)]

        return ray.get(on_worker_node.remote())
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
