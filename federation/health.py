"""Whether a route or a federation's peering forwards: Operational, Waiting or Failed, since
when, and the last error, for `routes.list` and `federations.list`.

A link's state says whether the connection is up; a route on an Operational link can still
fail (its source queue deleted, the parent refusing the exchange) and be retried on the
link's backoff schedule. `Health` is what the route itself knows; `combined` folds in the
link's, because a route cannot forward while its link is down.
"""

from __future__ import annotations

import time
from typing import Any

from federation.link import ends_connection

OPERATIONAL = "Operational"
WAITING = "Waiting"
FAILED = "Failed"


class Health:
    """A route's own state: Waiting until it first forwards on a connection, Operational once
    it consumes its source, Failed (with the error) from a failed run until the next one
    consumes again. `since` (time.time()) is when the state last changed: a route failing
    over and over keeps the time of its first failure."""

    def __init__(self) -> None:
        self.state = WAITING
        self.last_error = ""
        self.since = time.time()

    def operational(self) -> None:
        self._set(OPERATIONAL, "")

    def failed(self, error: str) -> None:
        self._set(FAILED, error)

    def ended(self, error: Exception, text: str) -> None:
        """A run ended with `error`: Failed (with `text`), unless the connection ended it,
        which the link's state reports (the route waits for the next connection)."""
        if ends_connection(error):
            self._set(WAITING, "")
        else:
            self.failed(text)

    def _set(self, state: str, error: str) -> None:
        if state != self.state:
            self.since = time.time()
        self.state, self.last_error = state, error

    def record(self) -> dict[str, Any]:
        """The fields `routes.list` and `federations.list` records carry."""
        return {"state": self.state, "last_error": self.last_error, "since": self.since}


def combined(health: Health, link: dict[str, Any]) -> dict[str, Any]:
    """The route's state as a user sees it: the link's (`link: <its error>`) while the link is
    not Operational (the route then cannot forward), else the route's own."""
    if link["state"] == OPERATIONAL:
        return health.record()
    state = FAILED if link["state"] == FAILED else WAITING
    error = f"link {link['state']}: {link['last_error']}" if link["last_error"] else f"link {link['state']}"
    return {"state": state, "last_error": error, "since": link.get("since") or health.since}
