"""Federation links and static routes between real node processes on loopback, driven by the
amq-route and amq-config console scripts as an operator would, plus management requests for
what the CLIs do not expose (a link's heartbeat). Every wait is bounded."""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio
from pamqp import commands

from federation.address import BrokerAddress
from federation.client import connect
from federation.management_client import ManagementClient
from gateway.wire import Content
from tests.nodes import NodeProcess, running
from topology.proxy import TcpProxy

BIN = Path(sys.executable).parent
PERSISTENT = commands.Basic.Properties(delivery_mode=2, content_type="text/plain", headers={"h": "v"})
RULE = "=" * 81
HEADER = "Host            Port    Node      Transport Durable  State             Last Error"


def at(node: NodeProcess) -> str:
    return f"127.0.0.1:{node.port}"


def address(node: NodeProcess) -> BrokerAddress:
    return BrokerAddress("127.0.0.1", node.port)


async def cli(tool: str, *args: str) -> tuple[int, str, str]:
    """Run amq-route or amq-config; (exit status, stdout, stderr)."""
    result = await trio.run_process(
        [str(BIN / tool), *args, "--timeout", "10"], capture_stdout=True, capture_stderr=True, check=False
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def unstated(text: str) -> str:
    """amq-route's lines without the `  [state; traffic]` a live route or federation ends with:
    qpid-route's own fields."""
    return re.sub(r"  \[[^\n]*\]$", "", text, flags=re.MULTILINE)


async def route(*args: str) -> str:
    """amq-route, which must succeed; its standard output."""
    status, out, err = await cli("amq-route", *args)
    assert status == 0, f"amq-route {' '.join(args)} -> {status}: {err}"
    return out


async def manage(node: NodeProcess, method: str, arguments: dict[str, Any] | None = None) -> Any:
    async with ManagementClient.connect(address(node), 10) as client:
        return await client.call(method, arguments or {})


async def wait_link(node: NodeProcess, port: int, ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll the node's link to `port` until `ready(record)`; the caller bounds the wait."""
    while True:
        links = {link["port"]: link for link in await manage(node, "links.list")}
        if port in links and ready(links[port]):
            return links[port]
        await trio.sleep(0.1)


def operational(link: dict[str, Any]) -> bool:
    return link["state"] == "Operational"


async def sink_queue(node: NodeProcess, exchange: str, key: str, *, durable: bool = False) -> str:
    """A queue on `node` bound to `exchange` with `key`, to see what a route delivered."""
    queue = f"sink-{uuid.uuid4().hex[:8]}"
    async with connect(address(node)) as connection:
        channel = await connection.channel()
        await channel.call(commands.Queue.Declare(queue=queue, durable=durable))
        await channel.call(commands.Queue.Bind(queue=queue, exchange=exchange, routing_key=key))
    return queue


async def publish(node: NodeProcess, exchange: str, key: str, bodies: list[bytes]) -> None:
    """Persistent messages, confirmed by the node."""
    async with connect(address(node)) as connection:
        channel = await connection.channel()
        await channel.confirm_select()
        for body in bodies:
            channel.publish(exchange, key, Content.from_properties(PERSISTENT, body))
        await channel.wait_for_confirms()


async def settled(group: Sequence[NodeProcess] | None = None) -> None:
    """Until nothing moves between the nodes of `group` (default: every node the test process
    started that still runs): no route or federation has anything unconfirmed, no federation's
    outbox holds anything, every consumed queue (a route's source, a bridge, a subscriber's) is
    empty, and two sweeps in a
    row saw the same counts (a message moving between the reads of one sweep changes a count
    in the next). The caller bounds the wait."""
    previous: list[int] | None = None
    while True:
        counts: list[int] = []
        quiet = True
        for node in running() if group is None else group:
            for record in await manage(node, "routes.list"):
                quiet = quiet and record["in_flight"] == 0
                counts.append(record["messages"])
            for record in await manage(node, "federations.list"):
                # An outbox waits for its parent without a consumer: the queues check misses it.
                quiet = quiet and record["in_flight"] == 0 and record["outbox"]["messages"] == 0
                counts += (record["forwarded"], record["received"], record["returned"])
            for queue in await manage(node, "queues.list"):
                quiet = quiet and (queue["consumers"] == 0 or queue["messages"] == 0)
        if quiet and counts == previous:
            return
        previous = counts if quiet else None
        await trio.sleep(0.05)


async def drain(node: NodeProcess, queue: str, count: int) -> list[Content]:
    """Consume `count` messages; then, once the nodes have settled, a marker published into
    the queue must be the next message: no more came."""
    received: list[Content] = []
    async with connect(address(node)) as connection:
        channel = await connection.channel()
        await channel.qos(prefetch_count=500)
        await channel.consume(queue)
        deliveries = channel.deliveries()
        async for delivery in deliveries:
            received.append(delivery.content)
            channel.ack(delivery.delivery_tag)
            if len(received) == count:
                break
        await settled()
        marker = f"drain-marker-{uuid.uuid4().hex[:8]}".encode()
        await publish(node, "", queue, [marker])
        following = await anext(aiter(deliveries))
        channel.ack(following.delivery_tag)
        assert following.content.body == marker, f"unexpected extra message {following.content.body!r}"
    return received


async def wait_consumed(node: NodeProcess, exchange: str, key: str) -> None:
    """Poll until a queue on `node` bound to `exchange` with `key` has a consumer: the route's
    source queue is in place, so a message published now cannot miss it."""
    while True:
        consumed = await consumed_queues(node)
        for binding in await manage(node, "bindings.list"):
            bound = (binding["exchange"], binding["routing_key"]) == (exchange, key)
            if bound and binding["destination"] in consumed:
                return
        await trio.sleep(0.05)


async def consumed_queues(node: NodeProcess) -> set[str]:
    return {queue["name"] for queue in await manage(node, "queues.list") if queue["consumers"]}


def bodies(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


async def test_seed_walkthrough_links_exchange_and_queue_routes(nodes: Callable[..., NodeProcess]) -> None:
    a, b = nodes("A"), nodes("B")
    with trio.fail_after(40):
        assert await route("-v", "link", "add", at(a), at(b)) == f"Adding link {at(a)} -> {at(b)}\n"
        assert (await route("link", "add", at(a), at(b))) == ""  # idempotent
        await wait_link(a, b.port, operational)
        table = (await route("link", "list", at(a))).splitlines()
        assert table == [
            HEADER,
            RULE,
            f"127.0.0.1       {b.port:<8}B         tcp          N     Operational       ",
        ]
        status, _, err = await cli("amq-route", "link", "add", f"localhost:{a.port}", at(a))
        assert (status, err) == (
            1,
            f"Failed: usage - {at(a)} is this node's own address: a node cannot link to itself\n",
        )
        assert await route("-v", "link", "del", at(a), at(b)) == f"Deleting link {at(a)} -> {at(b)}\n"
        assert await route("link", "list", at(a)) == "No Links Found\n"

        # route add on amq.topic global.#: its link is created, messages flow B -> A.
        global_sink = await sink_queue(a, "amq.topic", "global.#")
        await route("route", "add", at(a), at(b), "amq.topic", "global.#")
        await wait_link(a, b.port, operational)
        status, _, err = await cli("amq-route", "route", "add", at(a), at(b), "amq.topic", "global.#")
        assert (status, err) == (1, "Duplicate Route - ignoring: amq.topic(global.#)\n")
        await wait_consumed(b, "amq.topic", "global.#")
        await publish(b, "amq.topic", "global.x", [b"hello"])
        [message] = await drain(a, global_sink, 1)
        assert (message.body, message.headers, message.delivery_mode) == (b"hello", {"h": "v"}, 2)

        # queue add: A consumes B's queue "public" into amq.fanout.
        status, _, err = await cli("amq-config", "-a", at(b), "add", "queue", "public")
        assert status == 0, err
        fanout_sink = await sink_queue(a, "amq.fanout", "")
        await route("queue", "add", at(a), at(b), "amq.fanout", "public")
        while "public" not in await consumed_queues(b):
            await trio.sleep(0.05)
        await publish(b, "", "public", bodies("public", 3))
        assert [m.body for m in await drain(a, fanout_sink, 3)] == bodies("public", 3)

        assert unstated(await route("route", "list", at(a))).splitlines() == [
            f"{at(a)} {at(b)} amq.topic global.#",
            f"{at(a)} {at(b)} amq.fanout ",
        ]
        records = await manage(a, "routes.list")
        assert [(r["messages"], r["in_flight"]) for r in records] == [(1, 0), (3, 0)]
        assert records[1]["bytes"] == sum(map(len, bodies("public", 3)))
        assert (await route("-v", "-e", "route", "flush", at(a))).splitlines() == [
            f"Deleted route: {at(b)} amq.topic global.#",
            f"Deleted route: {at(b)} amq.fanout ",
            f"Deleted link: {at(b)}",
        ]
        assert await route("link", "list", at(a)) == "No Links Found\n"


async def test_durable_route_delivers_what_was_published_while_the_source_was_down(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    a = nodes("A")
    b = nodes("B", data_dir=tmp_path / "b-data")
    with trio.fail_after(45):
        sink = await sink_queue(a, "amq.topic", "dur.#")
        await route("-d", "route", "add", at(a), at(b), "amq.topic", "dur.#")
        link = await wait_link(a, b.port, operational)
        assert link["durable"] is True
        await wait_consumed(b, "amq.topic", "dur.#")
        await publish(b, "amq.topic", "dur.before", bodies("before", 50))
        assert [m.body for m in await drain(a, sink, 50)] == bodies("before", 50)

        b.kill()
        link = await wait_link(a, b.port, lambda link: link["last_error"] == "Connection refused")
        assert link["state"] in ("Waiting", "Connecting")
        assert "Waiting" in (await route("link", "list", at(a)))
        b = nodes("B", data_dir=tmp_path / "b-data", port=b.port)
        # The link retries 4 s after the refusal: these wait in B's durable route queue.
        await publish(b, "amq.topic", "dur.after", bodies("after", 200))
        await wait_link(a, b.port, operational)
        received = [m.body for m in await drain(a, sink, 200)]
        assert sorted(received) == sorted(bodies("after", 200))
        assert received == bodies("after", 200)  # in order, too


async def test_wrong_password_fails_the_link_without_retrying(nodes: Callable[..., NodeProcess]) -> None:
    a, b = nodes("A"), nodes("B")
    with trio.fail_after(20):
        arguments = {"host": "127.0.0.1", "port": b.port, "username": "guest", "password": "wrong"}
        await manage(a, "links.add", arguments)
        link = await wait_link(a, b.port, lambda link: link["state"] == "Failed")
        assert "ACCESS_REFUSED" in link["last_error"]
        # Failed is final: the link's task has returned and schedules no retry (in virtual
        # time, tests/unit/test_link.py waits ten hours for one). Here: one attempt, refused.
        assert link["reconnects"] == 0
        assert b.log().count("login refused") == 1


async def test_link_reaching_the_node_itself_is_refused(nodes: Callable[..., NodeProcess]) -> None:
    """Through a proxy the address differs, so the peer's cluster_name gives it away."""
    a = nodes("A")
    proxy = TcpProxy("127.0.0.1", a.port)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(proxy.serve)
            await manage(a, "links.add", {"host": "127.0.0.1", "port": port})
            link = await wait_link(a, port, lambda link: link["state"] == "Failed")
            assert link["last_error"] == "link to itself refused"
            nursery.cancel_scope.cancel()


async def test_half_open_link_leaves_operational_and_comes_back(nodes: Callable[..., NodeProcess]) -> None:
    a, b = nodes("A"), nodes("B")
    proxy = TcpProxy("127.0.0.1", b.port)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(proxy.serve)
            await manage(a, "links.add", {"host": "127.0.0.1", "port": port, "heartbeat": 1})
            await manage(
                a,
                "routes.add",
                {
                    "host": "127.0.0.1",
                    "port": port,
                    "kind": "exchange",
                    "exchange": "amq.topic",
                    "key": "half.#",
                },
            )
            sink = await sink_queue(a, "amq.topic", "half.#")
            await wait_link(a, port, operational)
            proxy.cut()
            beats_at_cut = proxy.heartbeats["to_target"]
            link = await wait_link(a, port, lambda link: link["state"] != "Operational")
            assert "heartbeat" in link["last_error"]
            # Two 1 s intervals of silence, counted in the link's own heartbeats (one every
            # 0.5 s) sent into the cut rather than in seconds: a few, not dozens.
            assert 1 <= proxy.heartbeats["to_target"] - beats_at_cut <= 6
            proxy.restore()
            await wait_link(a, port, operational)
            await wait_consumed(b, "amq.topic", "half.#")
            await publish(b, "amq.topic", "half.x", [b"after restore"])
            assert [m.body for m in await drain(a, sink, 1)] == [b"after restore"]
            nursery.cancel_scope.cancel()


async def test_push_route_delivers_from_the_source(nodes: Callable[..., NodeProcess]) -> None:
    a, b = nodes("A"), nodes("B")
    with trio.fail_after(20):
        sink = await sink_queue(a, "amq.topic", "push.#")
        # -s: the request goes to the source B, which opens the link to A and pushes.
        await route("-s", "route", "add", at(a), at(b), "amq.topic", "push.#")
        await wait_link(b, a.port, operational)
        await wait_consumed(b, "amq.topic", "push.#")
        assert unstated(await route("route", "list", at(b))) == f"{at(b)} {at(a)} amq.topic push.#\n"
        await publish(b, "amq.topic", "push.1", bodies("push", 20))
        assert [m.body for m in await drain(a, sink, 20)] == bodies("push", 20)
        assert (await manage(a, "links.list")) == []


async def test_durable_link_and_route_restored_when_the_destination_restarts(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    a = nodes("A", data_dir=tmp_path / "a-data")
    b = nodes("B")
    with trio.fail_after(40):
        sink = await sink_queue(a, "amq.topic", "restart.#", durable=True)
        await route("-d", "link", "add", at(a), at(b))
        await route("-d", "route", "add", at(a), at(b), "amq.topic", "restart.#")
        await wait_consumed(b, "amq.topic", "restart.#")
        assert a.stop() == 0
        # A is down: B keeps these in the route's durable queue.
        await publish(b, "amq.topic", "restart.x", bodies("while-down", 30))
        a = nodes("A", data_dir=tmp_path / "a-data", port=a.port)
        link = await wait_link(a, b.port, operational)
        assert link["durable"] is True
        assert unstated(await route("route", "list", at(a))) == f"{at(a)} {at(b)} amq.topic restart.#\n"
        assert [m.body for m in await drain(a, sink, 30)] == bodies("while-down", 30)
