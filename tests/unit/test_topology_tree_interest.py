"""topology.tree_interest: on forests of dynamic routes, routing with a TreeInterest gives
exactly what routing with converged InterestTables (one per node, as the nodes keep them)
gives: every queue's copies, every crossing with its path, loops and cuts, the bindings that
took each copy. Random forests over seeds, each exchange type, a static route carrying a
stamped copy from one forest into another; and the shapes it must leave to the tables."""

from __future__ import annotations

import random
from typing import Any

import pytest

from topology.flow import _Network
from topology.model import Binding, Exchange, Node, Publisher, Queue, Route, Topology
from topology.tree_interest import TreeInterest

X, Y = "fed.x", "fed.y"
WORDS = ["a", "b", "c"]


def _key(rng: random.Random, kind: str) -> tuple[str, dict[str, Any]]:
    words = [rng.choice(WORDS) for _ in range(2)]
    if kind == "topic":
        words = [w if rng.random() > 0.3 else "*" for w in words] + (["#"] if rng.random() < 0.2 else [])
    if kind == "headers":
        return "", {
            "x-match": rng.choice(["all", "any"]),
            "w0": words[0],
            **({"w1": words[1]} if rng.random() < 0.5 else {}),
        }
    return ".".join(words), {}


def forest(seed: int, kind: str) -> Topology:
    """Two random trees of dynamic routes (both ways) on X and one on Y, random bindings (some
    nodes none, some twice the same, arguments in either order)."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(14)]
    trees = [names[:6], names[6:10], names[10:]]
    routes: list[Route] = []
    for tree, exchange in zip(trees, (X, X, Y), strict=True):
        for index, node in enumerate(tree[1:], start=1):
            parent = tree[rng.randrange(index)]
            routes += [Route("dynamic", parent, node, exchange), Route("dynamic", node, parent, exchange)]
    # a static route from the first tree into the second: copies arrive stamped for origins
    # of another tree
    routes.append(Route("exchange", rng.choice(trees[0]), rng.choice(trees[1]), X, key="#"))
    exchanges = [Exchange(n, X, kind) for n in names[:10]] + [Exchange(n, Y, kind) for n in names[10:]]
    queues, bindings = [], []
    for node in names:
        queues.append(Queue(node, "q"))
        exchange = X if node in names[:10] else Y
        for _ in range(rng.choice([0, 1, 2, 3])):
            key, arguments = _key(rng, kind)
            bindings.append(Binding(node, exchange, "q", key, arguments))
            if rng.random() < 0.2:
                bindings.append(Binding(node, exchange, "q", key, dict(reversed(list(arguments.items())))))
    return Topology(
        "t",
        "t.toml",
        {name: Node(name, "127.0.0.1", 5701 + i) for i, name in enumerate(names)},
        tuple(exchanges),
        tuple(queues),
        tuple(bindings),
        routes=tuple(routes),
    )


def routed(network: _Network, publisher: Publisher, headers: dict[str, Any]) -> tuple[Any, ...]:
    result = network.publish(publisher, headers)
    return (result.queues, result.bindings, result.looped, result.cut, result.crossings, result.deliveries)


@pytest.mark.parametrize("kind", ["topic", "direct", "fanout", "headers"])
@pytest.mark.parametrize("seed", range(6))
def test_a_forest_routes_as_the_converged_tables_do(kind: str, seed: int) -> None:
    topology = forest(seed, kind)
    trees, tables = _Network(topology), _Network(topology, trees=False)
    assert trees.work["interest bindings"] and not tables.work["interest bindings"]  # both ways ran
    rng = random.Random(seed)
    for node in topology.nodes:
        exchange = Y if topology.exchange(node, Y) else X
        for _ in range(4):
            key, _ = _key(rng, "direct")
            headers = {"w0": key.split(".")[0], "w1": key.split(".")[1]}
            publisher = Publisher(node, exchange, key)
            assert routed(trees, publisher, headers) == routed(tables, publisher, headers)


def _routes(pairs: list[tuple[str, str]], excludes: tuple[str, ...] = ()) -> list[Route]:
    return [Route("dynamic", a, b, X, excludes=excludes) for a, b in pairs]


def _interest(routes: list[Route], tags: dict[str, str] | None = None) -> TreeInterest | None:
    nodes = {n for r in routes for n in (r.source, r.destination)}
    return TreeInterest.of(routes, tags or {n: n for n in nodes}, {n: "topic" for n in nodes}, {})


def test_only_forests_of_reversible_routes_without_excludes_or_tags_are_taken() -> None:
    line = [("a", "b"), ("b", "a"), ("b", "c"), ("c", "b")]
    assert _interest(_routes(line)) is not None
    assert _interest(_routes(line[:3])) is None  # one way only
    assert _interest(_routes(line + [("c", "a"), ("a", "c")])) is None  # a ring
    assert _interest(_routes(line, excludes=("x",))) is None
    assert _interest(_routes(line + line[:1])) is None  # two routes on one link
    assert _interest(_routes(line), {"a": "a", "b": "tag-b", "c": "c"}) is None


def test_next_hops_follow_the_tree() -> None:
    interest = _interest(
        _routes([("r", "h"), ("h", "r"), ("h", "e1"), ("e1", "h"), ("h", "e2"), ("e2", "h")])
    )
    assert interest is not None
    assert [interest.next_hop("e1", o) for o in ("h", "r", "e2")] == ["h", "h", "h"]
    assert [interest.next_hop("h", o) for o in ("r", "e1", "e2")] == ["r", "e1", "e2"]
    assert [interest.next_hop("r", o) for o in ("h", "e1", "e2")] == ["h", "h", "h"]
