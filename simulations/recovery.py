"""When each link is down and when it comes back, as the federation recovers it (issue 27).

A link between two nodes is a connection one of them holds (the opener: a pull route's
destination, a push route's source, a federation's child; topology.model), retried by
federation.link on `federation.timing.Backoff`'s schedule from the moment it dropped (2, 4, 8
... 64 s between attempts, then every 64 s; a connection that worked resets it, a refused
connect counts as an attempt). So a failure's end is not its links' end:

- a node killed from `start` to `end` is ready `restart` s after `end`: the connections it
  holds come back when it is ready (its first attempt), those others hold towards it at their
  first retry at or after that (the first at `start` + 2, then + 6, + 14, + 30, + 62 ...);
- a link cut from `start` to `end` drops at `start` at both ends; its holder's retries are
  refused until `end`;
- a partition silences the connections between its groups from `start` on; each holder
  notices after MISSED_HEARTBEATS heartbeat intervals without a byte (20 s), then retries;
  an attempt made while partitioned hangs until the connect timeout (10 s), or succeeds when
  the partition heals before that. A partition healed before anyone noticed drops nothing:
  its connections only stall (`Downtime.kept`: nothing is lost, what was sent waits).

Times are seconds from the start of the run; a down interval is [down_from, up_at).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from federation.timing import BACKOFF, CONNECT_TIMEOUT, HEARTBEAT, MISSED_HEARTBEATS, Backoff
from simulations.scenario import Failure
from topology.model import Topology

Interval = tuple[float, float]


class Downtime(NamedTuple):
    """A link down from `down_from` to `up_at` (s); `kept`: it stalled rather than dropped, so
    even a transient one loses nothing."""

    down_from: float
    up_at: float
    kept: bool = False


class Recovery:
    """Each node's dead time and each connection's and link's downtimes, for a topology and
    its failures."""

    def __init__(
        self,
        topology: Topology,
        failures: Iterable[Failure],
        restart: float,
        backoff: Backoff = BACKOFF,
        heartbeat: float = HEARTBEAT,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self.backoff = backoff
        self.detection = MISSED_HEARTBEATS * heartbeat
        self.connect_timeout = connect_timeout
        self._dead: dict[str, list[Interval]] = {}
        self._cuts: dict[frozenset[str], list[Interval]] = {}
        self._partitions: list[tuple[float, float, dict[str, int]]] = []
        for failure in failures:
            if failure.node is not None:
                ready = failure.end + (restart if failure.restart is None else failure.restart)
                self._dead.setdefault(failure.node, []).append((failure.start, ready))
            elif failure.link is not None:
                self._cuts.setdefault(frozenset(failure.link), []).append((failure.start, failure.end))
            elif failure.partition is not None:
                group = {node: number for number, names in enumerate(failure.partition) for node in names}
                self._partitions.append((failure.start, failure.end, group))
        self._carriers = carriers(topology)

    def dead(self, node: str) -> list[Interval]:
        """When `node` accepts nothing: from its kill until it is ready."""
        return sorted(self._dead.get(node, []))

    def link(self, source: str, destination: str) -> list[Downtime]:
        """When messages from `source` to `destination` cannot cross: while a connection that
        carries them is down (the default carrier is a pull route's: the destination's)."""
        found = [
            down
            for holder, far in sorted(self._carriers.get((source, destination), {(destination, source)}))
            for down in self.connection(holder, far)
        ]
        return _merged(found)

    def connection(self, holder: str, far: str) -> list[Downtime]:
        """The downtimes of the connection `holder` opens to `far`."""
        found = []
        since = 0.0
        while (drop := self._next_drop(holder, far, since)) is not None:
            down_from, seen, ready = drop
            if ready is not None:  # the holder itself was killed: its new process connects
                up = self._reconnect(holder, far, ready, immediately=True)
            elif seen is not None:
                up = self._reconnect(holder, far, seen, immediately=False)
            else:  # a partition healed before it was noticed
                up = self._partition_end(holder, far, down_from)
            found.append(Downtime(down_from, up, kept=ready is None and seen is None))
            since = up
        return found

    def _next_drop(
        self, holder: str, far: str, since: float
    ) -> tuple[float, float | None, float | None] | None:
        """The first failure at or after `since` that reaches the connection: (when it stops
        carrying, when its holder sees it end (None: never), when the holder is ready again
        if it was the holder that died)."""
        drops: list[tuple[float, float | None, float | None]] = []
        drops += [(start, None, ready) for start, ready in self._dead.get(holder, []) if start >= since]
        drops += [(start, start, None) for start, _ in self._dead.get(far, []) if start >= since]
        drops += [
            (start, start, None)
            for start, _ in self._cuts.get(frozenset((holder, far)), [])
            if start >= since
        ]
        for start, end in self._apart(holder, far):
            if start >= since:
                drops.append((start, start + self.detection if end - start >= self.detection else None, None))
        return min(drops, key=lambda drop: drop[0], default=None)

    def _reconnect(self, holder: str, far: str, at: float, immediately: bool) -> float:
        """When the holder's attempts, from `at` on, first succeed: at once if it has just
        started (`immediately`), else after the schedule's first delay."""
        delays = self.backoff.delays()
        attempt = at if immediately else at + next(delays)
        while True:
            died = [(start, ready) for start, ready in self._dead.get(holder, []) if at < start <= attempt]
            if died:  # the holder died again while retrying: a new process, a fresh schedule
                at, attempt = min(died)[0], min(died)[1]
                delays = self.backoff.delays()
                continue
            if any(start <= attempt < end for start, end in self._refusing(holder, far)):
                at, attempt = attempt, attempt + next(delays)
                continue
            heals = [end for start, end in self._apart(holder, far) if start <= attempt < end]
            if heals:
                if max(heals) < attempt + self.connect_timeout:
                    return max(heals)
                at, attempt = attempt, attempt + self.connect_timeout + next(delays)
                continue
            return attempt

    def _refusing(self, holder: str, far: str) -> Iterator[Interval]:
        """When a connect from `holder` to `far` is refused at once: the far end dead, or the
        link between them cut."""
        yield from self._dead.get(far, [])
        yield from self._cuts.get(frozenset((holder, far)), [])

    def _apart(self, one: str, other: str) -> Iterator[Interval]:
        """The partitions with `one` and `other` in different groups (a node no group names
        is in the group of the rest)."""
        for start, end, group in self._partitions:
            if group.get(one, -1) != group.get(other, -1):
                yield start, end

    def _partition_end(self, one: str, other: str, start: float) -> float:
        return max(end for begin, end in self._apart(one, other) if begin == start)


def carriers(topology: Topology) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """Per direction (source, destination) messages cross, the connections (holder, far end)
    that carry them: each route's link, and a federation's peering (the child's) both ways."""
    found: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for route in topology.routes:
        found.setdefault((route.source, route.destination), set()).add((route.holder, route.far_end))
    for federation in topology.federations:
        peering = (federation.child, federation.parent)
        found.setdefault((federation.child, federation.parent), set()).add(peering)
        found.setdefault((federation.parent, federation.child), set()).add(peering)
    return found


def _merged(downtimes: list[Downtime]) -> list[Downtime]:
    """Overlapping downtimes as one (kept only if every part was)."""
    merged: list[Downtime] = []
    for down in sorted(downtimes):
        if merged and down.down_from <= merged[-1].up_at:
            last = merged[-1]
            merged[-1] = Downtime(last.down_from, max(last.up_at, down.up_at), last.kept and down.kept)
        else:
            merged.append(down)
    return merged
