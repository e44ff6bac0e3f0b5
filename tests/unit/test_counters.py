"""The broker's counters since start (docs/federation.md, "Counters"), counted by the model:
per exchange published, routed, unroutable; per queue enqueued, delivered, acknowledged,
dead-lettered and dropped by its length limit."""

import pytest
from pamqp import commands

from gateway.broker import Broker
from gateway.broker.records import MessageRecord, QueueRecord, Snapshot
from gateway.management import Management
from gateway.wire.errors import AMQPError

from .broker_fakes import Client, Returned, content, undecodable_headers


def counts(record: dict, *names: str) -> tuple[int, ...]:
    return tuple(record[name] for name in names)


def exchange(management: Management, name: str) -> dict:
    return next(e for e in management.call("exchanges.list", {}) if e["name"] == name)


def queue(management: Management, name: str) -> dict:
    return next(q for q in management.call("queues.list", {}) if q["name"] == name)


EXCHANGE = ("published", "routed", "unroutable", "dropped_looping")
QUEUE = ("enqueued", "delivered", "acknowledged", "dead_lettered", "dropped", "messages")


def test_exchange_counts_routed_and_unroutable_publishes() -> None:
    broker = Broker()
    management = Management(broker, "n1")
    c = Client(broker)
    c.exchange("x", "topic")
    c.declare("q")
    c.bind("q", "x", "a.#")
    for key in ("a.1", "a.2", "b.1"):
        c.publish("x", key)
    c.publish("x", "b.2", mandatory=True)
    c.publish("", "q")
    c.publish("", "nobody")
    assert counts(exchange(management, "x"), *EXCHANGE) == (4, 2, 2, 0)
    assert counts(exchange(management, ""), *EXCHANGE) == (2, 1, 1, 0)
    # The mandatory one that reached nothing was returned: unroutable counts it too.
    assert len([sent for sent in c.outbox.take() if isinstance(sent, Returned)]) == 1
    assert counts(queue(management, "q"), *QUEUE) == (3, 0, 0, 0, 0, 3)


def test_queue_counts_deliveries_acks_and_requeues() -> None:
    broker = Broker()
    management = Management(broker, "n1")
    c = Client(broker)
    c.declare("q")
    for _ in range(4):
        c.publish("", "q")
    first = c.get("q")
    second = c.get("q")
    c.get("q", no_ack=True)
    c.ack(first.delivery_tag)
    c.call(commands.Basic.Nack(delivery_tag=second.delivery_tag, requeue=True))
    c.consume("q", "t")
    (redelivered, last) = c.outbox.deliveries()
    c.call(commands.Basic.Ack(delivery_tag=last.delivery_tag, multiple=True))
    # 4 in; 3 got + 2 delivered to the consumer (one of them the requeued one again); two
    # acks by basic.ack plus the multiple one covering two: 3 acknowledged; no-ack is not.
    assert redelivered.redelivered
    assert counts(queue(management, "q"), *QUEUE) == (4, 5, 3, 0, 0, 0)


def test_length_limits_count_dropped_and_dead_lettered() -> None:
    broker = Broker()
    management = Management(broker, "n1")
    c = Client(broker)
    c.declare("dlq")
    c.declare("head", arguments={"x-max-length": 2})
    c.declare("refuse", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    c.declare(
        "refuse-dlx",
        arguments={
            "x-max-length": 1,
            "x-overflow": "reject-publish-dlx",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dlq",
        },
    )
    for name in ("head", "refuse", "refuse-dlx"):
        for _ in range(5):
            c.publish("", name)
    assert counts(queue(management, "head"), *QUEUE) == (5, 0, 0, 0, 3, 2)
    assert counts(queue(management, "refuse"), *QUEUE) == (2, 0, 0, 0, 3, 2)
    assert counts(queue(management, "refuse-dlx"), *QUEUE) == (1, 0, 0, 4, 4, 1)
    assert counts(queue(management, "dlq"), *QUEUE) == (4, 0, 0, 0, 0, 4)
    # The default exchange took 15 publishes and 4 dead-lettered copies, all routed.
    assert counts(exchange(management, ""), *EXCHANGE) == (19, 19, 0, 0)


def test_rejected_messages_are_dead_lettered_and_purged_ones_not() -> None:
    broker = Broker()
    management = Management(broker, "n1")
    c = Client(broker)
    c.exchange("dlx", "fanout")
    c.declare("work", arguments={"x-dead-letter-exchange": "dlx"})
    for _ in range(3):
        c.publish("", "work")
    got = c.get("work")
    c.call(commands.Basic.Reject(delivery_tag=got.delivery_tag, requeue=False))
    c.call(commands.Queue.Purge(queue="work"))
    # Rejected: dead-lettered into dlx, which has no queue (published, unroutable); purged
    # messages are not dead-lettered (RabbitMQ's rule).
    assert counts(queue(management, "work"), *QUEUE) == (3, 1, 0, 1, 0, 0)
    assert counts(exchange(management, "dlx"), *EXCHANGE) == (1, 0, 1, 0)


def test_recovered_messages_and_refused_publishes_are_not_counted() -> None:
    snapshot = Snapshot(
        queues=[QueueRecord("/", "a", False, {})],
        messages={("/", "a"): [MessageRecord(40, "", "a", content(b"x"), False)]},
    )
    broker = Broker()
    broker.recover(snapshot)
    management = Management(broker, "n1")
    c = Client(broker)
    c.publish("", "a", b"y")
    c.bind("a", "amq.headers", arguments={"x-match": "any", "k": 1})
    with pytest.raises(AMQPError):  # 502: a headers table the exchange cannot read
        c.session.handle_publish(c.ch, "amq.headers", "", False, False, undecodable_headers())
    # One enqueued since start (the recovered one was enqueued before it), two in the queue.
    assert counts(queue(management, "a"), *QUEUE) == (1, 0, 0, 0, 0, 2)
    assert counts(exchange(management, "amq.headers"), *EXCHANGE) == (0, 0, 0, 0)
