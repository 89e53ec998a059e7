"""Serve's autoscaling policy for ModelServer: replicas follow the batch rows the load asks for, not HTTP requests.

What limits a replica is its engine's batch rows (a beam-4 request holds 4, a document's chunk one per sentence,
a glossary adds rows), and a replica that serves HTTP itself (`replica_http`) passes no request through Serve, so
Serve's own count reads zero there. Each replica therefore reports the rows its engines hold and the rows their
waiting sequences ask for (`DEMAND_ROWS`, ModelServer.record_autoscaling_stats); Serve's controller keeps each
replica's reports over the look-back window and hands this policy their time-weighted means, every 0.1 s. Serve
applies the result only once it has asked for the same direction for upscale_delay_s or downscale_delay_s on end
(its wrapper around every custom policy), then clips it to min/max replicas.

The controller imports this module by value (cloudpickle): it imports nothing of the project.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEMAND_ROWS = "demand_rows"  # the custom metric: rows held + rows waiting, over the replica's engines


@dataclass(frozen=True)
class RowsPolicy:
    """`rows_per_replica`: the rows a replica decodes at once (max_batch_rows). A replica is added while the demand
    exceeds what the replicas hold at `target_utilisation` of their rows; one is removed while one fewer would hold
    the demand at `downscale_utilisation`. Between the two the count stays: load that moves inside that band (a
    closed-loop client between requests, a wave of short requests) changes nothing."""

    rows_per_replica: int
    target_utilisation: float = 1.0
    downscale_utilisation: float = 0.5

    def replicas_for(self, demand_rows: float, current: int) -> int:
        """The replica count `demand_rows` asks for when `current` replicas run (before Serve's delays and bounds)."""
        fewest = math.ceil(demand_rows / (self.rows_per_replica * self.target_utilisation))
        roomy = math.ceil(demand_rows / (self.rows_per_replica * self.downscale_utilisation))
        return min(max(current, fewest), roomy)

    def __call__(self, ctx) -> tuple[int, dict]:
        """Serve's policy call (ctx: ray.serve.config.AutoscalingContext). Requests Serve queues in front of the
        replicas (when every one is at max_ongoing_requests) count a row each: they ask for one at least."""
        demand = sum((ctx.aggregated_metrics or {}).get(DEMAND_ROWS, {}).values()) + (ctx.total_queued_requests or 0)
        wanted = self.replicas_for(demand, ctx.target_num_replicas)
        return max(ctx.capacity_adjusted_min_replicas, min(ctx.capacity_adjusted_max_replicas, wanted)), {}
