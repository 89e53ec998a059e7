"""Which requests may be sent again when the replica serving them died before answering (runtime.replica_lost): each
route declares it. A route marked `@resendable` computes its answer from the request alone (a translation, a
generation, a detection, a listing), so doing its work twice changes nothing stored; one that stores something (a
glossary, a document job, a deletion) is not marked, since the dead replica may have stored it already. A read (GET,
HEAD) may always be sent again.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

from starlette.routing import BaseRoute, Match

Endpoint = TypeVar("Endpoint", bound=Callable)
READS = ("GET", "HEAD")


def resendable(endpoint: Endpoint) -> Endpoint:
    """Marks a route's endpoint as one whose work may run twice."""
    endpoint.resendable = True
    return endpoint


class Resending:
    """The rule over an app's routes (api.app.routers)."""

    def __init__(self, routes: Sequence[BaseRoute]):
        self.routes = routes

    def allows(self, scope: dict) -> bool:
        """Whether the request of `scope` (an ASGI HTTP scope) may be sent again: a read, or one to a route marked.
        The route is the one its path ends with, the longest: Serve's proxy sees the path under the application's
        route prefix, which it does not know."""
        if scope["method"] in READS:
            return True
        parts = scope["path"].split("/")
        for start in range(1, len(parts)):
            tail = {**scope, "path": "/" + "/".join(parts[start:]), "root_path": ""}
            route = next((r for r in self.routes if r.matches(tail)[0] is Match.FULL), None)
            if route is not None:
                return getattr(route.endpoint, "resendable", False)
        return False
