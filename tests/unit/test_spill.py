"""Bodies the store does not keep (transient messages, non-durable queues) leave memory for the
spill file once their queue is over its memory budget, or over a flow_to_disk queue's limits,
and come back in order; the file starts empty and frees what the model lets go of."""

from __future__ import annotations

import gc
from pathlib import Path

from pamqp import commands

from gateway.broker import Broker
from gateway.broker.paging import PagedContent, SpilledContent
from gateway.store import Store
from gateway.store.spill import FORGET_BATCH, SPILL_FILE, SpillFile

from .broker_fakes import Client


def spilled(broker: Broker, queue: str) -> list[bool]:
    """Per ready message: whether its body is out of memory."""
    ready = broker.vhosts["/"].queues[queue].ready
    return [isinstance(e.message.content, PagedContent) and not e.message.content.in_memory for e in ready]


def rows(spill: SpillFile) -> int:
    return spill._db.execute("SELECT count(*) FROM bodies").fetchone()[0]


def test_the_spill_file_starts_empty_and_keeps_bodies_until_forgotten(tmp_path: Path) -> None:
    (tmp_path / SPILL_FILE).write_bytes(b"left by the last run")
    spill = SpillFile.open(tmp_path)
    spill.put(1, b"one")
    spill.put(2, b"two")
    assert spill.read_bodies([1, 2, 3]) == {1: b"one", 2: b"two"}
    assert (spill.count, spill.bytes) == (2, 6)
    spill.forget(1, 3)
    assert (spill.count, spill.bytes) == (1, 3)
    spill.close()
    assert not (tmp_path / SPILL_FILE).exists()


def test_a_spill_file_without_a_data_dir_has_no_name() -> None:
    spill = SpillFile.open(None)
    spill.put(1, b"body")
    assert not spill.path.exists() and spill.read_bodies([1]) == {1: b"body"}
    spill.close()


def test_transient_messages_over_the_budget_spill_and_are_delivered_in_order(tmp_path: Path) -> None:
    broker = Broker()
    broker.spill = spill = SpillFile.open(tmp_path)
    broker.queue_memory_budget = 10_000
    client = Client(broker)
    client.declare("q")
    for n in range(50):
        client.publish("", "q", b"%04d" % n + b"x" * 996)
    # The first ten fill the budget; each later one takes the queue over it: its body is on disk.
    assert spilled(broker, "q") == [False] * 10 + [True] * 40
    assert (spill.count, spill.bytes) == (40, 40 * 1000)
    consumer = Client(broker)
    consumer.consume("q", "c", no_ack=True)
    assert [body[:4] for body in consumer.bodies()] == [b"%04d" % n for n in range(50)]
    gc.collect()
    assert (spill.count, spill.bytes) == (0, 0)


def test_the_spill_file_frees_rows_in_batches(tmp_path: Path) -> None:
    broker = Broker()
    broker.spill = spill = SpillFile.open(tmp_path)
    broker.queue_memory_budget = 0
    client = Client(broker)
    client.declare("q")
    for _ in range(FORGET_BATCH + 10):
        client.publish("", "q", b"x")
    client.call(commands.Queue.Purge(queue="q"))
    assert spill.count == 0 and rows(spill) == FORGET_BATCH + 10
    client.publish("", "q", b"y")  # the next write runs the deletions
    assert rows(spill) == 1


def test_a_flow_to_disk_queue_keeps_bodies_beyond_its_limits_on_disk(tmp_path: Path) -> None:
    broker = Broker()
    broker.spill = SpillFile.open(tmp_path)
    client = Client(broker)
    client.declare("q", arguments={"qpid.max_size": 3000, "qpid.policy_type": "flow_to_disk"})
    for n in range(6):
        client.publish("", "q", b"%04d" % n + b"x" * 996)
    assert spilled(broker, "q") == [False] * 3 + [True] * 3
    consumer = Client(broker)
    consumer.consume("q", "c", no_ack=True)
    assert [body[:4] for body in consumer.bodies()] == [b"%04d" % n for n in range(6)]


async def test_persistent_messages_on_durable_queues_page_to_the_store_not_the_spill(
    tmp_path: Path,
) -> None:
    with Store.open(tmp_path) as store:
        broker = Broker(store=store)
        broker.spill = spill = SpillFile.open(tmp_path)
        broker.queue_memory_budget = 0
        client = Client(broker)
        client.declare("durable", durable=True)
        client.declare("transient")
        client.exchange("both", "fanout")
        client.bind("durable", "both")
        client.bind("transient", "both")
        client.publish("", "durable", b"stored", delivery_mode=2)
        client.publish("both", "", b"shared", delivery_mode=2)  # a copy no store keeps
        durable = broker.vhosts["/"].queues["durable"].ready
        kinds = [type(entry.message.content) for entry in durable]
        assert kinds == [PagedContent, SpilledContent] and spill.count == 1
        await store.commit()
        consumer = Client(broker)
        consumer.consume("durable", "c", no_ack=True)
        assert consumer.bodies() == [b"stored", b"shared"]


def test_a_body_the_spill_file_cannot_take_stays_in_memory(tmp_path: Path) -> None:
    """A full disk (here: a file that cannot be written any more) must not cost the publish."""
    broker = Broker()
    broker.spill = spill = SpillFile.open(tmp_path)
    broker.queue_memory_budget = 0
    spill._db.close()
    client = Client(broker)
    client.declare("q")
    client.publish("", "q", b"kept")
    assert spilled(broker, "q") == [False] and spill.count == 0
    consumer = Client(broker)
    consumer.consume("q", "c", no_ack=True)
    assert consumer.bodies() == [b"kept"]
