"""The routing cases shared with the broker and the planner (tests/vectors/routing.json) run
through the Spark routing step: each case is a node of one topology, each publish a class."""

from __future__ import annotations

import json

from pyspark.sql import SparkSession

from simulations.scenario import Scenario
from spark import jobs
from tests.routing_vectors import GraphCase, all_cases
from topology.model import Binding, Exchange, Node, Queue, Topology

#: What the planner's model can declare: queue bindings, no alternate exchanges.
CASES = [case for case in all_cases() if case.plain_bindings_only]


def topology_of(cases: list[GraphCase]) -> Topology:
    nodes, exchanges, queues, bindings = {}, [], [], []
    for number, case in enumerate(cases):
        node = f"case-{number}"
        nodes[node] = Node(node, "127.0.0.1", 10_000 + number)
        exchanges += [Exchange(node, name, kind) for name, kind, _ in case.exchanges if name]
        queues += [Queue(node, name) for name in case.queues]
        bindings += [Binding(node, b.source, b.destination, b.key, b.arguments) for b in case.bindings]
    return Topology("vectors", "<vectors>", nodes, tuple(exchanges), tuple(queues), tuple(bindings))


def test_every_plain_case_routes_as_expected(spark: SparkSession) -> None:
    assert len(CASES) >= 20  # every match case and the plain graph cases
    scenario = Scenario("vectors", "<vectors>", topology_of(CASES), duration=1.0, step=1.0)
    classes = spark.createDataFrame(
        [
            (number, number, f"case-{number}", 0, case.exchange, case.routing_key, json.dumps(case.headers))
            for number, case in enumerate(CASES)
        ],
        "cid bigint, entry int, node string, key int, exchange string, routing_key string, headers string",
    )
    shared = spark.sparkContext.broadcast(scenario)
    routes = jobs.route_classes(classes, shared).collect()
    # a frame per class or two gives the same rows as one per Arrow batch
    one_by_one = jobs.route_classes(classes, shared, rows_per_frame=1).collect()
    assert sorted(map(repr, one_by_one)) == sorted(map(repr, routes))
    found: dict[int, set[str]] = {number: set() for number in range(len(CASES))}
    for row in routes:
        assert row.kind == "deliver" and row.path == [] and row.copies == 1
        found[row.entry].add(row.queue)
    assert {CASES[n].name: q for n, q in found.items()} == {case.name: set(case.expected) for case in CASES}
