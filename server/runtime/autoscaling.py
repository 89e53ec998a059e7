"""Serve's autoscaling profile for ModelServer, derived from the settings (deploy/README.md explains the numbers),
and the replica count the application runs now.

Serve counts ongoing requests per replica (as its proxy and handles see them) and adds a replica while the mean
over the look-back window stays above the target for the upscale delay, removes one while it stays below for the
downscale delay. A request is one engine sequence at least, so the target is written in batch rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import Settings

# Load that lasts this long is load, not a burst: a few requests' time on a CPU replica, well under the time a
# new replica needs before it serves (start, model load, trace), so waiting longer only queues clients.
UPSCALE_DELAY_S = 10.0
# Past the longest request's deadline, what a removed replica still has to do: write the last answers, stop
# its engines.
SHUTDOWN_MARGIN_S = 5.0


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


def target_ongoing_requests(settings: Settings) -> int:
    """Half the batch rows: above it a replica still decodes everything it holds, and it keeps the other half
    for the growth that goes on while the new replica starts (Ray Serve LLM's default keeps the same
    ratio: target 16 of 32)."""
    return max(1, settings.max_batch_rows // 2)


def graceful_shutdown_timeout_s(settings: Settings) -> float:
    """How long a replica being removed may finish its requests (streams too): the longest one ends by its
    deadline (request_timeout_s), a --no-ray server's drain by drain_timeout_s; whichever is longer, plus the
    margin."""
    return max(settings.request_timeout_s, settings.drain_timeout_s) + SHUTDOWN_MARGIN_S


def autoscaling_config(settings: Settings, scaling: Scaling) -> dict:
    """Serve's autoscaling_config for ModelServer. The downscale delay is the longest request's time: a lull
    between waves of long requests keeps the replica. Serve's look-back window (the mean it decides on) stays
    its own 30 s: a shorter one must still exceed its deprecated metrics_interval_s, 10 s."""
    upscale = UPSCALE_DELAY_S if scaling.upscale_delay_s is None else scaling.upscale_delay_s
    downscale = settings.request_timeout_s if scaling.downscale_delay_s is None else scaling.downscale_delay_s
    return {"min_replicas": scaling.min_replicas, "max_replicas": scaling.max_replicas,
            "target_ongoing_requests": target_ongoing_requests(settings),
            "upscale_delay_s": upscale, "downscale_delay_s": downscale}


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
