"""Routes without the network: the forwarder's ack batching against fakes, the local adapters
against a real broker model, and the federation manager's rules and persistence with links
whose peer is always down."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from pamqp import commands

from federation.errors import ConnectFailed, PublishNacked
from federation.link import Carried
from federation.local import LocalChannelClosed, LocalSink, LocalSource
from federation.manager import Federation
from federation.routes import IDLE_ACK_DELAY, DestinationRefused, Forwarder, LocalNode, RouteStats
from gateway.broker import Broker
from gateway.broker.outbox import Delivery
from gateway.management import Management, ManagementError
from gateway.memoryalarm import MemoryAlarm
from gateway.wire import Content
from tests.unit.test_memory_alarm import Memory

from .broker_fakes import Client

MESSAGE = Content.from_properties(commands.Basic.Properties(delivery_mode=2, headers={"a": 1}), b"body")


class FakeSource:
    """Deliveries the test feeds in; acks recorded."""

    def __init__(self) -> None:
        self.feed, self._deliveries = trio.open_memory_channel[Delivery](math.inf)
        self.acks: list[tuple[int, bool]] = []
        self.fed = 0

    def deliver(self, count: int, first: int = 1) -> None:
        self.fed += count
        for tag in range(first, first + count):
            self.feed.send_nowait(Delivery(1, "federation", tag, False, "src", f"key.{tag}", MESSAGE))

    def deliveries(self) -> trio.MemoryReceiveChannel[Delivery]:
        return self._deliveries

    def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        self.acks.append((delivery_tag, multiple))


def taken(source: FakeSource) -> int:
    """How many deliveries the forwarder has taken from `source`."""
    statistics = source.feed.statistics()
    return source.fed - statistics.current_buffer_used


class FakeSink:
    """Publishes recorded; confirmed at once, or when the test says (`confirm`)."""

    def __init__(self, *, auto_confirm: bool = True) -> None:
        self.resumed: trio.Event | None = None
        self.published: list[tuple[str, str, Content]] = []
        self.auto_confirm = auto_confirm
        self.settled = 0
        self.nacked: set[int] = set()
        self._progress = trio.Event()

    def publish(self, exchange: str, routing_key: str, content: Content) -> int:
        self.published.append((exchange, routing_key, content))
        if self.auto_confirm:
            self.settled = len(self.published)
        return len(self.published)

    def confirm(self, up_to: int, *, nack: int | None = None) -> None:
        if nack is not None:
            self.nacked.add(nack)
        self.settled = up_to
        self._progress.set()
        self._progress = trio.Event()

    def confirmed(self, seq: int) -> bool:
        if seq > self.settled:
            return False
        if seq in self.nacked:
            raise PublishNacked([seq])
        return True

    async def wait_for_confirm(self, seq: int) -> None:
        while not self.confirmed(seq):
            await self._progress.wait()


async def test_acks_are_batched_and_the_rest_flushed_when_the_stream_goes_idle(autojump_clock: Any) -> None:
    source, sink, stats, carried = FakeSource(), FakeSink(), RouteStats(), Carried()
    source.deliver(7)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(Forwarder(source, sink, "dest", ack=3, stats=stats, carried=carried).run)
        await trio.sleep(IDLE_ACK_DELAY / 2)
        assert source.acks == [(3, True), (6, True)]
        await trio.sleep(IDLE_ACK_DELAY)
        assert source.acks == [(3, True), (6, True), (7, True)]
        assert (stats.messages, stats.bytes, stats.in_flight) == (7, 7 * len(b"body"), 0)
        # The link's count for this direction goes with the route's.
        assert (carried.messages, carried.bytes) == (7, 7 * len(b"body"))
        # Into the route's exchange, with each message's key and its very content object.
        assert sink.published[0] == ("dest", "key.1", MESSAGE) and sink.published[0][2] is MESSAGE
        nursery.cancel_scope.cancel()


async def test_nothing_is_acked_before_the_destination_confirms(autojump_clock: Any) -> None:
    source, sink, stats, carried = FakeSource(), FakeSink(auto_confirm=False), RouteStats(), Carried()
    source.deliver(5)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(Forwarder(source, sink, "dest", ack=100, stats=stats, carried=carried).run)
        await trio.sleep(1)
        assert (source.acks, stats.in_flight, stats.messages) == ([], 5, 0)
        # A window (prefetch) of 5 is all the source sends: the batch of 100 never fills, so
        # what is confirmed is acked as soon as the forwarder has to wait for more.
        sink.confirm(2)
        await trio.sleep(IDLE_ACK_DELAY / 10)
        assert (source.acks, stats.in_flight, stats.messages, carried.messages) == ([(2, True)], 3, 2, 2)
        sink.confirm(5)
        await trio.sleep(1)
        assert source.acks == [(2, True), (5, True)]
        assert stats.last_transfer is not None
        nursery.cancel_scope.cancel()


async def test_a_refused_message_is_never_acked(autojump_clock: Any) -> None:
    source, sink = FakeSource(), FakeSink(auto_confirm=False)
    source.deliver(4)

    async def forward() -> None:
        with pytest.raises(DestinationRefused, match="refused 2 message"):
            await Forwarder(source, sink, "dest", ack=100, stats=RouteStats(), carried=Carried()).run()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(forward)
        await trio.sleep(1)
        sink.confirm(3, nack=3)
    # 1 and 2 were accepted: acked; 3 (refused) and 4 go back to the source with the channel.
    assert source.acks == [(2, True)]


# -- the local adapters, on a real broker model ----------------------------------------------


def declare(broker: Broker, queue: str, key: str, **arguments: Any) -> Management:
    management = Management(broker, "node")
    management.add_queue(queue, arguments=arguments)
    management.add_binding("amq.topic", queue, key)
    return management


def depth(management: Management, queue: str) -> int:
    return next(record["messages"] for record in management.list_queues() if record["name"] == queue)


async def test_local_sink_confirms_after_routing_and_reports_refusals() -> None:
    broker = Broker()
    management = declare(broker, "full", "k", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    commits: list[None] = []
    sink = LocalSink(broker, lambda: commits.append(None))
    first, second = sink.publish("amq.topic", "k", MESSAGE), sink.publish("amq.topic", "k", MESSAGE)
    await sink.wait_for_confirm(first)
    with pytest.raises(PublishNacked):
        await sink.wait_for_confirm(second)
    assert depth(management, "full") == 1 and commits
    with pytest.raises(LocalChannelClosed, match="NOT_FOUND - no exchange 'missing'") as refused:
        sink.publish("missing", "k", MESSAGE)
    assert str(refused.value).startswith("local broker: ")
    sink.close()


async def test_local_source_consumes_within_its_credit_and_acks() -> None:
    broker = Broker()
    source = LocalSource(broker, lambda: None, credit=2)
    queue = source.declare_private_queue("amq.topic", "k.#")
    sink = LocalSink(broker, lambda: None)
    for _ in range(3):
        sink.publish("amq.topic", "k.1", MESSAGE)
    source.consume(queue)
    deliveries = aiter(source.deliveries())
    first, second = await anext(deliveries), await anext(deliveries)
    assert (first.routing_key, first.content, second.delivery_tag) == ("k.1", MESSAGE, 2)
    with trio.move_on_after(0.05) as idle:
        await anext(deliveries)  # the third waits for credit
    assert idle.cancelled_caught
    source.ack(second.delivery_tag, multiple=True)
    assert (await anext(deliveries)).delivery_tag == 3
    source.close()
    assert queue not in {record["name"] for record in Management(broker, "node").list_queues()}


# -- the manager ------------------------------------------------------------------------------


@asynccontextmanager
async def unreachable(address: Any, **options: Any) -> AsyncIterator[Any]:
    raise ConnectFailed("Connection refused")
    yield  # pragma: no cover


@asynccontextmanager
async def running(data_dir: Path | None = None) -> AsyncIterator[Federation]:
    management = Management(Broker(), "node")
    federation = Federation(
        LocalNode("node", management, lambda: None), data_dir=data_dir, connect=unreachable
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(federation.run, [("127.0.0.1", 5672)])
        yield federation
        nursery.cancel_scope.cancel()


def refusal(operation: Any, **arguments: Any) -> tuple[str, str]:
    with pytest.raises(ManagementError) as refused:
        operation(**arguments)
    return refused.value.kind, refused.value.message


ROUTE = {"host": "peer", "port": 5673, "kind": "exchange", "exchange": "amq.topic", "key": "k"}


async def test_manager_refuses_what_it_cannot_run() -> None:
    async with running() as federation:
        assert refusal(federation.add_link, host="localhost", port=5672)[0] == "usage"
        assert refusal(federation.add_route, **{**ROUTE, "kind": "dynamic", "src_local": True}) == (
            "usage",
            "-s/--src-local is not permitted on dynamic routes (the destination must pull)",
        )
        kind, message = refusal(federation.add_route, **{**ROUTE, "exchange": "nowhere"})
        assert (kind, message) == (
            "NOT_FOUND",
            "no exchange 'nowhere' on node 'node': the route's destination exchange must exist there",
        )
        assert federation.list_links() == []  # a refused route creates no link
        federation.add_link(host="peer", port=5673)
        kind, message = refusal(federation.add_route, **ROUTE, durable=True)
        assert kind == "usage" and "durable route needs a durable link" in message
        assert refusal(federation.add_route, **ROUTE, ack=-1)[0] == "usage"


async def test_dynamic_routes_attach_the_exchange_seeded_until_the_last_goes() -> None:
    async with running() as federation:
        management = federation.node.management
        management.add_queue("q")
        management.add_binding("amq.topic", "q", "a.#")
        exchange = federation.node.broker.vhosts["/"].exchanges["amq.topic"]
        dynamic = {**ROUTE, "kind": "dynamic", "key": None}
        record = federation.add_route(**dynamic)
        assert (record["kind"], record["key"], record["queue"]) == ("dynamic", None, None)
        federated = exchange.federation
        assert federated is not None and federated.tag == "node"
        assert [(a.key, a.path) for a in federated.adverts_for("peer", [])] == [("a.#", ("node",))]
        federation.add_route(**{**dynamic, "port": 5674})
        assert exchange.federation is federated  # one per exchange, shared by its routes
        federation.delete_route(**dynamic)
        assert exchange.federation is federated
        federation.delete_route(**{**dynamic, "port": 5674})
        assert exchange.federation is None


async def test_manager_links_routes_flush_and_records() -> None:
    async with running() as federation:
        record = federation.add_route(**ROUTE, credit=10)  # creates its link
        assert federation.add_link(host="peer", port=5673, durable=True)["durable"] is False  # idempotent
        assert (record["dest"], record["src"], record["ack"], record["credit"]) == (
            "node",
            "peer:5673",
            100,
            10,
        )
        assert refusal(federation.add_route, **ROUTE)[0] == "duplicate"
        federation.add_route(host="peer", port=5673, kind="queue", exchange="amq.fanout", queue="q")
        federation.delete_route(host="peer", port=5673, kind="queue", exchange="amq.fanout", queue="q")
        assert refusal(federation.delete_route, **{**ROUTE, "key": "other"})[0] == "NOT_FOUND"
        flushed = federation.flush_routes(links=True)
        assert [(r["kind"], r["key"]) for r in flushed["routes"]] == [("exchange", "k")]
        assert [(link["host"], link["port"]) for link in flushed["links"]] == [("peer", 5673)]
        assert federation.list_links() == [] and federation.list_routes() == []


async def test_durable_links_and_routes_are_restored(tmp_path: Path) -> None:
    async with running(tmp_path) as federation:
        federation.add_link(host="peer", port=5673, username="u", password="p", durable=True, heartbeat=3)
        federation.add_route(**ROUTE, durable=True)
        federation.add_route(**{**ROUTE, "key": "transient"})
        federation.add_link(host="other", port=1, durable=True)
        federation.delete_link(host="other", port=1)
    async with running(tmp_path) as federation:
        [link] = federation.list_links()
        assert (link["host"], link["port"], link["durable"]) == ("peer", 5673, True)
        assert [(route["key"], route["durable"]) for route in federation.list_routes()] == [("k", True)]
    async with running(None) as federation:
        assert federation.list_links() == []


async def test_a_durable_push_route_owns_its_local_queue(tmp_path: Path) -> None:
    """Created with the route, so it collects messages while the link is down; deleted with it."""
    async with running(tmp_path) as federation:
        federation.add_link(host="peer", port=5673, durable=True)
        federation.add_route(**ROUTE, durable=True, src_local=True)
        management = federation.node.management
        queue = "federation.peer:5673.amq.topic.k"
        [record] = [record for record in management.list_queues() if record["name"] == queue]
        assert (record["durable"], record["bindings"]) == (True, 1)
        federation.delete_route(host="peer", port=5673, kind="exchange", exchange="amq.topic", key="k")
        assert queue not in {record["name"] for record in management.list_queues()}


async def test_a_route_into_a_held_node_takes_nothing_more_from_its_source() -> None:
    """A federation route publishing into this node pauses with the node's publishers: its
    forwarder waits before taking the next delivery, so the source keeps the rest."""
    broker = Broker()
    Client(broker).exchange("x", "fanout")
    memory = Memory(200 * 2**20)
    alarm = MemoryAlarm(broker, 100 * 2**20, memory, memory.release)
    alarm.check()
    sink = LocalSink(broker, lambda: None)
    source = FakeSource()
    source.deliver(5)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(Forwarder(source, sink, "x", ack=1, stats=RouteStats(), carried=Carried()).run)
        await trio.testing.wait_all_tasks_blocked()
        assert sink.resumed is not None
        assert taken(source) == 1  # held after the first publish, as a client connection is
        memory.used = 10 * 2**20
        alarm.check()
        await trio.testing.wait_all_tasks_blocked()
        assert sink.resumed is None and taken(source) == 5
        nursery.cancel_scope.cancel()
