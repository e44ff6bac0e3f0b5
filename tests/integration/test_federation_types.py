"""OpenAMQ-style exchange federation between real node processes on loopback: children attach
their ESB exchanges (amq.service, amq.data, amq.dataex) to a parent through management
(federations.add, what `amq-route federate add` sends), or their own exchanges with one type each
(subscriber, publisher, locator, a three-level fanout tree), and each test checks exact delivery
lists. Every wait is bounded."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import trio
from pamqp import commands

from federation.client import connect
from gateway.wire import Content
from tests.integration.test_federation_routes import address, manage, settled
from tests.nodes import NodeProcess

PERSISTENT = commands.Basic.Properties(delivery_mode=2)


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


async def received(node: NodeProcess, queue: str) -> list[bytes]:
    """Everything the queue gets, in order, until the nodes have settled (see `read_settled`)."""
    return (await read_settled({queue: (node, queue)}))[queue]


async def read_settled(queues: dict[str, tuple[NodeProcess, str]]) -> dict[str, list[bytes]]:
    """What each queue gets, consumed concurrently, until the nodes have settled (nothing in
    flight, every consumed queue empty, counters still: test_federation_routes.settled); then a
    marker published into each queue ends its reading, so a message that was coming has come."""
    got: dict[str, list[bytes]] = {name: [] for name in queues}
    marker = f"received-marker-{uuid.uuid4().hex[:8]}".encode()

    async def read(
        name: str,
        node: NodeProcess,
        queue: str,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        async with connect(address(node)) as connection:
            channel = await connection.channel()
            await channel.consume(queue, no_ack=True)
            task_status.started()
            async for delivery in channel.deliveries():
                if delivery.content.body == marker:
                    return
                got[name].append(delivery.content.body)

    async with trio.open_nursery() as nursery:
        for name, (node, queue) in queues.items():
            await nursery.start(partial(read, name, node, queue))
        await settled()
        for node, queue in queues.values():
            await publish(node, "", queue, [marker])
    return got


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
        got = await received(parent, "sub")
        # At least once: every message arrives; a message in flight at the kill may come twice.
        assert set(got) == set(sent)
        assert [body for body in got if body in sent[200:]] == sent[200:]


# -- one test per federation type, and a three-level fanout tree ------------------------------
#
# Each checks exact delivery lists (sorted lists, so a duplicate fails). Waits go by the
# federations.list counters (`forwarded` counts what the parent confirmed, `received` what a
# child republished locally) before the queues are read, and reading ends once the nodes have
# settled, not after a quiet interval.


async def declare(exchange: str, kind: str, *on: NodeProcess) -> None:
    """The same exchange (same type and flags) on every node: the parent must have it."""
    for node in on:
        async with connect(address(node)) as connection:
            channel = await connection.channel()
            await channel.call(commands.Exchange.Declare(exchange=exchange, exchange_type=kind))


async def unbind(node: NodeProcess, exchange: str, key: str, queue: str) -> None:
    async with connect(address(node)) as connection:
        channel = await connection.channel()
        await channel.call(commands.Queue.Unbind(queue=queue, exchange=exchange, routing_key=key))


async def federation(node: NodeProcess, exchange: str) -> dict[str, Any]:
    """The node's federations.list record of `exchange`."""
    return {r["exchange"]: r for r in await manage(node, "federations.list")}[exchange]


async def wait_counter(node: NodeProcess, exchange: str, counter: str, at_least: int) -> None:
    """Until the federation's `forwarded` or `received` counter is `at_least` (caller bounds it)."""
    while (await federation(node, exchange))[counter] < at_least:
        await trio.sleep(0.05)


async def counters(node: NodeProcess, exchange: str) -> tuple[int, int, int]:
    """(forwarded, received, returned) of the node's federation of `exchange`."""
    record = await federation(node, exchange)
    return record["forwarded"], record["received"], record["returned"]


async def upstream(parent: NodeProcess, exchange: str, key: str) -> list[str]:
    """The queues bound on the parent's `exchange` with `key`, sorted."""
    bindings = await manage(parent, "bindings.list")
    return sorted(b["destination"] for b in bindings if (b["exchange"], b["routing_key"]) == (exchange, key))


async def received_by(queues: dict[str, tuple[NodeProcess, str]]) -> dict[str, list[bytes]]:
    """What each queue gets (sorted), read concurrently until the nodes have settled."""
    return {name: sorted(bodies) for name, bodies in sorted((await read_settled(queues)).items())}


Returned = tuple[int, str, str, bytes]


async def publish_mandatory(
    node: NodeProcess, exchange: str, key: str, bodies: list[bytes], settled: Callable[[], Any] | None = None
) -> list[Returned]:
    """Publish `bodies` with mandatory on one channel and wait for the confirms, then for
    `settled()` (e.g. until the forwarded copies were confirmed by the parent, whose Return
    comes before its confirm); the Returns the publisher got, as (code, text, key, body).

    A round trip on the same channel afterwards makes sure every Return the node sent before
    it has been read."""
    returns: list[Any] = []
    async with connect(address(node)) as connection:
        channel = await connection.channel()
        channel.on_return = returns.append
        await channel.confirm_select()
        for body in bodies:
            channel.publish(exchange, key, Content(b"\x00\x00", body), mandatory=True)
        await channel.wait_for_confirms()
        if settled is not None:
            await settled()
        await channel.call(commands.Exchange.Declare(exchange=exchange, passive=True))
    return [(r.reply_code, r.reply_text, r.routing_key, r.content.body) for r in returns]


async def federate_to(
    parent: NodeProcess, children: tuple[NodeProcess, ...], exchange: str, kind: str
) -> None:
    """Federate each child's `exchange` to `parent` as `kind`, until every peering is up."""
    for child in children:
        await attach(child, parent.port, exchange, type=kind)
    for child in children:
        await wait_federated(child, {exchange})


async def test_subscriber_pulls_the_parents_messages_and_keeps_its_own(
    nodes: Callable[..., NodeProcess],
) -> None:
    parent = nodes("p")
    one, two = nodes("c1"), nodes("c2")
    exchange = "fed.sub"
    with trio.fail_after(30):
        await declare(exchange, "topic", parent, one, two)
        await federate_to(parent, (one, two), exchange, "subscriber")
        queues = {
            "p": (parent, await subscriber(parent, exchange, "news.#", "on-p")),
            "c1": (one, await subscriber(one, exchange, "news.#", "on-c1")),
            "c1b": (one, await subscriber(one, exchange, "news.#", "on-c1-b")),
            "c2": (two, await subscriber(two, exchange, "news.#", "on-c2")),
        }
        await wait_bound_upstream(parent, exchange, "news.#", 3)
        # Two identical bindings on c1: one binding of c1's queue on the parent.
        assert await upstream(parent, exchange, "news.#") == [
            f"federation.c1.{exchange}",
            f"federation.c2.{exchange}",
            "on-p",
        ]
        await publish(parent, exchange, "news.p", [b"from-p"])
        await publish(one, exchange, "news.c1", [b"from-c1"])
        await publish(two, exchange, "news.c2", [b"from-c2"])
        await wait_counter(one, exchange, "received", 1)
        await wait_counter(two, exchange, "received", 1)
        assert await received_by(queues) == {
            "c1": [b"from-c1", b"from-p"],
            "c1b": [b"from-c1", b"from-p"],
            "c2": [b"from-c2", b"from-p"],
            "p": [b"from-p"],
        }
        # A subscriber forwards nothing and has no outbox; each child got the parent's one message.
        for child in (one, two):
            record = await federation(child, exchange)
            assert (record["forwarded"], record["received"], record["outbox"]["messages"]) == (0, 1, 0)
        queue_names = {q["name"] for q in await manage(one, "queues.list")}
        assert f"federation.outbox.{exchange}" not in queue_names
        # The remote binding stays while one local binding is left and goes with the last one.
        await unbind(one, exchange, "news.#", "on-c1-b")
        await publish(parent, exchange, "news.p", [b"still-bound"])
        await wait_counter(one, exchange, "received", 2)
        assert f"federation.c1.{exchange}" in await upstream(parent, exchange, "news.#")
        await unbind(one, exchange, "news.#", "on-c1")
        while f"federation.c1.{exchange}" in await upstream(parent, exchange, "news.#"):
            await trio.sleep(0.05)
        await publish(parent, exchange, "news.p", [b"after-unbind"])
        await wait_counter(two, exchange, "received", 3)
        assert await received_by(queues) == {
            "c1": [b"still-bound"],
            "c1b": [],
            "c2": [b"after-unbind", b"still-bound"],
            "p": [b"after-unbind", b"still-bound"],
        }
        assert (await federation(one, exchange))["received"] == 2


async def test_publisher_forwards_every_publish_and_subscribes_to_nothing(
    nodes: Callable[..., NodeProcess],
) -> None:
    parent = nodes("p")
    one, two = nodes("c1"), nodes("c2")
    exchange = "fed.pub"
    with trio.fail_after(30):
        await declare(exchange, "direct", parent, one, two)
        await federate_to(parent, (one, two), exchange, "publisher")
        queues = {
            "p": (parent, await subscriber(parent, exchange, "k", "on-p")),
            "c1": (one, await subscriber(one, exchange, "k", "on-c1")),
            "c1b": (one, await subscriber(one, exchange, "k", "on-c1-b")),
            "c2": (two, await subscriber(two, exchange, "k", "on-c2")),
        }
        await publish(one, exchange, "k", [b"from-c1"])
        await publish(parent, exchange, "k", [b"from-p"])
        await publish(two, exchange, "other", [b"from-c2-unbound"])
        await wait_counter(one, exchange, "forwarded", 1)
        await wait_counter(two, exchange, "forwarded", 1)
        # No binding is mirrored: the parent's only one is its own queue's. Each child's
        # forwarded message went over its link after its bindings were made, so a mirrored
        # binding would have reached the parent before it.
        bindings = [b for b in await manage(parent, "bindings.list") if b["exchange"] == exchange]
        assert [(b["destination"], b["routing_key"]) for b in bindings] == [("on-p", "k")]
        assert await received_by(queues) == {
            "c1": [b"from-c1"],
            "c1b": [b"from-c1"],
            "c2": [],
            "p": [b"from-c1", b"from-p"],
        }
        assert await counters(one, exchange) == (1, 0, 0)
        assert await counters(two, exchange) == (1, 0, 0)
        # Routed nowhere, here or on the parent: exactly one Return, from the parent's copy.
        returns = await publish_mandatory(
            one, exchange, "nowhere", [b"lost?"], lambda: wait_counter(one, exchange, "forwarded", 2)
        )
        assert returns == [(312, "NO_ROUTE", "nowhere", b"lost?")]
        assert await counters(one, exchange) == (2, 0, 1)


async def test_publisher_does_not_return_a_mandatory_publish_routed_locally(
    nodes: Callable[..., NodeProcess],
) -> None:
    parent = nodes("p")
    child = nodes("c1")
    exchange = "fed.pub"
    with trio.fail_after(30):
        await declare(exchange, "direct", parent, child)
        await federate_to(parent, (child,), exchange, "publisher")
        await subscriber(child, exchange, "only-here", "on-c1")
        returns = await publish_mandatory(
            child,
            exchange,
            "only-here",
            [b"delivered"],
            lambda: wait_counter(child, exchange, "forwarded", 1),
        )
        assert await received(child, "on-c1") == [b"delivered"]
        # mandatory means "route it to at least one queue", and a queue on c1 got it.
        assert returns == []
        assert (await federation(child, exchange))["returned"] == 0


async def test_locator_forwards_only_what_no_local_queue_takes(
    nodes: Callable[..., NodeProcess],
) -> None:
    parent = nodes("p")
    child = nodes("c1")
    exchange = "fed.loc"
    with trio.fail_after(30):
        await declare(exchange, "direct", parent, child)
        await federate_to(parent, (child,), exchange, "locator")
        queues = {
            "c1-local": (child, await subscriber(child, exchange, "local", "c1-local")),
            "c1-both": (child, await subscriber(child, exchange, "both", "c1-both")),
            "p-remote": (parent, await subscriber(parent, exchange, "remote", "p-remote")),
            "p-both": (parent, await subscriber(parent, exchange, "both", "p-both")),
        }
        # A locator mirrors no binding.
        assert not [
            b for b in await manage(parent, "bindings.list") if b["destination"].startswith("federation.")
        ]
        await publish(child, exchange, "local", [b"local-1", b"local-2"])
        await publish(child, exchange, "both", [b"both"])
        assert await counters(child, exchange) == (0, 0, 0)
        await publish(child, exchange, "remote", [b"remote"])
        await wait_counter(child, exchange, "forwarded", 1)
        assert await received_by(queues) == {
            "c1-both": [b"both"],
            "c1-local": [b"local-1", b"local-2"],
            "p-both": [],
            "p-remote": [b"remote"],
        }
        assert await counters(child, exchange) == (1, 0, 0)
        # A mandatory publish routed locally is not forwarded, so nothing can return it.
        returns = await publish_mandatory(child, exchange, "local", [b"local-mandatory"])
        assert returns == []
        # Routed nowhere: forwarded, and the parent's Return reaches the publisher, once.
        returns = await publish_mandatory(
            child, exchange, "nowhere", [b"lost?"], lambda: wait_counter(child, exchange, "forwarded", 2)
        )
        assert returns == [(312, "NO_ROUTE", "nowhere", b"lost?")]
        assert await counters(child, exchange) == (2, 0, 1)
        assert await received_by(queues) == {
            "c1-both": [],
            "c1-local": [b"local-mandatory"],
            "p-both": [],
            "p-remote": [],
        }


async def test_a_three_level_fanout_tree_delivers_each_message_once_everywhere(
    nodes: Callable[..., NodeProcess],
) -> None:
    # r <- m <- (l1, l2), and r <- l3: every node federates fed.tree to its parent as fanout.
    root = nodes("r")
    mid, leaf1, leaf2, leaf3 = nodes("m"), nodes("l1"), nodes("l2"), nodes("l3")
    exchange = "fed.tree"
    with trio.fail_after(45):
        await declare(exchange, "topic", root, mid, leaf1, leaf2, leaf3)
        await attach(mid, root.port, exchange, type="fanout")
        await attach(leaf3, root.port, exchange, type="fanout")
        await attach(leaf1, mid.port, exchange, type="fanout")
        await attach(leaf2, mid.port, exchange, type="fanout")
        for node in (mid, leaf1, leaf2, leaf3):
            await wait_federated(node, {exchange})
        placed = {"r": root, "m": mid, "l1": leaf1, "l2": leaf2, "l3": leaf3}
        everywhere = {name: (node, f"t-{name}") for name, node in placed.items()}
        for node, queue in everywhere.values():
            await subscriber(node, exchange, "t.#", queue)
        only = {"solo": (leaf1, await subscriber(leaf1, exchange, "solo", "solo-l1"))}
        await wait_bound_upstream(root, exchange, "t.#", 3)
        await wait_bound_upstream(root, exchange, "solo", 1)
        assert await upstream(root, exchange, "t.#") == [
            f"federation.l3.{exchange}",
            f"federation.m.{exchange}",
            "t-r",
        ]
        assert await upstream(mid, exchange, "t.#") == [
            f"federation.l1.{exchange}",
            f"federation.l2.{exchange}",
            "t-m",
        ]
        assert await upstream(root, exchange, "solo") == [f"federation.m.{exchange}"]
        assert await upstream(mid, exchange, "solo") == [f"federation.l1.{exchange}"]
        sent = [(leaf1, b"from-l1"), (mid, b"from-m"), (root, b"from-r"), (leaf3, b"from-l3")]
        for node, body in sent:
            await publish(node, exchange, "t.x", [body])
        await publish(leaf2, exchange, "solo", [b"solo-from-l2"])
        await publish(leaf2, exchange, "nobody", [b"dropped"])
        # What each node republished from its parent: the four t.x messages, plus solo on m and l1.
        children = {"m": mid, "l1": leaf1, "l2": leaf2, "l3": leaf3}
        expected_received = {"m": 5, "l1": 5, "l2": 4, "l3": 4}
        for name, count in expected_received.items():
            await wait_counter(children[name], exchange, "received", count)
        got = await received_by(everywhere | only)
        every = sorted(body for _, body in sent)
        assert got == {
            "l1": every,
            "l2": every,
            "l3": every,
            "m": every,
            "r": every,
            "solo": [b"solo-from-l2"],
        }
        # Leaves forward what was published on them; m forwards its own and its leaves' publishes.
        forwarded = {"m": 4, "l1": 1, "l2": 2, "l3": 1}
        for name, node in children.items():
            assert await counters(node, exchange) == (forwarded[name], expected_received[name], 0), name
        # A mandatory publish on a leaf that nobody binds is returned by the root, through m.
        returns = await publish_mandatory(
            leaf2,
            exchange,
            "nobody",
            [b"lost?"],
            lambda: wait_counter(leaf2, exchange, "returned", 1),
        )
        assert returns == [(312, "NO_ROUTE", "nobody", b"lost?")]
        assert [(await federation(node, exchange))["returned"] for node in (mid, leaf2)] == [1, 1]


async def test_returns_through_two_levels_reach_each_publisher(
    nodes: Callable[..., NodeProcess],
) -> None:
    # r <- m <- l, fanout: a publish on l goes l -> m -> r; r returns it to m, m to l, l to its
    # publisher. r is stopped (SIGSTOP) for a moment so its Returns come after m's confirms.
    root = nodes("r")
    mid, leaf = nodes("m"), nodes("l")
    exchange = "fed.chain"
    with trio.fail_after(30):
        await declare(exchange, "topic", root, mid, leaf)
        await attach(mid, root.port, exchange, type="fanout")
        await attach(leaf, mid.port, exchange, type="fanout")
        await wait_federated(mid, {exchange})
        await wait_federated(leaf, {exchange})
        returns: dict[str, list[Any]] = {"a": [], "b": []}
        async with connect(address(leaf)) as first, connect(address(leaf)) as second:
            channels = {}
            for name, connection in [("a", first), ("b", second)]:
                channel = channels[name] = await connection.channel()
                channel.on_return = returns[name].append
                await channel.confirm_select()
            os.kill(root.process.pid, signal.SIGSTOP)
            try:
                # Two publishers, the same key and body; the second publishes once m confirmed
                # the first.
                for forwarded, name in enumerate(["a", "b"], start=1):
                    channels[name].publish(exchange, "nobody", Content(b"\x00\x00", b"ping"), mandatory=True)
                    await channels[name].wait_for_confirms()
                    await wait_counter(leaf, exchange, "forwarded", forwarded)
            finally:
                os.kill(root.process.pid, signal.SIGCONT)
            await wait_counter(mid, exchange, "returned", 2)
            with trio.move_on_after(1):
                await wait_counter(leaf, exchange, "returned", 2)
            for channel in channels.values():  # every Return the leaf sent has been read
                await channel.call(commands.Exchange.Declare(exchange=exchange, passive=True))
        got = {name: [(r.reply_code, r.content.body) for r in events] for name, events in returns.items()}
        assert got == {"a": [(312, b"ping")], "b": [(312, b"ping")]}
