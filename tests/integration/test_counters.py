"""The counters since start (docs/federation.md, "Counters") on real node processes: exact
values through management and through the `--stats` listings of amq-config and amq-route, after
traffic from pika, over routes, around a loop, and across a link cut."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika
import trio

from tests.integration.test_federation_routes import (
    at,
    drain,
    manage,
    publish,
    route,
    settled,
    sink_queue,
    wait_consumed,
    wait_link,
)
from tests.nodes import NodeProcess
from topology.proxy import TcpProxy

BIN = Path(sys.executable).parent
EXCHANGE = ("published", "routed", "unroutable", "dropped_looping")
QUEUE = ("enqueued", "delivered", "acknowledged", "dead_lettered", "dropped", "messages")


def by_name(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {record["name"]: record for record in records}


def counts(record: dict[str, Any], fields: tuple[str, ...]) -> tuple[int, ...]:
    return tuple(record[field] for field in fields)


def amq_config(node: NodeProcess, *args: str) -> list[str]:
    """amq-config's output lines, which must succeed."""
    result = subprocess.run(
        [str(BIN / "amq-config"), "-a", at(node), *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def row(lines: list[str], name: str) -> list[str]:
    """The cells of a `--stats` listing's row for `name`."""
    return next(line.split() for line in lines if line.split()[:1] == [name])


def test_exchange_and_queue_counters_after_pika_traffic(nodes: Callable[..., NodeProcess]) -> None:
    node = nodes("counted")
    connection = pika.BlockingConnection(pika.URLParameters(node.url()))
    channel = connection.channel()
    returned: list[bytes] = []
    channel.add_on_return_callback(lambda _channel, _method, _properties, body: returned.append(body))
    channel.exchange_declare("work.x", "direct")
    channel.queue_declare("dlq")
    queues: dict[str, dict[str, Any]] = {
        "work": {},
        "head": {"x-max-length": 3},
        "refuse": {"x-max-length": 2, "x-overflow": "reject-publish"},
        "dying": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"},
    }
    for name, arguments in queues.items():
        channel.queue_declare(name, arguments=arguments)
        channel.queue_bind(name, "work.x", routing_key=name)
    for key, count in (("work", 5), ("head", 5), ("refuse", 4), ("dying", 2), ("nobody", 2)):
        for index in range(count):
            channel.basic_publish("work.x", key, f"{key}-{index}".encode())
    channel.basic_publish("work.x", "nobody", b"returned", mandatory=True)
    # Three from `work`: two acked (one of them after a requeue and a redelivery), one not.
    first = channel.basic_get("work")[0]
    second = channel.basic_get("work")[0]
    channel.basic_ack(first.delivery_tag)
    channel.basic_nack(second.delivery_tag, requeue=True)
    again = channel.basic_get("work")[0]
    channel.basic_ack(again.delivery_tag)
    channel.basic_get("work")
    # Both of `dying` rejected: dead-lettered into dlq through the default exchange.
    for _ in range(2):
        channel.basic_reject(channel.basic_get("dying")[0].delivery_tag, requeue=False)
    channel.queue_declare("dlq", passive=True)  # a round trip: everything before it is done
    connection.process_data_events(time_limit=0)
    assert returned == [b"returned"]

    exchanges = by_name(trio.run(manage, node, "exchanges.list"))
    assert counts(exchanges["work.x"], EXCHANGE) == (19, 16, 3, 0)
    # Only the two dead-lettered copies went through the default exchange: management's own
    # replies are not counted.
    assert counts(exchanges[""], EXCHANGE) == (2, 2, 0, 0)
    listed = by_name(trio.run(manage, node, "queues.list"))
    expected = {
        # enqueued, delivered (3 gets + 1 redelivery), acked, dead-lettered, dropped, depth
        "work": (5, 4, 2, 0, 0, 2),
        "head": (5, 0, 0, 0, 2, 3),  # drop-head: the two oldest went
        "refuse": (2, 0, 0, 0, 2, 2),  # reject-publish: the last two refused
        "dying": (2, 2, 0, 2, 0, 0),
        "dlq": (2, 0, 0, 0, 0, 2),
    }
    assert {name: counts(listed[name], QUEUE) for name in expected} == expected
    connection.close()  # the unacked delivery goes back to `work`: no counter moves

    lines = amq_config(node, "queues", "--stats")
    assert lines[0].split() == [
        "Queue",
        "Name",
        "Enqueued",
        "Delivered",
        "Acked",
        "Dead-lettered",
        "Dropped",
        "Messages",
    ]
    assert {name: tuple(int(cell) for cell in row(lines, name)[1:]) for name in expected} == {
        **expected,
        "work": (5, 4, 2, 0, 0, 3),
    }
    lines = amq_config(node, "exchanges", "--stats", "work")
    assert [line.split() for line in lines[2:]] == [["work.x", "19", "16", "3", "0"]]


async def test_routes_count_on_the_link_each_way(nodes: Callable[..., NodeProcess]) -> None:
    """A pulled route from B and a pushed one to B, on A's one link to B."""
    a, b = nodes("A"), nodes("B")
    with trio.fail_after(60):
        pulled = await sink_queue(a, "amq.topic", "in.#")
        pushed = await sink_queue(b, "amq.topic", "out.#")
        await route("route", "add", at(a), at(b), "amq.topic", "in.#")
        await route("-s", "route", "add", at(b), at(a), "amq.topic", "out.#")
        await wait_consumed(b, "amq.topic", "in.#")
        await wait_consumed(a, "amq.topic", "out.#")
        await publish(b, "amq.topic", "in.x", [b"in-%d" % i for i in range(7)])
        await publish(a, "amq.topic", "out.x", [b"out-%d" % i for i in range(3)])
        await publish(a, "amq.topic", "elsewhere", [b"nobody"])
        assert len(await drain(a, pulled, 7)) == 7
        assert len(await drain(b, pushed, 3)) == 3
        await settled([a, b])

        [link] = await manage(a, "links.list")
        sizes_in, sizes_out = 7 * len(b"in-0"), 3 * len(b"out-0")
        assert counts(link, ("messages_in", "messages_out", "bytes_in", "bytes_out")) == (
            7,
            3,
            sizes_in,
            sizes_out,
        )
        assert link["down_seconds"] > 0  # Waiting, then Connecting, before the first connection
        routes = {route["key"]: route for route in await manage(a, "routes.list")}
        assert (routes["in.#"]["messages"], routes["in.#"]["bytes"]) == (7, sizes_in)
        assert (routes["out.#"]["messages"], routes["out.#"]["bytes"]) == (3, sizes_out)
        # amq.topic on A: 3 + 1 from its client (4 published, the route's queue took 3), 7
        # from the route (routed to the sink), each drain's marker went by the default exchange.
        exchanges = by_name(await manage(a, "exchanges.list"))
        assert counts(exchanges["amq.topic"], EXCHANGE) == (11, 10, 1, 0)
        assert counts(by_name(await manage(b, "exchanges.list"))["amq.topic"], EXCHANGE) == (10, 10, 0, 0)

        lines = (await route("link", "list", "--stats", at(a))).splitlines()
        assert lines[0].split()[:7] == ["Host", "Port", "State", "Msgs", "In", "Msgs", "Out"]
        cells = row(lines, "127.0.0.1")
        assert cells[1:7] == [str(b.port), "Operational", "7", "3", str(sizes_in), str(sizes_out)]


async def test_a_message_back_at_its_first_node_is_counted_as_looping_there_only(
    nodes: Callable[..., NodeProcess],
) -> None:
    """B pulls A's fed.topic dynamically; A pulls everything on B's fed.topic back with a static
    route, which passes the stamp unchanged: each message published on A comes back to A, whose
    dynamic routing drops it. Nowhere else is anything dropped."""
    a, b = nodes("A"), nodes("B")
    with trio.fail_after(60):
        for node in (a, b):
            assert amq_config(node, "add", "exchange", "topic", "fed.topic") == []
        sink = await sink_queue(b, "fed.topic", "#")
        await route("dynamic", "add", at(b), at(a), "fed.topic")
        await route("route", "add", at(a), at(b), "fed.topic", "#")
        await wait_consumed(b, "fed.topic", "#")  # A's static route's queue on B
        await wait_bridge(a)
        await publish(a, "fed.topic", "k", [b"m-%d" % i for i in range(5)])
        assert len(await drain(b, sink, 5)) == 5
        await settled([a, b])

        on_a = by_name(await manage(a, "exchanges.list"))["fed.topic"]
        on_b = by_name(await manage(b, "exchanges.list"))["fed.topic"]
        # A: 5 from its client (each forwarded to B), 5 back from B (dropped as looping).
        assert counts(on_a, EXCHANGE) == (10, 5, 0, 5)
        # B: 5 from the dynamic route, each to the sink and the static route's queue.
        assert counts(on_b, EXCHANGE) == (5, 5, 0, 0)
        assert row(amq_config(a, "exchanges", "--stats", "fed"), "fed.topic") == [
            "fed.topic",
            "10",
            "5",
            "0",
            "5",
        ]


async def wait_bridge(node: NodeProcess) -> None:
    """Until `node` has a consumed bridge queue: its downstream's route pulls, and its adverts
    (sent before it consumes) have arrived."""
    while True:
        queues = await manage(node, "queues.list")
        if any(queue["name"].startswith("federation.bridge.") and queue["consumers"] for queue in queues):
            return
        await trio.sleep(0.05)


async def test_down_seconds_grow_only_while_the_link_is_not_operational(
    nodes: Callable[..., NodeProcess],
) -> None:
    a, b = nodes("A"), nodes("B")
    proxy = TcpProxy("127.0.0.1", b.port)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(proxy.serve)
            await manage(a, "links.add", {"host": "127.0.0.1", "port": port, "heartbeat": 1})
            up = await wait_link(a, port, lambda link: link["state"] == "Operational")
            # While Operational the count stands still, whatever time passes; the state's age grows.
            later = await wait_link(a, port, lambda link: link["state_seconds"] > up["state_seconds"])
            assert later["down_seconds"] == up["down_seconds"] > 0
            proxy.cut()
            down = await wait_link(a, port, lambda link: link["state"] != "Operational")
            assert down["down_seconds"] >= up["down_seconds"]
            # Not Operational: it grows (a fact the node reports, awaited, not a time measured here).
            await wait_link(a, port, lambda link: link["down_seconds"] > down["down_seconds"])
            proxy.restore()
            back = await wait_link(a, port, lambda link: link["state"] == "Operational")
            assert back["down_seconds"] > down["down_seconds"]
            steady = await wait_link(a, port, lambda link: link["state_seconds"] > back["state_seconds"])
            assert steady["down_seconds"] == back["down_seconds"]
            nursery.cancel_scope.cancel()
