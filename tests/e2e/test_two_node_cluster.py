"""A two-node Ray cluster on loopback (tests/two_node_cluster.py, a process of its own): replicas on both nodes, keys
counted once, a short locust run served by both."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_two_node_cluster_on_loopback_runs_replicas_on_both_nodes_and_counts_keys_once(tmp_path):
    """Replicas on both nodes answer; a key limited to 5 a minute gets 5 across them, charged once each; only the
    head node's replica holds the key store file (the other goes through the head node's actor). Under a short
    locust run both nodes' replicas serve, nothing fails, and their counts add up to locust's requests."""
    script = ROOT / "tests" / "two_node_cluster.py"
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for line in ("nodes with replicas: 2", "http answers: 20/20", "limited key: 5 x 200, 11 x 429",
                 "limited key's characters: 45", "replicas holding the key store file: 1 of 2", "key store actors: 1",
                 "nodes that served under locust: 2"):
        assert line in result.stdout, result.stdout
    sent = re.search(r"locust: (\d+) requests, (\d+) failures", result.stdout)
    answered = re.search(r"requests answered under locust, per node: .* = (\d+)", result.stdout)
    assert sent and answered, result.stdout
    assert int(sent[1]) > 0 and int(sent[2]) == 0 and int(answered[1]) == int(sent[1]), result.stdout
