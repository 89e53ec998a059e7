"""Locust file: locustfile.py's users under a staged load (loadtests.stages: ramp up, hold, ramp down, idle; or with
--low-users, steps: low, high, low),
recording per stage the replica count (from /v1/models, each second), throughput, failures and p50/p95. With
--kill-at-s, a steady load instead, before and after the busiest replica of the server --server-pid is killed
(loadtests.replica_kill).

    python -m loadtests.run --staged --users 16 --duration 2m --idle 90s --out results/staged   # the usual way
    locust -f loadtests/staged.py --headless --host ... --peak-users 16 --stage-s 120 --idle-s 90 --stages-out DIR

Writes DIR/stages.csv and DIR/timeline.csv (t, users, replicas) when the test stops, and DIR/kill.json
(replica_kill.Kill) once a killed replica's replacement runs.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import gevent
from locust import LoadTestShape, events
from locustfile import PollerUser, StreamUser, TranslateUser, workload  # noqa: F401 (the users locust runs)
from replica_kill import BUSIEST_OVER_S, cpu_seconds, kill_one_and_wait, replica_pids
from stages import Recorder, Stage, kill_plan, plan, stage_at, step_plan

SAMPLE_EVERY_S = 1.0
recording: dict = {}  # recorder, start (monotonic s), sampler (its greenlet): set when the test starts


@events.init_command_line_parser.add_listener
def add_arguments(parser) -> None:
    group = parser.add_argument_group("stages")
    group.add_argument("--peak-users", type=int, default=16, help="users held in the hold stage")
    group.add_argument("--stage-s", type=float, default=120, help="ramp up, hold and ramp down together (1:2:1)")
    group.add_argument("--idle-s", type=float, default=90, help="then no users this long")
    group.add_argument("--low-users", type=int, default=0,
                       help="steps instead of ramps: this many users for 30 s (LOW_LEAD_S), --peak-users for "
                            "--stage-s, this many again for --idle-s")
    group.add_argument("--stages-out", default=".", help="directory for stages.csv and timeline.csv")
    group.add_argument("--kill-at-s", type=float, default=0,
                       help="instead of the stages: --peak-users all along --stage-s, and the busiest replica of "
                            "--server-pid killed this far into the run")
    group.add_argument("--server-pid", type=int,
                       help="the `python -m server` process: its replicas' CPU time is sampled (cpu.csv), and "
                            "--kill-at-s kills one")


def stages_of(options) -> list[Stage]:
    if options.kill_at_s:
        return kill_plan(options.peak_users, options.stage_s, options.kill_at_s)
    if options.low_users:
        return step_plan(options.low_users, options.peak_users, options.stage_s, options.idle_s)
    return plan(options.peak_users, options.stage_s, options.idle_s)


class StagedShape(LoadTestShape):
    def tick(self):
        t = self.get_run_time()
        stage = stage_at(stages_of(self.runner.environment.parsed_options), t)
        return None if stage is None else (stage.users_at(t), 100)


def replicas(host: str) -> int | None:
    """The replica count /v1/models reports (None without Ray Serve, or when the server does not answer)."""
    request = urllib.request.Request(f"{host.rstrip('/')}/v1/models", headers=workload.headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return next((card.get("replicas") for card in json.load(response)["data"]), None)
    except (OSError, ValueError, KeyError):
        return None


def kill_replica(environment, start: float) -> None:
    options = environment.parsed_options
    gevent.sleep(max(0.0, options.kill_at_s - BUSIEST_OVER_S))
    kill = kill_one_and_wait(options.server_pid, lambda: replicas(environment.host), start)
    kill.write(Path(options.stages_out) / "kill.json")
    if kill.recovered_after_s is not None:
        recording["recorder"].split(kill.at_s + kill.recovered_after_s, "recovered")


def sample(environment, recorder: Recorder, start: float) -> None:
    server = environment.parsed_options.server_pid
    while True:
        count, t = replicas(environment.host), time.monotonic() - start
        recorder.sample(t, environment.runner.user_count, count)
        for pid in replica_pids(server) if server else ():
            recorder.cpu.append((t, pid, cpu_seconds(pid)))
        gevent.sleep(SAMPLE_EVERY_S)


@events.test_start.add_listener
def start_recording(environment, **_) -> None:
    recorder = Recorder(stages_of(environment.parsed_options))
    recording.update(recorder=recorder, start=time.monotonic())
    recording["sampler"] = gevent.spawn(sample, environment, recorder, recording["start"])
    if environment.parsed_options.kill_at_s:
        recording["killer"] = gevent.spawn(kill_replica, environment, recording["start"])


@events.request.add_listener
def record_request(request_type, name, response_time, exception, **_) -> None:
    if "recorder" in recording and request_type != "SSE":  # SSE rows are stream timings, not requests
        recording["recorder"].request(time.monotonic() - recording["start"], name, response_time,
                                      exception is not None)


@events.test_stop.add_listener
def write_stages(environment, **_) -> None:
    if "recorder" in recording:
        recording["sampler"].kill()
        out = Path(environment.parsed_options.stages_out)
        out.mkdir(parents=True, exist_ok=True)
        recording["recorder"].write(out)
