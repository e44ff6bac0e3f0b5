"""OpenAMQ-style exchange federation between real node processes on loopback: children attach
their ESB exchanges (amq.service, amq.data, amq.dataex) to a parent through management
(federations.add, what `amq-route federate add` sends), and each test checks exact delivery
sets. Every wait is bounded."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from pamqp import commands

from federation.client import connect
from gateway.wire import Content
from tests.integration.test_federation_routes import address, manage
from tests.nodes import NodeProcess, start_node

PERSISTENT = commands.Basic.Properties(delivery_mode=2)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Callable[..., NodeProcess]]:
    """Start named nodes for one test; every one still running is stopped at the end."""
    started: list[NodeProcess] = []

    def start(name: str, **options: Any) -> NodeProcess:
        node = start_node(tmp_path / name, name=name, **options)
        started.append(node)
        return node

    yield start
    for node in started:
        if node.process.poll() is None:
            node.stop()


async def attach(child: NodeProcess, port: int, *exchanges: str, **options: Any) -> None:
    """Federate the child's `exchanges` to the parent on `port` (default types)."""
    for exchange in exchanges:
        arguments = {"host": "127.0.0.1", "port": port, "exchange": exchange, "username": "guest"}
        await manage(child, "federations.add", {**arguments, "password": "guest", **options})


ESB = ("amq.service", "amq.data", "amq.dataex")


async def wait_federated(node: NodeProcess, exchanges: set[str]) -> None:
    """Until the node's federations of `exchanges` are Operational (caller bounds it)."""
    while True:
        records = {r["exchange"]: r for r in await manage(node, "federations.list")}
        if all(records.get(name, {}).get("state") == "Operational" for name in exchanges):
            return
        await trio.sleep(0.1)


async def subscriber(node: NodeProcess, exchange: str, key: str, name: str) -> str:
    async with connect(address(node)) as connection:
        channel = await connection.channel()
        await channel.call(commands.Queue.Declare(queue=name))
        await channel.call(commands.Queue.Bind(queue=name, exchange=exchange, routing_key=key))
    return name


async def wait_bound_upstream(parent: NodeProcess, exchange: str, key: str, count: int) -> None:
    """Until `count` queues on the parent are bound to `exchange` with `key` (children's)."""
    while True:
        bindings = await manage(parent, "bindings.list")
        if sum(1 for b in bindings if (b["exchange"], b["routing_key"]) == (exchange, key)) >= count:
            return
        await trio.sleep(0.05)


async def publish(node: NodeProcess, exchange: str, key: str, bodies: list[bytes], **properties: Any) -> None:
    async with connect(address(node)) as connection:
        channel = await connection.channel()
        await channel.confirm_select()
        for body in bodies:
            channel.publish(
                exchange, key, Content.from_properties(commands.Basic.Properties(**properties), body)
            )
        await channel.wait_for_confirms()


async def received(node: NodeProcess, queue: str, settle: float = 0.5) -> list[bytes]:
    """Everything the queue gets until it has been quiet for `settle` seconds."""
    bodies: list[bytes] = []
    async with connect(address(node)) as connection:
        channel = await connection.channel()
        await channel.consume(queue, no_ack=True)
        deliveries = channel.deliveries()
        while True:
            with trio.move_on_after(settle) as quiet:
                delivery = await anext(aiter(deliveries))
                bodies.append(delivery.content.body)
            if quiet.cancelled_caught:
                return bodies


async def test_fanout_delivers_each_message_once_to_every_subscriber(
    nodes: Callable[..., NodeProcess],
) -> None:
    parent = nodes("p")
    one, two = nodes("c1"), nodes("c2")
    with trio.fail_after(30):
        await attach(one, parent.port, *ESB)
        await attach(two, parent.port, *ESB)
        await wait_federated(one, {"amq.data", "amq.service", "amq.dataex"})
        await wait_federated(two, {"amq.data"})
        queues = {
            "p": (parent, await subscriber(parent, "amq.data", "prices.#", "on-p")),
            "c1": (one, await subscriber(one, "amq.data", "prices.#", "on-c1")),
            "c1b": (one, await subscriber(one, "amq.data", "prices.#", "on-c1-b")),
            "c2": (two, await subscriber(two, "amq.data", "prices.#", "on-c2")),
        }
        # Two identical local bindings on c1 make one binding on the parent.
        await wait_bound_upstream(parent, "amq.data", "prices.#", 3)
        bindings = [b for b in await manage(parent, "bindings.list") if b["routing_key"] == "prices.#"]
        assert sorted(b["destination"] for b in bindings) == [
            "federation.c1.amq.data",
            "federation.c2.amq.data",
            "on-p",
        ]
        await publish(one, "amq.data", "prices.eur", [b"from-c1"])
        await publish(parent, "amq.data", "prices.usd", [b"from-p"])
        await publish(two, "amq.data", "other.key", [b"nobody"])
        for name, (node, queue) in queues.items():
            assert sorted(await received(node, queue)) == [b"from-c1", b"from-p"], name


async def test_service_requests_find_the_service_and_replies_come_back(
    nodes: Callable[..., NodeProcess],
) -> None:
    parent = nodes("p")
    client_node, service_node = nodes("c1"), nodes("c2")
    with trio.fail_after(30):
        await attach(client_node, parent.port, *ESB)
        await attach(service_node, parent.port, *ESB)
        await wait_federated(client_node, {"amq.service"})
        await wait_federated(service_node, {"amq.service"})
        await subscriber(service_node, "amq.service", "svc", "service")
        reply_to = "replies@c1"
        await subscriber(client_node, "amq.service", reply_to, "replies")
        await wait_bound_upstream(parent, "amq.service", "svc", 1)
        await wait_bound_upstream(parent, "amq.service", reply_to, 1)
        await publish(client_node, "amq.service", "svc", [b"request"], reply_to=reply_to)
        async with connect(address(service_node)) as connection:
            channel = await connection.channel()
            await channel.consume("service")
            request = await anext(aiter(channel.deliveries()))
            assert request.content.body == b"request"
            await channel.confirm_select()
            channel.publish("amq.service", request.content.reply_to, Content(b"\x00\x00", b"reply"))
            await channel.wait_for_confirms()
            channel.ack(request.delivery_tag)
        assert await received(client_node, "replies") == [b"reply"]
        # A local service answers locally: nothing goes to the parent.
        await subscriber(client_node, "amq.service", "local-svc", "local-service")
        before = {r["exchange"]: r["forwarded"] for r in await manage(client_node, "federations.list")}
        await publish(client_node, "amq.service", "local-svc", [b"here"])
        assert await received(client_node, "local-service") == [b"here"]
        after = {r["exchange"]: r["forwarded"] for r in await manage(client_node, "federations.list")}
        assert after["amq.service"] == before["amq.service"]


async def test_an_unroutable_mandatory_publish_is_returned_by_way_of_the_parent(
    nodes: Callable[..., NodeProcess],
) -> None:
    parent = nodes("p")
    child = nodes("c1")
    with trio.fail_after(30):
        await attach(child, parent.port, *ESB)
        await wait_federated(child, {"amq.service"})
        returns: list[Any] = []
        async with connect(address(child)) as connection:
            channel = await connection.channel()
            channel.on_return = returns.append
            await channel.confirm_select()
            channel.publish("amq.service", "no.such.service", Content(b"\x00\x00", b"lost?"), mandatory=True)
            await channel.wait_for_confirms()  # the child took it (into its outbox)
            while not returns:
                await trio.sleep(0.05)
        assert (returns[0].reply_code, returns[0].routing_key, returns[0].content.body) == (
            312,
            "no.such.service",
            b"lost?",
        )
        record = {r["exchange"]: r for r in await manage(child, "federations.list")}["amq.service"]
        assert record["returned"] == 1


async def test_children_start_first_and_nothing_is_lost_while_the_parent_is_away(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    # The parent's port is fixed up front so the child can be configured before it runs.
    data = tmp_path / "p-data"
    parent = nodes("p", data_dir=data)
    port = parent.port
    async with connect(address(parent)) as connection:
        channel = await connection.channel()
        await channel.call(commands.Queue.Declare(queue="sub", durable=True))
        await channel.call(commands.Queue.Bind(queue="sub", exchange="amq.data", routing_key="k"))
    parent.stop()
    child = nodes("c1")
    sent = [f"m-{i}".encode() for i in range(300)]
    with trio.fail_after(60):
        await attach(child, port, "amq.data")
        await publish(child, "amq.data", "k", sent[:100], delivery_mode=2)
        record = {r["exchange"]: r for r in await manage(child, "federations.list")}["amq.data"]
        assert record["state"] != "Operational" and record["outbox"]["messages"] == 100
        parent = nodes("p", data_dir=data, port=port)
        await wait_federated(child, {"amq.data"})
        await publish(child, "amq.data", "k", sent[100:200], delivery_mode=2)
        parent.kill()  # SIGKILL in the middle of the stream
        await publish(child, "amq.data", "k", sent[200:], delivery_mode=2)
        parent = nodes("p", data_dir=data, port=port)
        got = await received(parent, "sub", settle=2.0)
        # At least once: every message arrives; a message in flight at the kill may come twice.
        assert set(got) == set(sent)
        assert [body for body in got if body in sent[200:]] == sent[200:]
