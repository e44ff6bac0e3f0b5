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
    """Links down from step `first` to step `end` (excluded)."""

    first: int
    end: int
    links: frozenset[LinkId]


class World:
    """The scenario, concrete (see the module's docstring)."""

    def __init__(self, scenario: Scenario, forests: bool = True) -> None:
        self.scenario = scenario
        self.topology: Topology = with_subscribers(scenario, reachable_only=True)
        self._transient = _transient_pairs(self.topology)
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

    def windows(self, links: Iterable[LinkId]) -> list[Window]:
        """The failures as windows of steps over `links` (a node's failure takes every link at
        it down)."""
        links = list(links)
        step_ms, steps = self.scenario.step_ms, self.scenario.steps
        found = []
        for failure in self.scenario.failures:
            first = min(steps, math.floor(failure.start * 1000 / step_ms))
            end = min(steps, math.ceil(failure.end * 1000 / step_ms))
            if failure.link is not None:
                down = {link_id(*failure.link), link_id(*reversed(failure.link))}
            else:
                down = {link for link in links if failure.node in link_ends(link)}
            found.append(Window(first, end, frozenset(down)))
        return found


class Outages:
    """Which links are down when, by the failure windows over some links (a node's failure
    takes down those of them at the node)."""

    def __init__(self, world: World, windows: list[Window]) -> None:
        self.world = world
        self.windows = windows

    def failing(self, step: int) -> bool:
        """Some window is open at this step."""
        return any(w.first <= step < w.end for w in self.windows)

    def down(self, link: LinkId, step: int) -> bool:
        return any(w.first <= step < w.end and link in w.links for w in self.windows)

    def losing(self, link: LinkId, step: int) -> bool:
        return self.down(link, step) and not self.world.durable(link)

    def blocked(self, path: Path, step: int) -> bool:
        return any(self.losing(link, step) for link in path)

    def wait_ms(self, link: LinkId, step: int) -> int:
        """How long a durable link that is down holds what arrives now."""
        waits = [
            (w.end - step) * self.world.scenario.step_ms
            for w in self.windows
            if w.first <= step < w.end and link in w.links and self.world.durable(link)
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
