"""loadtests.stages: the staged plan, what each stage records, its table and chart; run.py's --staged command;
loadtests.replica_kill and run.py's --kill-replica-at."""

import os
import subprocess
import sys
import time

import pytest

from loadtests.charts import stage_chart
from loadtests.replica_kill import Kill, busiest, replica_pids
from loadtests.run import locust_command, parse_args, run_seconds
from loadtests.stages import (Recorder, cpu_shares, kill_plan, plan, read_csv, replica_changes, stage_at, step_plan,
                              table)


def test_plan_ramps_up_holds_ramps_down_and_idles():
    stages = plan(peak_users=16, duration_s=120, idle_s=90)
    assert [(s.name, s.start_s, s.end_s) for s in stages] == [
        ("ramp-up", 0, 30), ("hold", 30, 90), ("ramp-down", 90, 120), ("idle", 120, 210)]
    assert [stage_at(stages, t).users_at(t) for t in (0, 15, 60, 105, 150)] == [1, 8, 16, 8, 0]
    assert stage_at(stages, 210) is None  # the shape then stops the test


def test_steps_go_low_high_low_and_each_replica_change_is_timed_from_its_stage(tmp_path):
    stages = step_plan(low_users=2, peak_users=48, high_s=90, after_s=90)
    assert [(s.name, s.start_s, s.end_s, s.users_at(s.start_s)) for s in stages] == [
        ("low", 0, 30, 2), ("high", 30, 120, 48), ("low-after", 120, 210, 2)]
    timeline = [{"t": t, "replicas": r} for t, r in ((10, "1"), (40, ""), (52, "2"), (130, "2"), (155, "1"))]
    assert replica_changes(timeline, stages) == ["replicas 1 -> 2 at 52 s (22 s into high)",
                                                 "replicas 2 -> 1 at 155 s (35 s into low-after)"]
    cpu = [{"t": t, "replica": pid, "cpu_s": c} for t, pid, c in ((60, 1, 10), (60, 2, 0), (120, 1, 40), (120, 2, 10))]
    assert cpu_shares(cpu, 60, 120) == {1: 0.75, 2: 0.25}
    args = parse_args(["--staged", "--low-users", "2", "--users", "48", "--duration", "90s", "--idle", "90s",
                       "--out", str(tmp_path)])
    assert run_seconds(args) == 210 and "--low-users" in locust_command(args, 48, tmp_path, server_pid=7)


def test_the_time_after_a_replacement_runs_is_a_stage_of_its_own():
    recorder = Recorder(kill_plan(users=32, duration_s=90, kill_at_s=30))
    recorder.request(40, "/v1/translate", 900, failed=False)
    recorder.split(46.5, "recovered")
    recorder.request(50, "/v1/translate", 100, failed=False)
    assert [(s.name, s.start_s, s.end_s) for s in recorder.stages] == [
        ("before-kill", 0, 30), ("after-kill", 30, 46.5), ("recovered", 46.5, 90)]
    assert [(row["stage"], row["p50_ms"]) for row in recorder.rows()][1:] == [("after-kill", 900), ("recovered", 100)]


def test_recorder_summarizes_each_stage(tmp_path):
    recorder = Recorder(plan(peak_users=4, duration_s=40, idle_s=10))
    for t, replicas in ((1, 1), (12, 2), (25, 2), (35, 2), (45, 1)):
        recorder.sample(t, 4, replicas)
    for ms in (100, 200, 300):
        recorder.request(15, "/v1/translate", ms, failed=False)
    recorder.request(15, "/v1/models", 5, failed=False)
    recorder.request(32, "/v1/translate", 0, failed=True)
    recorder.write(tmp_path)
    rows = read_csv(tmp_path / "stages.csv")
    hold = rows[1]
    assert (hold["stage"], hold["replicas_min"], hold["replicas_max"], hold["requests"], hold["failures"],
            hold["p50_ms"]) == ("hold", "2", "2", "4", "0", "200")
    assert (rows[2]["failures"], rows[2]["p50_ms"], rows[3]["replicas_end"]) == ("1", "", "1")
    assert "| hold | 10-30 | 4-4 | 2-2, 2 | 4 | 0 | 0.2 | 200 | 290 |" in table(rows)
    stage_chart(tmp_path, tmp_path / "stages.png", "test")
    assert (tmp_path / "stages.png").stat().st_size > 0


def test_staged_run_passes_the_stages_to_locust(tmp_path):
    args = parse_args(["--staged", "--users", "8", "--duration", "1m", "--idle", "30s", "--out", str(tmp_path)])
    command = locust_command(args, 8, tmp_path)
    assert command[command.index("-f") + 1].endswith("staged.py")
    assert command[command.index("--peak-users") + 1] == "8" and command[command.index("--idle-s") + 1] == "30"
    assert run_seconds(args) == 90
    steady = parse_args(["--out", str(tmp_path)])
    assert locust_command(steady, 4, tmp_path)[locust_command(steady, 4, tmp_path).index("-f") + 1].endswith(
        "locustfile.py")


def test_kill_run_holds_the_users_before_and_after_the_kill_and_passes_the_server_to_locust(tmp_path):
    stages = kill_plan(users=32, duration_s=90, kill_at_s=30)
    assert [(s.name, s.start_s, s.end_s, s.users_at(s.start_s)) for s in stages] == [
        ("before-kill", 0, 30, 32), ("after-kill", 30, 90, 32)]
    args = parse_args(["--kill-replica-at", "30s", "--users", "32", "--duration", "90s", "--start-server",
                       "--out", str(tmp_path)])
    command = locust_command(args, 32, tmp_path, server_pid=1234)
    assert command[command.index("-f") + 1].endswith("staged.py") and run_seconds(args) == 90
    assert command[command.index("--kill-at-s") + 1] == "30" and command[command.index("--server-pid") + 1] == "1234"
    for refused in (["--kill-replica-at", "30s"], ["--kill-replica-at", "90s", "--start-server"]):
        with pytest.raises(SystemExit):
            parse_args([*refused, "--duration", "90s", "--out", str(tmp_path)])
    Kill(pid=7, at_s=30.2, replicas_before=2, recovered_after_s=8.04).write(tmp_path / "kill.json")
    assert Kill.read(tmp_path / "kill.json").line() == \
        "replica pid 7 (of 2) killed at 30 s; a replacement ran 8.0 s later"


def test_the_replica_to_kill_is_the_busiest_of_this_process_tree():
    """Two stand-in replicas (processes titled as Ray titles them), one busy: it is the one picked."""
    code = "import sys, time\nwhile sys.argv[1] == 'busy': pass\ntime.sleep(60)"
    stand_ins = {role: subprocess.Popen([sys.executable, "-c", code, role, "ray::ServeReplica:s2s:ModelServer"])
                 for role in ("busy", "idle")}
    try:
        # a process just started may not show its command line yet on a loaded machine (seen once in a full run)
        deadline = time.monotonic() + 10
        while not replica_pids(os.getpid()) >= {p.pid for p in stand_ins.values()} and time.monotonic() < deadline:
            time.sleep(0.1)
        assert replica_pids(os.getpid()) >= {p.pid for p in stand_ins.values()}
        assert busiest({p.pid for p in stand_ins.values()}, over_s=0.5) == stand_ins["busy"].pid
    finally:
        for process in stand_ins.values():
            process.kill()
            process.wait()
