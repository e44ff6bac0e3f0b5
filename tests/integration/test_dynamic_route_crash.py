"""A durable dynamic route loses no confirmed message when either end is SIGKILLed mid-stream.

Node A is the source (the publisher's node), B the destination (a durable queue bound there
pulls A's matching messages over the route `amq-route -d dynamic add B A fed.topic`). A stream
of persistent messages is published on A with confirms; one end is killed a third of the way
through and restarted a second later with the same data dir and port. Every message A
confirmed must reach B's queue; duplicates are allowed only for what the route had in flight
at the crash (at most its credit). Real node processes on loopback; every wait is bounded and
polls an observable fact (A's bridge queue drained and consumed, the route's in-flight count).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import trio
from pamqp import commands

from federation.client import connect
from federation.errors import ClientError
from federation.routes import DEFAULT_CREDIT
from gateway.wire import Content
from tests.integration.test_federation_dynamic import EXCHANGE, config, flows
from tests.integration.test_federation_routes import PERSISTENT, address, at, manage, route
from tests.nodes import NodeProcess

MESSAGES = 20_000
#: Publishes outstanding at once (pipelined, each confirm awaited in order).
WINDOW = 500
QUEUE = "sub"
KEY = "data.x"
#: B's bridge queue on A (federation.bridge.<B's tag>.<exchange>).
BRIDGE = f"federation.bridge.B.{EXCHANGE}"


def body(index: int) -> bytes:
    return b"m%06d" % index


class Publisher:
    """Persistent messages on the node with confirms, in order; after a broken connection it
    reconnects (the node is restarting) and goes on with the next message. `confirmed` holds
    the indices the node confirmed."""

    def __init__(self, node: Callable[[], NodeProcess]) -> None:
        self._node = node
        self.confirmed: set[int] = set()
        self.progress = trio.Condition()

    async def run(self, count: int) -> None:
        sent = 0
        while sent < count:
            try:
                async with connect(address(self._node())) as connection:
                    channel = await connection.channel()
                    await channel.confirm_select()
                    while sent < count:
                        batch = range(sent, min(sent + WINDOW, count))
                        content = [Content.from_properties(PERSISTENT, body(i)) for i in batch]
                        seqs = [channel.publish(EXCHANGE, KEY, c) for c in content]
                        sent = batch.stop
                        for seq, index in zip(seqs, batch, strict=True):
                            assert seq is not None
                            await channel.wait_for_confirm(seq)
                            self.confirmed.add(index)
                        async with self.progress:
                            self.progress.notify_all()
            except ClientError:
                await trio.sleep(0.1)  # the node is down: try again soon

    async def wait_confirmed(self, count: int) -> None:
        async with self.progress:
            while len(self.confirmed) < count:
                await self.progress.wait()


async def quiescent(a: NodeProcess, b: NodeProcess) -> bool:
    """Whether the route is caught up: B consumes its bridge queue on A, which is empty, and
    B's route holds nothing unconfirmed."""
    bridges = [q for q in await manage(a, "queues.list") if q["name"] == BRIDGE]
    if not bridges or bridges[0]["consumers"] != 1 or bridges[0]["messages"] != 0:
        return False
    return all(r["in_flight"] == 0 for r in await manage(b, "routes.list"))


async def collect(a: NodeProcess, b: NodeProcess, confirmed: set[int]) -> Counter[bytes]:
    """B's queue taken until every confirmed message is there, or until the route is caught
    up and the queue empty (then some are missing)."""
    received: Counter[bytes] = Counter()
    wanted = {body(i) for i in confirmed}
    while True:
        caught_up = await quiescent(a, b)
        async with connect(address(b)) as connection:
            channel = await connection.channel()
            while (got := await channel.get(QUEUE, no_ack=True)) is not None:
                if got.content.body.startswith(b"m"):
                    received[got.content.body] += 1
        if wanted <= received.keys() or caught_up:
            return received
        await trio.sleep(0.2)


async def crash_mid_stream(nodes: Callable[..., NodeProcess], tmp_path: Path, victim: str) -> None:
    """The scenario: `victim` ("A" or "B") is SIGKILLed a third of the way through the stream."""
    running = {name: nodes(name, data_dir=tmp_path / f"{name}-data") for name in "AB"}
    for node in running.values():
        await config(node, "add", "exchange", "topic", EXCHANGE, "--durable")
    async with connect(address(running["B"])) as connection:
        channel = await connection.channel()
        await channel.call(commands.Queue.Declare(queue=QUEUE, durable=True))
        await channel.call(commands.Queue.Bind(queue=QUEUE, exchange=EXCHANGE, routing_key="data.#"))
    await route("-d", "dynamic", "add", at(running["B"]), at(running["A"]), EXCHANGE)
    await flows(running["A"], running["B"], QUEUE, "data.probe")

    publisher = Publisher(lambda: running["A"])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(publisher.run, MESSAGES)
        await publisher.wait_confirmed(MESSAGES // 3)
        port = running[victim].port
        running[victim].kill()
        await trio.sleep(1)  # the outage: the publisher goes on (or retries) meanwhile
        running[victim] = await trio.to_thread.run_sync(
            lambda: nodes(victim, data_dir=tmp_path / f"{victim}-data", port=port)
        )
    received = await collect(running["A"], running["B"], publisher.confirmed)
    missing = sorted(i for i in publisher.confirmed if body(i) not in received)
    duplicates = sum(received.values()) - len(received)
    print(
        f"SIGKILL {victim}: {len(publisher.confirmed)} confirmed of {MESSAGES} published,"
        f" {len(received)} distinct received, {len(missing)} missing, {duplicates} duplicates"
    )
    assert not missing, f"{len(missing)} confirmed messages lost, first {missing[:5]}"
    assert duplicates <= DEFAULT_CREDIT, f"{duplicates} duplicates: more than the route had in flight"


async def test_destination_killed_mid_stream_loses_no_confirmed_message(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    with trio.fail_after(90):
        await crash_mid_stream(nodes, tmp_path, "B")


async def test_source_killed_mid_stream_loses_no_confirmed_message(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    with trio.fail_after(90):
        await crash_mid_stream(nodes, tmp_path, "A")
