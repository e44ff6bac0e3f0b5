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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from functools import cache, cached_property
from typing import Any

from simulations.holding import Cuts, Message, cuts, expiring_links, limited_links, publishes_before
from simulations.recovery import Recovery, carriers
from simulations.scenario import LinkProps, Scenario
from simulations.workload import headers_of, routing_key, with_subscribers
from topology.flow import DYNAMIC, TRANSIENT_BINDING, PlainForest, Tracer
from topology.model import Publisher, Topology

#: A directed link as the tables name it: "from>to" (">" is never in a node name).
LinkId = str
Path = tuple[LinkId, ...]
#: Why a crossing over a dynamic hop is made: dynamic hops from it on, ending at the link of a
#: transient exchange route whose binding the hops' nodes advertised (see `withdrawals`).
Leaf = Path
#: A crossing on a copy's path that is not made while the bindings behind it are gone: its
#: position on the path, and its leaves (it is made while any leaf's binding stands).
Gate = tuple[int, tuple[Leaf, ...]]


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
    #: Per crossing, in order, the gates on its path, itself included (() if none has any).
    gates: tuple[tuple[Gate, ...], ...] = ()
    #: Per crossing, in order, the exchange its copy arrives on at the link's far end ("": it
    #: arrives on none) and whether that node drops it as looping.
    landings: tuple[tuple[str, bool], ...] = ()


def withdrawals(
    vias: dict[tuple[LinkId, Path], str], ends: set[Path], durable: Callable[[LinkId], bool]
) -> Callable[[LinkId, Path], tuple[Gate, ...]]:
    """The gates on the path of each crossing (link, path before it) of one class, from how
    each crossing was made (`vias`, topology.flow's) and the paths that end at a queue or
    where the copy is dropped as looping (`ends`).

    A transient exchange route's binding on its source exists only while the route's link is
    up (its queue dies with the connection), and the source advertises it upstream over its
    dynamic routes (federation.dynamic_route resends its adverts at once on every change). So a
    crossing over a dynamic hop is made only while some binding it is forwarded for stands:
    its leaves are the dynamic hops from it to each transient link (not durable in the model)
    that all its copies go on to; it has none (it is always made) if a copy stops after it (a
    queue, a loop) or goes on any other way (a durable route, a federation)."""

    onward_of: dict[Path, list[LinkId]] = {}
    for nxt, path in vias:
        onward_of.setdefault(path, []).append(nxt)

    @cache
    def leaves(link: LinkId, before: Path) -> tuple[Leaf, ...] | None:
        here = (*before, link)
        onward = onward_of.get(here, [])
        if vias.get((link, before)) != DYNAMIC or here in ends or not onward:
            return None
        found: set[Leaf] = set()
        for nxt in onward:
            if vias[(nxt, here)] == TRANSIENT_BINDING and not durable(nxt):
                found.add((link, nxt))
                continue
            further = leaves(nxt, here) if vias[(nxt, here)] == DYNAMIC else None
            if further is None:
                return None
            found.update((link, *leaf) for leaf in further)
        return tuple(sorted(found))

    @cache
    def gates(link: LinkId, before: Path) -> tuple[Gate, ...]:
        path = (*before, link)
        found = [(position, leaves(path[position], path[:position])) for position in range(len(path))]
        return tuple((position, leaf) for position, leaf in found if leaf)

    return gates


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
        forest = (
            None if self.by_classes(entry) else self.plain_forest(self.scenario.publishers[entry].exchange)
        )
        tree = forest.tree_of(node) if forest is not None else None
        return None if forest is None or tree is None else (forest, tree)

    def plain_forest(self, exchange: str) -> PlainForest | None:
        """The exchange's routing as a plain forest, if it is one and forests are on."""
        if not self._forests:
            return None
        if exchange not in self._forest:
            self._forest[exchange] = self._trace.plain_forest(exchange)
        return self._forest[exchange]

    def by_classes(self, entry: int) -> bool:
        """Publishes of entry `entry` are routed class by class: a link holding them may drop
        some (simulations.holding), which routing in aggregate cannot tell apart. Decided
        from the scenario: some bounded queue may overflow, or the entry's TTL is shorter
        than some outage that holds, or its messages are not persistent and some node is
        killed while one of its links holds."""
        if self.overflows:
            return True
        message = Message.of(self.scenario.publishers[entry])
        if message == DURABLE:
            return False
        step_ms = self.scenario.step_ms
        for window, killed, expiring in self._holding:
            if (
                expiring
                and message.ttl_ms is not None
                and (window.end - window.first) * step_ms > message.ttl_ms
            ):
                return True
            if not message.persistent and killed:
                return True
        return False

    @cached_property
    def _holding(self) -> list[tuple[Window, bool, bool]]:
        """The windows of the topology's links that hold some link, each with whether the
        source of one of them is killed while it holds, and whether one of them expires what
        it holds."""
        if not self.scenario.failures:
            return []
        links = [link_id(*pair) for pair in sorted(carriers(self.topology))]
        found = []
        for window in self.windows(links):
            held = [link for link in window.links if window.kept or self.durable(link)]
            killed = any(
                window.first < first < window.end
                for link in held
                for first, _ in self.dead_steps(link_ends(link)[0])
            )
            if held:
                found.append((window, killed, any(link in self.expiring for link in held)))
        return found

    @cached_property
    def limits(self) -> dict[LinkId, int]:
        """The links held by a bounded queue, with its length limit (simulations.holding)."""
        return limited_links(self.topology)

    @cached_property
    def expiring(self) -> set[LinkId]:
        """The links whose held copies may expire (simulations.holding.expiring_links)."""
        return expiring_links(self.topology)

    @cached_property
    def overflows(self) -> bool:
        """Some bounded queue may hold more than its limit: an outage of a limited link ends
        after more publishes than the limit (whatever they route to)."""
        if not self.scenario.failures or not self.limits:
            return False
        before = publishes_before(self.scenario)
        if before[-1] <= min(self.limits.values()):
            return False
        return any(before[w.end] > min(self.limits.values()) for w in self.windows(sorted(self.limits)))

    def cuts(self, windows: list[Window], arrivals: Callable[[LinkId, int], int]) -> Cuts:
        """What the limited links' full queues drop in `windows` (simulations.holding.cuts),
        given the messages that join each at each step (none unless some may overflow)."""
        if not self.overflows:
            return {}
        return cuts(((w.first, w.end, w.links) for w in windows), self.limits, arrivals)

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
        #: Per crossing, how its copy arrived: (exchange, dropped as looping, via); two
        #: crossings alike that differ count as made neither way (DYNAMIC nor TRANSIENT_BINDING).
        landed: dict[tuple[LinkId, Path], tuple[str, bool, str]] = {}
        for arrival in result.arrivals:
            if arrival.path:
                hops = tuple(link_id(*hop) for hop in arrival.path)
                crossing, found = (hops[-1], hops[:-1]), (arrival.exchange, arrival.looped, arrival.via)
                known = landed.setdefault(crossing, found)
                if known != found:
                    landed[crossing] = (*known[:2], "")
        ordered = sorted(crossings.items())
        vias = {crossing: via for crossing, (_, _, via) in landed.items()}
        # (most classes cross no transient exchange route: nothing to work out for them)
        if TRANSIENT_BINDING in vias.values():
            ends = {path for _, _, path in deliveries}
            ends |= {(*before, link) for (link, before), (_, looped, _) in landed.items() if looped}
            gates = withdrawals(vias, ends, self.durable)
            on_paths = tuple(gates(link, before) for (link, before), _ in ordered)
        else:
            on_paths = ()
        return ClassRoute(
            tuple((link, before, copies) for (link, before), copies in ordered),
            tuple((*delivery, copies) for delivery, copies in sorted(deliveries.items())),
            on_paths,
            tuple(landed.get(crossing, ("", False, ""))[:2] for crossing, _ in ordered),
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


#: A message with no property that gets it dropped while held.
DURABLE = Message()


class Outages:
    """Which links are down when, by the failure windows over some links, and how copies
    cross them: a link down and transient loses what reaches it; one down that holds what
    reaches it (durable, or stalled) lets it on when it comes back, so the links after it
    see it then, not when it was published. A copy a link holds may be dropped there instead
    (simulations.holding): by `cuts` (what full queues drop), its TTL or its source's kill."""

    def __init__(self, world: World, windows: list[Window], cuts: Cuts | None = None) -> None:
        self.world = world
        self.windows = windows
        self.cuts = cuts or {}
        self._walks: dict[tuple[Path, int, Message], Walk] = {}
        self._kills: dict[str, list[int]] = {}

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

    def dropped(self, link: LinkId, step: int, message: Message) -> bool:
        """The link holds what reaches it at `step` and drops this copy before it is back
        (simulations.holding): a full queue's cut, the message's TTL (where the queue applies
        it), or its source killed while it holds a message that is not persistent."""
        release = self.release(link, step)
        if release == step:
            return False
        if any(first <= step < cut for first, cut in self.cuts.get(link, ())):
            return True
        ttl = message.ttl_ms
        if ttl is not None and link in self.world.expiring and self.wait_ms(link, step) > ttl:
            return True
        return not message.persistent and any(step < first < release for first in self._killed(link))

    def _killed(self, link: LinkId) -> list[int]:
        """The steps the link's source is killed at."""
        source = link_ends(link)[0]
        if source not in self._kills:
            self._kills[source] = [first for first, _ in self.world.dead_steps(source)]
        return self._kills[source]

    def walk(self, path: Path, step: int, message: Message = DURABLE) -> Walk:
        """A copy of `message` published at `step` along `path`: the step it reaches each
        link at (a link down that holds it lets it on when it comes back), up to the one that
        loses or drops it if one does."""
        if not self.failing(step):
            return Walk((step,) * len(path), step, False, False)
        key = (path, step, message)
        if key not in self._walks:
            at, lost, through_down = [], False, False
            for link in path:
                at.append(step)
                if self.losing(link, step) or self.dropped(link, step, message):
                    lost = True
                    break
                through_down = through_down or self.down(link, step)
                step = self.release(link, step)
            self._walks[key] = Walk(tuple(at), step, lost, through_down)
        return self._walks[key]

    def withdrawn(self, path: Path, gates: tuple[Gate, ...], step: int) -> bool:
        """A copy published at `step` that would take `path` is not sent along all of it: at a
        gate on the way, every binding it would be forwarded for is gone as the gate's node
        sees it when the copy is there (`unbound`)."""
        if not gates or not self.failing(step):  # (every hop up: every binding stands)
            return False
        return any(
            all(self.unbound(leaf, self.walk(path[:position], step).after) for leaf in leaves)
            for position, leaves in gates
        )

    def unbound(self, leaf: Leaf, step: int) -> bool:
        """The binding behind the leaf's last link is gone as the node at its start sees it at
        `step`: a node knows what the next one advertised when the hop between them was last
        up (while a hop is down its adverts stay as they were: a durable bridge queue keeps
        them, a dead node sends none), and the binding is gone while its transient link is
        down and dropped (not while it only stalls)."""
        for hop in leaf[:-1]:
            step = self.last_up(hop, step)
        return step >= 0 and self.losing(leaf[-1], step)

    def last_up(self, link: LinkId, step: int) -> int:
        """The last step at or before `step` at which the link is up (-1: none); a link is in
        one window at a time (World.windows)."""
        firsts = [w.first - 1 for w in self.windows if w.first <= step < w.end and link in w.links]
        return min(firsts, default=step)

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
