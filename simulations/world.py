"""A scenario made concrete, the same for both engines: the topology with its subscribers,
each link's properties and durability, the failures as windows of steps, and the routing of
one class of publish.

A class is what decides a publish's path: (publisher entry, node, key number), which fix the
node, the exchange, the routing key and the headers. It is routed once, by topology.flow (the
planner's model, which routes with gateway.routing and converges dynamic routes' interest
tables as the nodes do), giving the hops its copies make and the queues they reach.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

from simulations.recovery import Recovery, carriers
from simulations.scenario import LinkProps, Scenario
from simulations.workload import headers_of, routing_key, with_subscribers
from topology.flow import PlainForest, Tracer
from topology.model import Publisher, Topology

#: A directed link as the tables name it: "from>to" (">" is never in a node name).
LinkId = str
Path = tuple[LinkId, ...]


def link_id(source: str, destination: str) -> LinkId:
    return f"{source}>{destination}"


def link_ends(link: LinkId) -> tuple[str, str]:
    source, _, destination = link.partition(">")
    return source, destination


@dataclass(frozen=True)
class ClassRoute:
    """Where one publish of a class goes: each hop a copy makes, with the hops before it, and
    each copy a queue gets, with its path; each with how many copies took it."""

    crossings: tuple[tuple[LinkId, Path, int], ...]
    deliveries: tuple[tuple[str, str, Path, int], ...]


@dataclass(frozen=True)
class Window:
    """Links down from step `first` to step `end` (excluded); `kept`: stalled, not dropped, so
    even transient ones lose nothing (simulations.recovery.Downtime)."""

    first: int
    end: int
    links: frozenset[LinkId]
    kept: bool = False


class World:
    """The scenario, concrete (see the module's docstring)."""

    def __init__(self, scenario: Scenario, forests: bool = True) -> None:
        self.scenario = scenario
        self.topology: Topology = with_subscribers(scenario, reachable_only=True)
        self._transient = _transient_pairs(self.topology)
        self._recovery = Recovery(self.topology, scenario.failures, scenario.restart)
        #: Route publishes on plain forests in aggregate (simulations.hops); the tests turn it
        #: off to compare with routing every class by its paths.
        self._forests = forests
        self._forest: dict[str, PlainForest | None] = {}

    @cached_property
    def _trace(self) -> Tracer:
        """The planner's model, built on first use (converging interest is the World's costly
        part; the Spark engine's driver reads only links' properties and durability)."""
        return Tracer(self.topology)

    def forest(self, entry: int, node: str) -> tuple[PlainForest, int] | None:
        """Where publisher entry `entry` publishes on `node` into a plain forest: the forest
        and the number of the node's tree (simulations.hops routes those publishes), else
        None (each class is routed by `route`)."""
        forest = self.plain_forest(self.scenario.publishers[entry].exchange)
        tree = forest.tree_of(node) if forest is not None else None
        return None if forest is None or tree is None else (forest, tree)

    def plain_forest(self, exchange: str) -> PlainForest | None:
        """The exchange's routing as a plain forest, if it is one and forests are on."""
        if not self._forests:
            return None
        if exchange not in self._forest:
            self._forest[exchange] = self._trace.plain_forest(exchange)
        return self._forest[exchange]

    def message(self, entry: int, key: int) -> tuple[str, str, dict[str, Any]]:
        """What publisher entry `entry` sends with key number `key`: (exchange, routing key,
        headers)."""
        keys = self.scenario.keys
        return self.scenario.publishers[entry].exchange, routing_key(keys, key), headers_of(keys, key)

    def route(self, node: str, exchange: str, key: str, headers: dict[str, Any] | None) -> ClassRoute:
        """Where one message published on `node` goes."""
        result = self._trace(Publisher(node, exchange, key), headers)
        crossings = Counter(
            (link_id(*hop), tuple(link_id(*h) for h in before)) for hop, before in result.crossings
        )
        deliveries = Counter(
            (where[0], where[1], tuple(link_id(*hop) for hop in path)) for where, path in result.deliveries
        )
        return ClassRoute(
            tuple((link, before, copies) for (link, before), copies in sorted(crossings.items())),
            tuple((*delivery, copies) for delivery, copies in sorted(deliveries.items())),
        )

    def durable(self, link: LinkId) -> bool:
        """Whether a link buffers while it is down (durable routes, links and federations) or
        loses what it carries (every declaration between the two nodes is transient)."""
        return frozenset(link_ends(link)) not in self._transient

    def props(self, link: LinkId) -> LinkProps:
        """The link's properties: the scenario's default, overridden by a rule for the two
        nodes' regions, then by one for the two nodes (either direction)."""
        source, destination = link_ends(link)
        nodes = self.topology.nodes
        regions = (
            {nodes[source].region, nodes[destination].region}
            if source in nodes and destination in nodes
            else set()
        )
        values = {f.name: getattr(self.scenario.link_default, f.name) for f in fields(LinkProps)}
        for rule in self.scenario.region_rules:
            if set(rule.ends) == regions:
                values.update(rule.values)
        for rule in self.scenario.pair_rules:
            if set(rule.ends) == {source, destination}:
                values.update(rule.values)
        return LinkProps(**values)

    def recovery(self) -> dict[LinkId, list[tuple[float, float]]]:
        """Per directed link of the topology (every direction a route or federation carries
        messages in), its down intervals (down_from, up_at) in seconds, as the federation
        recovers from the scenario's failures (simulations.recovery)."""
        return {
            link_id(*pair): [(down.down_from, down.up_at) for down in self._recovery.link(*pair)]
            for pair in sorted(carriers(self.topology))
        }

    def windows(self, links: Iterable[LinkId]) -> list[Window]:
        """The links' downtimes (simulations.recovery) as windows of steps: from the step a
        link goes down in to the first step starting at or after it is back. A link's windows
        that meet in steps are one (kept only if both were), so a link that is down at a step
        is back at the end of the one window holding it."""
        found: dict[tuple[int, int, bool], set[LinkId]] = {}
        for link in links:
            merged: list[tuple[int, int, bool]] = []
            for down in self._recovery.link(*link_ends(link)):
                first, end = self.steps_of(down.down_from, down.up_at)
                if merged and first <= merged[-1][1]:
                    last = merged[-1]
                    merged[-1] = (last[0], max(last[1], end), last[2] and down.kept)
                elif first < end:
                    merged.append((first, end, down.kept))
            for window in merged:
                found.setdefault(window, set()).add(link)
        return [
            Window(first, end, frozenset(down), kept) for (first, end, kept), down in sorted(found.items())
        ]

    def dead_steps(self, node: str) -> list[tuple[int, int]]:
        """The steps [first, end) in which `node` is dead (killed and not yet ready again): its
        publishers' messages are refused."""
        return [self.steps_of(start, ready) for start, ready in self._recovery.dead(node)]

    def steps_of(self, start: float, end: float) -> tuple[int, int]:
        """Seconds [start, end) as the steps [first, end) they touch, within the run."""
        step_ms, steps = self.scenario.step_ms, self.scenario.steps
        return min(steps, math.floor(start * 1000 / step_ms)), min(steps, math.ceil(end * 1000 / step_ms))


@dataclass(frozen=True)
class Walk:
    """A copy's way along a path (Outages.walk): the step it reaches each link at, the step
    it is past the path at, whether a link lost it (the last one reached) and whether a link
    was down when it got there."""

    at: tuple[int, ...]
    after: int
    lost: bool
    through_down: bool


class Outages:
    """Which links are down when, by the failure windows over some links, and how copies
    cross them: a link down and transient loses what reaches it; one down that holds what
    reaches it (durable, or stalled) lets it on when it comes back, so the links after it
    see it then, not when it was published."""

    def __init__(self, world: World, windows: list[Window]) -> None:
        self.world = world
        self.windows = windows
        self._walks: dict[tuple[Path, int], Walk] = {}

    def failing(self, step: int) -> bool:
        """Some window is open at this step."""
        return any(w.first <= step < w.end for w in self.windows)

    def down(self, link: LinkId, step: int) -> bool:
        return any(w.first <= step < w.end and link in w.links for w in self.windows)

    def down_links(self, step: int) -> frozenset[LinkId]:
        """Every link down at this step."""
        return frozenset().union(*(w.links for w in self.windows if w.first <= step < w.end))

    def losing(self, link: LinkId, step: int) -> bool:
        """The link is down and transient at this step, and dropped (not stalled): what
        arrives now is lost."""
        return not self.world.durable(link) and any(
            w.first <= step < w.end and link in w.links and not w.kept for w in self.windows
        )

    def release(self, link: LinkId, step: int) -> int:
        """The step at which what reaches the link at `step` crosses it: the end of its
        window if it is down and holds what arrives (durable, or stalled), else `step`."""
        ends = [
            w.end
            for w in self.windows
            if w.first <= step < w.end and link in w.links and (w.kept or self.world.durable(link))
        ]
        return max(ends, default=step)

    def walk(self, path: Path, step: int) -> Walk:
        """A copy published at `step` along `path`: the step it reaches each link at (a link
        down that holds it lets it on when it comes back), up to the one that loses it if one
        does."""
        if not self.failing(step):
            return Walk((step,) * len(path), step, False, False)
        key = (path, step)
        if key not in self._walks:
            at, lost, through_down = [], False, False
            for link in path:
                at.append(step)
                if self.losing(link, step):
                    lost = True
                    break
                through_down = through_down or self.down(link, step)
                step = self.release(link, step)
            self._walks[key] = Walk(tuple(at), step, lost, through_down)
        return self._walks[key]

    def blocked(self, path: Path, step: int) -> bool:
        """A copy published at `step` is lost on the way along `path`."""
        return self.walk(path, step).lost

    def wait_ms(self, link: LinkId, step: int) -> int:
        """How long a link that is down and holds what arrives (durable, or stalled) holds it."""
        waits = [
            (w.end - step) * self.world.scenario.step_ms
            for w in self.windows
            if w.first <= step < w.end and link in w.links and (w.kept or self.world.durable(link))
        ]
        return max(waits, default=0)


def _transient_pairs(topology: Topology) -> set[frozenset[str]]:
    """Pairs of nodes whose every link and route is transient (federations always buffer)."""
    durable: dict[frozenset[str], bool] = {}
    for link in topology.effective_links():
        pair = frozenset((link.opener, link.peer))
        durable[pair] = durable.get(pair, False) or link.durable
    for route in topology.routes:
        pair = frozenset((route.source, route.destination))
        durable[pair] = durable.get(pair, False) or route.durable
    for federation in topology.federations:
        durable[frozenset((federation.child, federation.parent))] = True
    return {pair for pair, kept in durable.items() if not kept}
