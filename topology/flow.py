"""Where one message goes: the copies of a publish each declared queue receives, as the real
nodes deliver it once the topology is applied and interest has propagated.

`reached_queues(topology, publisher)` is what `amq-gateway up --traffic` expects to see arrive;
`trace_flow` also says which bindings took the message and how many copies were dropped as
looping or cut off (for the checks). The model routes with the nodes' own rules
(gateway.routing) and follows the federation machinery around them, step by step:

- **Local routing** (gateway.routing.graph, the walk the broker routes with): the exchange's
  bindings are matched (the default exchange routes by queue name), each queue once per arrival.
  Besides the file's bindings, an exchange has the queues federation binds to it: an exchange
  route's source queue (bound on the source with the route's key), and on a parent the queue
  `federation.<child>.<exchange>` of each child whose federation subscribes, bound with every
  distinct binding the child's exchange has (its own such queues included, so bindings climb
  a tree of federations).
- **Exchange routes** (federation.routes): what reaches the source queue is published on the
  destination's exchange with its routing key, unchanged (headers included).
- **Queue routes**: the destination consumes the source's queue, so a message reaching that
  queue moves on to the destination's exchange and does not stay there. Several routes on one
  queue share its messages; the model sends each message to the first one declared.
- **Dynamic routes** (gateway.routing.interest, federation.dynamic, federation.dynamic_route): each
  node on the exchange keeps a real `InterestTable`, fed the adverts its downstream nodes send
  (their tags, names and exclude lists applied by `adverts_for`) until nothing changes. A
  message is forwarded to the next hop of each origin with matching interest, carrying the
  origins it must still reach and its trace; a node delivers to its own queues only if it is
  one of those origins, and drops a message whose trace holds its tag. So every node with a
  matching binding gets one copy, in rings too. A node that only relays is attached only
  while some downstream interest stands there.
- **Federations** (gateway.routing.federation_types, as federation.attachment applies them): a
  publish on a child's exchange that did
  not come from its parent is forwarded to the parent (publisher and fanout: always; locator
  and service: only if no local queue took it) and routed locally unless the type is fanout;
  a subscribing child (subscriber, fanout, service) gets what the parent routes to its
  queue there, and routes it locally without forwarding it back.

What is refused when the topology is applied carries nothing: a route or federation whose
exchange is missing on either side (or of another type, for dynamic routes and non-`amq.*`
federations), a dynamic route pushed with `-s`, a second federation of one exchange, a
federation of an exchange with dynamic routes, and federations of internal or system
exchanges. A message that would go round a cycle of static routes or federations forever is
followed for at most MAX_HOPS node-to-node hops (the checks report such cycles).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any

import networkx as nx

from gateway.routing.bindings import Identity, binding_identity
from gateway.routing.federation_types import BEHAVIOURS
from gateway.routing.graph import ExchangeGraph
from gateway.routing.interest import InterestTable
from gateway.routing.matchers import matcher_for
from gateway.routing.predicate import binding_matches
from gateway.routing.sender_selected import extra_routing_keys
from topology.graph import dynamic_tags
from topology.model import Binding, Exchange, Federation, Publisher, Route, Topology, federatable
from topology.tree_interest import TreeInterest, TreeTable

QueueAt = tuple[str, str]
#: The node-to-node hops one copy took, in order: ((from, to), ...).
Path = tuple[tuple[str, str], ...]
#: Where a binding leads: ("queue", name), ("route", Route) or ("mirror", Federation).
Target = tuple[str, Any]
#: Node-to-node hops one copy may take before the model stops following it (a loop).
MAX_HOPS = 32
#: Copies one publish may make in all before the model stops (loops that multiply); a
#: topology of more nodes allows one per node, since a publish on a tree of routes reaches each
#: node once (a 100,000-node hierarchy's publish made 33,000 copies and was cut at 10,000).
MAX_COPIES = 10_000
#: How a copy came to a node (`Arrival.via`): forwarded by dynamic routing for the interest a
#: node downstream advertised, or taken by an exchange route's binding that exists only while
#: the route's link is up (a transient exchange route's queue dies with its connection); ""
#: for any other way (a publish, a durable route, a queue route, a federation).
DYNAMIC = "dynamic"
TRANSIENT_BINDING = "transient binding"


@dataclass(frozen=True)
class Copy:
    """One copy of the message arriving on an exchange of a node."""

    node: str
    exchange: str
    key: str
    #: Dynamic routing's stamp: the origins still to reach (None: not forwarded by a dynamic
    #: route, so it counts as published here) and the tags the message passed.
    destinations: frozenset[str] | None = None
    trace: tuple[str, ...] = ()
    #: Republished by the node's peering from its parent: never forwarded back up.
    from_parent: bool = False
    hops: int = 0
    path: Path = ()
    #: How it came to this node (DYNAMIC, TRANSIENT_BINDING or "").
    via: str = ""


@dataclass(frozen=True)
class Arrival:
    """One copy arriving on an exchange of a node (the publish itself, with no path, first):
    what the node counts as published there; `looped` if it dropped it as looping."""

    node: str
    exchange: str
    path: Path
    via: str
    looped: bool


@dataclass
class FlowResult:
    """What one publish does: copies per queue, bindings that took it, copies dropped."""

    queues: Counter[QueueAt] = field(default_factory=Counter)
    bindings: set[Binding] = field(default_factory=set)
    #: Copies a dynamic node dropped because they came back to it (federation.dynamic).
    looped: int = 0
    #: Copies not followed beyond MAX_HOPS / MAX_COPIES: a cycle that never ends.
    cut: int = 0
    #: Every node-to-node hop a copy made, with the hops that copy made before it (the
    #: simulator loads links and loses copies behind a failed link with these).
    crossings: list[tuple[tuple[str, str], Path]] = field(default_factory=list)
    #: Every copy a queue received, with the path it came by.
    deliveries: list[tuple[QueueAt, Path]] = field(default_factory=list)
    #: Every copy that arrived on an exchange (the simulator counts exchanges with these).
    arrivals: list[Arrival] = field(default_factory=list)


def reached_queues(topology: Topology, publisher: Publisher) -> Counter[tuple[str, str]]:
    """How many copies of ONE message from `publisher` each (node, queue) receives (queues
    that receive none are absent)."""
    return trace_flow(topology, publisher).queues


def trace_flow(topology: Topology, publisher: Publisher, headers: dict[str, Any] | None = None) -> FlowResult:
    """Follow one publish through the topology (see the module's docstring)."""
    return _Network(topology).publish(publisher, headers)


class Tracer:
    """`trace_flow` for many publishes on one topology: interest converges once (the simulator
    routes every class of publish with it), and the bindings that took each copy are not
    collected (`FlowResult.bindings` stays empty; only the checks read it)."""

    def __init__(self, topology: Topology) -> None:
        self._network = _Network(topology, record_bindings=False)

    def __call__(self, publisher: Publisher, headers: dict[str, Any] | None = None) -> FlowResult:
        return self._network.publish(publisher, headers)

    def plain_forest(self, exchange: str) -> PlainForest | None:
        """The exchange's routing as a `PlainForest`, or None where it is not one."""
        return self._network.plain_forest(exchange)


class PlainForest:
    """An exchange whose dynamic routes form a forest (a `TreeInterest`) and whose bindings on
    every node of it lead to plain queues (no exchange route, federation mirror or queue route
    takes them), each tree low enough that `publish` never cuts a copy (height at most
    MAX_HOPS / 2; a publish makes at most one copy per node, never more than it may).

    On it `publish` makes no choice: a message with a routing key published at node o of a
    tree crosses the tree links on the paths from o to the nodes `matched` by the key (every
    node of the tree whose interest matches it), once each, and each node m it reaches, o
    included, delivers it once to each of its queues in `queues`, by the tree path from o to
    m (tests/spark/test_hop_routing.py holds the simulator's tables to that)."""

    def __init__(
        self,
        interest: TreeInterest,
        trees: list[list[tuple[str, str | None]]],
        queue_bindings: dict[str, list[tuple[str, dict[str, Any], str]]],
    ):
        #: `interest.breadth_first()`, as the caller already worked it out.
        self.trees = trees
        self._interest = interest
        self._roots = [tree[0][0] for tree in self.trees]
        self._tree_of = {node: number for number, tree in enumerate(self.trees) for node, _ in tree}
        #: One matcher per tree, each node's queue bindings bound to (node, queue) exactly as
        #: the node's exchange graph binds them to its queue (a refused binding is skipped).
        self._queues = []
        for tree in self.trees:
            matcher = matcher_for(interest.exchange_type)
            for node, _ in tree:
                for key, arguments, queue in queue_bindings.get(node, ()):
                    try:
                        matcher.bind(key, arguments, (node, queue))
                    except ValueError:
                        continue
            self._queues.append(matcher)

    def tree_of(self, node: str) -> int | None:
        """The number of `node`'s tree (None: not on the forest)."""
        return self._tree_of.get(node)

    def matched(self, tree: int, routing_key: str, headers: dict[str, Any] | None) -> frozenset[str]:
        """The nodes of tree number `tree` whose interest matches the message."""
        return self._interest.matched(self._roots[tree], routing_key, headers)

    def queues(self, tree: int, routing_key: str, headers: dict[str, Any] | None) -> set[QueueAt]:
        """The (node, queue) pairs of the tree whose bindings match the message: what each
        node's exchange graph routes it to (ValueError for CC or BCC headers, which the
        graph would follow and this does not)."""
        if extra_routing_keys(headers):
            raise ValueError("a plain forest does not route sender-selected (CC, BCC) keys")
        found: set[Any] = self._queues[tree].match(routing_key, headers or {})
        return found


def model_work(topology: Topology) -> Counter[str]:
    """The work building the model of `topology` takes, counted by kind (binding entries
    read while mirroring bindings up federations, interest bindings or adverts propagated):
    tests hold it to linear growth without timing anything."""
    return _Network(topology, record_bindings=False).work


def routing_work(topology: Topology, publishers: list[Publisher]) -> Counter[str]:
    """The work routing `publishers` takes on a model of `topology` once it is built, counted
    as `model_work` counts (origins of interest examined on the way, ...)."""
    network = _Network(topology, record_bindings=False)
    before = Counter(network.work)
    for publisher in publishers:
        network.publish(publisher)
    return network.work - before


# -- what is in effect once applied -------------------------------------------------------------


def _same_exchange(topology: Topology, a: str, b: str, name: str, builtin_ok: bool) -> bool:
    one, two = topology.exchange(a, name), topology.exchange(b, name)
    if one is None or two is None:
        return False
    return (builtin_ok and name.startswith("amq.")) or one.type == two.type


def active_routes(topology: Topology) -> list[Route]:
    """Routes the nodes accept and run (file order; a duplicate on one link is refused)."""
    active, seen = [], set()
    for route in topology.routes:
        if route.source == route.destination or (route.kind == "dynamic" and route.push):
            continue
        ident = (route.holder, route.far_end, route.kind, route.exchange, route.key, route.queue)
        if ident in seen or topology.exchange(route.destination, route.exchange) is None:
            continue
        if route.kind == "queue" and topology.queue(route.source, route.queue or "") is None:
            continue
        if route.kind != "queue" and topology.exchange(route.source, route.exchange) is None:
            continue
        if route.kind == "dynamic" and not _same_exchange(
            topology, route.source, route.destination, route.exchange, False
        ):
            continue
        seen.add(ident)
        active.append(route)
    return active


def active_federations(topology: Topology, routes: list[Route]) -> dict[tuple[str, str], Federation]:
    """(child, exchange) -> the federation in effect there: the first one, if it can be made."""
    dynamic = {(n, r.exchange) for r in routes if r.kind == "dynamic" for n in (r.source, r.destination)}
    active: dict[tuple[str, str], Federation] = {}
    for federation in topology.federations:
        place = (federation.child, federation.exchange)
        exchange = topology.exchange(*place)
        if place in active or place in dynamic or exchange is None or federatable(exchange):
            continue
        if federation.child == federation.parent or topology.federation_type(federation) not in BEHAVIOURS:
            continue
        if _same_exchange(topology, federation.child, federation.parent, federation.exchange, True):
            active[place] = federation
    return active


# -- the simulation ----------------------------------------------------------------------------


class _Network:
    def __init__(self, topology: Topology, record_bindings: bool = True, trees: bool = True) -> None:
        self.topology = topology
        self.record_bindings = record_bindings
        #: Copies one publish may make (see MAX_COPIES).
        self.max_copies = max(MAX_COPIES, len(topology.nodes))
        #: Converge a forest of dynamic routes as a TreeInterest (the tests turn it off to
        #: compare it with real InterestTables).
        self.trees = trees
        #: Work done building the model, counted (see `model_work`).
        self.work: Counter[str] = Counter()
        self.exchanges = {
            (exchange.node, exchange.name): exchange for exchange in reversed(topology.exchanges)
        }
        self.routes = active_routes(topology)
        self.federations = active_federations(topology, self.routes)
        self.consumers: dict[QueueAt, Route] = {}
        for route in self.routes:
            if route.kind == "queue":
                self.consumers.setdefault((route.source, route.queue or ""), route)
        self.bound = self._bindings()
        self.graphs: dict[str, ExchangeGraph] = {}
        #: node -> its queues as the default exchange routes to them (built on first use).
        self.queues_of: dict[str, dict[str, Target]] = {}
        self.tags: dict[str, dict[str, str]] = {}
        self.tables: dict[tuple[str, str], InterestTable | TreeTable] = {}
        #: exchange -> (node, tag) -> the node behind that bridge queue (see _downstream).
        self.downstream: dict[str, dict[tuple[str, str], str]] = {}
        #: (node, exchange) -> the file's bindings there, in file order (built on first use).
        self.bindings_at: dict[tuple[str, str], list[Binding]] = {}
        #: The headers of the publish being followed: every copy carries them unchanged.
        self.headers: dict[str, Any] = {}
        for exchange in {route.exchange for route in self.routes if route.kind == "dynamic"}:
            self._converge(exchange)

    # bindings: (key, arguments, target)

    def _bindings(self) -> dict[tuple[str, str], list[tuple[str, dict[str, Any], Target]]]:
        bound: dict[tuple[str, str], list[tuple[str, dict[str, Any], Target]]] = {}
        for binding in self.topology.bindings:
            if self.topology.queue(binding.node, binding.queue) and self._exchange(
                binding.node, binding.exchange
            ):
                bound.setdefault((binding.node, binding.exchange), []).append(
                    (binding.key, binding.arguments, ("queue", binding.queue))
                )
        for route in self.routes:
            if route.kind == "exchange":
                bound.setdefault((route.source, route.exchange), []).append(
                    (route.key or "", {}, ("route", route))
                )
        subscribing = [
            f for f in self.federations.values() if BEHAVIOURS[self.topology.federation_type(f)].subscribes
        ]
        mirrored = self._mirrored(bound, subscribing)
        for federation in subscribing:
            place = (federation.parent, federation.exchange)
            bound.setdefault(place, []).extend(
                (key, args, ("mirror", federation)) for key, args in mirrored[federation]
            )
        return bound

    def _mirrored(
        self,
        bound: dict[tuple[str, str], list[tuple[str, dict[str, Any], Target]]],
        subscribing: list[Federation],
    ) -> dict[Federation, list[tuple[str, dict[str, Any]]]]:
        """Each subscribing federation -> the distinct bindings its child's exchange has, its
        own and those mirrored to it from below (federation.attachment binds the parent's queue
        with each once, so bindings climb a tree of federations).

        Places (node, exchange) are taken children first, each once: what a place has is its
        own bindings, then what each federation into it mirrors (in federation order), first
        occurrence of an identity first. Federations that form a cycle share one set, the
        bindings of every place on the cycle and of all below it. The work is what the
        bindings are, not rounds over every federation's mirrors (issue 13).
        """
        graph: nx.DiGraph[tuple[str, str]] = nx.DiGraph()
        into: dict[tuple[str, str], list[Federation]] = {}
        for federation in subscribing:
            child, parent = (federation.child, federation.exchange), (federation.parent, federation.exchange)
            graph.add_edge(child, parent)
            into.setdefault(parent, []).append(federation)
        pieces = nx.condensation(graph)
        piece_of: dict[tuple[str, str], int] = pieces.graph["mapping"]
        has: dict[int, dict[Identity, tuple[str, dict[str, Any]]]] = {}
        for piece in nx.topological_sort(pieces):
            members = sorted(pieces.nodes[piece]["members"])
            distinct: dict[Identity, tuple[str, dict[str, Any]]] = {}
            for place in members:
                for key, arguments, _target in bound.get(place, ()):
                    self.work["mirror entries"] += 1
                    distinct[binding_identity(key, arguments)] = (key, arguments)
            for place in members:
                for federation in into.get(place, ()):
                    below = piece_of[(federation.child, federation.exchange)]
                    if below == piece:
                        continue
                    self.work["mirror entries"] += len(has[below])
                    distinct.update(has[below])
            has[piece] = distinct
        return {
            federation: list(has[piece_of[(federation.child, federation.exchange)]].values())
            for federation in subscribing
        }

    def _exchange(self, node: str, name: str) -> Exchange | None:
        """topology.exchange, by a dict for declared exchanges (the first declaration wins)."""
        return self.exchanges.get((node, name)) or self.topology.exchange(node, name)

    # -- dynamic routing's interest, propagated until nothing changes --------------------------

    def _converge(self, exchange: str) -> None:
        tags = dynamic_tags(self.topology, exchange)
        self.tags[exchange] = tags
        routes = [r for r in self.routes if r.kind == "dynamic" and r.exchange == exchange]
        nodes = list(dict.fromkeys(n for r in routes for n in (r.source, r.destination)))
        types = {node: self._exchange(node, exchange).type for node in nodes}  # type: ignore[union-attr]
        local = {
            node: [(key, arguments) for key, arguments, _target in self.bound.get((node, exchange), [])]
            for node in nodes
        }
        tree = TreeInterest.of(routes, tags, types, local, self.work) if self.trees else None
        if tree is not None:  # the same answers as the tables below, without N x N adverts
            for node in nodes:
                self.tables[(node, exchange)] = tree.table(node)
            return
        tables: dict[str, InterestTable] = {}
        for node in nodes:
            table = tables[node] = InterestTable(tags[node], types[node])
            for key, arguments in local[node]:
                table.bind_local(key, arguments)
        sent: dict[Route, object] = {}
        for _ in range(4 * len(self.topology.nodes) + 4):
            changed = False
            for route in routes:
                adverts = tables[route.destination].adverts_for(route.source, route.excludes)
                if sent.get(route) != adverts:
                    sent[route] = adverts
                    self.work["interest adverts"] += len(adverts)
                    tables[route.source].replace_from(tags[route.destination], adverts)
                    changed = True
            if not changed:
                break
        holders = {route.destination for route in routes}
        for node in {route.source for route in routes} - holders:
            if not tables[node].next_hops():  # detached: serves nobody
                del tables[node]
        self.tables.update(((node, exchange), table) for node, table in tables.items())

    def plain_forest(self, exchange: str) -> PlainForest | None:
        """The exchange's routing as a PlainForest, or None unless it provably is one."""
        tables = [t for (_, name), t in self.tables.items() if name == exchange]
        on_trees = [table for table in tables if isinstance(table, TreeTable)]
        if not tables or len(on_trees) != len(tables):
            return None
        interest = on_trees[0].interest
        trees = interest.breadth_first()
        queue_bindings: dict[str, list[tuple[str, dict[str, Any], str]]] = {}
        for tree in trees:
            depth: dict[str, int] = {}
            for node, parent in tree:
                depth[node] = 0 if parent is None else depth[parent] + 1
            if 2 * max(depth.values()) > MAX_HOPS:
                return None
            for node, _ in tree:
                for key, arguments, (kind, what) in self.bound.get((node, exchange), ()):
                    if kind != "queue" or (node, what) in self.consumers:
                        return None
                    queue_bindings.setdefault(node, []).append((key, arguments, what))
        return PlainForest(interest, trees, queue_bindings)

    def _downstream(self, node: str, exchange: str, tag: str) -> str | None:
        """The node behind the bridge queue `tag` on `node` (it pulls from `node`): the first
        dynamic route's, as found in route order."""
        if exchange not in self.downstream:
            tags = self.tags[exchange]
            found: dict[tuple[str, str], str] = {}
            for route in self.routes:
                if route.kind == "dynamic" and route.exchange == exchange:
                    found.setdefault((route.source, tags[route.destination]), route.destination)
            self.downstream[exchange] = found
        return self.downstream[exchange].get((node, tag))

    # -- one publish --------------------------------------------------------------------------

    def publish(self, publisher: Publisher, headers: dict[str, Any] | None = None) -> FlowResult:
        result = FlowResult()
        self.headers = headers or {}
        pending = deque([Copy(publisher.node, publisher.exchange, publisher.key)])
        made = 1
        while pending:
            copy = pending.popleft()
            if copy.hops > MAX_HOPS or made > self.max_copies:
                result.cut += 1
                continue
            onward = self._arrive(copy, result)
            made += len(onward)
            result.crossings.extend((each.path[-1], each.path[:-1]) for each in onward)
            pending.extend(onward)
        result.queues = +result.queues
        return result

    def _arrive(self, copy: Copy, result: FlowResult) -> list[Copy]:
        """Route `copy` on its node: deliver to local queues, return the copies sent on."""
        exchange = self._exchange(copy.node, copy.exchange)
        if exchange is None:
            return []
        found = self._match(copy, exchange)
        onward: list[Copy] = []
        table = self.tables.get((copy.node, copy.exchange))
        federation = self.federations.get((copy.node, copy.exchange))
        looped = table is not None and table.node in copy.trace
        result.arrivals.append(Arrival(copy.node, copy.exchange, copy.path, copy.via, looped))
        if table is not None:
            if looped:
                result.looped += 1
                return []
            onward += self._forward_dynamic(copy, table)
            if not table.delivers_locally(copy.destinations):
                found = []
        elif federation is not None:
            behaviour = BEHAVIOURS[self.topology.federation_type(federation)]
            decision = behaviour.decide(copy.from_parent, bool(found))
            if decision.forward:
                onward.append(_moved(copy, federation.parent, copy.exchange, copy.key))
            if not decision.route_locally:
                found = []
        if self.record_bindings:
            self._record(copy, exchange, found, result)
        for target in found:
            onward += self._deliver(copy, target, result)
        return onward

    def _match(self, copy: Copy, exchange: Exchange) -> list[Target]:
        graph = self._graph(copy.node)
        if exchange.name not in graph.exchanges:
            graph.declare(exchange.name, exchange.type)
            for key, arguments, target in self.bound.get((copy.node, copy.exchange), []):
                try:
                    graph.bind(exchange.name, key, arguments, target)
                except ValueError:  # a headers binding the broker refuses
                    continue
        return sorted(graph.route(copy.exchange, copy.key, self.headers), key=repr)

    def _graph(self, node: str) -> ExchangeGraph:
        """The node's exchanges as the walk sees them: declared with their bindings on first
        use; the default exchange routes to ("queue", name) for each of its queues."""
        graph = self.graphs.get(node)
        if graph is None:
            if not self.queues_of:
                for queue in self.topology.queues:
                    self.queues_of.setdefault(queue.node, {})[queue.name] = ("queue", queue.name)
            graph = self.graphs[node] = ExchangeGraph(self.queues_of.get(node, {}))
        return graph

    def _record(self, copy: Copy, exchange: Exchange, found: list[Target], result: FlowResult) -> None:
        """The file's bindings that took the message (their queue got it through them)."""
        queues = {what for kind, what in found if kind == "queue"}
        if not self.bindings_at:
            for binding in self.topology.bindings:
                self.bindings_at.setdefault((binding.node, binding.exchange), []).append(binding)
        for binding in self.bindings_at.get((copy.node, copy.exchange), ()):
            if binding.queue not in queues:
                continue
            if binding_matches(exchange.type, binding.key, binding.arguments, copy.key, self.headers):
                result.bindings.add(binding)

    def _forward_dynamic(self, copy: Copy, table: InterestTable | TreeTable) -> list[Copy]:
        onward = []
        plan = table.forward(copy.key, self.headers, copy.destinations)
        if isinstance(table, InterestTable):  # (a TreeTable counts what it examines itself)
            self.work["origins examined"] += sum(map(len, plan.values()))
        for tag, origins in sorted(plan.items()):
            node = self._downstream(copy.node, copy.exchange, tag)
            if node is not None:
                moved = _moved(copy, node, copy.exchange, copy.key)
                onward.append(
                    replace(moved, destinations=origins, trace=(*copy.trace, table.node), via=DYNAMIC)
                )
        return onward

    def _deliver(self, copy: Copy, target: Target, result: FlowResult) -> list[Copy]:
        kind, what = target
        if kind == "route":
            moved = _moved(copy, what.destination, what.exchange, copy.key)
            return [moved if what.durable else replace(moved, via=TRANSIENT_BINDING)]
        if kind == "mirror":
            return [replace(_moved(copy, what.child, copy.exchange, copy.key), from_parent=True)]
        consumer = self.consumers.get((copy.node, what))
        if consumer is not None:
            return [_moved(copy, consumer.destination, consumer.exchange, copy.key)]
        result.queues[(copy.node, what)] += 1
        result.deliveries.append(((copy.node, what), copy.path))
        return []


def _moved(copy: Copy, node: str, exchange: str, key: str) -> Copy:
    """`copy` published on `exchange` of `node` by a route or peering: the stamp travels along."""
    path = (*copy.path, (copy.node, node))
    return Copy(node, exchange, key, copy.destinations, copy.trace, False, copy.hops + 1, path)
