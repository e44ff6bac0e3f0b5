"""Dynamic routing's interest table, exercised on whole topologies in memory.

A tiny simulator propagates adverts along dynamic routes until nothing changes, then publishes
from every node and counts deliveries: each node with a matching binding must receive each
message exactly once, and no other node may receive it.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter

from gateway.routing import TopicMatcher
from gateway.routing.interest import Advert, InterestTable


class Network:
    """Nodes with one exchange each; `routes` are (dest, src) pairs: dest pulls from src."""

    def __init__(self, nodes: list[str], routes: list[tuple[str, str]], exchange_type: str = "topic") -> None:
        self.tables = {node: InterestTable(node, exchange_type) for node in nodes}
        self.routes = routes
        self.bound: dict[str, list[str]] = {node: [] for node in nodes}

    def bind(self, node: str, key: str) -> None:
        self.tables[node].bind_local(key, {})
        self.bound[node].append(key)

    def converge(self) -> int:
        """Exchange full advert sets along every route until a fixpoint; returns the rounds."""
        for rounds in itertools.count(1):
            changed = False
            for dest, src in self.routes:
                adverts = self.tables[dest].adverts_for(src)
                before = self.tables[src].adverts_for("nobody")
                self.tables[src].replace_from(dest, adverts)
                changed |= before != self.tables[src].adverts_for("nobody")
            if not changed:
                return rounds
            assert rounds < 50, "interest did not converge"
        raise AssertionError("unreachable")

    def publish(self, node: str, key: str) -> Counter[str]:
        """Where one message published at `node` is delivered, with multiplicity."""
        deliveries: Counter[str] = Counter()
        self._arrive(node, key, None, deliveries, hops=0)
        return deliveries

    def _arrive(self, node: str, key: str, destinations, deliveries: Counter[str], hops: int) -> None:
        assert hops < 20, "message loops"
        table = self.tables[node]
        if table.delivers_locally(destinations) and any(_topic_match(p, key) for p in self.bound[node]):
            deliveries[node] += 1
        for neighbour, origins in table.forward(key, None, destinations).items():
            assert (neighbour, node) in self.routes, f"{node} forwarded to {neighbour} without a route"
            self._arrive(neighbour, key, origins, deliveries, hops + 1)


def _topic_match(pattern: str, key: str) -> bool:
    matcher = TopicMatcher()
    matcher.bind(pattern, {}, "x")
    return bool(matcher.match(key, None))


def both_ways(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [route for a, b in pairs for route in ((a, b), (b, a))]


def assert_exactly_once(network: Network, key: str, interested: set[str]) -> None:
    for publisher in network.tables:
        assert network.publish(publisher, key) == Counter({node: 1 for node in interested}), publisher


def test_two_nodes_both_ways() -> None:
    network = Network(["a", "b"], both_ways([("a", "b")]))
    network.bind("b", "stock.#")
    network.converge()
    assert network.publish("a", "stock.ibm") == Counter({"b": 1})
    assert network.publish("a", "bond.x") == Counter()


def test_line_forwards_over_several_hops_only_toward_consumers() -> None:
    network = Network(["a", "b", "c", "d"], both_ways([("a", "b"), ("b", "c"), ("c", "d")]))
    network.bind("d", "news.*")
    network.converge()
    assert network.publish("a", "news.eu") == Counter({"d": 1})
    assert network.publish("d", "news.eu") == Counter({"d": 1})
    assert network.tables["a"].next_hops() == {"d": "b"}


def test_three_node_ring_both_ways_exactly_once() -> None:
    network = Network(["a", "b", "c"], both_ways([("a", "b"), ("b", "c"), ("c", "a")]))
    for node in ("a", "b", "c"):
        network.bind(node, "ring.#")
    network.converge()
    assert_exactly_once(network, "ring.x", {"a", "b", "c"})


def test_one_way_ring_reaches_everyone_the_long_way() -> None:
    # b pulls from a, c from b, a from c: messages can only travel a -> b -> c -> a.
    network = Network(["a", "b", "c"], [("b", "a"), ("c", "b"), ("a", "c")])
    network.bind("a", "k")
    network.bind("c", "k")
    network.converge()
    assert network.publish("b", "k") == Counter({"a": 1, "c": 1})
    assert network.tables["b"].next_hops() == {"a": "c", "c": "c"}


def test_four_node_full_mesh_exactly_once() -> None:
    nodes = ["a", "b", "c", "d"]
    network = Network(nodes, both_ways(list(itertools.combinations(nodes, 2))))
    for node in nodes:
        network.bind(node, "mesh.*")
    network.bind("d", "mesh.#")
    network.converge()
    assert_exactly_once(network, "mesh.x", set(nodes))
    assert_exactly_once(network, "mesh.x.y", {"d"})


def test_identical_local_bindings_are_one_advert_and_withdrawn_with_the_last() -> None:
    table = InterestTable("a", "topic")
    assert table.bind_local("k.*", {}) is True
    assert table.bind_local("k.*", {}) is False
    assert table.adverts_for("up") == {Advert.of("a", "k.*", {}, ("a",))}
    assert table.unbind_local("k.*", {}) is False
    assert table.unbind_local("k.*", {}) is True
    assert table.adverts_for("up") == set()
    assert table.unbind_local("k.*", {}) is False


def test_unbinding_withdraws_interest_across_hops() -> None:
    network = Network(["a", "b", "c"], both_ways([("a", "b"), ("b", "c")]))
    network.bind("c", "x")
    network.converge()
    assert network.publish("a", "x") == Counter({"c": 1})
    network.tables["c"].unbind_local("x", {})
    network.bound["c"].remove("x")
    network.converge()
    assert network.publish("a", "x") == Counter()
    assert network.tables["a"].next_hops() == {}


def test_adverts_never_go_back_along_their_path_or_to_excluded_nodes() -> None:
    table = InterestTable("b", "direct")
    table.replace_from("c", {Advert.of("d", "k", {}, ("c", "d"))})
    assert {a.path for a in table.adverts_for("a")} == {("b", "c", "d")}
    assert table.adverts_for("d") == set()
    assert table.adverts_for("a", excludes=["d"]) == set()


def test_adverts_that_passed_this_node_are_ignored() -> None:
    table = InterestTable("b", "direct")
    table.replace_from("c", {Advert.of("x", "k", {}, ("c", "b", "x"))})
    assert table.next_hops() == {}


def test_resync_replaces_and_forget_drops_a_neighbour() -> None:
    table = InterestTable("a", "direct")
    table.replace_from("b", {Advert.of("b", "k1", {}, ("b",)), Advert.of("b", "k2", {}, ("b",))})
    table.replace_from("b", {Advert.of("b", "k2", {}, ("b",))})
    assert table.forward("k1", None, None) == {}
    assert table.forward("k2", None, None) == {"b": frozenset({"b"})}
    table.forget("b")
    assert table.forward("k2", None, None) == {}


def test_held_counts_other_nodes_bindings_and_falls_in_hops_when_a_path_shortens() -> None:
    table = InterestTable("a", "direct")
    table.bind_local("own", {})  # a's own binding is not other nodes' interest
    assert table.held() == (0, 0)
    table.replace_from("c", {Advert.of("d", "k", {}, ("c", "b", "d"))})
    assert table.held() == (1, 3)
    table.replace_from("b", {Advert.of("d", "k", {}, ("b", "d")), Advert.of("b", "j", {}, ("b",))})
    assert table.held() == (2, 3)  # d's k now over b (2 hops), and b's j (1 hop)
    table.forget("b")
    assert table.held() == (1, 3)


def test_headers_interest_matches_on_arguments() -> None:
    table = InterestTable("a", "headers")
    table.replace_from("b", {Advert.of("b", "", {"x-match": "all", "region": "eu"}, ("b",))})
    assert table.forward("", {"region": "eu"}, None) == {"b": frozenset({"b"})}
    assert table.forward("", {"region": "us"}, None) == {}


def test_ties_between_equal_paths_are_broken_the_same_way_everywhere() -> None:
    # a reaches d via b or c, both two hops: the lexicographically smaller path wins.
    network = Network(["a", "b", "c", "d"], both_ways([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]))
    network.bind("d", "k")
    network.converge()
    assert network.tables["a"].next_hops() == {"d": "b"}
    assert_exactly_once(network, "k", {"d"})


def reachable(routes: list[tuple[str, str]], start: str) -> set[str]:
    """Nodes a message can reach from `start`: it flows from a route's src to its dest."""
    seen, frontier = {start}, [start]
    while frontier:
        node = frontier.pop()
        for dest, src in routes:
            if src == node and dest not in seen:
                seen.add(dest)
                frontier.append(dest)
    return seen


def test_random_topologies_deliver_exactly_once_to_every_reachable_subscriber() -> None:
    rng = random.Random(20261121)
    keys = ["a.b", "a.c", "b.b"]
    patterns = ["a.*", "#", "*.b", "a.b", "b.#"]
    for _ in range(200):
        nodes = [f"n{i}" for i in range(rng.randint(2, 7))]
        pairs = [pair for pair in itertools.permutations(nodes, 2) if rng.random() < 0.35]
        network = Network(nodes, pairs)
        for node in nodes:
            for pattern in rng.sample(patterns, rng.randint(0, 2)):
                network.bind(node, pattern)
        network.converge()
        for publisher in nodes:
            targets = reachable(pairs, publisher)
            for key in keys:
                expected = Counter(
                    {
                        node: 1
                        for node in targets
                        if any(_topic_match(pattern, key) for pattern in network.bound[node])
                    }
                )
                assert network.publish(publisher, key) == expected, (pairs, publisher, key)
