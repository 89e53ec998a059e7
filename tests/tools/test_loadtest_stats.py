"""The load-test tooling's arithmetic: the SLO gates and percentiles over merged locust entries. A run through
`python -m loadtests.run` against the Ray Serve app it starts is the GPU check's dry run's serve step
(tests/e2e/test_gpu_check.py)."""

from __future__ import annotations

from loadtests.stats import Entries, RunSummary, Slo


def run(requests=100, failures=0, p95=100.0, ttft_p95=50.0) -> RunSummary:
    return RunSummary("base", 4, requests, failures, 10.0, 50.0, p95, 200.0, ttft_p95)


def test_slo_gates():
    slo = Slo(max_failure_ratio=0.01, max_p95_ms=1000, max_ttft_p95_ms=500)
    assert slo.violations(run()) == []
    assert slo.violations(run(failures=2)) == ["failure ratio 2.00% > 1.00%"]
    assert slo.violations(run(p95=1500)) == ["translate p95 1500 ms > 1000 ms"]
    assert slo.violations(run(ttft_p95=600)) == ["ttft p95 600 ms > 500 ms"]
    assert slo.violations(run(ttft_p95=None)) == []  # no streams: that gate has nothing to check
    assert slo.violations(run(requests=0)) == ["no requests completed"]


def test_percentiles_over_merged_entries():
    def entry(times: dict[str, int]) -> dict:
        return {"num_requests": sum(times.values()), "num_failures": 0, "start_time": 0.0,
                "last_request_timestamp": 10.0, "response_times": times}

    merged = Entries.merge([entry({"10": 90}), entry({"500": 9, "900": 1})])
    assert (merged.percentile(0.5), merged.percentile(0.95), merged.percentile(0.995)) == (10.0, 500.0, 900.0)
    assert merged.rate() == 10.0
    assert Entries.merge([]).percentile(0.95) is None
