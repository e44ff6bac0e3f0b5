"""The planner's graph checks: loops and multiple paths, reachability, resilience.

Loops and duplicate paths are judged as the nodes behave (topology.flow has the details):
dynamic routes are loop-free and deliver once per node by path-vector routing
(gateway/routing/interest.py), so their rings and alternative paths are safe and reported as info.
Static exchange routes, queue routes and federations have no hop limit and no duplicate
detection: a cycle of them, or two of their paths to one node, is the real risk. A copy coming
back to a node from its own parent is the one exception (a child never forwards back up what
its parent sent). A cycle or a second path is only reported if some routing key can take it
(`witness_key`); the proposal names the declaration whose removal (or replacement by a dynamic
route) makes it safe.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from functools import cached_property, partial
from itertools import islice
from typing import Any, cast

import networkx as nx

from gateway.routing.matchers import matcher_for
from topology.flow import trace_flow
from topology.graph import (
    MAX_ENUMERATED,
    Declaration,
    DynamicRoutes,
    bindings_on,
    connection_graph,
    describe,
    flow_exchanges,
    flow_graph,
)
from topology.model import Federation, Finding, Route, Topology

Edge = dict[str, Any]
#: Longest routing key `witness_key` tries, in words.
WITNESS_WORDS = 4
#: A part a cut leaves is listed up to this many nodes, and pairs of nodes up to this many; a
#: bigger part is named by its node next to the cut and a count (a bridge of a 10,000-node
#: hierarchy would list 9,999 names), further pairs are counted.
MAX_LISTED = 20


def arrow(path: list[str]) -> str:
    return " -> ".join(path)


def _order(topology: Topology, decl: Declaration) -> int:
    for index, item in enumerate((*topology.links, *topology.routes, *topology.federations)):
        if item is decl:
            return index
    return -1


# -- which keys a hop lets through ------------------------------------------------------------------


def _patterns(topology: Topology, edge: Edge) -> list[str] | None:
    """The binding keys a message must match (any of them) to take `edge`; None: any key."""
    if edge["kind"] == "bound":
        return edge["keys"]
    decl = edge["decl"]
    if edge["kind"] == "exchange":
        return [decl.key or ""]
    if edge["kind"] == "queue":
        return [b.key for b in topology.bindings if (b.node, b.queue) == (decl.source, decl.queue)]
    return None


def _example(key: str) -> str:
    return f"e.g. key '{key}'" if key else "any key"


def _exchange_type(topology: Topology, exchange: str) -> str:
    for node in topology.nodes:
        found = topology.exchange(node, exchange)
        if found is not None:
            return found.type
    return "topic"


def witness_key(topology: Topology, exchange: str, edges: list[Edge]) -> str | None:
    """A routing key every edge lets through (the words of their keys, and 'x', tried in
    every combination up to WITNESS_WORDS words); None if there is none."""
    alternatives = [p for p in (_patterns(topology, edge) for edge in edges) if p is not None]
    kind_name = _exchange_type(topology, exchange)
    if kind_name in ("fanout", "headers") or not alternatives:
        return ""
    matchers = []
    for keys in alternatives:
        matcher = matcher_for(kind_name)
        for key in keys:
            matcher.bind(key, {}, "hit")
        matchers.append(matcher)
    words = sorted(
        {w for keys in alternatives for key in keys for w in key.split(".") if w not in "*#"} | {"x"}
    )
    candidates = [key for keys in alternatives for key in keys]
    for length in range(WITNESS_WORDS + 1):
        candidates += [".".join(combo) for combo in itertools.product(words, repeat=length)]
        if len(candidates) > 20_000:
            break
    return next((key for key in candidates if all(m.match(key, {}) for m in matchers)), None)


# -- loops -----------------------------------------------------------------------------------------


def _cycles(topology: Topology, graph: nx.MultiDiGraph[str]) -> Iterator[tuple[list[str], list[list[Edge]]]]:
    """Simple cycles (bounded), each starting at its node declared first, in a stable order."""
    position = {name: index for index, name in enumerate(topology.nodes)}
    cycles: dict[tuple[str, ...], None] = {}
    for cycle in _simple_cycles(graph):
        first = min(range(len(cycle)), key=lambda i: position[cycle[i]])
        cycles[tuple(cycle[first:] + cycle[:first])] = None
    for cycle in sorted(map(list, cycles), key=lambda c: (len(c), [position[n] for n in c])):
        if len(cycle) > 1:
            pairs = zip(cycle, cycle[1:] + cycle[:1], strict=True)
            yield cycle, [list(graph.get_edge_data(u, v).values()) for u, v in pairs]


def _undirected(graph: nx.DiGraph[str]) -> nx.Graph[str]:
    """The links once directions and self-loops are dropped."""
    undirected: nx.Graph[str] = nx.Graph(graph)
    undirected.remove_edges_from(list(nx.selfloop_edges(undirected)))
    return undirected


def _both_ways_only(graph: nx.DiGraph[str]) -> bool:
    """Whether every edge has one back (the generators' links): then the links are an
    undirected graph, whose cycles, paths and distances have answers without enumerating."""
    return all(graph.has_edge(v, u) for u, v in graph.edges())


def _forest_once_undirected(graph: nx.DiGraph[str]) -> bool:
    """Whether the links form a forest (no cycle) once directions and self-loops are dropped."""
    undirected = _undirected(graph)
    return len(undirected) == 0 or bool(nx.is_forest(undirected))


def _simple_cycles(graph: nx.MultiDiGraph[str]) -> list[list[str]]:
    """Every simple cycle of two nodes or more: the pairs of edges both ways, found in linear
    time (a hierarchy of 10,000 nodes has 9,999, which networkx took 50 s to list), and the
    longer cycles, which only the 2-core holds (a node with one neighbour is on none): all of
    them when there are at most MAX_ENUMERATED (Johnson's search, time per cycle found), else
    the shortest through each static hop and MAX_ENUMERATED short ones (a mesh has
    exponentially many; networkx's search bounded by the node count did not finish at 500
    nodes, and which 200 it listed changed with the hash seed)."""
    simple: nx.DiGraph[str] = nx.DiGraph(graph)
    pairs = _both_ways(simple)
    undirected = _undirected(simple)
    in_core = {str(node) for node in nx.k_core(cast("nx.Graph[object]", undirected), 2)}
    core = simple.copy()  # not a subgraph view: its order follows a set's, the hash seed's
    core.remove_nodes_from([node for node in simple if node not in in_core])
    if not core:
        return pairs  # a forest once directions are dropped
    if not _more_than_listed(core, undirected.subgraph(in_core)):
        longer = (cycle for cycle in nx.simple_cycles(core) if len(cycle) > 2)
        cycles = list(islice(longer, MAX_ENUMERATED + 1))
        if len(cycles) <= MAX_ENUMERATED:
            return pairs + cycles
    return pairs + _through_static(graph, simple) + _shortest_longer_cycles(core)


def _more_than_listed(core: nx.DiGraph[str], undirected: nx.Graph[str]) -> bool:
    """Whether the core (`undirected`: its links once directions are dropped) surely has more
    than MAX_ENUMERATED cycles of three nodes or more, without searching (Johnson's search
    recomputes strongly connected components per cycle: 8 s for 200 cycles at 10,000 nodes):
    with every edge both ways, each of the edges - nodes + components independent cycles of
    the links is a cycle both ways."""
    if not _both_ways_only(core):
        return False
    independent = undirected.number_of_edges() - len(undirected) + nx.number_connected_components(undirected)
    return 2 * independent > MAX_ENUMERATED


def _both_ways(graph: nx.DiGraph[str]) -> list[list[str]]:
    """The cycles of two nodes: each pair of edges both ways (`u -> v -> u`)."""
    return [[u, v] for u, v in graph.edges() if u < v and graph.has_edge(v, u)]


def _through_static(graph: nx.MultiDiGraph[str], simple: nx.DiGraph[str]) -> list[list[str]]:
    """The shortest cycle through each static hop on one, so that where there are too many
    cycles to list no static loop is left out for the cap."""
    found = []
    for tail, head in sorted((u, v) for u, v in _static_hops(graph) if u != v):
        try:
            found.append(nx.shortest_path(simple, head, tail))
        except nx.NetworkXNoPath:
            continue  # the hop is on no cycle
    return found


def _shortest_longer_cycles(graph: nx.DiGraph[str]) -> list[list[str]]:
    """Short cycles of three nodes or more, MAX_ENUMERATED of them at most, the same whatever
    the hash seed (networkx's order varies with it): searched with a length bound doubled from
    3 until that many are found or no cycle can be longer."""
    order = {node: index for index, node in enumerate(graph)}
    bound = 3
    while True:
        found = list(islice(_cycles_within(graph, order, bound), MAX_ENUMERATED))
        if len(found) == MAX_ENUMERATED or bound >= len(graph):
            return sorted(found, key=len)
        bound *= 2


def _cycles_within(graph: nx.DiGraph[str], order: dict[str, int], bound: int) -> Iterator[list[str]]:
    """The simple cycles of 3 to `bound` nodes, each from its first node in `order` and only
    through later nodes (so each is found once per direction), depth first in `order`."""
    for start in graph:
        path, on_path = [start], {start}
        stack = [iter(graph[start])]
        while stack:
            for after in stack[-1]:
                if after == start and len(path) > 2:
                    yield list(path)
                elif after not in on_path and order[after] > order[start] and len(path) < bound:
                    path.append(after)
                    on_path.add(after)
                    stack.append(iter(graph[after]))
                    break
            else:
                stack.pop()
                on_path.discard(path.pop())


def _static_hops(graph: nx.MultiDiGraph[str]) -> set[tuple[str, str]]:
    """The (tail, head) of every static hop: an exchange or queue route, or a federation."""
    return {(u, v) for u, v, data in graph.edges(data=True) if data["kind"] != "dynamic"}


def _static(hop: list[Edge]) -> list[Edge]:
    return [edge for edge in hop if edge["kind"] != "dynamic"]


def _bounce(hops: list[list[Edge]]) -> bool:
    """Up to a parent and back down the same federation: never forwarded up again."""
    return len(hops) == 2 and len({id(edge["decl"]) for hop in hops for edge in hop}) == 1


def _proposal(decl: Declaration) -> str:
    if isinstance(decl, Route) and decl.kind == "exchange":
        return f"delete the {describe(decl)} or make it a dynamic route (they never loop)"
    return f"delete the {describe(decl)}"


def _breakers(topology: Topology, unsafe: list[list[list[Edge]]]) -> list[Declaration]:
    """Static declarations whose removal breaks every unsafe cycle: greedily the one on most
    cycles (ties: the one declared last, which closed the loop)."""
    chosen: list[Declaration] = []
    left = list(unsafe)
    while left:
        counts = Counter(id(e["decl"]) for hops in left for hop in hops for e in _static(hop))
        decls = {id(e["decl"]): e["decl"] for hops in left for hop in hops for e in _static(hop)}
        best = max(decls.values(), key=lambda d: (counts[id(d)], _order(topology, d)))
        chosen.append(best)
        left = [hops for hops in left if not any(e["decl"] is best for hop in hops for e in hop)]
    return chosen


def check_loops(topology: Topology) -> Iterator[Finding]:
    for exchange in flow_exchanges(topology):
        unsafe, dynamic_seen = [], set()
        for cycle, hops in _cycles(topology, flow_graph(topology, exchange)):
            if not any(_static(hop) for hop in hops):
                if len(cycle) > 2 and frozenset(cycle) not in dynamic_seen:
                    dynamic_seen.add(frozenset(cycle))
                    yield _dynamic_loop(topology, exchange, cycle, hops)
            elif not _bounce(hops):
                key = witness_key(
                    topology, exchange, [min(hop, key=lambda e: e["kind"] == "dynamic") for hop in hops]
                )
                if key is not None:
                    unsafe.append((cycle, hops, key))
        breakers = _breakers(topology, [hops for _, hops, _ in unsafe])
        for cycle, hops, key in unsafe:
            yield _static_loop(exchange, cycle, hops, key, breakers)


def _dynamic_loop(topology: Topology, exchange: str, cycle: list[str], hops: list[list[Edge]]) -> Finding:
    message = (
        f"dynamic routes on '{exchange}' form the cycle {arrow([*cycle, cycle[0]])}: safe, a message "
        "never comes back (its trace holds the nodes it passed) and interest never loops (adverts "
        "carry their path), so no tag, exclude list or hop limit is needed"
    )
    return Finding("info", "dynamic-loop", message, hops[0][0]["decl"].where)


def _static_loop(
    exchange: str, cycle: list[str], hops: list[list[Edge]], key: str, breakers: list[Declaration]
) -> Finding:
    breaker = next(d for d in breakers if any(e["decl"] is d for hop in hops for e in hop))
    ring = arrow([*cycle, cycle[0]])
    if all(_static(hop) for hop in hops):
        message = (
            f"messages of '{exchange}' ({_example(key)}) go round {ring} forever: static routes and "
            f"federations have no hop limit; break the cycle: {_proposal(breaker)}"
        )
        return Finding("error", "static-loop", message, breaker.where)
    message = (
        f"messages of '{exchange}' ({_example(key)}) can go round {ring}: the trace of dynamic routes "
        "drops a copy that comes back to a dynamically routed node, but the static hops deliver copies "
        f"again (duplicates); break the cycle: {_proposal(breaker)}"
    )
    return Finding("warning", "mixed-loop", message, breaker.where)


# -- more than one path ------------------------------------------------------------------------------


def _edge_paths(graph: nx.MultiDiGraph[str], start: str, end: str) -> list[list[Edge]]:
    # types-networkx says paths of nodes or of (u, v) pairs; in a multigraph they are paths of
    # (u, v, key) edges, which is what networkx documents and returns.
    paths = cast(
        "Iterator[list[tuple[str, str, int]]]",
        islice(nx.all_simple_edge_paths(graph, start, end, cutoff=len(graph)), MAX_ENUMERATED),
    )
    return [[{**graph.edges[edge], "to": edge[1]} for edge in path] for path in paths]


def _path_text(start: str, path: list[Edge]) -> str:
    nodes = [start] + [e["to"] for e in path]
    kinds = ", ".join(dict.fromkeys(e["kind"] for e in path))
    return f"{arrow(nodes)} by {kinds}"


class _ExchangeGraphs:
    """An exchange's flow graph and dynamic routes, built once for all the pairs searched."""

    def __init__(self, topology: Topology, exchange: str) -> None:
        self.topology, self.exchange = topology, exchange
        self.flow = flow_graph(topology, exchange)

    @cached_property
    def dynamic(self) -> DynamicRoutes:
        """Built when a pair is searched: an exchange with one path at most never is."""
        return DynamicRoutes(self.topology, self.exchange)


def _delivering_paths(graphs: _ExchangeGraphs, start: str, end: str) -> list[list[Edge]]:
    """The paths that each deliver a copy: every path with a static hop, and one dynamic path."""
    graph = graphs.flow
    paths = [path for path in _edge_paths(graph, start, end) if any(e["kind"] != "dynamic" for e in path)]
    chosen = graphs.dynamic.chosen(start, end)
    if chosen is not None:
        pairs = zip(chosen, chosen[1:], strict=False)
        dynamic = [
            {**next(e for e in graph.get_edge_data(u, v).values() if e["kind"] == "dynamic"), "to": v}
            for u, v in pairs
        ]
        paths.insert(0, dynamic)
    return sorted(paths, key=lambda path: (len(path), any(e["kind"] != "dynamic" for e in path)))


def _one_path_at_most(graph: nx.MultiDiGraph[str] | nx.DiGraph[str]) -> bool:
    """Whether no two nodes have two simple paths between them: no two edges the same way
    between two nodes, and no cycle once directions are dropped (a tree of links both ways, as
    the generators make). Checked in linear time, so the pairwise checks skip such exchanges
    (at 200 nodes enumerating every pair's paths took minutes)."""
    pairs = list(graph.edges())
    if len(set(pairs)) != len(pairs) or any(u == v for u, v in pairs):
        return False  # (a self-loop is a cycle, so not a forest, as it always was here)
    return _forest_once_undirected(graph)


def _pairs_through_static(topology: Topology, graph: nx.MultiDiGraph[str]) -> Iterator[tuple[str, str]]:
    """The (start, end) pairs, in declaration order, that some path with a static hop joins:
    `start` reaches the hop's tail and its head reaches `end`. Dynamic routes deliver once per
    node, so only these pairs can get a second copy; the others need no path search (every pair
    of a 60-node mesh of dynamic routes took minutes)."""
    ends: dict[str, set[str]] = {}
    for tail, head in _static_hops(graph):
        reached = nx.descendants(graph, head) | {head}
        for start in nx.ancestors(graph, tail) | {tail}:
            ends.setdefault(start, set()).update(reached)
    position = {name: index for index, name in enumerate(topology.nodes)}
    for start in sorted(ends, key=position.__getitem__):
        yield from ((start, end) for end in sorted(ends[start] - {start}, key=position.__getitem__))


def _pair_paths(
    topology: Topology, exchange: str, graphs: _ExchangeGraphs, start: str, end: str
) -> Finding | None:
    """The multiple-paths finding of one pair: more than one delivering path that some key
    `end`'s bindings match takes; None if there is none."""
    bound = {"kind": "bound", "keys": [b.key for b in bindings_on(topology, end, exchange)]}
    if not bound["keys"]:
        return None  # no queue of its own to get copies twice (further nodes are checked)
    paths = _delivering_paths(graphs, start, end)
    kept, extra = (paths[0], paths[1:]) if paths else ([], [])
    extra = [p for p in extra if witness_key(topology, exchange, [*kept, *p, bound]) is not None]
    return _multiple_paths(topology, exchange, start, end, [*kept, bound], extra) if extra else None


def check_multiple_paths(topology: Topology) -> Iterator[Finding]:
    for exchange in flow_exchanges(topology):
        graphs = _ExchangeGraphs(topology, exchange)
        if _one_path_at_most(graphs.flow):
            continue
        for start, end in _pairs_through_static(topology, graphs.flow):
            found = _pair_paths(topology, exchange, graphs, start, end)
            if found is not None:
                yield found


def _multiple_paths(
    topology: Topology, exchange: str, start: str, end: str, kept: list[Edge], extra: list[list[Edge]]
) -> Finding:
    key = witness_key(topology, exchange, kept + extra[0]) or ""
    kept = kept[:-1]
    drop = [_first_static(path, kept) for path in extra]
    drop = list({id(d): d for d in drop}.values())
    routes = "; ".join(_path_text(start, path) for path in [kept, *extra])
    message = (
        f"a message of '{exchange}' published on {start} ({_example(key)}) reaches {end} over "
        f"{len(extra) + 1} paths ({routes}), so {end} gets it {len(extra) + 1} times; keep the first: "
        + "; ".join(_proposal(decl) for decl in drop)
    )
    return Finding("warning", "multiple-paths", message, drop[0].where)


def _first_static(path: list[Edge], kept: list[Edge]) -> Declaration:
    """The declaration to drop for `path`'s copy: its first static hop the kept path does not
    take; else (the two differ in dynamic hops only) its first static hop; else (`path` is the
    dynamic one, longer than a static kept path) the kept path's first static hop."""
    static = _static(path)
    candidates = [e for e in static if e not in kept] + static + _static(kept)
    return cast("Declaration", candidates[0]["decl"])


def _every_simple_path_allowed(topology: Topology, routes: DynamicRoutes) -> bool:
    """Whether tags and exclude lists stop interest on no simple path of dynamic routes: no
    route excludes a tag, no two nodes share a tag and no node's tag is another node's name
    (DynamicRoutes.hop_allowed then lets every hop of a simple path through)."""
    tags = routes.tags
    named = [node for node, tag in tags.items() if tag != node and tag in topology.nodes]
    excluding = any(route.excludes for hop in routes.routes.values() for route in hop)
    return not excluding and len(set(tags.values())) == len(tags) and not named


def _components(graph: nx.Graph[str]) -> tuple[dict[str, int], list[list[int]]]:
    """Each node's component, and each component's node positions (in `graph`'s order)."""
    position = {node: index for index, node in enumerate(graph)}
    parts = [sorted(position[n] for n in part) for part in nx.connected_components(graph)]
    nodes = list(graph)
    return {nodes[i]: which for which, part in enumerate(parts) for i in part}, parts


def _pairs_by_bridges(graph: nx.Graph[str]) -> tuple[int, list[tuple[str, str]]]:
    """How many pairs of nodes more than one simple path joins in an undirected graph, and the
    first MAX_LISTED of them in pair order, without enumerating paths: a simple path is the
    only one exactly when all its edges are bridges (with a bridge left out every path is
    cut; with another edge left out some path is left), so a pair has several paths when it is
    connected but not by bridges alone."""
    nodes = list(graph)
    component, parts = _components(graph)
    bridged: nx.Graph[str] = nx.Graph(cast("Iterator[tuple[str, str]]", nx.bridges(graph)))
    bridged.add_nodes_from(nodes)
    tree, trees = _components(bridged)
    count = sum(len(p) * (len(p) - 1) // 2 for p in parts) - sum(len(t) * (len(t) - 1) // 2 for t in trees)
    first: list[tuple[str, str]] = []
    for index, node in enumerate(nodes):
        part, own = parts[component[node]], trees[tree[node]]
        after = bisect_right(part, index)
        if len(part) - after == len(own) - bisect_right(own, index):
            continue  # every later node of its component is joined to it by bridges alone
        later = (nodes[i] for i in part[after:] if tree[nodes[i]] != tree[node])
        first += [(node, other) for other in islice(later, MAX_LISTED - len(first))]
        if len(first) == MAX_LISTED:
            break
    return count, first


def _pairs_enumerated(topology: Topology, routes: DynamicRoutes) -> list[tuple[str, str]]:
    """Every pair of nodes with more than one allowed path of dynamic routes one way or the
    other, by listing each pair's paths: for links not both ways, or tags and excludes that
    stop interest on some path."""
    return [
        (a, b)
        for a, b in itertools.combinations(topology.nodes, 2)
        if len(routes.paths(a, b)) > 1 or len(routes.paths(b, a)) > 1
    ]


def _several_dynamic_paths(topology: Topology, routes: DynamicRoutes) -> tuple[int, list[tuple[str, str]]]:
    """How many pairs of nodes an exchange's dynamic `routes` join by more than one path, and
    the first MAX_LISTED: from the bridges where every route goes both ways and every simple
    path is allowed (a 60-node random-geometric mesh's paths, pair by pair, did not finish in
    20 s), else by listing each pair's paths."""
    if _both_ways_only(routes.graph) and _every_simple_path_allowed(topology, routes):
        return _pairs_by_bridges(nx.Graph(routes.graph))
    pairs = _pairs_enumerated(topology, routes)
    return len(pairs), pairs[:MAX_LISTED]


def check_dynamic_paths(topology: Topology) -> Iterator[Finding]:
    for exchange in flow_exchanges(topology):
        routes = DynamicRoutes(topology, exchange)
        if _one_path_at_most(routes.graph):
            continue
        count, first = _several_dynamic_paths(topology, routes)
        if count:
            where = next(r.where for r in topology.routes if r.kind == "dynamic" and r.exchange == exchange)
            listed = ", ".join(f"{a} <-> {b}" for a, b in first)
            rest = f" and {count - len(first):,} other pairs" if count > len(first) else ""
            message = (
                f"dynamic routes on '{exchange}' give {count:,} pair(s) of nodes more than one path "
                f"({listed}{rest}): safe, each node forwards along one best "
                "path per destination (the nodes' path-vector interest tables), so every node gets each message once"
            )
            yield Finding("info", "dynamic-paths", message, where)


# -- reachability ------------------------------------------------------------------------------------


def check_unreached_bindings(topology: Topology) -> Iterator[Finding]:
    if not topology.publishers:
        if topology.bindings:
            message = f"no publishers declared: whether the {len(topology.bindings)} binding(s) get messages is not checked"
            yield Finding("info", "no-publishers", message, "")
        return
    reached = set()
    for publisher in topology.publishers:
        reached |= trace_flow(topology, publisher).bindings
    for binding in topology.bindings:
        if binding not in reached and binding.node in topology.nodes:
            message = (
                f"no publisher's messages reach queue '{binding.queue}' on {binding.node} through its "
                f"binding to '{binding.exchange}' (key '{binding.key}')"
            )
            yield Finding("warning", "unreached-binding", message, binding.where)


def check_unrouted_publishers(topology: Topology) -> Iterator[Finding]:
    for publisher in topology.publishers:
        if publisher.node in topology.nodes and not trace_flow(topology, publisher).queues:
            message = (
                f"messages published on {publisher.node} to '{publisher.exchange}' with key "
                f"'{publisher.key}' reach no queue"
            )
            yield Finding("warning", "unrouted-publisher", message, publisher.where)


def _group(nodes: Any) -> str:
    return "[" + ", ".join(sorted(nodes)) + "]"


def _cut_off(names: list[str]) -> str:
    """Nodes cut off together, in declaration order, or past MAX_LISTED the first and a count."""
    return ", ".join(names) if len(names) <= MAX_LISTED else _part(lambda: names, len(names), names[0])


def check_cut_off_nodes(topology: Topology) -> Iterator[Finding]:
    position = {name: index for index, name in enumerate(topology.nodes)}
    components = sorted(
        (sorted(c, key=position.__getitem__) for c in nx.connected_components(connection_graph(topology))),
        key=lambda names: (-len(names), position[names[0]]),
    )
    if not components:
        return
    rest = components[0]
    for names in components[1:]:
        what = f"node '{names[0]}' is" if len(names) == 1 else f"nodes {_cut_off(names)} are"
        message = (
            f"{what} cut off from the rest {_part(lambda: rest, len(rest), rest[0])}: "
            "no link, route or federation joins the two"
        )
        yield Finding("warning", "cut-off", message, topology.nodes[names[0]].where)


# -- resilience ----------------------------------------------------------------------------------------


def _part(members: Callable[[], Iterable[str]], count: int, near: str) -> str:
    """`[a, b, c]`, or past MAX_LISTED nodes `[near and 1,234 other nodes]` (members unlisted)."""
    if count <= MAX_LISTED:
        return _group(members())
    return f"[{near} and {count - 1:,} other nodes]"


def _join(parts: Iterable[str]) -> str:
    """The groups of nodes a cut leaves, smallest first: `[a] | [b, c]`."""
    return " | ".join(sorted(parts, key=lambda text: (len(text), text)))


class _DepthFirst:
    """One depth-first search of an undirected graph, so that each cut's parts are found
    without copying the graph: a node's subtree is the range of `preorder` from its `index`
    over its `size`, a component is its root's subtree, and `low` is the lowest index a
    subtree reaches by one edge (Hopcroft and Tarjan): a bridge's far side is the subtree of
    its lower end; an articulation point's parts are the subtrees of its children whose `low`
    does not reach above it, and (unless it is a root) the rest of its component."""

    def __init__(self, graph: nx.Graph[str]) -> None:
        self.preorder: list[str] = []
        self.index: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.size: dict[str, int] = {}
        self.parent: dict[str, str | None] = {}
        self.children: dict[str, list[str]] = {}
        self.root: dict[str, str] = {}
        for root in graph:
            if root not in self.index:
                self._search(graph, root)

    def _visit(self, node: str, parent: str | None, root: str) -> None:
        self.index[node] = self.low[node] = len(self.preorder)
        self.preorder.append(node)
        self.parent[node], self.root[node], self.children[node] = parent, root, []
        if parent is not None:
            self.children[parent].append(node)

    def _search(self, graph: nx.Graph[str], root: str) -> None:
        self._visit(root, None, root)
        stack = [(root, iter(graph[root]))]
        while stack:
            node, neighbours = stack[-1]
            for neighbour in neighbours:
                if neighbour not in self.index:
                    self._visit(neighbour, node, root)
                    stack.append((neighbour, iter(graph[neighbour])))
                    break
                if neighbour != self.parent[node]:
                    self.low[node] = min(self.low[node], self.index[neighbour])
            else:
                stack.pop()
                self.size[node] = len(self.preorder) - self.index[node]
                up = self.parent[node]
                if up is not None:
                    self.low[up] = min(self.low[up], self.low[node])

    def subtree(self, node: str) -> list[str]:
        return self.preorder[self.index[node] : self.index[node] + self.size[node]]

    def outside(self, node: str, inside: Iterable[str], left_out: str | None = None) -> list[str]:
        """The nodes of `node`'s component outside the subtrees of `inside` (and not `left_out`)."""
        root = self.root[node]
        start, end = self.index[root], self.index[root] + self.size[root]
        cut = sorted((self.index[n], self.index[n] + self.size[n]) for n in inside)
        kept = []
        for low, high in cut:
            kept += self.preorder[start:low]
            start = max(start, high)
        return [n for n in kept + self.preorder[start:end] if n != left_out]


def check_articulation_points(topology: Topology) -> Iterator[Finding]:
    graph = connection_graph(topology)
    search = _DepthFirst(graph)
    for node in sorted(nx.articulation_points(graph), key=list(topology.nodes).index):
        below = [c for c in search.children[node] if search.low[c] >= search.index[node]]
        parts = [_part(partial(search.subtree, child), search.size[child], child) for child in below]
        up = search.parent[node]
        if up is not None:  # a root has no rest: its children's subtrees are all it joined
            count = search.size[search.root[node]] - 1 - sum(search.size[c] for c in below)
            parts.append(_part(partial(search.outside, node, below, node), count, up))
        message = (
            f"node '{node}' is a single point of failure: without it, {_join(parts)} cannot reach each other"
        )
        yield Finding("warning", "single-point-of-failure", message, topology.nodes[node].where)


def check_bridges(topology: Topology) -> Iterator[Finding]:
    graph = connection_graph(topology)
    search = _DepthFirst(graph)
    # types-networkx says bridges() yields nodes; it yields (u, v) edges, as networkx documents.
    for u, v in cast("Iterator[tuple[str, str]]", nx.bridges(graph)):
        decls = graph.edges[u, v]["decls"]
        low, high = (v, u) if search.parent[v] == u else (u, v)  # a bridge is a tree edge
        below = search.size[low]
        count = search.size[search.root[low]] - below
        parts = [
            _part(partial(search.subtree, low), below, low),
            _part(partial(search.outside, low, [low]), count, high),
        ]
        message = (
            f"the connection {u} - {v} ({', '.join(describe(d) for d in decls)}) is a single point of "
            f"failure: without it, {_join(parts)} cannot reach each other"
        )
        yield Finding("warning", "bridge", message, decls[0].where)


def _flows(topology: Topology) -> Iterator[Route | Federation]:
    """The declarations that move an exchange's messages: routes, then federations."""
    yield from topology.routes
    yield from topology.federations


def check_diameter(topology: Topology) -> Iterator[Finding]:
    for exchange in flow_exchanges(topology):
        graph: nx.DiGraph[str] = nx.DiGraph(flow_graph(topology, exchange))
        graph.remove_edges_from(list(nx.selfloop_edges(graph)))
        longest = _longest_shortest_path(graph)
        if len(longest) > 1:
            where = next(d.where for d in _flows(topology) if d.exchange == exchange)
            message = f"exchange '{exchange}': a message crosses at most {len(longest) - 1} hop(s) ({arrow(longest)})"
            yield Finding("info", "diameter", message, where)


def all_pairs_longest(graph: nx.DiGraph[str]) -> list[str]:
    """The first longest shortest path over all pairs, sources in node order: the exhaustive
    answer, for graphs that are not two-way forests."""
    longest: list[str] = []
    for _start, paths in nx.all_pairs_shortest_path(graph):
        for path in paths.values():
            if len(path) > len(longest):
                longest = path
    return longest


def _longest_shortest_path(graph: nx.DiGraph[str]) -> list[str]:
    """The first longest shortest path, sources in node order and each source's paths in the
    order networkx finds them. When every edge goes both ways (the generators' dynamic routes
    and fanout federations) the first source at the diameter is found with a few breadth-first
    searches (three per tree of a forest), and only it is searched for its path (all pairs of
    10,000 nodes are 10^8 paths)."""
    if not (_both_ways_only(graph) and len(graph)):
        return all_pairs_longest(graph)
    if _forest_once_undirected(graph):
        eccentricity = _tree_eccentricities(graph)
        diameter = max(eccentricity.values())
        start = next(node for node in graph if eccentricity[node] == diameter)
    else:
        start, diameter = _EccentricityBounds(graph).first_at_diameter()
    found = nx.single_source_shortest_path(graph, start)
    return next(path for path in found.values() if len(path) == diameter + 1)


def _tree_eccentricities(graph: nx.DiGraph[str]) -> dict[str, int]:
    """How far each node's farthest node is, in a forest with every edge both ways: the
    farther of the two ends of a diameter of its tree, found by two sweeps (a tree's farthest
    node from anywhere is an end of any diameter)."""
    eccentricity: dict[str, int] = {}
    for component in nx.weakly_connected_components(graph):
        anywhere = next(iter(component))
        far = nx.single_source_shortest_path_length(graph, anywhere)
        one_end = max(far, key=far.__getitem__)
        from_one = nx.single_source_shortest_path_length(graph, one_end)
        other_end = max(from_one, key=from_one.__getitem__)
        from_other = nx.single_source_shortest_path_length(graph, other_end)
        eccentricity.update({node: max(from_one[node], from_other[node]) for node in component})
    return eccentricity


class _EccentricityBounds:
    """Bounds on how far each node's farthest node is (its eccentricity), with every edge both
    ways, after Takes and Kosters: a search from `v` bounds each node `w` of its component
    below by max(d, ecc(v) - d) and above by ecc(v) + d, d being their distance. On a mesh a
    few searches settle the diameter, where all pairs search from every node (8 s at 2,000
    nodes). A leaf (one neighbour, which has others) is one hop farther from everything than
    its neighbour, so it takes its neighbour's bounds plus one and is not searched from: on a
    ring of regions, whose edges are leaves, that is a third of the searches."""

    def __init__(self, graph: nx.DiGraph[str]) -> None:
        self.graph = graph
        self.lower = dict.fromkeys(graph, 0)
        self.upper = dict.fromkeys(graph, len(graph))
        self.leaves = {
            node: next(iter(graph[node]))
            for node in graph
            if len(graph[node]) == 1 and len(graph[next(iter(graph[node]))]) > 1
        }

    def search(self, start: str) -> None:
        distance = nx.single_source_shortest_path_length(self.graph, start)
        farthest = max(distance.values())
        for node, far in distance.items():
            self.lower[node] = max(self.lower[node], far, farthest - far)
            self.upper[node] = min(self.upper[node], farthest + far)
        for leaf, neighbour in self.leaves.items():
            self.lower[leaf] = max(self.lower[leaf], self.lower[neighbour] + 1)
            self.upper[leaf] = min(self.upper[leaf], self.upper[neighbour] + 1)

    def diameter(self) -> int:
        """The largest eccentricity: searches from the open node of the highest upper bound
        and of the lowest lower bound in turn until no node can be farther than one is."""
        highest = True
        while max(self.upper.values()) > max(self.lower.values()):
            open_nodes = [
                node for node in self.graph if self.lower[node] < self.upper[node] and node not in self.leaves
            ]
            if highest:
                self.search(max(open_nodes, key=self.upper.__getitem__))
            else:
                self.search(min(open_nodes, key=self.lower.__getitem__))
            highest = not highest
        return max(self.lower.values())

    def first_at_diameter(self) -> tuple[str, int]:
        """The first node in the graph's order whose eccentricity is the diameter (those whose
        upper bound falls short are skipped unsearched), and the diameter."""
        diameter = self.diameter()
        for node in self.graph:
            if self.upper[node] == diameter and self.lower[node] < diameter:
                self.search(node)
            if self.lower[node] == diameter:
                return node, diameter
        raise AssertionError("a node is at the diameter")
