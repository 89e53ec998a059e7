"""python -m server --no-ray --workers 2: two processes on one port, each with its own copy of the model and its
own engine. Their outputs are Translator's, /metrics counts what both served, a killed worker is replaced while
the other one serves, and a stop leaves no process and no metrics files behind."""

import asyncio
import os
import signal
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from server_process import Scrape, eventually, running_server
from test_server_http import demo_requests

from model import Translator

TRANSLATED = {"route": "/v1/translate", "status": "200"}


def workers_of(server_pid: int) -> set[int]:
    """The server's worker processes: its children that multiprocessing spawned (not its resource tracker)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        parent = int(stat.rpartition(")")[2].split()[1])
        if parent == server_pid and b"spawn_main" in cmdline:
            pids.add(int(entry.name))
    return pids


def listeners(url: str) -> int:
    """Sockets listening on the url's port: one per worker that serves (each binds its own)."""
    port = f"{urlsplit(url).port:04X}"
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return sum(1 for row in rows if row[1].endswith(":" + port) and row[3] == "0A")


def metrics_dir_of(pid: int) -> Path:
    environ = dict(item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in item)
    return Path(environ[b"PROMETHEUS_MULTIPROC_DIR"].decode())


def expected(bodies: list[dict]) -> list[str]:
    translator = Translator.from_pretrained()
    return [translator.translate([b["text"]], target_lang=b["target_lang"])[0].text for b in bodies]


async def post_each_on_its_own_connection(url: str, bodies: list[dict]) -> list[httpx.Response]:
    async def one(body):
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            return await client.post("/v1/translate", json=body)

    return await asyncio.gather(*(one(b) for b in bodies))


def test_two_workers_serve_one_port_and_one_metrics_page_and_replace_a_killed_worker():
    concurrent, after_kill = demo_requests(48, seed=5), demo_requests(8, seed=6)
    reference = expected(concurrent + after_kill)
    with running_server("--no-ray", "--workers", "2") as server:
        pid = server.proc.pid
        workers = eventually(lambda: len(workers_of(pid)) == 2 and workers_of(pid))
        assert workers, "two worker processes"
        assert eventually(lambda: listeners(server.url) == 2, timeout=60), "both workers serving"
        metrics_dir = metrics_dir_of(next(iter(workers)))
        before = Scrape.of(server.url)

        responses = asyncio.run(post_each_on_its_own_connection(server.url, concurrent))
        assert [r.status_code for r in responses] == [200] * len(concurrent)
        texts = [r.json()["translations"][0]["text"] for r in responses]
        assert texts == reference[:len(concurrent)]

        killed = min(workers)
        os.kill(killed, signal.SIGKILL)
        # Connections the kernel queued on the dying worker's socket are reset with it, as its requests are.
        assert eventually(lambda: listeners(server.url) == 1), "the killed worker's socket closed"
        survivor_texts = [httpx.post(server.url + "/v1/translate", json=b, timeout=60).json()["translations"][0]["text"]
                          for b in after_kill]
        assert survivor_texts == reference[len(concurrent):]

        replaced = eventually(lambda: len(workers_of(pid)) == 2 and killed not in workers_of(pid) and workers_of(pid),
                              timeout=60)
        assert replaced, f"the killed worker {killed} was not replaced: {workers_of(pid)}"
        assert eventually(lambda: listeners(server.url) == 2, timeout=60), "the new worker serving"
        # Both workers' counts, the killed one's included, in every scrape.
        assert Scrape.of(server.url).delta(before, "s2s_requests_total", **TRANSLATED) == len(concurrent) + len(after_kill)
        assert len({p.name.rpartition("_")[2] for p in metrics_dir.glob("counter_*.db")}) >= 2
    assert not workers_of(pid) and not any(Path(f"/proc/{w}").exists() for w in replaced | workers)
    assert not metrics_dir.exists()


@pytest.mark.parametrize("args", [["--no-ray", "--workers", "2"], []], ids=["workers", "ray"])
def test_a_port_in_use_is_refused_before_anything_starts(args, capsys):
    """Worker processes and Ray replicas bind with SO_REUSEPORT, which would share the port with a server already
    there (the same user's): the server refuses to start instead."""
    from server.__main__ import main
    from server.runtime.listen import reuseport_socket

    with reuseport_socket("127.0.0.1", 0) as taken:
        taken.listen()
        port = taken.getsockname()[1]
        assert main([*args, "--host", "127.0.0.1", "--port", str(port)]) == 1
    assert f"cannot serve on 127.0.0.1:{port}" in capsys.readouterr().err


def test_workers_are_for_the_server_without_ray():
    from server.__main__ import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--workers", "2"])
    with pytest.raises(SystemExit):
        parse_args(["--no-ray", "--workers", "0"])
    assert parse_args(["--no-ray", "--workers", "3"])[1].workers == 3
