"""Graphs of a topology (networkx), for the planner's checks and the message-flow model.

- `topology_graph`: every declared node, and one edge per link, route and federation between
  declared nodes (a MultiDiGraph; `kind` is link, dynamic, exchange, queue or federation).
- `connection_graph`: the same, undirected and simple: which nodes can talk at all (components,
  single points of failure).
- `flow_graph`: how messages of one exchange move between nodes: dynamic routes, exchange
  routes, queue routes whose source queue is bound to that exchange, and federations in the
  direction(s) their type moves messages (`federation-up`: child to parent, `federation-down`:
  parent to child). Each edge keeps its declaration as `decl`.

Directions are the messages': a route's edge goes from its source to its destination whatever
node holds it, and a link's from the node that opens it to its peer.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from itertools import islice

import networkx as nx

from gateway.routing.federation_types import BEHAVIOURS
from topology.model import Binding, Federation, Link, Route, Topology

Declaration = Link | Route | Federation
#: Cycles and paths beyond this many are not enumerated (the checks say so).
MAX_ENUMERATED = 200
#: (start, end) pairs whose dynamic paths DynamicRoutes keeps (at most MAX_ENUMERATED paths each).
PATHS_KEPT = 4096


def describe(decl: Declaration) -> str:
    """A declaration as findings name it, in the file's own terms (links and routes `from ->
    to`, federations `child -> parent`)."""
    if isinstance(decl, Link):
        return f"link {decl.peer} -> {decl.opener}"
    if isinstance(decl, Federation):
        return f"federation {decl.child} -> {decl.parent} of '{decl.exchange}' ({decl.type})"
    what = f"{decl.kind} route {decl.source} -> {decl.destination}"
    if decl.kind == "exchange":
        return f"{what} on '{decl.exchange}' (key '{decl.key}')"
    if decl.kind == "queue":
        return f"{what} from queue '{decl.queue}' into '{decl.exchange}'"
    return f"{what} on '{decl.exchange}'"


def ends(decl: Declaration) -> tuple[str, str]:
    """(from, to) of a declaration, in the direction messages (or the link's connection) go."""
    if isinstance(decl, Link):
        return decl.opener, decl.peer
    if isinstance(decl, Federation):
        return decl.child, decl.parent
    return decl.source, decl.destination


def kind_of(decl: Declaration) -> str:
    if isinstance(decl, Link):
        return "link"
    if isinstance(decl, Federation):
        return "federation"
    return decl.kind


def declarations(topology: Topology) -> Iterator[Declaration]:
    yield from topology.links
    yield from topology.routes
    yield from topology.federations


def topology_graph(topology: Topology) -> nx.MultiDiGraph[str]:
    """Declared nodes, and an edge per link, route and federation whose two nodes are declared."""
    graph: nx.MultiDiGraph[str] = nx.MultiDiGraph()
    for name, node in topology.nodes.items():
        graph.add_node(name, region=node.region, endpoint=node.endpoint)
    for decl in declarations(topology):
        start, end = ends(decl)
        if start in topology.nodes and end in topology.nodes:
            graph.add_edge(start, end, kind=kind_of(decl), decl=decl)
    return graph


def connection_graph(topology: Topology) -> nx.Graph[str]:
    """Undirected, one edge per connected pair, listing the declarations that connect it
    (self-loops left out: they connect nothing)."""
    graph: nx.Graph[str] = nx.Graph()
    graph.add_nodes_from(topology.nodes)
    for start, end, data in topology_graph(topology).edges(data=True):
        if start == end:
            continue
        if not graph.has_edge(start, end):
            graph.add_edge(start, end, decls=[])
        graph.edges[start, end]["decls"].append(data["decl"])
    return graph


def flow_exchanges(topology: Topology) -> list[str]:
    """Exchanges some route or federation moves messages of, in order of first mention (queue
    routes count for their destination exchange)."""
    names = [route.exchange for route in topology.routes]
    names += [federation.exchange for federation in topology.federations]
    return list(dict.fromkeys(names))


def _queue_bound_to(topology: Topology, node: str, queue: str | None, exchange: str) -> bool:
    return any(b.node == node and b.queue == queue and b.exchange == exchange for b in topology.bindings)


def flow_graph(topology: Topology, exchange: str) -> nx.MultiDiGraph[str]:
    """How messages of `exchange` move between declared nodes (edge kinds: dynamic, exchange,
    queue, federation-up, federation-down)."""
    graph: nx.MultiDiGraph[str] = nx.MultiDiGraph()
    graph.add_nodes_from(topology.nodes)
    known = topology.nodes
    for route in topology.routes:
        if route.exchange != exchange or route.source not in known or route.destination not in known:
            continue
        if route.kind == "queue" and not _queue_bound_to(topology, route.source, route.queue, exchange):
            continue
        graph.add_edge(route.source, route.destination, kind=route.kind, decl=route)
    for federation in topology.federations:
        if federation.exchange != exchange or federation.child not in known or federation.parent not in known:
            continue
        behaviour = BEHAVIOURS.get(topology.federation_type(federation))
        if behaviour is None:
            continue
        if behaviour.forwards is not None:
            graph.add_edge(federation.child, federation.parent, kind="federation-up", decl=federation)
        if behaviour.subscribes:
            graph.add_edge(federation.parent, federation.child, kind="federation-down", decl=federation)
    return graph


def dynamic_tags(topology: Topology, exchange: str) -> dict[str, str]:
    """Each node's federation tag on `exchange`: the first dynamic route it holds there sets it
    (the route's tag, else the node's tag or name); a node holding none is named by its name."""
    tags = {name: name for name in topology.nodes}
    held: set[str] = set()
    for route in topology.routes:
        node = topology.nodes.get(route.destination)
        if route.kind != "dynamic" or route.exchange != exchange or node is None or node.name in held:
            continue
        held.add(node.name)
        tags[node.name] = route.tag or node.federation_tag
    return tags


def dynamic_graph(topology: Topology, exchange: str) -> nx.DiGraph[str]:
    """Every declared node, and an edge per dynamic route of `exchange` between two of them."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(topology.nodes)
    for route in topology.routes:
        if route.kind == "dynamic" and route.exchange == exchange and route.source != route.destination:
            if route.source in topology.nodes and route.destination in topology.nodes:
                graph.add_edge(route.source, route.destination)
    return graph


class DynamicRoutes:
    """One exchange's dynamic routes, its nodes' tags and their graph, worked out once for
    searches that ask about many paths (a check of every pair of a 60-node ring built them
    again per hop of every path: three quarters of its time)."""

    def __init__(self, topology: Topology, exchange: str) -> None:
        self.tags = dynamic_tags(topology, exchange)
        self.graph = dynamic_graph(topology, exchange)
        #: The dynamic routes from one node to another, in declaration order.
        self.routes: dict[tuple[str, str], list[Route]] = {}
        for route in topology.routes:
            if route.kind == "dynamic" and route.exchange == exchange:
                self.routes.setdefault((route.source, route.destination), []).append(route)
        # Each hop of a chosen path lists the paths from there to the same end again: kept
        # for the last PATHS_KEPT (start, end) asked, so memory stays bounded on big meshes.
        self._paths = lru_cache(maxsize=PATHS_KEPT)(self._search)

    def hop_allowed(self, path: list[str], hop: int) -> Route | None:
        """The dynamic route carrying messages from path[hop] to path[hop + 1] if interest
        from path[-1] crosses it backwards (gateway.routing.interest: the upstream's own tag,
        its name and the route's excludes must not be on the advert's path); None if no route
        lets it."""
        upstream, downstream = path[hop], path[hop + 1]
        advert_path = [self.tags[node] for node in path[hop + 1 :]]
        if self.tags[upstream] in advert_path:
            return None
        relayed = set(advert_path[1:])
        for route in self.routes.get((upstream, downstream), []):
            if not relayed.intersection({upstream, *route.excludes}):
                return route
        return None

    def paths(self, start: str, end: str) -> list[list[str]]:
        """The simple paths of dynamic routes a message could take from `start` to `end`:
        those interest from `end` can travel back along (tags and exclude lists respected)."""
        return [list(path) for path in self._paths(start, end)]

    def _search(self, start: str, end: str) -> tuple[tuple[str, ...], ...]:
        if start not in self.graph or end not in self.graph or start == end:
            return ()
        return tuple(
            tuple(path)
            for path in islice(nx.all_simple_paths(self.graph, start, end), MAX_ENUMERATED)
            if all(self.hop_allowed(path, hop) for hop in range(len(path) - 1))
        )

    def chosen(self, start: str, end: str) -> list[str] | None:
        """The path path-vector routing sends messages along from `start` to `end`: at each
        node, the shortest allowed path to `end`, ties broken by comparing the tags on it
        (gateway.routing.interest's rule); None if interest from `end` reaches no way back."""
        path = [start]
        while path[-1] != end:
            options = [option for option in self.paths(path[-1], end) if not set(option[1:]) & set(path)]
            if not options:
                return None
            best = min(options, key=lambda option: (len(option), [self.tags[node] for node in option[1:]]))
            path.append(best[1])
        return path


def bindings_on(topology: Topology, node: str, exchange: str) -> list[Binding]:
    return [b for b in topology.bindings if b.node == node and b.exchange == exchange]
