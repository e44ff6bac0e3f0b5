"""`plan` and `apply` of a topology against real node processes on loopback: a plan of empty
nodes lists everything, apply makes it, links and routes come up and carry messages, a second
plan and apply change nothing, and drift made by hand (a queue deleted through management, an
exchange added with amq-config) shows per object and is put right, the extra exchange only with
--prune. The Topology is built in code with the fixture's ports. Every wait is bounded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import trio

from tests.integration.test_federation_dynamic import flows
from tests.integration.test_federation_routes import at, cli, manage
from tests.integration.test_federation_types import publish, received, wait_bound_upstream
from tests.nodes import NodeProcess
from topology.apply import apply_plan
from topology.live import read_live
from topology.model import Binding, Exchange, Federation, Node, Queue, Route, Topology
from topology.plan import plan_topology
from topology.routemap import compare_views, expected_views

TIMEOUT = 10.0


def pair(a: NodeProcess, b: NodeProcess) -> Topology:
    """b pulls fed.topic dynamically from a into its `orders` queue, a pushes amq.topic's
    global.# to b's `global` queue, and b's `events` fanout exchange is federated to a's."""
    return Topology(
        name="pair",
        path="pair.toml",
        nodes={"a": Node("a", "127.0.0.1", a.port), "b": Node("b", "127.0.0.1", b.port)},
        exchanges=(
            Exchange("a", "fed.topic", "topic"),
            Exchange("b", "fed.topic", "topic"),
            Exchange("a", "events", "fanout"),
            Exchange("b", "events", "fanout"),
        ),
        queues=(Queue("b", "orders"), Queue("b", "global"), Queue("b", "audit")),
        bindings=(
            Binding("b", "fed.topic", "orders", "orders.#"),
            Binding("b", "amq.topic", "global", "global.#"),
            Binding("b", "events", "audit"),
        ),
        routes=(
            Route("dynamic", source="a", destination="b", exchange="fed.topic"),
            Route("exchange", source="a", destination="b", exchange="amq.topic", key="global.#", push=True),
        ),
        federations=(Federation("b", "a", "events", "fanout"),),
    )


def empty_plan(a: NodeProcess, b: NodeProcess) -> str:
    return f"""\
Node a (127.0.0.1:{a.port}):
  + exchange fed.topic (topic, durable)
  + exchange events (fanout, durable)
  + link to b 127.0.0.1:{b.port} (durable, tcp)
  + route exchange amq.topic(global.#) => b 127.0.0.1:{b.port} (durable, push, ack 100, credit 1000)

Node b (127.0.0.1:{b.port}):
  + exchange fed.topic (topic, durable)
  + exchange events (fanout, durable)
  + queue orders (durable)
  + queue global (durable)
  + queue audit (durable)
  + binding fed.topic -> orders key "orders.#"
  + binding amq.topic -> global key "global.#"
  + binding events -> audit key ""
  + link to a 127.0.0.1:{a.port} (durable, tcp)
  + route dynamic fed.topic <= a 127.0.0.1:{a.port} (durable, ack 100, credit 1000)
  + federation events => a 127.0.0.1:{a.port} (fanout, durable)

Plan: 15 to create, 0 to change, 0 to delete."""


async def wait_operational(topology: Topology) -> None:
    """Until every link and peering is Operational (the caller bounds it)."""
    while not (await read_live(topology, TIMEOUT)).all_operational():
        await trio.sleep(0.1)


async def messages_flow(a: NodeProcess, b: NodeProcess, tag: bytes) -> None:
    """A message published on a reaches b by each route and the federation, once."""
    await flows(a, b, "orders", "orders.probe")  # b's interest in orders.# reached a (probes, drained)
    await wait_bound_upstream(a, "events", "", 1)  # b's peering queue on a
    await publish(a, "fed.topic", "orders.eu", [b"order " + tag])
    await publish(a, "amq.topic", "global.news", [b"news " + tag])
    await publish(a, "events", "", [b"event " + tag])
    assert await received(b, "orders") == [b"order " + tag]
    assert await received(b, "global") == [b"news " + tag]
    assert await received(b, "audit") == [b"event " + tag]


async def test_plan_apply_idempotence_drift_and_prune(nodes: Callable[..., NodeProcess]) -> None:
    a, b = nodes("a"), nodes("b")
    topology = pair(a, b)
    with trio.fail_after(90):
        plan = await plan_topology(topology, prune=False, timeout=TIMEOUT)
        assert "\n".join(plan.lines()) == empty_plan(a, b)

        said: list[str] = []
        result = await apply_plan(plan, said.append)
        assert (result.ok, result.failure, result.applied) == (True, "", 15)
        assert said[0] == "a: created exchange fed.topic"
        assert said[-1] == f"b: created federation events => a 127.0.0.1:{a.port}"

        with trio.fail_after(30):
            await wait_operational(topology)
        await messages_flow(a, b, b"1")

        # Idempotence: nothing left to do, with or without prune, and apply says so.
        for prune in (False, True):
            again = await plan_topology(topology, prune=prune, timeout=TIMEOUT)
            assert again.lines() == ["No changes. The live nodes match pair.toml."]
            said.clear()
            result = await apply_plan(again, said.append)
            assert (result.ok, result.applied, said) == (
                True,
                0,
                ["No changes. The live nodes match pair.toml."],
            )

        # Drift by hand: b's queue deleted through management, an exchange added on a with amq-config.
        await manage(b, "queues.delete", {"name": "orders"})
        status, _, err = await cli("amq-config", "-a", at(a), "add", "exchange", "direct", "scratch")
        assert status == 0, err
        drift = await plan_topology(topology, prune=False, timeout=TIMEOUT)
        assert drift.lines() == [
            f"Node a (127.0.0.1:{a.port}):",
            "  ? exchange scratch (direct, transient): not in the file (kept: apply --prune deletes it)",
            "",
            f"Node b (127.0.0.1:{b.port}):",
            "  + queue orders (durable)",
            '  + binding fed.topic -> orders key "orders.#"',
            "",
            "1 object(s) (?) not in the file are kept: apply --prune deletes them.",
            "Plan: 2 to create, 0 to change, 0 to delete.",
        ]
        # Without --prune apply recreates the queue and its binding and keeps the extra exchange.
        result = await apply_plan(drift, lambda _: None)
        assert (result.ok, result.applied) == (True, 2)
        kept = await plan_topology(topology, prune=False, timeout=TIMEOUT)
        assert [change.name for change in kept.changes] == []
        assert [(d.node, d.kind, d.name) for d in kept.drift] == [("a", "exchange", "scratch")]

        pruning = await plan_topology(topology, prune=True, timeout=TIMEOUT)
        assert pruning.lines() == [
            f"Node a (127.0.0.1:{a.port}):",
            "  - exchange scratch (direct, transient)",
            "",
            "Plan: 0 to create, 0 to change, 1 to delete.",
        ]
        said.clear()
        result = await apply_plan(pruning, said.append)
        assert (result.ok, result.applied, said) == (True, 1, ["a: deleted exchange scratch"])
        status, out, err = await cli("amq-config", "-a", at(a), "exchanges", "scratch")
        assert status == 0 and "scratch" not in out, out + err

        final = await plan_topology(topology, prune=True, timeout=TIMEOUT)
        assert final.lines() == ["No changes. The live nodes match pair.toml."]
        await messages_flow(a, b, b"2")


async def test_an_unreachable_node_makes_the_plan_incomplete_and_apply_refuses(
    nodes: Callable[..., NodeProcess],
) -> None:
    a, b = nodes("a"), nodes("b")
    topology = pair(a, b)
    b.stop()
    with trio.fail_after(30):
        plan = await plan_topology(topology, prune=False, timeout=TIMEOUT)
        assert not plan.complete
        assert plan.unreachable["b"].startswith("ConnectFailed - ")
        assert plan.lines()[-4].startswith(f"Node b (127.0.0.1:{b.port}): not read: ConnectFailed - ")
        result = await apply_plan(plan, lambda _: None)
        assert not result.ok and result.applied == 0
        assert result.failure.startswith("nothing applied: cannot read b (ConnectFailed - ")
        # Nothing was sent to a either.
        assert [r["name"] for r in await manage(a, "exchanges.list") if r["name"] == "fed.topic"] == []


def by_localhost(topology: Topology) -> Topology:
    """The same nodes, the file naming each by `localhost` rather than 127.0.0.1."""
    nodes = {name: replace(node, host="localhost") for name, node in topology.nodes.items()}
    return replace(topology, nodes=nodes)


async def test_links_routes_and_federations_are_matched_by_the_name_the_peer_reports(
    nodes: Callable[..., NodeProcess],
) -> None:
    """A file naming the nodes `localhost:X` matches what was made as `127.0.0.1:X`: one node,
    known by the name it reports, so no link, route or federation is missing or extra, and a
    route planned on a link made under the other address goes on that link."""
    a, b = nodes("a"), nodes("b")
    made = pair(a, b)
    topology = by_localhost(made)
    with trio.fail_after(90):
        result = await apply_plan(await plan_topology(made, prune=False, timeout=TIMEOUT), lambda _: None)
        assert result.ok, result.failure
        with trio.fail_after(30):
            await wait_operational(made)

        for prune in (False, True):
            plan = await plan_topology(topology, prune=prune, timeout=TIMEOUT)
            assert plan.lines() == ["No changes. The live nodes match pair.toml."]
        live = await read_live(topology, TIMEOUT)
        comparison = compare_views(topology, expected_views(topology), live.views())
        assert comparison.lines[-1] == "No drift: the live nodes match pair.toml."
        assert f"localhost:{b.port} -> 127.0.0.1:{a.port}" in comparison.lines

        # b's route deleted by hand: it is made again on b's link to a as it is, 127.0.0.1.
        await manage(
            b,
            "routes.delete",
            {"host": "127.0.0.1", "port": a.port, "kind": "dynamic", "exchange": "fed.topic"},
        )
        await manage(
            b,
            "routes.add",
            {
                "host": "127.0.0.1",
                "port": a.port,
                "kind": "queue",
                "exchange": "amq.fanout",
                "queue": "audit",
            },
        )
        plan = await plan_topology(topology, prune=True, timeout=TIMEOUT)
        assert plan.lines() == [
            f"Node b (localhost:{b.port}):",
            f"  + route dynamic fed.topic <= a 127.0.0.1:{a.port} (durable, ack 100, credit 1000)",
            f"  - route queue amq.fanout(audit) <= a 127.0.0.1:{a.port} (transient, ack 100, credit 1000)",
            "",
            "Plan: 1 to create, 0 to change, 1 to delete.",
        ]
        assert [request[1]["host"] for change in plan.changes for request in change.requests] == [
            "127.0.0.1",
            "127.0.0.1",
        ]
        result = await apply_plan(plan, lambda _: None)
        assert (result.ok, result.applied) == (True, 2)
        assert [(link["host"], link["port"]) for link in await manage(b, "links.list")] == [
            ("127.0.0.1", a.port)
        ]
        with trio.fail_after(30):
            await wait_operational(topology)
        await messages_flow(a, b, b"3")
