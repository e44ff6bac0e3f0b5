"""Dynamic routes' interest on a tree of routes, without a full table per node.

topology.flow converges a real `gateway.routing.interest.InterestTable` per node, as the nodes
do. Every table holds every other origin's bindings, so a topology of N nodes with b bindings
each holds N x N x b adverts, and converging them costs as much again per round: a 10,000-node
hierarchy (simulations/regions-10k.toml) never finishes. This module gives the same answers in
space and time linear in nodes plus bindings, for the shape large topologies have: the dynamic
routes of one exchange form a forest, every route has its reverse, none has an exclude list,
and every node's federation tag is its name. `TreeInterest.of` says None for anything else,
and the model converges InterestTables as before.

Theory of operation. On such a forest the path-vector rules of gateway.routing.interest leave
no choice to make: an advert is never sent back to a node already on its path (the receiver
drops it), so an origin's bindings travel every route away from it and arrive at each node of
its tree over exactly one path, the tree's. Shortest path and tie-break never come into play,
no node detaches (every node is some route's destination), and the converged tables are:

- node m's matcher holds the bindings (one per distinct binding identity) of every other
  origin in m's tree;
- m's next hop toward origin o is m's neighbour on the tree path from m to o.

So one matcher per tree (gateway.routing's, bound exactly as the tables bind their adverts:
key, arguments, origin) answers every node's match, and next hops come from a depth-first
numbering: o lies below m's child c when c's interval holds o's number, else above m. Routing
one publish then costs the origins it reaches times the hops to them, not a match over every
origin at every node it visits. tests/unit/test_topology_tree_interest.py checks `forward`
against converged InterestTables on random trees.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from typing import Any

from gateway.routing.bindings import binding_identity
from gateway.routing.matchers import Matcher, matcher_for
from topology.model import Route


class TreeInterest:
    """The converged interest of one exchange whose dynamic routes form a forest."""

    def __init__(self, exchange_type: str, work: Counter[str] | None = None) -> None:
        self.exchange_type = exchange_type
        #: Work done, counted by kind ("interest bindings", "origins examined").
        self.work: Counter[str] = Counter() if work is None else work
        self._tree: dict[str, int] = {}  # node -> its tree's number
        self._matchers: list[Matcher] = []
        self._parent: dict[str, str | None] = {}
        self._first: dict[str, int] = {}  # depth-first number
        self._last: dict[str, int] = {}  # the largest number below the node
        self._children: dict[str, list[str]] = {}
        self._child_numbers: dict[str, list[int]] = {}
        #: The last match per tree: (routing key, headers object, origins it matched).
        self._matched: dict[int, tuple[str, Any, frozenset[str]]] = {}

    @classmethod
    def of(
        cls,
        routes: Sequence[Route],
        tags: dict[str, str],
        exchange_types: dict[str, str],
        bindings: dict[str, list[tuple[str, dict[str, Any]]]],
        work: Counter[str] | None = None,
    ) -> TreeInterest | None:
        """The interest of the exchange `routes` carry (the active dynamic routes, in order),
        or None unless they form a forest of reversible routes without excludes whose nodes are
        tagged with their names. `exchange_types`: node -> the exchange's type there;
        `bindings`: node -> its local bindings on the exchange (key, arguments)."""
        pairs = [(route.source, route.destination) for route in routes]
        if any(route.excludes for route in routes) or len(set(pairs)) != len(pairs):
            return None
        if set(pairs) != {(b, a) for a, b in pairs} or len(set(exchange_types.values())) > 1:
            return None
        nodes = list(dict.fromkeys(node for pair in pairs for node in pair))
        if any(tags[node] != node for node in nodes):
            return None
        neighbours: dict[str, list[str]] = {node: [] for node in nodes}
        for source, destination in pairs:
            if source < destination:
                neighbours[source].append(destination)
                neighbours[destination].append(source)
        if len(pairs) // 2 != len(nodes) - _components(neighbours):
            return None  # a cycle
        interest = cls(next(iter(exchange_types.values()), "topic"), work)
        for node in nodes:
            if node not in interest._tree:
                interest._number(node, neighbours, bindings)
        return interest

    def _number(
        self,
        root: str,
        neighbours: dict[str, list[str]],
        bindings: dict[str, list[tuple[str, dict[str, Any]]]],
    ) -> None:
        """Number the tree holding `root` depth first, and bind its origins' interest."""
        tree = len(self._matchers)
        matcher = matcher_for(self.exchange_type)
        self._matchers.append(matcher)
        counter = 0
        self._parent[root] = None
        stack: list[tuple[str, int]] = [(root, 0)]
        self._enter(root, tree, counter)
        while stack:
            node, index = stack[-1]
            around = neighbours[node]
            if index == len(around):
                stack.pop()
                self._last[node] = counter
                continue
            stack[-1] = (node, index + 1)
            child = around[index]
            if child == self._parent[node]:
                continue
            counter += 1
            self._parent[child] = node
            self._children[node].append(child)
            self._child_numbers[node].append(counter)
            self._enter(child, tree, counter)
            stack.append((child, 0))
        for node in self._tree:
            if self._tree[node] != tree:
                continue
            distinct = {binding_identity(key, args): (key, args) for key, args in bindings.get(node, ())}
            for key, arguments in distinct.values():
                matcher.bind(key, arguments, node)  # as InterestTable binds its best adverts
                self.work["interest bindings"] += 1

    def _enter(self, node: str, tree: int, number: int) -> None:
        self._tree[node] = tree
        self._first[node] = number
        self._children[node] = []
        self._child_numbers[node] = []

    def __contains__(self, node: str) -> bool:
        return node in self._tree

    def breadth_first(self) -> list[list[tuple[str, str | None]]]:
        """Each tree's nodes with their parents, parents first and the children of one node
        together (so each depth is one run, ordered by parent)."""
        found = []
        for root in (node for node, parent in self._parent.items() if parent is None):
            order: list[tuple[str, str | None]] = [(root, None)]
            for node, _ in order:
                order += [(child, node) for child in self._children[node]]
            found.append(order)
        return found

    def table(self, node: str) -> TreeTable:
        """What `node`'s InterestTable would answer."""
        return TreeTable(self, node)

    def next_hop(self, node: str, origin: str) -> str:
        """`node`'s neighbour on the way to `origin` (another node of its tree)."""
        number = self._first[origin]
        if self._first[node] < number <= self._last[node]:
            children = self._child_numbers[node]
            return self._children[node][bisect_right(children, number) - 1]
        parent = self._parent[node]
        assert parent is not None, (node, origin)
        return parent

    def matched(self, node: str, routing_key: str, headers: dict[str, Any] | None) -> frozenset[str]:
        """The origins of `node`'s tree with a binding matching the message (`node` included)."""
        tree = self._tree[node]
        last = self._matched.get(tree)
        if last is not None and last[0] == routing_key and last[1] is headers:
            return last[2]
        origins: set[Any] = self._matchers[tree].match(routing_key, headers)  # origins were bound
        found = frozenset(origins)
        self.work["origins examined"] += len(found)
        self._matched[tree] = (routing_key, headers, found)
        return found


class TreeTable:
    """One node's view of a `TreeInterest`: the part of InterestTable that routing reads."""

    __slots__ = ("interest", "node")

    def __init__(self, interest: TreeInterest, node: str) -> None:
        self.interest = interest
        self.node = node

    def forward(
        self, routing_key: str, headers: dict[str, Any] | None, destinations: frozenset[str] | None
    ) -> dict[str, frozenset[str]]:
        """As InterestTable.forward: neighbour -> the origins a message must reach through it."""
        interest = self.interest
        matched = interest.matched(self.node, routing_key, headers)
        if destinations is not None:
            interest.work["origins examined"] += len(destinations)
            matched = frozenset(origin for origin in destinations if origin in matched)
        plan: dict[str, set[str]] = {}
        for origin in matched:
            if origin != self.node:
                plan.setdefault(interest.next_hop(self.node, origin), set()).add(origin)
        return {neighbour: frozenset(origins) for neighbour, origins in plan.items()}

    def delivers_locally(self, destinations: frozenset[str] | None) -> bool:
        return destinations is None or self.node in destinations


def _components(neighbours: dict[str, list[str]]) -> int:
    """How many connected pieces an undirected graph has."""
    seen: set[str] = set()
    count = 0
    for start in neighbours:
        if start in seen:
            continue
        count += 1
        seen.add(start)
        stack = [start]
        while stack:
            for other in neighbours[stack.pop()]:
                if other not in seen:
                    seen.add(other)
                    stack.append(other)
    return count
