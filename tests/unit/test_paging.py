"""Stored bodies stay in the store at start-up and are read back in batches ahead of delivery."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pamqp import commands

from gateway.broker import Broker
from gateway.broker.paging import PAGE_AHEAD_COUNT, PagedContent, page_in
from gateway.store import Store

from .broker_fakes import Client


class CountingReader:
    """A BodyReader over a dict, counting queries."""

    def __init__(self, bodies: dict[int, bytes]) -> None:
        self.bodies = bodies
        self.queries: list[list[int]] = []

    def read_bodies(self, message_ids: Sequence[int]) -> dict[int, bytes]:
        self.queries.append(list(message_ids))
        return {i: self.bodies[i] for i in message_ids if i in self.bodies}


def test_a_paged_body_is_read_once_when_first_used() -> None:
    reader = CountingReader({7: b"seven"})
    content = PagedContent(b"\x00\x00", 7, 5, reader)
    assert (len(content), content.in_memory, reader.queries) == (5, False, [])
    assert content.body == b"seven" and content.body == b"seven"
    assert reader.queries == [[7]] and content.in_memory


def test_page_in_reads_a_bounded_batch_in_one_query() -> None:
    reader = CountingReader({i: b"x" for i in range(1000)})
    contents = [PagedContent(b"\x00\x00", i, 1, reader) for i in range(1000)]
    page_in(contents)
    assert reader.queries == [list(range(PAGE_AHEAD_COUNT))]
    assert all(c.in_memory for c in contents[:PAGE_AHEAD_COUNT]) and not contents[PAGE_AHEAD_COUNT].in_memory


async def test_a_restarted_store_hands_over_properties_and_sizes_not_bodies(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        broker = Broker(store=store)
        publisher = Client(broker)
        publisher.declare("q", durable=True)
        for n in range(600):
            publisher.publish("", "q", b"%04d" % n + b"x" * 996, delivery_mode=2)
        await store.commit()
    with Store.open(tmp_path) as store:
        snapshot = store.load()
        records = snapshot.messages["/", "q"]
        assert all(isinstance(r.content, PagedContent) and not r.content.in_memory for r in records)
        broker = Broker(store=store)
        broker.recover(snapshot)
        queue = broker.vhosts["/"].queues["q"]
        assert queue.ready_bytes == 600 * 1000  # sizes known without reading a body
        consumer = Client(broker)
        consumer.call(commands.Basic.Qos(prefetch_count=300))
        consumer.consume("q", "c", no_ack=False)
        got = consumer.bodies()
        assert [body[:4] for body in got] == [b"%04d" % n for n in range(300)]
        contents = [entry.message.content for entry in queue.ready]
        # Read ahead of the consumer in batches: the rest of the last batch is in memory, the
        # messages beyond it are still in the store.
        assert sum(isinstance(c, PagedContent) and c.in_memory for c in contents) < PAGE_AHEAD_COUNT
        assert not contents[-1].in_memory


async def test_persistent_messages_beyond_a_durable_queues_budget_keep_only_their_properties(
    tmp_path: Path,
) -> None:
    with Store.open(tmp_path) as store:
        broker = Broker(store=store)
        broker.queue_memory_budget = 10_000
        publisher = Client(broker)
        publisher.declare("q", durable=True)
        publisher.declare("transient-home")  # not durable: its messages stay in memory
        publisher.call(commands.Queue.Bind(queue="q", exchange="amq.fanout"))
        publisher.call(commands.Queue.Bind(queue="transient-home", exchange="amq.fanout"))
        for n in range(30):
            publisher.publish("", "q", b"%04d" % n + b"x" * 996, delivery_mode=2)
        for n in range(30, 40):  # also reach a non-durable queue: no spill file here
            publisher.publish("amq.fanout", "", b"%04d" % n + b"x" * 996, delivery_mode=2)
        queue = broker.vhosts["/"].queues["q"]
        paged = [isinstance(e.message.content, PagedContent) for e in queue.ready]
        assert paged == [False] * 10 + [True] * 20 + [False] * 10
        assert not queue.ready[10].message.content.in_memory
        # Before the commit the body comes from the store's batch, after it from the disk.
        assert queue.ready[10].message.content.body[:4] == b"0010"
        await store.commit()
        assert queue.ready[11].message.content.body[:4] == b"0011"
        consumer = Client(broker)
        consumer.consume("q", "c", no_ack=True)
        assert [body[:4] for body in consumer.bodies()] == [b"%04d" % n for n in range(40)]
