"""A two-node Ray cluster on loopback (head + worker, one CPU each) running two model replicas, each serving
HTTP on the same port of its node (`replica_http`; both nodes are this machine here), with API keys: a key's rate
limit counted once across the nodes (the worker node's replica through the head node's key store actor); then a
short locust run (loadtests.run) against that port, which both nodes' replicas serve.

Run by tests/e2e/test_ray_serve.py in its own process (one Ray driver per process). Prints the nodes found, the HTTP
answers, the limited key's answers and usage, which processes hold the key store file, and locust's requests and
failures with the requests each node's replica answered during its run.
"""

import json
import os
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
from server.runtime.ray_main import LOCAL_RAY_ENV, local_runtime_env, stop_serve  # noqa: E402
from server_process import free_port, within_one_minute  # noqa: E402

os.environ.update(LOCAL_RAY_ENV)

import ray  # noqa: E402
from ray import serve  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from loadtests import run as loadtest  # noqa: E402
from loadtests.stats import summarize  # noqa: E402
from server.runtime.deployment import build, deploy  # noqa: E402
from server.front.registry import ModelRegistry  # noqa: E402
from server.key_store import KeyStore  # noqa: E402
from server.runtime.head_store import NAMESPACE  # noqa: E402
from server.settings import Settings  # noqa: E402

# Each user keeps its connections open; the kernel hands each connection to one node's socket (SO_REUSEPORT), so
# with 16 users both nodes get some but once in 2^15 runs (with 8, once in 128).
LOCUST_USERS, LOCUST_DURATION = 16, "10s"


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1",
                                                            "include_dashboard": False})
    cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    try:
        ray.init(address=cluster.address, log_to_driver=False, runtime_env=local_runtime_env(tempfile.mkdtemp()))
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        serve.start(proxy_location="Disabled")
        store = Path(tempfile.mkdtemp()) / "keys.sqlite"
        limited = KeyStore(store).add("limited", rate_limit_per_minute=5)
        settings = Settings(dtype="float32", max_batch_rows=8, replica_http=True, port=free_port(),
                            api_keys=("open-key",), key_store=str(store))
        app = build(settings, ModelRegistry.from_paths(None), replicas=2, num_cpus=1)
        handle = deploy(app, "two-nodes", route_prefix="/")
        replicas = {node: r["pid"] for node, r in replicas_by_node(handle).items()}
        print(f"nodes with replicas: {len(replicas)}", flush=True)
        url = f"http://127.0.0.1:{settings.port}"
        answers = [translate(url, "open-key") for _ in range(20)]  # a connection each
        print(f"http answers: {answers.count((200, 'quarante-deux'))}/20", flush=True)

        within_one_minute(20)
        statuses = sorted(translate(url, limited)[0] for _ in range(16))
        print(f"limited key: {statuses.count(200)} x 200, {statuses.count(429)} x 429", flush=True)
        request = urllib.request.Request(f"{url}/v2/usage", headers={"Authorization": f"DeepL-Auth-Key {limited}"})
        with urllib.request.urlopen(request, timeout=60) as response:
            print(f"limited key's characters: {json.load(response)['character_count']}", flush=True)
        holding = [pid for pid in replicas.values() if holds(pid, store)]
        print(f"replicas holding the key store file: {len(holding)} of {len(replicas)}", flush=True)
        actors = [a for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["namespace"] == NAMESPACE and a["name"].startswith("KeyStore-")]
        print(f"key store actors: {len(actors)}", flush=True)
        locust_on_both_nodes(url, handle, "open-key")
        stop_serve()  # as python -m server stops it: no retried-call error in the output
    finally:
        ray.shutdown()
        cluster.shutdown()


def replicas_by_node(handle, calls: int = 40) -> dict[str, dict]:
    """Each node's replica's describe(): Serve's router spreads the calls over the replicas."""
    return {(r := handle.describe.remote().result())["node"]: r for _ in range(calls)}


def locust_on_both_nodes(url: str, handle, key: str) -> None:
    """loadtests.run's headless locust run against the nodes' shared port, and the HTTP requests each node's
    replica answered meanwhile (its describe() count). Languages given: locust makes no request of its own."""
    before = replicas_by_node(handle)
    out = Path(tempfile.mkdtemp())
    loadtest.main(["--host", url, "--users", str(LOCUST_USERS), "--spawn-rate", str(LOCUST_USERS),
                   "--duration", LOCUST_DURATION, "--out", str(out), "--max-failure-ratio", "0",
                   "--locust-args", f"--api-key {key} --languages fr,de"])  # its latency gates are for real machines: not checked
    run = summarize(loadtest.stats_json(out / "locust"), "two nodes", LOCUST_USERS)
    print(f"locust: {run.requests} requests, {run.failures} failures; translate p50 {run.p50} ms, p95 {run.p95} ms",
          flush=True)
    after = replicas_by_node(handle)
    served = [after[node]["requests"] - before[node]["requests"] for node in after]
    print(f"nodes that served under locust: {sum(n > 0 for n in served)}", flush=True)
    print(f"requests answered under locust, per node: {' + '.join(map(str, served))} = {sum(served)}", flush=True)


def translate(url: str, key: str) -> tuple[int, str | None]:
    body = json.dumps({"text": "forty-two", "target_lang": "fr"}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    request = urllib.request.Request(f"{url}/v1/translate", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)["translations"][0]["text"]
    except urllib.error.HTTPError as e:
        return e.code, None


def holds(pid: int, path: Path) -> bool:
    """Whether process `pid` has the file at `path` open."""
    folder = Path(f"/proc/{pid}/fd")
    return any(os.path.realpath(fd) == str(path.resolve()) for fd in folder.iterdir())


if __name__ == "__main__":
    main()
