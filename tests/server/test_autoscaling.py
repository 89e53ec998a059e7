"""The autoscaling flags of `python -m server` and the profile they build (runtime.autoscaling), without Ray."""

import logging

import pytest

from server.__main__ import parse_args
from server.runtime.autoscaling import (
    ReplicaCount,
    Scaling,
    autoscaling_config,
    graceful_shutdown_timeout_s,
    target_ongoing_requests,
)
from server.runtime.deployment import ModelServer, build
from server.runtime.ray_main import scaling_of
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
        "min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 32,
        "upscale_delay_s": 10.0, "downscale_delay_s": 60}
    assert graceful_shutdown_timeout_s(settings) == 65
    assert target_ongoing_requests(Settings(max_batch_rows=1)) == 1
    assert graceful_shutdown_timeout_s(Settings(request_timeout_s=10, drain_timeout_s=30)) == 35


def test_given_delays_replace_the_profiles():
    config = autoscaling_config(Settings(), Scaling(1, 2, upscale_delay_s=0.5, downscale_delay_s=3))
    assert (config["upscale_delay_s"], config["downscale_delay_s"]) == (0.5, 3)


def test_build_autoscales_with_scaling_and_keeps_a_fixed_count_without():
    settings = Settings()
    scaled = build(settings, registry=None, scaling=Scaling(1, 2))._bound_deployment._deployment_config
    assert scaled.autoscaling_config.max_replicas == 2
    assert scaled.autoscaling_config.target_ongoing_requests == target_ongoing_requests(settings)
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
