"""The waiting places of an engine in a process of its own: the sequences sent to it and not yet admitted or
cancelled, counted in shared memory. The server's side takes places before it sends (`take`: QueueFull at once,
as with the engine in the server's process; given back if the send fails); the engine's scheduler gives them
back as sequences leave its waiting queue, admitted or cancelled (`give_back` as its `left_waiting` hook)."""

from __future__ import annotations

from ..errors import QueueFull


class QueuedCount:
    def __init__(self, context):
        """`context`: the multiprocessing context the engine process is started with."""
        self.shared = context.Value("q", 0)

    @property
    def value(self) -> int:
        return self.shared.value

    def take(self, count: int, limit: int) -> None:
        """`count` more places, or QueueFull (none taken) if more than `limit` would then be taken."""
        with self.shared.get_lock():
            if self.shared.value + count > limit:
                raise QueueFull(f"the queue holds {self.shared.value} waiting sequences; at most {limit}", limit=limit)
            self.shared.value += count

    def give_back(self, count: int) -> None:
        with self.shared.get_lock():
            self.shared.value -= count
