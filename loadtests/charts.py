"""PNG charts for load test runs (matplotlib, no display needed).

- history_chart: one run over time, from locust's `<prefix>_stats_history.csv` (--csv-full-history):
  HTTP requests/s, failures/s and users; p50/p95/p99 of the translate requests and of time to first token.
- sweep_chart: runs by user count, one line per server configuration: requests/s, translate p95, ttft p95.
- stage_chart: a staged run (loadtests/staged.py) over time: users and replica count; requests/s and p95 per
  stage, the stages marked.

Used by `python -m loadtests.run`.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from .stages import read_csv  # noqa: E402
from .stats import RunSummary  # noqa: E402

PERCENTILES = (("50%", ":"), ("95%", "-"), ("99%", "--"))
LATENCY_ROWS = ("/v1/translate", "/v1/translate [list]", "ttft")


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:  # locust writes N/A before the first request
        return math.nan


def read_history(path: Path) -> tuple[dict[int, dict], dict[str, list[dict]]]:
    """Per-timestamp HTTP totals ({"users", "rps", "fps"}) and each entry's rows by name."""
    totals: dict[int, dict] = defaultdict(lambda: {"users": 0, "rps": 0.0, "fps": 0.0})
    rows: dict[str, list[dict]] = defaultdict(list)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            t = int(row["Timestamp"])
            totals[t]["users"] = int(row["User Count"])
            if row["Name"] == "Aggregated":
                continue
            rows[row["Name"]].append(row)
            if row["Type"] != "SSE":
                totals[t]["rps"] += _number(row["Requests/s"])
                totals[t]["fps"] += _number(row["Failures/s"])
    return dict(totals), rows


def history_chart(history_csv: Path, png: Path, title: str) -> None:
    totals, rows = read_history(history_csv)
    if not totals:
        raise ValueError(f"{history_csv} has no rows")
    t0 = min(totals)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    times = sorted(totals)
    x = [t - t0 for t in times]
    top.plot(x, [totals[t]["rps"] for t in times], label="requests/s (HTTP)")
    top.plot(x, [totals[t]["fps"] for t in times], label="failures/s", color="tab:red")
    top.set_ylabel("per second")
    users = top.twinx()
    users.plot(x, [totals[t]["users"] for t in times], color="grey", alpha=0.5, label="users")
    users.set_ylabel("users")
    top.legend(loc="upper left")
    for i, name in enumerate(n for n in LATENCY_ROWS if n in rows):
        series = rows[name]
        xs = [int(r["Timestamp"]) - t0 for r in series]
        for column, style in PERCENTILES:
            bottom.plot(xs, [_number(r[column]) for r in series], style, color=f"C{i}", label=f"{name} p{column[:-1]}")
    bottom.set_ylabel("latency, ms (recent window)")
    bottom.set_xlabel("seconds")
    if bottom.lines:
        bottom.legend(fontsize="small", ncol=3)
    fig.suptitle(title)
    _save(fig, png)


def sweep_chart(runs: dict[str, list[RunSummary]], png: Path, title: str) -> None:
    """`runs`: for each server configuration (the legend label), its runs in order of user count."""
    panels = (("requests/s (HTTP)", lambda r: r.rps), ("translate p95, ms", lambda r: r.p95),
              ("time to first token p95, ms", lambda r: r.ttft_p95))
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4.5))
    counts = sorted({r.users for series in runs.values() for r in series})
    for ax, (label, value) in zip(axes, panels, strict=True):
        for name, series in runs.items():
            ax.plot([r.users for r in series], [_nan(value(r)) for r in series], "o-", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.set_xlabel("users")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle(title)
    _save(fig, png)


def stage_chart(directory: Path, png: Path, title: str) -> None:
    """From `directory`'s timeline.csv and stages.csv (loadtests/staged.py)."""
    timeline, stages = read_csv(directory / "timeline.csv"), read_csv(directory / "stages.csv")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    x = [float(r["t"]) for r in timeline]
    top.plot(x, [int(r["users"]) for r in timeline], color="grey", label="users")
    top.set_ylabel("users")
    replicas = top.twinx()
    replicas.step(x, [_number(r["replicas"]) for r in timeline], where="post", color="tab:green", label="replicas")
    replicas.set_ylabel("replicas")
    counts = [r["replicas"] for r in timeline if r["replicas"]]  # empty where /v1/models gave no count
    replicas.set_ylim(bottom=0, top=max(map(int, counts), default=1) + 0.5)
    replicas.yaxis.set_major_locator(MaxNLocator(integer=True))
    top.legend(loc="upper left")
    replicas.legend(loc="upper right")
    spans = [(float(s["start_s"]), float(s["end_s"])) for s in stages]
    for label, column in (("requests/s", "rps"), ("translate p95, ms / 100", "p95_ms")):
        scale = 100 if column == "p95_ms" else 1
        bottom.hlines([_number(s[column]) / scale for s in stages], [a for a, _ in spans], [b for _, b in spans],
                      color="tab:blue" if column == "rps" else "tab:orange", label=label)
    for (start, _), stage in zip(spans, stages):
        for ax in (top, bottom):
            ax.axvline(start, color="black", alpha=0.2)
        bottom.annotate(f"{stage['stage']}: {stage['failures']} failed", (start, 0), fontsize="small",
                        xytext=(2, 2), textcoords="offset points")
    bottom.set_ylim(bottom=0)
    bottom.set_xlabel("seconds")
    bottom.legend(fontsize="small")
    fig.suptitle(title)
    _save(fig, png)


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def _save(fig, png: Path) -> None:
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
