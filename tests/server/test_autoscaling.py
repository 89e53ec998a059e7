"""The autoscaling flags of `python -m server` and the profile they build (runtime.autoscaling), without Ray."""

import logging

import pytest

from server.__main__ import parse_args
from server.runtime.autoscaling import (
    ReplicaCount,
    Scaling,
    autoscaling_config,
    graceful_shutdown_timeout_s,
)
from server.runtime.deployment import ModelServer, build
from server.runtime.ray_main import scaling_of
from server.runtime.rows_policy import RowsPolicy
from server.settings import Settings


def test_flags_give_bounds_and_delays():
    args, _ = parse_args(["--min-replicas", "1", "--max-replicas", "3", "--upscale-delay-s", "2",
                          "--downscale-delay-s", "7.5"])
    assert scaling_of(args) == Scaling(1, 3, 2.0, 7.5)
    assert scaling_of(parse_args([])[0]) is None


@pytest.mark.parametrize("argv, message", [
    (["--max-replicas", "2"], "both --min-replicas and --max-replicas"),
    (["--min-replicas", "3", "--max-replicas", "2"], "min_replicas <= max_replicas"),
    (["--min-replicas", "0", "--max-replicas", "2"], "min_replicas <= max_replicas"),
    (["--upscale-delay-s", "2"], "need --min-replicas and --max-replicas"),
    (["--replicas", "2", "--min-replicas", "1", "--max-replicas", "2"], "not both"),
    (["--min-replicas", "1", "--max-replicas", "2", "--downscale-delay-s", "-1"], "at least 0"),
    (["--no-ray", "--min-replicas", "1", "--max-replicas", "2"], "not --no-ray"),
])
def test_flags_that_disagree_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_profile_follows_the_batch_rows_and_the_longest_request():
    settings = Settings(max_batch_rows=64, request_timeout_s=60, drain_timeout_s=30)
    assert autoscaling_config(settings, Scaling(1, 4)) == {
        "min_replicas": 1, "max_replicas": 4, "upscale_delay_s": 10.0, "downscale_delay_s": 60,
        "metrics_interval_s": 1.0, "look_back_period_s": 5.0,
        "policy": {"policy_function": "server.runtime.rows_policy:RowsPolicy",
                   "policy_kwargs": {"rows_per_replica": 64, "target_utilisation": 1.0,
                                     "downscale_utilisation": 0.5}}}
    assert graceful_shutdown_timeout_s(settings) == 65
    assert graceful_shutdown_timeout_s(Settings(request_timeout_s=10, drain_timeout_s=30)) == 35


def test_given_delays_replace_the_profiles():
    config = autoscaling_config(Settings(), Scaling(1, 2, upscale_delay_s=0.5, downscale_delay_s=3))
    assert (config["upscale_delay_s"], config["downscale_delay_s"]) == (0.5, 3)


def test_build_autoscales_with_scaling_and_keeps_a_fixed_count_without():
    settings = Settings()
    scaled = build(settings, registry=None, scaling=Scaling(1, 2))._bound_deployment._deployment_config
    assert scaled.autoscaling_config.max_replicas == 2
    assert scaled.autoscaling_config.policy.get_policy() is RowsPolicy
    assert scaled.graceful_shutdown_timeout_s == graceful_shutdown_timeout_s(settings)
    fixed = build(settings, registry=None, replicas=3)._bound_deployment._deployment_config
    assert (fixed.autoscaling_config, fixed.num_replicas) == (None, 3)


def test_replica_count_logs_each_change_once(caplog):
    count = ReplicaCount(logging.getLogger("test"))
    with caplog.at_level(logging.INFO):
        assert [count.update(n) for n in (1, 1, 2, 2, 1)] == [True, False, True, False, True]
    assert [r.getMessage() for r in caplog.records] == ["replicas: ? -> 1", "replicas: 1 -> 2", "replicas: 2 -> 1"]


# Python itself calls the (async) __del__ again when it collects the object, making a coroutine nobody awaits
@pytest.mark.filterwarnings("ignore:coroutine .*__del__' was never awaited:RuntimeWarning")
def test_a_replica_being_removed_is_not_ready():
    """Serve calls a removed replica's __del__ once it has finished its requests; from then its probes say so."""
    import asyncio

    server = ModelServer.func_or_class.__new__(ModelServer.func_or_class)
    server.loaded, server.draining = {}, False
    assert server.health(5) == (True, "0 model(s) loaded")
    asyncio.run(server.__del__())  # what Serve runs on a replica it removes, after its requests finished
    assert server.health(5)[0] is False and "draining" in server.health(5)[1]


# ---- the policy (runtime.rows_policy) under Serve's own wrapper: its delays and bounds ----------------------------

class Controller:
    """Serve's controller as a policy sees it: the policy wrapped as Serve wraps it (delays, bounds), called every
    0.1 s of a clock of its own, on the mean demand each replica reports."""

    def __init__(self, monkeypatch, scaling: Scaling, settings: Settings = Settings(max_batch_rows=64)):
        from ray.serve import autoscaling_policy
        from ray.serve.config import AutoscalingConfig

        self.config = AutoscalingConfig(**autoscaling_config(settings, scaling))
        self.decide = autoscaling_policy._apply_autoscaling_config(self.config.policy.get_policy()(
            **self.config.policy.policy_kwargs))
        self.now, self.replicas, self.state, self.changes = 0.0, scaling.min_replicas, {}, []
        monkeypatch.setattr(autoscaling_policy.time, "time", lambda: self.now)

    def run(self, seconds: float, demand_rows: list[float] | float) -> int:
        """`demand_rows` reported by the replicas for `seconds` (a list: one value per tick, cycled)."""
        from ray.serve.config import AutoscalingContext

        values = demand_rows if isinstance(demand_rows, list) else [demand_rows]
        for tick in range(round(seconds / 0.1)):
            self.now += 0.1
            total = values[tick % len(values)]
            per_replica = {f"replica-{i}": total / self.replicas for i in range(self.replicas)}
            ctx = AutoscalingContext(
                deployment_id=None, deployment_name="ModelServer", app_name="s2s",
                current_num_replicas=self.replicas, target_num_replicas=self.replicas,
                running_replicas=list(per_replica), total_num_requests=0, total_queued_requests=0,
                aggregated_metrics={"demand_rows": per_replica}, raw_metrics={},
                capacity_adjusted_min_replicas=self.config.min_replicas,
                capacity_adjusted_max_replicas=self.config.max_replicas, policy_state=self.state,
                last_scale_up_time=None, last_scale_down_time=None, current_time=self.now, config=self.config)
            decision, self.state = self.decide(ctx)
            if decision != self.replicas:
                self.changes.append((round(self.now, 1), decision))
                self.replicas = decision
        return self.replicas


def test_demand_above_a_replicas_rows_for_the_upscale_delay_adds_one(monkeypatch):
    controller = Controller(monkeypatch, Scaling(1, 3, upscale_delay_s=5, downscale_delay_s=20))
    assert controller.run(4.5, 100) == 1  # 100 rows against 64: not yet for the delay
    assert controller.run(1, 100) == 2
    assert controller.run(60, 100) == 2  # 100 rows on 2 × 64: held, and never removed while it lasts
    assert controller.run(19, 20) == 2 and controller.run(2, 20) == 1  # 20 rows: one replica holds them at half


def test_load_that_moves_inside_the_band_changes_nothing(monkeypatch):
    """On two replicas, demand swinging between 40 and 120 rows (one replica's half and two replicas' whole):
    neither bound holds for a delay, so the count stays; a dip below the band shorter than the delay too."""
    controller = Controller(monkeypatch, Scaling(1, 2, upscale_delay_s=5, downscale_delay_s=20))
    controller.run(6, 100)
    assert controller.changes == [(5.1, 2)]
    controller.run(120, [40] * 30 + [120] * 30)
    controller.run(120, [10] * 100 + [80] * 50)
    assert controller.changes == [(5.1, 2)]


def test_beam_demand_scales_where_greedy_demand_of_as_many_requests_does_not(monkeypatch):
    """48 requests in hand: greedy they hold 48 rows, which one replica has; at beam 4 they ask for 192."""
    greedy = Controller(monkeypatch, Scaling(1, 2, upscale_delay_s=5, downscale_delay_s=20))
    assert greedy.run(30, 48 * 1) == 1
    beam = Controller(monkeypatch, Scaling(1, 2, upscale_delay_s=5, downscale_delay_s=20))
    assert beam.run(30, 48 * 4) == 2
