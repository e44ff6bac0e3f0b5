"""Producer flow control on a queue (Qpid's capacity / flowResumeCapacity), on the model."""

from __future__ import annotations

import logging

import pytest
from pamqp import commands

from gateway.broker import Broker
from gateway.wire.errors import AMQPError

from .broker_fakes import Client

CAPACITY = {"x-qpid-capacity": 1000, "x-qpid-flow-resume-capacity": 500}
BODY = b"x" * 400


def test_a_publisher_to_an_overfull_queue_is_held_until_it_is_underfull(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gateway.queue")
    broker = Broker()
    publisher, consumer = Client(broker), Client(broker)
    publisher.declare("q", arguments=CAPACITY)
    publisher.publish("", "q", BODY)
    publisher.publish("", "q", BODY)  # 800 bytes: at capacity is not over it
    assert publisher.outbox.blocked is None
    publisher.publish("", "q", BODY)  # 1200 bytes
    assert publisher.outbox.blocked == "queue 'q' in vhost '/' is overfull: 1200 bytes, capacity 1000"
    consumer.get("q", no_ack=True)  # 800 bytes: not under the resume capacity yet
    assert publisher.outbox.blocked is not None
    consumer.get("q", no_ack=True)  # 400 bytes
    assert publisher.outbox.blocked is None
    assert [r.getMessage() for r in caplog.records] == [
        "[vh(/)/qu(q)] QUE-1003 : Overfull : Size : 1200 bytes, Capacity : 1000, Resume Capacity : 500",
        "[vh(/)/qu(q)] QUE-1004 : Underfull : Size : 400 bytes, Resume Capacity : 500",
    ]


def test_between_the_resume_capacity_and_the_capacity_the_queue_stays_overfull() -> None:
    broker = Broker()
    publisher, consumer = Client(broker), Client(broker)
    publisher.declare("q", arguments=CAPACITY)
    for _ in range(4):
        publisher.publish("", "q", BODY)  # held after the third; the fourth was already read
    consumer.get("q", no_ack=True)  # 1200 bytes left
    consumer.get("q", no_ack=True)  # 800: under the capacity, over the resume capacity
    assert publisher.outbox.blocked is not None
    consumer.get("q", no_ack=True)  # 400
    assert publisher.outbox.blocked is None


def test_other_publishers_and_other_queues_are_not_held() -> None:
    broker = Broker()
    publisher, bystander = Client(broker), Client(broker)
    publisher.declare("q", arguments=CAPACITY)
    publisher.declare("other")
    for _ in range(3):
        publisher.publish("", "q", BODY)
    assert publisher.outbox.blocked is not None
    bystander.publish("", "other", BODY)
    assert bystander.outbox.blocked is None
    bystander.publish("", "q", BODY)  # anyone who publishes to the overfull queue is held
    assert bystander.outbox.blocked is not None


def test_without_a_resume_capacity_it_is_the_capacity() -> None:
    broker = Broker()
    publisher, consumer = Client(broker), Client(broker)
    publisher.declare("q", arguments={"x-qpid-capacity": 1000})
    for _ in range(3):
        publisher.publish("", "q", BODY)
    consumer.get("q", no_ack=True)  # 800 < 1000
    assert publisher.outbox.blocked is None


def test_messages_handed_straight_to_a_consumer_never_fill_the_queue() -> None:
    broker = Broker()
    publisher, consumer = Client(broker), Client(broker)
    publisher.declare("q", arguments=CAPACITY)
    consumer.consume("q", no_ack=True)
    for _ in range(10):
        publisher.publish("", "q", BODY)
    assert publisher.outbox.blocked is None and len(consumer.bodies()) == 10


def test_deleting_or_purging_an_overfull_queue_releases_its_publishers() -> None:
    broker = Broker()
    publisher = Client(broker)
    for name in ("purged", "deleted"):
        publisher.declare(name, arguments=CAPACITY)
        for _ in range(3):
            publisher.publish("", name, BODY)
        assert publisher.outbox.blocked is not None
        if name == "purged":
            publisher.call(commands.Queue.Purge(queue=name))
        else:
            publisher.call(commands.Queue.Delete(queue=name))
        assert publisher.outbox.blocked is None


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        (
            {"x-qpid-capacity": 100, "x-qpid-flow-resume-capacity": 200},
            "invalid arg 'x-qpid-flow-resume-capacity' for queue 'q' in vhost '/': {greater_than_capacity,200}",
        ),
        (
            {"x-qpid-flow-resume-capacity": 200},
            "invalid arg 'x-qpid-flow-resume-capacity' for queue 'q' in vhost '/':"
            " {resume_capacity_but_no_capacity_defined}",
        ),
        (
            {"x-qpid-capacity": -1},
            "invalid arg 'x-qpid-capacity' for queue 'q' in vhost '/': {value_negative,-1}",
        ),
    ],
)
def test_bad_capacities_are_406(arguments: dict[str, int], text: str) -> None:
    client = Client(Broker())
    with pytest.raises(AMQPError) as refused:
        client.declare("q", arguments=arguments)
    assert (refused.value.reply_code, refused.value.reply_text) == (406, f"PRECONDITION_FAILED - {text}")


def test_a_zero_capacity_means_no_limit_and_capacities_are_compared_on_redeclare() -> None:
    client = Client(Broker())
    client.declare("free", arguments={"x-qpid-capacity": 0})
    for _ in range(10):
        client.publish("", "free", BODY)
    assert client.outbox.blocked is None
    client.declare("q", arguments=CAPACITY)
    with pytest.raises(AMQPError) as refused:
        client.declare("q", arguments={"x-qpid-capacity": 2000})
    assert "inequivalent arg 'x-qpid-capacity'" in refused.value.reply_text


def test_a_vhosts_default_capacity_applies_to_queues_declared_without_one() -> None:
    broker = Broker()
    broker.queue_defaults["/"] = {"x-qpid-capacity": 1000}
    publisher = Client(broker)
    publisher.declare("q")
    publisher.declare("q")  # the default is not an argument the redeclare must repeat
    publisher.declare("own", arguments={"x-qpid-capacity": 0})  # its own setting wins: no limit
    for _ in range(3):
        publisher.publish("", "own", BODY)
    assert publisher.outbox.blocked is None
    for _ in range(3):
        publisher.publish("", "q", BODY)
    assert publisher.outbox.blocked == "queue 'q' in vhost '/' is overfull: 1200 bytes, capacity 1000"
    other = Broker()
    Client(other).declare("q")
    assert other.vhosts["/"].queues["q"].flow is None  # defaults are per broker and vhost
