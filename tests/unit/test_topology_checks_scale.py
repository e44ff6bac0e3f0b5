"""topology.checks at the generators' scale: each check does work linear (or near) in the size
of a tree-shaped topology, counted here on generated hierarchies of a few hundred nodes (at
10,000 nodes the all-pairs, per-cut and per-route versions did not finish), and finds what the
exhaustive versions find; `amq-route topology check` lists a code's first warnings and counts
the rest. No wall-clock times: the work is counted."""

from __future__ import annotations

import itertools
import math
import os
import random
import re
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from simulations.generators import GeneratorSpec, generate
from topology import checks_graph as graph_checks
from topology import checks_references as reference_checks
from topology import graph as topology_graph
from topology.cli import listed
from topology.graph import flow_graph
from topology.model import Binding, Federation, Finding, Route, Topology

#: 1 root, 4 hubs, 120 edges: dynamic routes both ways along the tree, fanout federations up it.
HIERARCHY = GeneratorSpec("hierarchy", 3, hubs=4, nodes=125, fanout_federation="sim.fanout")


def hierarchy() -> Topology:
    return generate(HIERARCHY)


def counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[Any]:
    """Replace owner.name with a wrapper that records each call's arguments."""
    calls: list[Any] = []
    real = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return calls


def test_excludes_work_out_each_exchanges_tags_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not once per dynamic route: 248 routes made 248 passes over every route (70 s at 10,000)."""
    tree = hierarchy()
    first = tree.routes[0]
    tree = replace(tree, routes=(replace(first, excludes=("nobody",)), *tree.routes[1:]))
    calls = counting(monkeypatch, reference_checks, "dynamic_tags")
    found = list(reference_checks.check_excludes(tree))
    assert [(f.code, f.where) for f in found] == [("unknown-exclude", first.where)]
    assert (
        "excludes 'nobody', which is no node's tag on 'sim.topic' (tags: edge-000-000, " in found[0].message
    )
    assert [exchange for _topology, exchange in calls] == ["sim.topic"]


class CountedRoutes(tuple[Route, ...]):
    """The routes, counting how often something walks through them."""

    walks = 0

    def __iter__(self) -> Any:
        CountedRoutes.walks += 1
        return super().__iter__()


def test_federated_dynamic_walks_the_routes_once() -> None:
    """Not once per federation (6 s at 10,000 nodes); the first clashing route is still named."""
    tree = hierarchy()
    clash = Federation("edge-000-000", "root", "sim.topic", "fanout", where="t.toml:9: federations[124]")
    tree = replace(tree, routes=CountedRoutes(tree.routes), federations=(*tree.federations, clash))
    CountedRoutes.walks = 0
    found = list(reference_checks.check_federated_dynamic(tree))
    assert CountedRoutes.walks == 1
    assert [(f.code, f.where) for f in found] == [("federated-dynamic", clash.where)]
    assert "(dynamic route hub-000 -> edge-000-000 on 'sim.topic')" in found[0].message


def test_a_forest_s_loops_are_its_pairs_both_ways_without_enumerating(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once directions are dropped a tree has no cycle, so its directed cycles are the pairs
    of edges both ways: all dynamic (safe, no finding), a federation going up and back down
    (a bounce, no finding), or a static exchange route against a dynamic one (reported)."""
    calls = counting(monkeypatch, nx, "simple_cycles")
    tree = hierarchy()
    assert list(graph_checks.check_loops(tree)) == []
    back = Route("exchange", "hub-001", "edge-001-003", "sim.topic", key="#", where="t.toml:7: routes[248]")
    found = list(graph_checks.check_loops(replace(tree, routes=(*tree.routes, back))))
    assert [(f.severity, f.code, f.where) for f in found] == [("warning", "mixed-loop", back.where)]
    assert "can go round hub-001 -> edge-001-003 -> hub-001" in found[0].message
    assert calls == []
    ring = generate(GeneratorSpec("ring-of-regions", 1, hubs=3, edges=1))
    assert [f.code for f in graph_checks.check_loops(ring)] == ["dynamic-loop"]
    assert calls  # a graph with a cycle of its own is still enumerated


def test_bridges_and_single_points_of_failure_copy_no_subgraph(monkeypatch: pytest.MonkeyPatch) -> None:
    """One depth-first search finds every cut's parts (a subgraph per bridge: 10,000 copies of
    a 10,000-node graph); a part of more than MAX_LISTED nodes is named by its node at the cut."""
    calls = counting(monkeypatch, nx.Graph, "subgraph")
    tree = hierarchy()
    bridges = list(graph_checks.check_bridges(tree))
    points = list(graph_checks.check_articulation_points(tree))
    assert calls == []
    assert len(bridges) == 124 and len(points) == 5
    by_edge = {f.message.split(" (")[0]: f.message for f in bridges}
    assert by_edge["the connection root - hub-002"].endswith(
        "without it, [root and 93 other nodes] | [hub-002 and 30 other nodes] cannot reach each other"
    )
    assert by_edge["the connection hub-002 - edge-002-007"].endswith(
        "without it, [edge-002-007] | [hub-002 and 123 other nodes] cannot reach each other"
    )
    root = next(f.message for f in points if f.message.startswith("node 'root'"))
    assert root.endswith(
        "without it, [hub-000 and 30 other nodes] | [hub-001 and 30 other nodes] | "
        "[hub-002 and 30 other nodes] | [hub-003 and 30 other nodes] cannot reach each other"
    )


@pytest.mark.parametrize("seed", range(6))
def test_cut_parts_are_the_components_left_by_each_cut(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With every part listed, the depth-first parts are exactly the components networkx
    finds in a copy without the node or the connection (random graphs with cycles, trees and
    isolated nodes)."""
    monkeypatch.setattr(graph_checks, "MAX_LISTED", 10**6)
    rng = random.Random(seed)
    names = [f"n{index:02d}" for index in range(30)]
    pairs = [(a, b) for a in names for b in names if a < b and rng.random() < 0.07]
    topology = Topology("t", "t.toml", {n: replace(hierarchy().nodes["root"], name=n) for n in names})
    topology = replace(
        topology, routes=tuple(Route("dynamic", a, b, "x", where="t.toml:1") for a, b in pairs)
    )
    graph = nx.Graph(pairs)
    graph.add_nodes_from(names)

    def parts(cut: nx.Graph) -> str:
        return graph_checks._join(graph_checks._group(c) for c in nx.connected_components(cut))

    expected = []
    for node in sorted(nx.articulation_points(graph), key=names.index):
        expected.append(
            f"'{node}' is a single point of failure: without it, {parts(graph.subgraph(set(nx.node_connected_component(graph, node)) - {node}))} "
        )
    found = [f.message.removeprefix("node ") for f in graph_checks.check_articulation_points(topology)]
    assert [m[: m.index(" cannot")] + " " for m in found] == expected
    expected = []
    for u, v in nx.bridges(graph):
        rest = nx.Graph(graph.subgraph(nx.node_connected_component(graph, u)))
        rest.remove_edge(u, v)
        expected.append(parts(rest))
    found = [
        f.message.split("without it, ")[1].removesuffix(" cannot reach each other")
        for f in graph_checks.check_bridges(topology)
    ]
    assert sorted(found) == sorted(expected)  # networkx lists bridges in its own order


def test_the_diameter_of_a_tree_takes_no_all_pairs_search(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting(monkeypatch, nx, "all_pairs_shortest_path")
    found = [f.message for f in graph_checks.check_diameter(hierarchy())]
    assert calls == []
    assert found == [
        f"exchange '{name}': a message crosses at most 4 hop(s) (edge-000-000 -> hub-000 -> root -> hub-001 -> edge-001-000)"
        for name in ("sim.topic", "sim.fanout")
    ]
    ring = generate(GeneratorSpec("ring-of-regions", 1, hubs=3, edges=1))
    assert [f.code for f in graph_checks.check_diameter(ring)] == ["diameter"]
    assert calls == []  # not a tree, but every edge both ways: bounded searches
    one_way = replace(ring, routes=(*ring.routes, Route("exchange", "hub-000", "edge-001-000", "sim.topic")))
    assert [f.code for f in graph_checks.check_diameter(one_way)] == ["diameter"]
    assert calls  # an edge one way: every pair


@pytest.mark.parametrize("seed", range(20))
def test_a_tree_s_diameter_path_is_the_one_all_pairs_finds(seed: int) -> None:
    """Same length and the same path (first source in node order, first target networkx
    reaches), on random forests of edges both ways with the nodes in a random order."""
    rng = random.Random(seed)
    names = [f"n{index}" for index in range(rng.randint(1, 40))]
    rng.shuffle(names)
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(names)
    for index in range(1, len(names)):
        if rng.random() < 0.9:  # else a new tree of the forest starts here
            parent = names[rng.randrange(index)]
            graph.add_edge(parent, names[index])
            graph.add_edge(names[index], parent)
    assert graph_checks._longest_shortest_path(graph) == graph_checks.all_pairs_longest(graph)


def finding(code: str, severity: str, index: int) -> Finding:
    return Finding(severity, code, f"{code} number {index}", f"t.toml:{index}: routes[{index}]")


def test_check_lists_20_warnings_of_a_code_and_counts_the_rest() -> None:
    """A 10,000-node hierarchy has 9,999 bridges: the operator sees 20 and a count (--all:
    every one); errors are all listed, and a small topology's output is unchanged."""
    findings = [finding("bridge", "warning", i) for i in range(25)]
    findings += [finding("static-loop", "error", i) for i in range(25)]
    findings += [finding("diameter", "info", i) for i in range(3)]
    lines = listed(findings, 20, Path("big.toml"))
    codes = Counter(re.findall(r" \[([a-z-]+)\] ", "\n".join(lines)))
    assert codes == {"bridge": 21, "static-loop": 25, "diameter": 3}
    assert lines[-1] == (
        "... and 5 more warning(s) [bridge] like these; `amq-route topology check --all big.toml` lists every one"
    )
    assert listed(findings, None, Path("big.toml")) == [str(f) for f in findings]
    assert listed(findings[:20], 20, Path("big.toml")) == [str(f) for f in findings[:20]]


def bound_everywhere(topology: Topology, exchange: str = "sim.topic") -> Topology:
    """`topology` with a queue bound to `exchange` with '#' on every node."""
    bindings = tuple(Binding(node, exchange, "q", "#") for node in topology.nodes)
    return replace(topology, bindings=bindings)


def test_multiple_paths_search_only_the_pairs_a_static_hop_joins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dynamic routes deliver once per node, so a pair needs a path with a static hop to get
    a second copy: a mesh of dynamic routes alone has no pair to search (every pair's paths of
    a 30-node random-geometric mesh did not finish in 30 s); one exchange route hub-001 ->
    hub-002 makes the pairs whose start reaches hub-001 and whose end hub-002 reaches."""
    calls = counting(monkeypatch, graph_checks, "_delivering_paths")
    mesh = bound_everywhere(generate(GeneratorSpec("mesh-of-hubs", 1, hubs=3, edges=1)))
    assert list(graph_checks.check_multiple_paths(mesh)) == []
    assert calls == []
    static = Route("exchange", "hub-001", "hub-002", "sim.topic", key="#", where="t.toml:9: routes[12]")
    found = list(graph_checks.check_multiple_paths(replace(mesh, routes=(*mesh.routes, static))))
    assert len(calls) == 6 * 5  # everything reaches hub-001, hub-002 reaches everything
    assert len(found) == 12 and {f.where for f in found} == {static.where}


def test_multiple_paths_work_out_each_exchanges_dynamic_routes_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not once per hop of every pair's chosen path: a 60-node ring of regions with one
    exchange route worked out the tags 76,224 times (three quarters of a 14.8 s check)."""
    ring = bound_everywhere(generate(GeneratorSpec("ring-of-regions", 1, hubs=6, edges=4)))
    static = Route("exchange", "hub-000", "hub-003", "sim.topic", key="#", where="t.toml:9: routes[60]")
    ring = replace(ring, routes=(*ring.routes, static))
    calls = counting(monkeypatch, topology_graph, "dynamic_tags")
    found = list(graph_checks.check_multiple_paths(ring))
    assert found and {f.where for f in found} == {static.where}
    assert len(calls) == 1  # the one exchange with routes: sim.topic


def random_flows(seed: int) -> Topology:
    """A random topology of 7 nodes on one topic exchange: dynamic routes (mostly both ways),
    exchange routes with keys, fanout federations, and bindings with keys."""
    rng = random.Random(seed)
    names = [f"n{index}" for index in range(7)]
    keys = ["#", "a.#", "b.*", "a.b"]
    routes: list[Route] = []
    for a, b in itertools.permutations(names, 2):
        roll = rng.random()
        if roll < 0.12:
            routes += [Route("dynamic", a, b, "x", where=f"t.toml:{len(routes)}")]
            if rng.random() < 0.8:
                routes += [Route("dynamic", b, a, "x", where=f"t.toml:{len(routes)}")]
        elif roll < 0.2:
            routes += [Route("exchange", a, b, "x", key=rng.choice(keys), where=f"t.toml:{len(routes)}")]
    bindings = tuple(Binding(n, "x", "q", rng.choice(keys)) for n in names if rng.random() < 0.7)
    node = hierarchy().nodes["root"]
    nodes = {n: replace(node, name=n, port=node.port + index) for index, n in enumerate(names)}
    return Topology("t", "t.toml", nodes, routes=tuple(routes), bindings=bindings)


@pytest.mark.parametrize("seed", range(12))
def test_multiple_paths_find_what_searching_every_pair_finds(seed: int) -> None:
    """The same findings, in the same order, as the search of every ordered pair."""
    topology = random_flows(seed)
    graphs = graph_checks._ExchangeGraphs(topology, "x")
    every_pair = [
        found
        for start, end in itertools.permutations(topology.nodes, 2)
        if (found := graph_checks._pair_paths(topology, "x", graphs, start, end)) is not None
    ]
    if graph_checks._one_path_at_most(flow_graph(topology, "x")):
        assert every_pair == []
    assert list(graph_checks.check_multiple_paths(topology)) == every_pair


@pytest.mark.parametrize(
    "dynamic",
    [
        # a -> b -> c and a -> b -> d -> c: both take the exchange route a -> b.
        (("b", "c"), ("b", "d"), ("d", "c")),
        # a -> c by the exchange route, a -> b -> c by dynamic routes.
        (("a", "b"), ("b", "c")),
    ],
)
def test_a_second_path_without_a_static_hop_of_its_own_is_reported(
    dynamic: tuple[tuple[str, str], ...],
) -> None:
    """Random topologies of a few nodes with an exchange route among dynamic ones made the
    check raise StopIteration: the proposal looked for a static hop only the second path
    takes. It now names the static hop the copies share (or the first path's)."""
    base = random_flows(0)
    nodes = {n: replace(base.nodes["n0"], name=n, port=index) for index, n in enumerate("abcd")}
    static = Route("exchange", "a", "b" if len(dynamic) == 3 else "c", "x", key="#", where="t.toml:1")
    routes = (static, *(Route("dynamic", u, v, "x", where="t.toml:2") for u, v in dynamic))
    topology = Topology("t", "t.toml", nodes, routes=routes, bindings=(Binding("c", "x", "q", "#"),))
    found = list(graph_checks.check_multiple_paths(topology))
    assert [(f.code, f.where) for f in found] == [("multiple-paths", static.where)]
    assert "reaches c over 2 paths" in found[0].message
    assert f"delete the exchange route {static.source} -> {static.destination}" in found[0].message


def test_dynamic_paths_of_links_both_ways_come_from_the_bridges(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ring or mesh of dynamic routes both ways, with no tag or exclude list in the way:
    a pair has several paths unless bridges alone join it, so no pair's paths are listed
    (a 60-node random-geometric mesh's did not finish in 20 s), and past MAX_LISTED pairs the
    message counts the rest."""
    calls = counting(monkeypatch, topology_graph.DynamicRoutes, "paths")
    ring = generate(GeneratorSpec("ring-of-regions", 1, hubs=4, edges=2))  # 4 hubs, 8 edges
    [found] = graph_checks.check_dynamic_paths(ring)
    assert calls == []
    # The edges hang off the ring by bridges: any two nodes on different hubs, or two hubs.
    pairs = 12 * 11 // 2 - 4 * 3
    assert f"give {pairs} pair(s) of nodes more than one path (hub-000 <-> hub-001, " in found.message
    assert f"and {pairs - 20} other pairs): safe" in found.message


def random_dynamic(seed: int) -> Topology:
    """A random topology of up to 9 nodes with dynamic routes on 'x': both ways on most seeds,
    some one way on others; on some seeds a route excludes a tag or two nodes share one."""
    rng = random.Random(seed)
    names = [f"n{index}" for index in range(rng.randint(2, 9))]
    node = hierarchy().nodes["root"]
    nodes = {n: replace(node, name=n, port=node.port + index) for index, n in enumerate(names)}
    routes: list[Route] = []
    for a, b in itertools.combinations(names, 2):
        if rng.random() < 0.3:
            routes += [Route("dynamic", a, b, "x", where=f"t.toml:{len(routes)}")]
            if seed % 3 or rng.random() < 0.7:
                routes += [Route("dynamic", b, a, "x", where=f"t.toml:{len(routes)}")]
    if routes and seed % 5 == 4:
        routes[0] = replace(routes[0], excludes=(rng.choice(names),))
    if seed % 7 == 6:
        nodes[names[0]] = replace(nodes[names[0]], tag=names[-1])
    return Topology("t", "t.toml", nodes, routes=tuple(routes))


@pytest.mark.parametrize("seed", range(40))
def test_dynamic_paths_count_and_list_the_pairs_listing_every_path_finds(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same count and the same first pairs as listing each pair's paths both ways."""
    monkeypatch.setattr(graph_checks, "MAX_LISTED", 5)
    topology = random_dynamic(seed)
    routes = topology_graph.DynamicRoutes(topology, "x")
    pairs = graph_checks._pairs_enumerated(topology, routes)
    assert graph_checks._several_dynamic_paths(topology, routes) == (len(pairs), pairs[:5])


def test_cut_off_nodes_name_a_big_group_by_a_node_and_a_count() -> None:
    """The rest and the cut-off group are listed up to MAX_LISTED nodes, like a cut's parts
    (the message listed all 125 names of the rest, and would list every node of a
    few-thousand-node mesh); a small group still lists its nodes in declaration order."""
    tree = hierarchy()
    names = [f"z{index:02d}" for index in range(25)]
    node = tree.nodes["root"]
    apart = {
        n: replace(node, name=n, port=node.port + 1000 + i, where=f"t.toml:{i}") for i, n in enumerate(names)
    }
    pair = {
        n: replace(node, name=n, port=node.port + 2000 + i, where="t.toml:99")
        for i, n in enumerate(["y1", "y0"])
    }
    ring = tuple(Route("dynamic", a, b, "sim.topic") for a, b in zip(names, names[1:], strict=False))
    tie = (Route("dynamic", "y1", "y0", "sim.topic"),)
    found = list(
        graph_checks.check_cut_off_nodes(
            replace(tree, nodes={**tree.nodes, **apart, **pair}, routes=(*tree.routes, *ring, *tie))
        )
    )
    assert [f.message for f in found] == [
        "nodes [z00 and 24 other nodes] are cut off from the rest [root and 124 other nodes]: "
        "no link, route or federation joins the two",
        "nodes y1, y0 are cut off from the rest [root and 124 other nodes]: no link, route or federation joins the two",
    ]


def test_the_diameter_of_a_mesh_takes_fewer_searches_than_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Links both ways with cycles (a ring of 20 hubs with 4 edges each, 100 nodes, the worst
    shape for the bounds: every hub is searched, 41 searches before leaves took their hub's
    bounds): no all-pairs search (one per node), no search from an edge, and the path all
    pairs finds."""
    graph: nx.DiGraph[str] = nx.DiGraph(
        flow_graph(generate(GeneratorSpec("ring-of-regions", 1, hubs=20, edges=4)), "sim.topic")
    )
    expected = graph_checks.all_pairs_longest(graph)
    every_pair = counting(monkeypatch, nx, "all_pairs_shortest_path")
    searches = counting(monkeypatch, nx, "single_source_shortest_path_length")
    assert graph_checks._longest_shortest_path(graph) == expected
    assert len(graph) == 100 and every_pair == [] and 0 < len(searches) <= 20


@pytest.mark.parametrize("seed", range(60))
def test_a_mesh_s_diameter_path_is_the_one_all_pairs_finds(seed: int) -> None:
    """Same path as all pairs, on random graphs of edges both ways with cycles, several
    components and isolated nodes, the nodes in a random order."""
    rng = random.Random(seed)
    names = [f"n{index}" for index in range(rng.randint(1, 30))]
    rng.shuffle(names)
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(names)
    for a, b in itertools.combinations(names, 2):
        if rng.random() < 0.12:
            graph.add_edges_from([(a, b), (b, a)])
    for leaf in range(rng.randint(0, 6)):  # leaves hung off random nodes
        other = rng.choice(names)
        graph.add_edges_from([(f"leaf{leaf}", other), (other, f"leaf{leaf}")])
    assert graph_checks._longest_shortest_path(graph) == graph_checks.all_pairs_longest(graph)


def random_geometric(nodes: int) -> Topology:
    """The generator's random-geometric mesh, its radius large enough to join most nodes."""
    radius = math.sqrt(2.2 * math.log(nodes) / (math.pi * nodes))
    return generate(GeneratorSpec("random-geometric", 1, nodes=nodes, radius=radius))


def test_a_static_hop_on_a_cycle_of_a_mesh_is_reported() -> None:
    """A mesh has more cycles than are listed (MAX_ENUMERATED): the listing kept networkx's
    first 200, pairs both ways among them, and missed the loop an exchange route closes; the
    shortest cycle through each static hop is now always among those checked."""
    mesh = random_geometric(120)
    names = list(mesh.nodes)
    static = Route("exchange", names[0], names[-1], "sim.topic", key="#", where="t.toml:1: routes[999]")
    found = [
        f
        for f in graph_checks.check_loops(replace(mesh, routes=(*mesh.routes, static)))
        if f.severity != "info"
    ]
    assert found and {(f.code, f.where) for f in found} == {("mixed-loop", static.where)}
    assert f"can go round {names[0]} -> {names[-1]} -> {names[0]}:" in found[0].message


def test_a_mesh_s_loops_are_the_same_whatever_the_hash_seed() -> None:
    """Beyond MAX_ENUMERATED cycles, which are listed depended on networkx's set order, so on
    PYTHONHASHSEED: two runs of one check printed different findings."""
    script = (
        "from tests.unit.test_topology_checks_scale import random_geometric\n"
        "from topology.checks_graph import check_loops\n"
        "print([f.message for f in check_loops(random_geometric(60))])\n"
    )
    root = Path(__file__).resolve().parents[2]
    runs = {
        subprocess.run(
            [sys.executable, "-c", script],
            cwd=root,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(runs) == 1


def is_cycle(graph: nx.DiGraph[str], cycle: list[str]) -> bool:
    return len(set(cycle)) == len(cycle) > 1 and all(
        graph.has_edge(u, v) for u, v in zip(cycle, cycle[1:] + cycle[:1], strict=True)
    )


@pytest.mark.parametrize("seed", range(20))
def test_the_cycles_are_networkx_s_or_a_bounded_choice_covering_each_static_hop(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Up to MAX_ENUMERATED longer cycles: exactly networkx's cycles of two nodes or more.
    Beyond (MAX_ENUMERATED made 4): real simple cycles, every pair both ways, and every static
    hop on a cycle on one of them."""
    topology = random_flows(seed)
    graph = flow_graph(topology, "x")
    simple: nx.DiGraph[str] = nx.DiGraph(graph)
    every = sorted(sorted(c) for c in nx.simple_cycles(simple) if len(c) > 1)
    assert sorted(sorted(c) for c in graph_checks._simple_cycles(graph)) == every
    monkeypatch.setattr(graph_checks, "MAX_ENUMERATED", 4)
    chosen = graph_checks._simple_cycles(graph)
    assert all(is_cycle(simple, cycle) for cycle in chosen)
    assert {frozenset(c) for c in every if len(c) == 2} <= {frozenset(c) for c in chosen}
    on_cycles = {(u, v) for c in nx.simple_cycles(simple) for u, v in zip(c, c[1:] + c[:1], strict=True)}
    static = {(u, v) for u, v, kind in graph.edges(data="kind") if kind != "dynamic"} & on_cycles
    chosen_hops = {(u, v) for c in chosen for u, v in zip(c, c[1:] + c[:1], strict=True)}
    assert static <= chosen_hops
    assert len([c for c in chosen if len(c) > 2]) <= 4 + len(static)


def test_a_mesh_both_ways_with_many_independent_cycles_takes_no_johnson_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Edges both ways and more independent cycles than MAX_ENUMERATED / 2: surely more cycles
    than listed, so networkx's search (strongly connected components recomputed per cycle, 8 s
    for 200 cycles at 10,000 nodes) is not started; the same findings as a run that starts it."""
    mesh = random_geometric(120)
    searched = list(graph_checks.check_loops(mesh))
    monkeypatch.setattr(graph_checks, "_more_than_listed", lambda core, undirected: False)
    assert list(graph_checks.check_loops(mesh)) == searched
    monkeypatch.undo()
    calls = counting(monkeypatch, nx, "simple_cycles")
    assert list(graph_checks.check_loops(mesh)) == searched
    assert calls == []
