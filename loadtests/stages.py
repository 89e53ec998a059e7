"""A staged load (ramp up, hold, ramp down, idle) and what each stage saw: replica count, throughput, failures,
p50/p95. The plan and the bookkeeping, without locust: loadtests/staged.py runs them, loadtests.run prints them.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

TIMELINE_FIELDS = ("t", "users", "replicas")
CPU_FIELDS = ("t", "replica", "cpu_s")  # each replica's CPU time so far (with its engine processes)
STAGE_FIELDS = ("stage", "start_s", "end_s", "users", "replicas_min", "replicas_max", "replicas_end", "requests",
                "failures", "rps", "p50_ms", "p95_ms")
LOW_LEAD_S = 30  # step_plan's first low stage: the server at rest under a light load
LATENCY_NAME = "/v1/translate"  # p50/p95 per stage are this request's, as in the runner's table


@dataclass(frozen=True)
class Stage:
    name: str
    start_s: float
    end_s: float
    users_from: int
    users_to: int  # linear between the two over the stage

    def users_at(self, t: float) -> int:
        share = (t - self.start_s) / (self.end_s - self.start_s)
        return round(self.users_from + (self.users_to - self.users_from) * share)


def plan(peak_users: int, duration_s: float, idle_s: float) -> list[Stage]:
    """A quarter of `duration_s` up to `peak_users`, half of it held, a quarter down to one user, then `idle_s`
    with none (the time the autoscaler needs to remove what the load added)."""
    quarter = duration_s / 4
    edges = [0, quarter, 3 * quarter, duration_s, duration_s + idle_s]
    users = [(1, peak_users), (peak_users, peak_users), (peak_users, 1), (0, 0)]
    names = ("ramp-up", "hold", "ramp-down", "idle")
    return [Stage(name, edges[i], edges[i + 1], *users[i]) for i, name in enumerate(names)]


def step_plan(low_users: int, peak_users: int, high_s: float, after_s: float) -> list[Stage]:
    """`low_users` for LOW_LEAD_S, `peak_users` at once for `high_s`, `low_users` again for `after_s` (the time the
    autoscaler needs to remove what the high stage added)."""
    edges = [0, LOW_LEAD_S, LOW_LEAD_S + high_s, LOW_LEAD_S + high_s + after_s]
    users = [low_users, peak_users, low_users]
    names = ("low", "high", "low-after")
    return [Stage(name, edges[i], edges[i + 1], users[i], users[i]) for i, name in enumerate(names)]


def kill_plan(users: int, duration_s: float, kill_at_s: float) -> list[Stage]:
    """`users` all along `duration_s`, as two stages: before and after a replica is killed at `kill_at_s`."""
    return [Stage("before-kill", 0, kill_at_s, users, users), Stage("after-kill", kill_at_s, duration_s, users, users)]


def replica_changes(timeline: list[dict], stages: list[Stage]) -> list[str]:
    """Each change of the replica count in timeline.csv's rows, timed from the start of the stage it fell in."""
    lines, last = [], None
    for row in timeline:
        if row["replicas"] == "":
            continue
        t, count = float(row["t"]), int(row["replicas"])
        if last is not None and count != last:
            stage = stage_at(stages, t)
            where = f"{t - stage.start_s:.0f} s into {stage.name}" if stage else "after the stages"
            lines.append(f"replicas {last} -> {count} at {t:.0f} s ({where})")
        last = count
    return lines


def cpu_shares(cpu: list[dict], start_s: float, end_s: float) -> dict[int, float]:
    """Each replica's share of the CPU the replicas used from `start_s` to `end_s` (cpu.csv's rows): how the load
    spread over them."""
    used = {}
    for pid in {int(row["replica"]) for row in cpu}:
        within = [float(row["cpu_s"]) for row in cpu
                  if int(row["replica"]) == pid and start_s <= float(row["t"]) <= end_s]
        used[pid] = within[-1] - within[0] if within else 0.0
    total = sum(used.values()) or 1.0
    return {pid: u / total for pid, u in used.items()}


def stage_at(stages: list[Stage], t: float) -> Stage | None:
    return next((s for s in stages if s.start_s <= t < s.end_s), None)


@dataclass
class Recorder:
    """Requests and replica counts as they come, by stage; written out as stages.csv and timeline.csv."""

    stages: list[Stage]
    timeline: list[tuple[float, int, int | None]] = field(default_factory=list)  # (t, users, replicas)
    requests: dict[str, list[tuple[str, float, bool]]] = field(default_factory=dict)  # stage: (name, ms, failed)
    cpu: list[tuple[float, int, float]] = field(default_factory=list)  # (t, replica pid, CPU seconds so far)

    def request(self, t: float, name: str, milliseconds: float, failed: bool) -> None:
        stage = stage_at(self.stages, t)
        if stage is not None:
            self.requests.setdefault(stage.name, []).append((name, milliseconds, failed))

    def split(self, at_s: float, name: str) -> None:
        """From `at_s` on, a stage of its own, `name`, cut from the stage `at_s` falls in (requests from then on are
        counted there): the time after a killed replica's replacement runs."""
        stage = stage_at(self.stages, at_s)
        if stage is not None:
            cut = self.stages.index(stage)
            self.stages[cut:cut + 1] = [replace(stage, end_s=at_s),
                                        replace(stage, name=name, start_s=at_s, users_from=stage.users_at(at_s))]

    def sample(self, t: float, users: int, replicas: int | None) -> None:
        self.timeline.append((t, users, replicas))

    def rows(self) -> list[dict]:
        return [self.row(stage) for stage in self.stages]

    def row(self, stage: Stage) -> dict:
        requests = self.requests.get(stage.name, [])
        latencies = sorted(ms for name, ms, failed in requests if name == LATENCY_NAME and not failed)
        replicas = [r for t, _, r in self.timeline if stage.start_s <= t < stage.end_s and r is not None]
        return {"stage": stage.name, "start_s": stage.start_s, "end_s": stage.end_s,
                "users": f"{stage.users_from}-{stage.users_to}",
                "replicas_min": min(replicas, default=""), "replicas_max": max(replicas, default=""),
                "replicas_end": replicas[-1] if replicas else "", "requests": len(requests),
                "failures": sum(failed for _, _, failed in requests),
                "rps": round(len(requests) / (stage.end_s - stage.start_s), 2),
                "p50_ms": round(percentile(latencies, 50)) if latencies else "",
                "p95_ms": round(percentile(latencies, 95)) if latencies else ""}

    def write(self, directory: Path) -> None:
        write_csv(directory / "stages.csv", STAGE_FIELDS, self.rows())
        write_csv(directory / "cpu.csv", CPU_FIELDS, [dict(zip(CPU_FIELDS, (round(t, 1), pid, round(cpu, 2))))
                                                     for t, pid, cpu in self.cpu])
        write_csv(directory / "timeline.csv", TIMELINE_FIELDS,
                  [dict(zip(TIMELINE_FIELDS, (round(t, 1), users, "" if r is None else r)))
                   for t, users, r in self.timeline])


def percentile(sorted_values: list[float], p: int) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    return statistics.quantiles(sorted_values, n=100, method="inclusive")[p - 1]


def write_csv(path: Path, fields: tuple[str, ...], rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def table(rows: list[dict]) -> str:
    """The stages as a Markdown table (loadtests/README.md's)."""
    header = "| stage | s | users | replicas (min-max, end) | requests | failed | req/s | p50 ms | p95 ms |"
    lines = [header, "|" + "---|" * 9]
    for r in rows:
        lines.append(f"| {r['stage']} | {float(r['start_s']):.0f}-{float(r['end_s']):.0f} | {r['users']} | "
                     f"{r['replicas_min']}-{r['replicas_max']}, {r['replicas_end']} | {r['requests']} | "
                     f"{r['failures']} | {r['rps']} | {r['p50_ms']} | {r['p95_ms']} |")
    return "\n".join(lines)
