"""Serve's autoscaling profile for ModelServer, derived from the settings (deploy/README.md explains the numbers),
and the replica count the application runs now.

Replicas follow the batch rows the load asks for (runtime.rows_policy: each replica reports its engines' rows,
the policy compares them with what the replicas hold), in every serving mode: a replica serving HTTP itself passes
no request through Serve, so Serve's own count of ongoing requests cannot drive it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..settings import Settings
from .rows_policy import RowsPolicy

# Load that lasts this long is load, not a burst: a few requests' time on a CPU replica, well under the time a
# new replica needs before it serves (start, model load, trace), so waiting longer only queues clients.
UPSCALE_DELAY_S = 10.0
# Past the longest request's deadline, what a removed replica still has to do: write the last answers, stop
# its engines.
SHUTDOWN_MARGIN_S = 5.0
# A replica's report reaches the controller each second; the policy decides on the mean of the last 5 s of them
# (a few requests' time: a closed-loop client between two requests is not a drop in load). Serve wants the window
# longer than the interval.
METRICS_INTERVAL_S = 1.0
LOOK_BACK_S = 5.0


@dataclass(frozen=True)
class Scaling:
    """Replica bounds and, where given, delays that replace the profile's (--upscale-delay-s ...)."""

    min_replicas: int
    max_replicas: int
    upscale_delay_s: float | None = None
    downscale_delay_s: float | None = None

    def __post_init__(self):
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"replicas: need 1 <= min_replicas <= max_replicas, got {self.min_replicas} and "
                             f"{self.max_replicas}")
        for name in ("upscale_delay_s", "downscale_delay_s"):
            if (getattr(self, name) or 0) < 0:
                raise ValueError(f"{name} must be at least 0, got {getattr(self, name)}")


def graceful_shutdown_timeout_s(settings: Settings) -> float:
    """How long a replica being removed may finish its requests (streams too): the longest one ends by its
    deadline (request_timeout_s), a --no-ray server's drain by drain_timeout_s; whichever is longer, plus the
    margin."""
    return max(settings.request_timeout_s, settings.drain_timeout_s) + SHUTDOWN_MARGIN_S


def autoscaling_config(settings: Settings, scaling: Scaling) -> dict:
    """Serve's autoscaling_config for ModelServer. The downscale delay is the longest request's time: a lull
    between waves of long requests keeps the replica. Serve 2.60 pushes each replica's metrics to its controller
    every `metrics_interval_s` (its RAY_SERVE_*_AUTOSCALING_METRIC_PUSH_INTERVAL_S variables are read by nothing
    yet) and records them every fifth of the look-back window: a report each second, and a mean over the last
    `LOOK_BACK_S`, so that the delays, not the reports, set how fast the count follows."""
    upscale = UPSCALE_DELAY_S if scaling.upscale_delay_s is None else scaling.upscale_delay_s
    downscale = settings.request_timeout_s if scaling.downscale_delay_s is None else scaling.downscale_delay_s
    policy = RowsPolicy(settings.max_batch_rows)
    return {"min_replicas": scaling.min_replicas, "max_replicas": scaling.max_replicas,
            "upscale_delay_s": upscale, "downscale_delay_s": downscale,
            "metrics_interval_s": METRICS_INTERVAL_S, "look_back_period_s": LOOK_BACK_S,
            "policy": {"policy_function": f"{RowsPolicy.__module__}:{RowsPolicy.__name__}",
                       "policy_kwargs": asdict(policy)}}


def running_replicas(app: str, deployment: str) -> int:
    """The replicas of `deployment` in `app` that serve now (Serve's controller; call it off the event loop)."""
    from ray import serve

    status = serve.status().applications[app].deployments[deployment]
    return status.replica_states.get("RUNNING", 0)


class ReplicaCount:
    """The replica count last read, logged at every change (`python -m server`'s driver and each replica keep
    one)."""

    def __init__(self, log):
        self.log, self.value = log, None

    def update(self, count: int) -> bool:
        """True when `count` differs from the last one read (then logged)."""
        if count == self.value:
            return False
        self.log.info("replicas: %s -> %d", "?" if self.value is None else self.value, count)
        self.value = count
        return True
