"""The serving path against the engine, in one go on one machine: `Translator.translate`, the engine loop
in-process, HTTP without Ray (`python -m server --no-ray`: its engine in a process of its own, `--workers 2`, and
`--engine-process false`: everything in one process) and HTTP through Ray
Serve (`python -m server`: its replicas serve HTTP themselves; `ray-proxy`: `--serve-proxy`, through Serve's proxy).

    python -m loadtests.bench_serving [--texts 2000] [--clients 1,32] [--texts-per-request 1,8] [--workers 1,2]
                                      [--rounds 1] [--device cuda --dtype float16]

Every path gets the same demo texts (number words of mixed magnitudes, four target languages, greedy).
Closed-loop clients send their next request when the previous answer has arrived; HTTP load comes from
`loadtests.http_load` (one lean asyncio process, raw HTTP/1.1 keep-alive), not locust, so the load generator
takes little CPU from the server. Prints texts/s with the share of `Translator.translate` (batch 32) run just
before each cell (beside the idle server on the HTTP paths), latency percentiles, whether every output equals
Translator's, and CPU milliseconds per request by process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from model import Translator
from server.runtime.process import set_engine_threads
from server.metrics import EngineStats
from server.engine.sequence import FinalOutput
from server.engine.loop import start_engine_loop
from server.settings import Settings

from .bench_batching import demo_texts
from .server import session_members, served

Texts = list[tuple[str, str]]  # (text, target language)


@dataclass
class Result:
    path: str
    clients: int
    per_request: int
    texts_s: float
    latencies: list[float]  # seconds per request
    outputs: list[str]  # in text order
    cpu_ms: dict[str, float] | None = None  # CPU per request by process

    def pct(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000


def requests_of(texts: Texts, per_request: int) -> list[list[int]]:
    """Text indices grouped into requests of `per_request` texts of one target language, in order."""
    by_lang: dict[str, list[int]] = {}
    for i, (_, lang) in enumerate(texts):
        by_lang.setdefault(lang, []).append(i)
    groups = [ids[k:k + per_request] for ids in by_lang.values() for k in range(0, len(ids), per_request)]
    return sorted(groups, key=lambda g: g[0])


def run_translator(translator: Translator, texts: Texts) -> Result:
    """One batched call per target language (batch 32), longest first as Translator.translate sorts them, with
    torch's threads on every core (the engine path sets fewer)."""
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    outputs = [""] * len(texts)
    start = time.perf_counter()
    for group in requests_of(texts, len(texts)):
        lang = texts[group[0]][1]
        done = translator.translate([texts[i][0] for i in group], target_lang=lang, batch_size=32)
        for i, t in zip(group, done):
            outputs[i] = t.text
    elapsed = time.perf_counter() - start
    return Result("Translator.translate (batch 32)", 0, len(texts), len(texts) / elapsed, [elapsed], outputs)


def run_engine(translator: Translator, texts: Texts, clients: int, per_request: int, settings: Settings) -> Result:
    """The server's engine loop (scheduler, engine thread, asyncio delivery) with the server's default limits;
    token ids in and out, as a model replica's HeldModel sees them after tokenizing. Warmed up first as the
    HTTP servers are (64 texts, 8 clients): the loop's KV cache is new, and its first touch costs page faults."""
    bundle = translator.bundle
    params = bundle.decode_params()
    sources = [bundle.source(text, None, lang) for text, lang in texts]
    loop = start_engine_loop(bundle, settings, EngineStats("bench"), settings.max_waiting_sequences)
    outputs, latencies = [""] * len(texts), []

    async def client(requests: list[list[int]]):
        while requests:
            group = requests.pop(0)
            start = time.perf_counter()
            submitted = loop.submit([(sources[i].ids, replace(params, forced_bos_token_id=sources[i].forced_bos))
                                     for i in group], stream=False)
            for i, (request, queue) in zip(group, submitted):
                async for output in loop.outputs(request, queue):
                    if isinstance(output, FinalOutput):
                        outputs[i] = bundle.decode(output.hypotheses[0].token_ids)
            latencies.append(time.perf_counter() - start)

    async def drive(requests: list[list[int]], clients: int) -> float:
        start = time.perf_counter()
        await asyncio.gather(*(client(requests) for _ in range(clients)))
        return time.perf_counter() - start

    try:
        asyncio.run(drive(requests_of(texts[:64], 1), 8))
        latencies.clear()
        elapsed = asyncio.run(drive(requests_of(texts, per_request), clients))
    finally:
        loop.stop()
    return Result("engine loop, in-process", clients, per_request, len(texts) / elapsed, latencies, outputs)


def process_name(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"
    first = argv[0].decode(errors="replace")
    if comm.startswith("s2s-"):  # the server's worker and engine processes
        return comm
    if first.startswith("ray::"):
        return first.split()[0]
    name = Path(first).name
    if name.startswith("python") and len(argv) > 2 and argv[1] == b"-m":
        return f"python -m {argv[2].decode()}"
    return name


def cpu_seconds(pids: list[int]) -> dict[int, tuple[str, float]]:
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (process_name(pid), (int(fields[11]) + int(fields[12])) / ticks)
    return out


def run_http(url: str, server_pid: int, texts: Texts, clients: int, per_request: int, path: str) -> Result:
    groups = requests_of(texts, per_request)
    bodies = [{"text": [texts[i][0] for i in g] if per_request > 1 else texts[g[0]][0], "source_lang": "en",
               "target_lang": texts[g[0]][1]} for g in groups]
    processes = [server_pid, *session_members(server_pid)]
    before = cpu_seconds(processes)
    load = subprocess.run([sys.executable, "-m", "loadtests.http_load", "--url", url + "/v1/translate",
                           "--clients", str(clients)], input=json.dumps(bodies), capture_output=True, text=True,
                          check=True)
    after = cpu_seconds(processes)
    report = json.loads(load.stdout)
    if report["failed"]:
        raise RuntimeError(f"{report['failed']} of {len(bodies)} requests failed on {path}")
    outputs = [""] * len(texts)
    for group, answer in zip(groups, report["texts"]):
        for i, text in zip(group, answer):
            outputs[i] = text
    cpu: dict[str, float] = {}
    for pid, (name, seconds) in after.items():
        used = seconds - before.get(pid, (name, 0.0))[1]
        if used > 0:
            cpu[name] = cpu.get(name, 0.0) + used * 1000 / len(bodies)
    return Result(path, clients, per_request, len(texts) / report["elapsed"], report["latencies"], outputs, cpu)


def warm_up(url: str, texts: Texts) -> None:
    subprocess.run([sys.executable, "-m", "loadtests.http_load", "--url", url + "/v1/translate", "--clients", "8"],
                   input=json.dumps([{"text": t, "target_lang": lang} for t, lang in texts]), capture_output=True,
                   text=True, check=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_serving", description=__doc__.splitlines()[0])
    p.add_argument("--texts", type=int, default=2000)
    p.add_argument("--one-client-texts", type=int, default=400, help="texts sent by a single client")
    p.add_argument("--clients", default="1,32")
    p.add_argument("--texts-per-request", default="1,8")
    p.add_argument("--paths", default="engine,no-ray,no-ray-in-process,ray,ray-proxy")
    p.add_argument("--workers", default="1,2", help="worker processes of the --no-ray servers measured")
    p.add_argument("--port", type=int, default=8031)
    p.add_argument("--server-args", default="", help="extra arguments for both servers")
    p.add_argument("--rounds", type=int, default=1, help="reference-then-cell pairs per cell; the median is shown")
    p.add_argument("--device", default="cpu", help="every path's, the servers' too")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--max-batch-rows", type=int, default=Settings.max_batch_rows, help="the engines' batch, the "
                                                                                      "servers' too")
    args = p.parse_args(argv)
    translator = Translator.from_pretrained(device=args.device, dtype=args.dtype)
    on_device = Settings(device=args.device, dtype=args.dtype, max_batch_rows=args.max_batch_rows)
    args.server_args += f" --device {args.device} --dtype {args.dtype} --max-batch-rows {args.max_batch_rows}"
    texts = demo_texts(args.texts, seed=7)
    translator.translate([t for t, _ in texts[:64]], target_lang="de")  # warm-up
    reference = run_translator(translator, texts)  # the outputs every path must give
    clients, per_request = [int(c) for c in args.clients.split(",")], [int(k) for k in args.texts_per_request.split(",")]
    gpu = f"{torch.cuda.get_device_name()}, " if args.device.startswith("cuda") else ""
    print(f"machine: {gpu}{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch "
          f"{torch.__version__} ({torch.get_num_threads()} threads for Translator.translate); demo model, "
          f"{args.dtype} on {args.device}, greedy, batches of {args.max_batch_rows} rows; {len(texts)} texts "
          f"({args.one_client_texts} at one client); median of {args.rounds} round(s) per cell\n", flush=True)
    print("| path | clients | texts/request | texts/s | Translator texts/s | share | p50 ms | p95 ms "
          "| outputs = Translator |")
    print("|---|---|---|---|---|---|---|---|---|")
    results = [reference]
    row(reference, reference, reference)

    def matrix(run):
        """Each cell right after a run of the reference, `rounds` times: a share compares the two side by side
        (this VM's speed drifts by a third within minutes); the row is the round with the median share."""
        for c in clients:
            for k in per_request:
                share = texts if c > 1 else texts[:args.one_client_texts]
                rounds = sorted(((run_translator(translator, texts), run(share, c, k)) for _ in range(args.rounds)),
                                key=lambda pair: pair[1].texts_s / pair[0].texts_s)
                beside, result = rounds[len(rounds) // 2]
                results.append(result)
                row(result, beside, reference, [r for _, r in rounds])

    paths = args.paths.split(",")
    if "engine" in paths:
        def engine(share, c, k):
            set_engine_threads(len(os.sched_getaffinity(0)), on_device)  # as `python -m server` sets them
            return run_engine(translator, share, c, k, on_device)

        matrix(engine)
    url = f"http://127.0.0.1:{args.port}"
    servers = [("no-ray", "--no-ray" + (f" --workers {w}" if w != "1" else "")) for w in args.workers.split(",")]
    servers.append(("no-ray-in-process", "--no-ray --engine-process false"))
    for path, server_args in servers + [("ray", ""), ("ray-proxy", "--serve-proxy")]:
        if path not in paths:
            continue
        name = f"HTTP, python -m server {server_args}".rstrip()
        with tempfile.TemporaryDirectory() as logs, served(url, f"{server_args} {args.server_args}",
                                                             Path(logs) / "server.log") as process:
            warm_up(url, texts[:64])
            matrix(lambda share, c, k: run_http(url, process.pid, share, c, k, name))
    print("\nCPU ms per request, by process (HTTP paths; the load generator not included):\n")
    for r in results:
        if r.cpu_ms:
            top = ", ".join(f"{name} {ms:.2f}" for name, ms in sorted(r.cpu_ms.items(), key=lambda x: -x[1])
                            if ms >= 0.05)
            print(f"- {r.path}, {r.clients} clients × {r.per_request} texts: total {sum(r.cpu_ms.values()):.2f} "
                  f"({top})")


def row(r: Result, beside: Result, reference: Result, rounds: list[Result] | None = None) -> None:
    """One table row: r's speed against `beside` (the reference run just before it); the outputs of every round
    against the first reference run's (the fewest equal of any round)."""
    same = min(sum(o == reference.outputs[i] for i, o in enumerate(each.outputs)) for each in rounds or [r])
    clients = r.clients or "—"
    print(f"| {r.path} | {clients} | {r.per_request} | {r.texts_s:.0f} | {beside.texts_s:.0f} "
          f"| {r.texts_s / beside.texts_s:.2f} | {statistics.median(r.latencies) * 1000:.1f} | {r.pct(0.95):.1f} "
          f"| {same}/{len(r.outputs)} |", flush=True)


if __name__ == "__main__":
    main()
