"""A two-node Ray cluster on loopback (head + worker, one CPU each) running two model replicas, each serving
HTTP on the same port of its node (`replica_http`; both nodes are this machine here).

Run by tests/test_ray_serve.py in its own process (one Ray driver per process). Prints the nodes found and the
HTTP answers.
"""

import json
import os
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
from server.runtime.ray_main import LOCAL_RAY_ENV, local_runtime_env  # noqa: E402
from server_process import free_port  # noqa: E402

os.environ.update(LOCAL_RAY_ENV)

import ray  # noqa: E402
from ray import serve  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from server.runtime.deployment import build  # noqa: E402
from server.front.registry import ModelRegistry  # noqa: E402
from server.settings import Settings  # noqa: E402


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1",
                                                            "include_dashboard": False})
    cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    try:
        ray.init(address=cluster.address, log_to_driver=False, runtime_env=local_runtime_env(tempfile.mkdtemp()))
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        serve.start(proxy_location="Disabled")
        settings = Settings(dtype="float32", max_batch_rows=8, replica_http=True, port=free_port())
        app = build(settings, ModelRegistry.from_paths(None), replicas=2, num_cpus=1)
        serve.run(app, name="two-nodes", route_prefix="/")
        handle = serve.get_deployment_handle("ModelServer", app_name="two-nodes")
        nodes = {handle.describe.remote().result()["node"] for _ in range(40)}
        print(f"nodes with replicas: {len(nodes)}", flush=True)
        body = json.dumps({"text": "forty-two", "target_lang": "fr"}).encode()
        answers = []
        for _ in range(20):  # a connection each
            request = urllib.request.Request(f"http://127.0.0.1:{settings.port}/v1/translate", data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as response:
                answers.append(json.load(response)["translations"][0]["text"])
        print(f"http answers: {answers.count('quarante-deux')}/20", flush=True)
        serve.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
