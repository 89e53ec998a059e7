"""Run summaries from locust's JSON stats (--json-file), SLO gates, and the summary table.

Used by `python -m loadtests.run`. The JSON holds each entry's full response-time histogram, so percentiles
over several entries are exact. Entries are split by kind:
- HTTP (every request type but SSE): requests/s and the failure ratio;
- translate (names starting with /v1/translate): the p50/p95/p99 latency that the p95 gate checks;
- SSE "ttft": time to the first streamed token, checked by the time-to-first-token gate.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Entries:
    """Several locust stats entries merged into one."""

    requests: int = 0
    failures: int = 0
    start: float = math.inf
    end: float = -math.inf
    histogram: dict[int, int] | None = None

    @classmethod
    def merge(cls, entries: list[dict]) -> Entries:
        merged = cls(histogram={})
        for e in entries:
            merged.requests += e["num_requests"]
            merged.failures += e["num_failures"]
            merged.start = min(merged.start, e["start_time"])
            merged.end = max(merged.end, e["last_request_timestamp"] or e["start_time"])
            for ms, count in e["response_times"].items():
                merged.histogram[int(ms)] = merged.histogram.get(int(ms), 0) + count
        return merged

    def percentile(self, fraction: float) -> float | None:
        """The smallest recorded time (ms, rounded as locust rounds) with at least `fraction` of requests at or
        below it; None without requests."""
        total = sum(self.histogram.values())
        if not total:
            return None
        needed, seen = math.ceil(fraction * total), 0
        for ms in sorted(self.histogram):
            seen += self.histogram[ms]
            if seen >= needed:
                return float(ms)
        return float(max(self.histogram))

    def rate(self) -> float:
        return self.requests / (self.end - self.start) if self.requests and self.end > self.start else 0.0


@dataclass
class RunSummary:
    label: str
    users: int
    requests: int
    failures: int
    rps: float
    p50: float | None  # translate latency, ms
    p95: float | None
    p99: float | None
    ttft_p95: float | None

    @property
    def failure_ratio(self) -> float:
        return self.failures / self.requests if self.requests else 0.0


def summarize(json_path: Path, label: str, users: int) -> RunSummary:
    entries = json.loads(json_path.read_text())
    http = Entries.merge([e for e in entries if e["method"] != "SSE"])
    translate = Entries.merge([e for e in entries if e["method"] != "SSE" and e["name"].startswith("/v1/translate")])
    ttft = Entries.merge([e for e in entries if e["method"] == "SSE" and e["name"] == "ttft"])
    return RunSummary(label, users, http.requests, http.failures, http.rate(), translate.percentile(0.5),
                      translate.percentile(0.95), translate.percentile(0.99), ttft.percentile(0.95))


@dataclass(frozen=True)
class Slo:
    max_failure_ratio: float
    max_p95_ms: float
    max_ttft_p95_ms: float

    def violations(self, run: RunSummary) -> list[str]:
        """What this run broke; a gate whose measurement is missing (no streams, say) is skipped."""
        if not run.requests:
            return ["no requests completed"]
        problems = []
        if run.failure_ratio > self.max_failure_ratio:
            problems.append(f"failure ratio {run.failure_ratio:.2%} > {self.max_failure_ratio:.2%}")
        if run.p95 is not None and run.p95 > self.max_p95_ms:
            problems.append(f"translate p95 {run.p95:.0f} ms > {self.max_p95_ms:.0f} ms")
        if run.ttft_p95 is not None and run.ttft_p95 > self.max_ttft_p95_ms:
            problems.append(f"ttft p95 {run.ttft_p95:.0f} ms > {self.max_ttft_p95_ms:.0f} ms")
        return problems


def table(runs: list[RunSummary], slo: Slo) -> str:
    header = ("run", "users", "requests", "req/s", "fail %", "p50 ms", "p95 ms", "p99 ms", "ttft p95 ms", "SLO")
    rows = [header]
    for r in runs:
        problems = slo.violations(r)
        rows.append((r.label, str(r.users), str(r.requests), f"{r.rps:.1f}", f"{100 * r.failure_ratio:.2f}",
                     _ms(r.p50), _ms(r.p95), _ms(r.p99), _ms(r.ttft_p95), "; ".join(problems) or "pass"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = ["  ".join([*(cell.rjust(w) for cell, w in zip(row[:-1], widths, strict=True)), row[-1]])
             for row in rows]
    return "\n".join(lines[:1] + ["-" * len(lines[0])] + lines[1:])


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
