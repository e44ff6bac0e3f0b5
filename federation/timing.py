"""The times a link lives by: its retry schedule, its heartbeat and how long one connection
attempt may take. Pure and standard library only, so the simulator (simulations.recovery)
predicts a link's recovery from the very values federation.link, the client and the manager
run with, without loading trio or the client."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

#: Seconds between a link's (and a peering's) heartbeats unless links.add says otherwise.
HEARTBEAT = 10
#: A connection whose peer sent nothing for this many heartbeat intervals is lost: how a
#: half-open connection is noticed (gateway.pump.Pump.keep_alive, which both ends run).
MISSED_HEARTBEATS = 2
#: Seconds one connection attempt (TCP connect plus the AMQP handshake) may take
#: (federation.client.connect's `timeout`).
CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Backoff:
    """The retry schedule: `first` seconds, doubling up to `ceiling`, then `ceiling` forever.

    The defaults are qpid's (2 s growing to 64 s, then every 64 s); the doubling is our reading,
    as the qpid documentation gives no growth law. Frozen, so one instance can be shared.
    """

    first: float = 2.0
    ceiling: float = 64.0

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.ceiling:
            raise ValueError(
                f"backoff needs 0 < first <= ceiling, not first={self.first}, ceiling={self.ceiling}"
            )

    def next_delay(self, previous: float | None) -> float:
        """The delay before the next retry, given the one before it (None after a reset)."""
        if previous is None:
            return self.first
        return min(previous * 2, self.ceiling)

    def delays(self) -> Iterator[float]:
        """The delays from a reset on, one per retry, forever."""
        delay = None
        while True:
            delay = self.next_delay(delay)
            yield delay


#: The schedule links retry on unless told otherwise (frozen: one instance serves them all).
BACKOFF = Backoff()
