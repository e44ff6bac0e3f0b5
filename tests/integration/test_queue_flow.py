"""Producer flow control (x-qpid-capacity) between real node processes: a route feeding an
overfull queue pauses, its source keeps the rest, and once the queue is drained everything
arrives, in order, once. Every wait is bounded."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
from pamqp import commands

from federation.client import connect
from tests.integration.test_federation_routes import (
    address,
    at,
    drain,
    manage,
    operational,
    publish,
    route,
    wait_consumed,
    wait_link,
)
from tests.nodes import NodeProcess

CAPACITY = 20_000
BODY = 1000
COUNT = 300


async def probe_arrives(source: NodeProcess, dest: NodeProcess, queue: str) -> None:
    """Publish probes on `source` until one reaches `queue` on `dest` (the dynamic route carries
    the queue's binding as interest), then take them all off the queue."""
    async with connect(address(dest)) as connection:
        channel = await connection.channel()
        while True:
            await publish(source, "amq.topic", "flow.probe", [b"probe"])
            await trio.sleep(0.1)  # pacing between probes
            if await channel.get(queue, no_ack=True) is not None:
                break
        while await channel.get(queue, no_ack=True) is not None:
            pass


async def queue_record(node: NodeProcess, name: str) -> dict:
    return next(q for q in await manage(node, "queues.list") if q["name"] == name)


@pytest.mark.parametrize("kind", ["route", "dynamic"])
async def test_a_route_into_an_overfull_queue_pauses_and_loses_nothing(
    nodes: Callable[..., NodeProcess], kind: str
) -> None:
    """An exchange route, and a dynamic route (the queue's binding is the interest it carries)."""
    a, b = nodes("A"), nodes("B")
    sent = [b"%04d" % i + b"x" * (BODY - 4) for i in range(COUNT)]
    with trio.fail_after(60):
        async with connect(address(a)) as connection:
            channel = await connection.channel()
            arguments = {"x-qpid-capacity": CAPACITY, "x-qpid-flow-resume-capacity": CAPACITY // 2}
            await channel.call(commands.Queue.Declare(queue="capped", arguments=arguments))
            await channel.call(
                commands.Queue.Bind(queue="capped", exchange="amq.topic", routing_key="flow.#")
            )
        if kind == "route":
            await route("route", "add", at(a), at(b), "amq.topic", "flow.#")
            await wait_link(a, b.port, operational)
            await wait_consumed(b, "amq.topic", "flow.#")
        else:
            await route("dynamic", "add", at(a), at(b), "amq.topic")
            await wait_link(a, b.port, operational)
            await probe_arrives(b, a, "capped")
        await publish(b, "amq.topic", "flow.x", sent)
        # The route's internal session on A is held by the overfull queue...
        while (await manage(a, "node.info"))["blocked_connections"] == 0:
            await trio.sleep(0.05)
        capped = await queue_record(a, "capped")
        assert capped["overfull"] is True
        # ...after the one publish that took the queue over its capacity, not a window later.
        assert CAPACITY < capped["bytes"] <= CAPACITY + BODY
        # The rest waits on the source (in its route queue, or in the route's credit window).
        assert sum(q["messages"] for q in await manage(b, "queues.list")) + capped["messages"] <= COUNT
        received = [m.body for m in await drain(a, "capped", COUNT)]
        assert received == sent
        capped = await queue_record(a, "capped")
        assert (capped["overfull"], capped["bytes"]) == (False, 0)
        assert (await manage(a, "node.info"))["blocked_connections"] == 0
