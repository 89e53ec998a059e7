"""Headless load test runner: locust runs, summary table, charts and SLO gates.

    python -m loadtests.run --host http://127.0.0.1:8011 --users 8 --spawn-rate 4 --duration 60s --out results \\
        [--start-server --server-args "--no-ray --model /tmp/tiny_ckpt"] \\
        [--sweep 1,8,32,64 [--compare-server-args "--max-batch-rows 1"]] \\
        [--max-failure-ratio 0.01 --max-p95-ms 5000 --max-ttft-p95-ms 2000] [--locust-args "--languages de,fr"]

Each run is `locust -f loadtests/locustfile.py --headless ...` in a subprocess; its files go to --out (with
--sweep or a comparison: --out/<base|compare>/u<users>/): locust_stats.csv, locust_stats_history.csv,
locust_failures.csv, locust_exceptions.csv, locust.json, report.html, chart.png, locust.log (+ server.log).
A sweep also draws --out/sweep.png: requests/s and p95 latencies against users, one line per configuration.

--start-server starts `python -m server <server-args>` (with --host/--port taken from --host unless given),
waits for /readyz, and stops it after the runs. --compare-server-args adds a second configuration: the same
server arguments followed by these (later flags win), e.g. --max-batch-rows 1 to decode one sequence at a time.
The server caps beams at --max-batch-rows, so compare like with like: --locust-args "--beam-size 1".

--staged runs loadtests/staged.py instead: --users is the peak of a ramp up, hold and ramp down over --duration,
then --idle with no users; it adds stages.csv, timeline.csv (replicas each second) and stages.png, and prints
replica count, throughput, failures and p50/p95 per stage.

--kill-replica-at S (with --start-server, Ray): --users all along --duration, and S seconds in, the busiest replica
of the server is killed (SIGKILL, loadtests/replica_kill.py); the stages are before and after the kill, and the run
prints how long Serve took to run a replacement (kill.json).

Exit status: 0 when every run meets the SLO gates, 1 when one does not, 2 when a run could not be made.
"""

from __future__ import annotations

import argparse
import csv
import re
import shlex
import signal
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from .charts import history_chart, stage_chart, sweep_chart
from .replica_kill import Kill
from .server import served, start_group, stop_group, tail, wait_exited
from .stages import LOW_LEAD_S, cpu_shares, read_csv, replica_changes, step_plan
from .stages import table as stages_table
from .stats import RunSummary, Slo, summarize, table

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
STAGED_LOCUSTFILE = Path(__file__).with_name("staged.py")
# When --duration ends, users finish the request they are in (a stream included) for up to this long, so that
# every request started is counted rather than cut off unrecorded.
STOP_TIMEOUT_S = 30
LOCUST_GRACE_S = 60 + STOP_TIMEOUT_S  # locust's start-up and shutdown, on top of --duration
ARGUMENT_STRINGS = ("--server-args", "--compare-server-args", "--locust-args")  # values: other programs' flags


@dataclass(frozen=True)
class Configuration:
    name: str  # directory and table label
    legend: str
    server_args: str | None  # None: test --host as it is, start nothing


def duration(text: str) -> int:
    """Seconds from 90, 90s, 2m, 1h30m, 1m30s."""
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?", text.strip())
    hours, minutes, seconds = (int(g or 0) for g in match.groups()) if match else (0, 0, 0)
    total = hours * 3600 + minutes * 60 + seconds
    if total < 1:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use 60s, 2m, 1h30m)")
    return total


def user_count(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a user count: {text!r}")
    return int(text)


def user_counts(text: str) -> list[int]:
    """1,8,32,64 -> [1, 8, 32, 64]"""
    return [user_count(part) for part in text.split(",")]


def glue_values(argv: list[str]) -> list[str]:
    """`--server-args --no-ray` -> `--server-args=--no-ray`: argparse would take a lone `--no-ray` for an option."""
    glued, rest = [], iter(argv)
    for arg in rest:
        glued.append(f"{arg}={next(rest, '')}" if arg in ARGUMENT_STRINGS else arg)
    return glued


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtests.run", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="http://127.0.0.1:8000", help="base URL of the server")
    p.add_argument("--users", type=user_count, default=4, help="concurrent users (ignored with --sweep)")
    p.add_argument("--spawn-rate", type=float, default=10, help="users started per second")
    p.add_argument("--duration", type=duration, default=duration("60s"), help="per run, e.g. 60s or 2m")
    p.add_argument("--out", type=Path, required=True, help="directory for the reports")
    p.add_argument("--sweep", type=user_counts, help="user counts to run one after another, e.g. 1,8,32,64")
    p.add_argument("--locust-args", default="", help="more locust arguments, e.g. \"--languages de,fr\"")
    p.add_argument("--staged", action="store_true",
                   help="stages instead of a steady load (loadtests/staged.py): up to --users over a quarter of "
                        "--duration, held half, down a quarter, then --idle with none; a table and chart by stage")
    p.add_argument("--idle", type=duration, default=duration("90s"), help="--staged: the last stage, no users")
    p.add_argument("--low-users", type=user_count,
                   help="--staged in steps: this many users for 30 s, --users for --duration, this many for --idle")
    p.add_argument("--kill-replica-at", type=duration,
                   help="with --start-server (Ray): kill the busiest replica this far into a steady run")
    server = p.add_argument_group("server")
    server.add_argument("--start-server", action="store_true", help="start python -m server for the runs")
    server.add_argument("--server-args", default="", help="its arguments, e.g. \"--no-ray --model DIR\"")
    server.add_argument("--compare-server-args", help="extra arguments for a second configuration to compare")
    server.add_argument("--server-ready-timeout", type=float, default=180.0, help="seconds to wait for /readyz")
    slo = p.add_argument_group("SLO gates")
    slo.add_argument("--max-failure-ratio", type=float, default=0.01, help="failed / all HTTP requests")
    slo.add_argument("--max-p95-ms", type=float, default=5000.0, help="p95 latency of /v1/translate")
    slo.add_argument("--max-ttft-p95-ms", type=float, default=2000.0, help="p95 time to first streamed token")
    args = p.parse_args(glue_values(sys.argv[1:] if argv is None else argv))
    if args.compare_server_args is not None and not args.start_server:
        p.error("--compare-server-args needs --start-server")
    if args.staged and args.sweep:
        p.error("--staged runs one load that changes by itself: no --sweep")
    if args.low_users and not args.staged:
        p.error("--low-users needs --staged")
    if args.kill_replica_at is not None and (not args.start_server or args.staged or args.sweep
                                             or args.compare_server_args is not None
                                             or args.kill_replica_at >= args.duration):
        p.error("--kill-replica-at needs --start-server, one configuration and user count, no --staged, and a "
                "time within --duration")
    return args


def configurations(args: argparse.Namespace) -> list[Configuration]:
    if not args.start_server:
        return [Configuration("base", args.host, None)]
    base = Configuration("base", f"base: {args.server_args or '(defaults)'}", args.server_args)
    if args.compare_server_args is None:
        return [base]
    combined = f"{args.server_args} {args.compare_server_args}".strip()
    return [base, Configuration("compare", f"compare: + {args.compare_server_args}", combined)]


def run_seconds(args: argparse.Namespace) -> int:
    return args.duration + (args.idle if args.staged else 0) + (LOW_LEAD_S if args.low_users else 0)


def staged_locust(args: argparse.Namespace) -> bool:
    """Whether the run goes through staged.py: stages, or a replica killed between two."""
    return args.staged or args.kill_replica_at is not None


def locust_command(args: argparse.Namespace, users: int, directory: Path, server_pid: int | None = None) -> list[str]:
    prefix = str(directory / "locust")
    staged = ["--peak-users", str(users), "--stage-s", str(args.duration), "--idle-s", str(args.idle),
              "--stages-out", str(directory)] if staged_locust(args) else []
    if args.low_users:
        staged += ["--low-users", str(args.low_users)]
    if staged_locust(args) and server_pid is not None:
        staged += ["--server-pid", str(server_pid)]
    if args.kill_replica_at is not None:
        staged += ["--kill-at-s", str(args.kill_replica_at)]
    return [sys.executable, "-m", "locust", "-f", str(STAGED_LOCUSTFILE if staged_locust(args) else LOCUSTFILE),
            "--headless", "--host", args.host, *staged,
            "--users", str(users), "--spawn-rate", str(args.spawn_rate), "--run-time", f"{run_seconds(args)}s",
            "--stop-timeout", str(STOP_TIMEOUT_S),
            "--csv", prefix, "--csv-full-history", "--html", str(directory / "report.html"),
            "--json-file", prefix, "--only-summary", "--exit-code-on-error", "0",
            *shlex.split(args.locust_args)]


def run_locust(args: argparse.Namespace, users: int, directory: Path, name: str,
               server_pid: int | None = None) -> RunSummary:
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "locust.log"
    print(f"locust: {users} users for {run_seconds(args)} s against {args.host} -> {directory}", flush=True)
    process = start_group(locust_command(args, users, directory, server_pid), log)
    try:
        finished = wait_exited(process, run_seconds(args) + LOCUST_GRACE_S)
    finally:
        code = stop_group(process, timeout_s=10)
    if not finished or code != 0:
        problem = "did not stop in time" if not finished else f"exited with status {code}"
        raise RuntimeError(f"locust {problem}; its log ({log}) ends:\n{tail(log)}")
    history_chart(directory / "locust_stats_history.csv", directory / "chart.png", f"{name}, {users} users")
    if staged_locust(args):
        title = f"{name}: stages up to {users} users" if args.staged else \
            f"{name}: {users} users, a replica killed at {args.kill_replica_at} s"
        stage_chart(directory, directory / "stages.png", title)
        print(stages_table(read_csv(directory / "stages.csv")))
        if args.low_users:
            stages = step_plan(args.low_users, users, args.duration, args.idle)
            print("\n".join(replica_changes(read_csv(directory / "timeline.csv"), stages)))
            high = stages[1]
            shares = cpu_shares(read_csv(directory / "cpu.csv"), (high.start_s + high.end_s) / 2, high.end_s)
            print("CPU shares of the replicas over the high stage's second half:",
                  ", ".join(f"{share:.0%}" for share in sorted(shares.values(), reverse=True)) or "none sampled")
    if args.kill_replica_at is not None:
        kill = directory / "kill.json"
        print(Kill.read(kill).line() if kill.exists() else "killed replica: no replacement ran within the run")
    report_failures(directory / "locust_failures.csv")
    return summarize(stats_json(directory / "locust"), name, users)


def stats_json(prefix: Path) -> Path:
    """locust 2.x writes --json-file PREFIX to PREFIX.json."""
    with_suffix = prefix.with_name(prefix.name + ".json")
    return with_suffix if with_suffix.exists() else prefix


def report_failures(failures_csv: Path, limit: int = 5) -> None:
    with open(failures_csv, newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda row: -int(row["Occurrences"]))
    for row in rows[:limit]:
        print(f"  failure x{row['Occurrences']}: {row['Method']} {row['Name']}: {row['Error'][:300]}")


def run_configuration(args: argparse.Namespace, config: Configuration, counts: list[int],
                      nested: bool) -> list[RunSummary]:
    root = args.out / config.name if nested else args.out
    server = nullcontext() if config.server_args is None else served(
        args.host, config.server_args, root / "server.log", ready_timeout_s=args.server_ready_timeout)
    with server as process:
        pid = None if process is None else process.pid
        return [run_locust(args, n, root / f"u{n}" if nested else root, config.name, pid) for n in counts]


def report(args: argparse.Namespace, results: dict[str, list[RunSummary]], slo: Slo, nested: bool) -> bool:
    """Prints the table (and draws the sweep chart); whether every run met the SLO."""
    runs = [run for series in results.values() for run in series]
    print()
    print(table(runs, slo))
    print("(p50/p95/p99: /v1/translate latency; req/s and fail %: all HTTP requests)")
    if nested:
        sweep_chart(results, args.out / "sweep.png", f"{args.duration} s per run against {args.host}")
        for legend, series in results.items():
            passing = [run.users for run in series if not slo.violations(run)]
            print(f"most users within the SLO, {legend}: {max(passing) if passing else 'none'}")
    return all(not slo.violations(run) for run in runs)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwinds through the `finally` blocks that stop locust and the server


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    counts = args.sweep or [args.users]
    configs = configurations(args)
    nested = len(configs) > 1 or len(counts) > 1
    slo = Slo(args.max_failure_ratio, args.max_p95_ms, args.max_ttft_p95_ms)
    try:
        results = {config.legend: run_configuration(args, config, counts, nested) for config in configs}
    except (RuntimeError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0 if report(args, results, slo, nested) else 1


if __name__ == "__main__":
    sys.exit(main())
