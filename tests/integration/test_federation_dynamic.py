"""Dynamic routes between real node processes, driven by amq-route and amq-config: interest
follows bindings, messages follow interest, and on rings and meshes every subscriber gets each
message exactly once. Every wait is bounded."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import trio

from federation.client import connect
from federation.dynamic_route import BRIDGE_ARGUMENTS
from tests.integration.test_federation_routes import (
    address,
    at,
    bodies,
    cli,
    drain,
    manage,
    operational,
    publish,
    route,
    settled,
    sink_queue,
    unstated,
    wait_link,
)
from tests.nodes import NodeProcess

EXCHANGE = "fed.topic"
PROBE = b"probe-"
#: The last message each node publishes in `exactly_once`: it follows the same paths as the
#: messages before it, and each path is FIFO (bridge queue, route, confirms in order).
END = b"end-"


async def config(node: NodeProcess, *args: str) -> None:
    status, _, err = await cli("amq-config", "-a", at(node), *args)
    assert status == 0, f"amq-config {' '.join(args)} -> {status}: {err}"


async def federate(*pairs: tuple[NodeProcess, NodeProcess], durable: bool = False) -> None:
    """A dynamic route into the first node of each pair from the second, all at once."""
    flags = ["-d"] if durable else []
    async with trio.open_nursery() as nursery:
        for dest, src in pairs:
            nursery.start_soon(route, *flags, "dynamic", "add", at(dest), at(src), EXCHANGE)


async def forwarded(node: NodeProcess) -> int:
    """Messages the node's dynamic routes brought in."""
    return sum(record["messages"] for record in await manage(node, "routes.list"))


async def flows(source: NodeProcess, dest: NodeProcess, queue: str, key: str) -> None:
    """Publish probes on `source` until one reaches `queue` on `dest`: the interest arrived."""
    async with connect(address(dest)) as connection:
        channel = await connection.channel()
        while True:
            await publish(source, EXCHANGE, key, [b"probe"])
            await trio.sleep(0.1)
            if await channel.get(queue, no_ack=True) is not None:
                break
        while await channel.get(queue, no_ack=True) is not None:
            pass


class Subscriber:
    """A queue on one node bound with `#`, consumed into `bodies`."""

    def __init__(self, node: NodeProcess) -> None:
        self.node = node
        self.bodies: list[bytes] = []

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        queue = await sink_queue(self.node, EXCHANGE, "#")
        async with connect(address(self.node)) as connection:
            channel = await connection.channel()
            await channel.consume(queue, no_ack=True)
            task_status.started()
            async for delivery in channel.deliveries():
                self.bodies.append(delivery.content.body)

    def origins(self) -> set[bytes]:
        return {body for body in self.bodies if body.startswith(PROBE)}

    def messages(self) -> list[bytes]:
        return [body for body in self.bodies if not body.startswith((PROBE, END))]

    def ends(self) -> list[bytes]:
        return [body for body in self.bodies if body.startswith(END)]


async def exactly_once(group: Sequence[NodeProcess], count: int = 50) -> None:
    """A subscriber on every node; once probes from every node reach every subscriber, `count`
    messages published on each node must reach each subscriber exactly once."""
    async with trio.open_nursery() as nursery:
        subscribers = [Subscriber(node) for node in group]
        for subscriber in subscribers:
            await nursery.start(subscriber.run)
        probes = {PROBE + str(node.port).encode() for node in group}
        while any(subscriber.origins() != probes for subscriber in subscribers):
            for node in group:
                await publish(node, EXCHANGE, "probe", [PROBE + str(node.port).encode()])
            await trio.sleep(0.2)  # pacing: one round of probes, then look again
        await settled(group)  # the probes still in flight have arrived
        expected = [body for node in group for body in bodies(f"m{node.port}", count)]
        ends = [END + str(node.port).encode() for node in group]
        async with trio.open_nursery() as publishers:
            for node in group:
                own = [*bodies(f"m{node.port}", count), END + str(node.port).encode()]
                publishers.start_soon(publish, node, EXCHANGE, "k", own)
        # Every path carried each node's END after its messages; then nothing is in flight.
        while any(set(subscriber.ends()) != set(ends) for subscriber in subscribers):
            await trio.sleep(0.05)
        await settled(group)
        for subscriber in subscribers:
            assert Counter(subscriber.messages()) == Counter(expected), subscriber.node.port
            assert Counter(subscriber.ends()) == Counter(ends), subscriber.node.port
        nursery.cancel_scope.cancel()
    # Destination sets keep every copy off a loop: no node dropped one as looping, and every
    # node's neighbours are direct, so each copy reached the subscriber it was sent for.
    for node in group:
        exchange = next(e for e in await manage(node, "exchanges.list") if e["name"] == EXCHANGE)
        assert (exchange["dropped_looping"], exchange["unroutable"]) == (0, 0), node.port
        assert exchange["routed"] == exchange["published"] >= len(group) * (count + 1), node.port


async def test_seed_walkthrough_dynamic_routes(nodes: Callable[..., NodeProcess]) -> None:
    a, b = nodes("A"), nodes("B")
    with trio.fail_after(40):
        for node in (a, b):
            await config(node, "add", "exchange", "topic", EXCHANGE)
        await federate((a, b), (b, a))
        assert unstated(await route("route", "list", at(a))) == f"{at(a)} {at(b)} {EXCHANGE} <dynamic>\n"
        assert unstated(await route("route", "list", at(b))) == f"{at(b)} {at(a)} {EXCHANGE} <dynamic>\n"
        routes_map = unstated(await route("route", "map", at(a))).splitlines()
        assert f"Exchange {EXCHANGE}:" in routes_map
        assert f"{at(a)} <=> {at(b)}" in routes_map or f"{at(b)} <=> {at(a)}" in routes_map

        sink = await sink_queue(a, EXCHANGE, "a.#")
        await flows(b, a, sink, "a.probe")
        before = await forwarded(a)
        await publish(b, EXCHANGE, "b.x", [b"not for A"])
        await publish(b, EXCHANGE, "a.x", [b"for A"])
        assert [m.body for m in await drain(a, sink, 1)] == [b"for A"]
        assert await forwarded(a) == before + 1  # the bridge carried only the matching one

        await config(a, "unbind", EXCHANGE, sink, "a.#")
        while True:  # withdrawing the interest takes one advert to reach B
            before = await forwarded(a)
            await publish(b, EXCHANGE, "a.y", [b"after unbind"])
            await settled((a, b))  # forwarded by now, if it was forwarded at all
            if await forwarded(a) == before:
                break
        await publish(b, EXCHANGE, "a.z", [b"after unbind"])
        await settled((a, b))
        assert await forwarded(a) == before


async def test_source_exchange_must_exist_with_the_same_type(nodes: Callable[..., NodeProcess]) -> None:
    a, b = nodes("A"), nodes("B")
    with trio.fail_after(20):
        await config(a, "add", "exchange", "topic", EXCHANGE)
        status, _, err = await cli("amq-route", "dynamic", "add", at(a), at(b), EXCHANGE)
        assert (status, err) == (
            1,
            f"Failed: NOT_FOUND - no exchange '{EXCHANGE}' on {at(b)}: the route's source exchange must exist there\n",
        )
        # Added anyway (management does not read the peer): the route checks at run time.
        await manage(
            a, "routes.add", {"host": "127.0.0.1", "port": b.port, "kind": "dynamic", "exchange": EXCHANGE}
        )
        link = await wait_link(a, b.port, operational)
        assert link["state"] == "Operational"
        while not (record := (await manage(a, "routes.list"))[0])["last_error"]:
            await trio.sleep(0.05)
        assert record["last_error"].endswith(f"exchange '{EXCHANGE}' does not exist on {at(b)}")
        assert record["state"] == "Failed"
        await config(b, "add", "exchange", "direct", EXCHANGE)
        while "differently" not in (record := (await manage(a, "routes.list"))[0])["last_error"]:
            await trio.sleep(0.1)
        assert f"exchange '{EXCHANGE}' is declared differently on {at(b)}: " in record["last_error"]
        assert "inequivalent arg 'type'" in record["last_error"]


async def test_ring_of_three_delivers_exactly_once(nodes: Callable[..., NodeProcess]) -> None:
    group = [nodes(name) for name in "ABC"]
    with trio.fail_after(45):
        for node in group:
            await config(node, "add", "exchange", "topic", EXCHANGE)
        a, b, c = group
        await federate((a, b), (b, a), (b, c), (c, b), (c, a), (a, c))
        await exactly_once(group)


async def test_full_mesh_of_four_delivers_exactly_once(nodes: Callable[..., NodeProcess]) -> None:
    group = [nodes(name) for name in "ABCD"]
    with trio.fail_after(45):
        for node in group:
            await config(node, "add", "exchange", "topic", EXCHANGE)
        await federate(*itertools.permutations(group, 2))
        await exactly_once(group)


async def test_reconnect_resyncs_bindings(nodes: Callable[..., NodeProcess], tmp_path: Path) -> None:
    a = nodes("A", data_dir=tmp_path / "a-data")
    b = nodes("B")
    with trio.fail_after(45):
        for node in (a, b):  # the same type and flags on both, as the route checks
            await config(node, "add", "exchange", "topic", EXCHANGE, "--durable")
        await federate((a, b), durable=True)
        sink = await sink_queue(a, EXCHANGE, "r.#")
        await flows(b, a, sink, "r.probe")

        a.kill()  # B keeps A's durable bridge queue and A's last interest (r.#) meanwhile
        a = nodes("A", data_dir=tmp_path / "a-data", port=a.port)
        sink = await sink_queue(a, EXCHANGE, "again.#")  # A's durable route is restored
        await wait_link(a, b.port, operational)
        await flows(b, a, sink, "again.probe")
        before = await forwarded(a)
        await publish(b, EXCHANGE, "r.x", [b"stale interest"])
        await publish(b, EXCHANGE, "again.x", bodies("again", 20))
        assert [m.body for m in await drain(a, sink, 20)] == bodies("again", 20)
        assert await forwarded(a) == before + 20  # A's resync replaced the interest it had before


async def test_durable_route_keeps_a_bounded_bridge_queue_until_deleted(
    nodes: Callable[..., NodeProcess],
) -> None:
    a, b = nodes("A"), nodes("B")
    bridge = f"federation.bridge.A.{EXCHANGE}"
    with trio.fail_after(30):
        for node in (a, b):
            await config(node, "add", "exchange", "topic", EXCHANGE)
        await federate((a, b), durable=True)
        sink = await sink_queue(a, EXCHANGE, "d.#")
        await flows(b, a, sink, "d.probe")
        record = {q["name"]: q for q in await manage(b, "queues.list")}[bridge]
        assert (record["durable"], record["exclusive"], record["auto_delete"]) == (True, False, False)
        assert record["arguments"] == BRIDGE_ARGUMENTS
        await route("dynamic", "del", at(a), at(b), EXCHANGE)
        while bridge in {q["name"] for q in await manage(b, "queues.list")}:
            await trio.sleep(0.05)
