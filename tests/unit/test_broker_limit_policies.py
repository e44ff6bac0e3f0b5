"""Qpid's queue limit policies (qpid.max_count, qpid.max_size, qpid.policy_type) on the model,
beside RabbitMQ's x-max-length family: one implementation, Qpid's defaults and its reject."""

from __future__ import annotations

import pytest
from pamqp import commands

from gateway.broker import Broker
from gateway.wire.errors import AMQPError

from .broker_fakes import Client


def refused(client: Client, method: object) -> AMQPError:
    with pytest.raises(AMQPError) as caught:
        client.call(method)
    return caught.value


def depth(client: Client, queue: str) -> int:
    return client.declare(queue, passive=True).message_count


def test_reject_nacks_a_confirming_publisher_and_keeps_the_queue() -> None:
    client = Client(Broker())
    client.declare("q", arguments={"qpid.max_count": 2, "qpid.policy_type": "reject"})
    client.call(commands.Confirm.Select())
    for body in (b"1", b"2", b"3"):
        client.publish("", "q", body)
    confirms = [m for m in client.outbox.methods() if isinstance(m, commands.Basic.Ack | commands.Basic.Nack)]
    assert [(type(m).__name__, m.delivery_tag) for m in confirms] == [("Ack", 1), ("Ack", 2), ("Nack", 3)]
    assert depth(client, "q") == 2


def test_reject_closes_the_channel_of_a_publisher_without_confirms() -> None:
    """Qpid raises an exception in the publisher; RabbitMQ's reject-publish drops silently."""
    client = Client(Broker())
    client.declare("q", arguments={"qpid.max_size": 3})  # non-durable: reject by default
    client.publish("", "q", b"abc")
    with pytest.raises(AMQPError) as caught:
        client.publish("", "q", b"d")
    error = caught.value
    assert (error.reply_code, error.class_id, error.method_id) == (406, 60, 40)
    assert error.reply_text == (
        "PRECONDITION_FAILED - queue 'q' in vhost '/' is full (at most 3 bytes); message refused"
        " (qpid.policy_type reject)"
    )
    other = Client(client.broker)
    assert depth(other, "q") == 1
    other.declare("rabbit", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    other.publish("", "rabbit", b"1")
    other.publish("", "rabbit", b"2")  # RabbitMQ's behaviour: dropped, nothing said
    assert depth(other, "rabbit") == 1


@pytest.mark.parametrize("policy", ["ring", "ring_strict"])
def test_ring_policies_drop_the_oldest_ready_message(policy: str) -> None:
    client = Client(Broker())
    client.declare("q", durable=True, arguments={"qpid.max_count": 2, "qpid.policy_type": policy})
    client.call(commands.Basic.Qos(prefetch_count=1))
    client.consume("q", "c")
    for body in (b"1", b"2", b"3", b"4"):
        client.publish("", "q", body)
    # 1 went to the consumer (unacknowledged: never dropped), 2 was dropped for 4.
    assert client.bodies() == [b"1"]
    client.ack(1)
    assert client.bodies() == [b"3"]


def test_durable_queues_default_to_flow_to_disk_which_limits_memory_not_the_queue() -> None:
    """Qpid's flow_to_disk keeps every message: its limits say where bodies leave memory."""
    client = Client(Broker())
    client.declare("q", durable=True, arguments={"qpid.max_count": 5})
    client.call(commands.Confirm.Select())
    for n in range(8):
        client.publish("", "q", b"%d" % n)
    confirms = client.outbox.methods(commands.Basic.Ack)
    assert [m.delivery_tag for m in confirms] == list(range(1, 9))  # none refused
    assert depth(client, "q") == 8
    queue = client.broker.vhosts["/"].queues["q"]
    assert (queue.limited, queue.options.flow_to_disk_count, queue.options.flow_to_disk_bytes) == (
        False,
        5,
        None,
    )


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        (
            {"qpid.max_count": 1, "x-max-length": 1},
            "invalid arg 'qpid.max_count' for queue 'q' in vhost '/':"
            " {conflicting_arguments,x-max-length}: give one of the two",
        ),
        (
            {"qpid.policy_type": "ring", "x-overflow": "drop-head"},
            "invalid arg 'qpid.policy_type' for queue"
            " 'q' in vhost '/': {conflicting_arguments,x-overflow}: give one of the two",
        ),
        (
            {"qpid.policy_type": "spill"},
            "invalid arg 'qpid.policy_type' for queue 'q' in vhost '/': {invalid_policy_type,spill}",
        ),
        (
            {"qpid.max_size": -1},
            "invalid arg 'qpid.max_size' for queue 'q' in vhost '/': {value_negative,-1}",
        ),
    ],
)
def test_bad_qpid_limits_are_406(arguments: dict[str, object], text: str) -> None:
    error = refused(Client(Broker()), commands.Queue.Declare(queue="q", arguments=arguments))
    assert (error.reply_code, error.reply_text) == (406, f"PRECONDITION_FAILED - {text}")


def test_an_explicit_x_overflow_beats_qpids_default_policy() -> None:
    client = Client(Broker())
    client.declare("q", arguments={"qpid.max_count": 1, "x-overflow": "drop-head"})
    client.publish("", "q", b"1")
    client.publish("", "q", b"2")  # no channel error: the oldest went
    assert client.get("q", no_ack=True).content.body == b"2"
