"""Queue types as applications written for current RabbitMQ declare them: `classic` is no type,
`quorum` is a durable queue with quorum's rules (x-delivery-limit honoured), `stream` is refused."""

from __future__ import annotations

import uuid

import pika
import pika.exceptions
import pytest

from tests.integration.test_names import amq_config
from tests.nodes import NodeProcess, start_node


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_quorum_queue_honours_its_delivery_limit_and_is_listed_as_quorum(shared_node: NodeProcess) -> None:
    queue, dead = _name("qq"), _name("qq-dead")
    connection = pika.BlockingConnection(pika.URLParameters(shared_node.url()))
    try:
        channel = connection.channel()
        channel.queue_declare(dead, exclusive=True)
        channel.queue_declare(
            queue,
            durable=True,
            arguments={
                "x-queue-type": "quorum",
                "x-delivery-limit": 2,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": dead,
            },
        )
        channel.basic_publish("", queue, b"poison")
        returns = 0
        while True:  # delivered three times: two returns are within the limit, the third is not
            method, _, body = channel.basic_get(queue)
            if method is None:
                break
            assert body == b"poison"
            channel.basic_nack(method.delivery_tag, requeue=True)
            returns += 1
        assert returns == 3
        _, properties, body = channel.basic_get(dead, auto_ack=True)
        assert body == b"poison"
        assert properties.headers["x-first-death-reason"] == "delivery_limit"
        listing = amq_config(shared_node, "queues")
        assert listing.returncode == 0, listing.stderr
        assert any(line.endswith(f"{queue}  (quorum)") for line in listing.stdout.splitlines()), (
            listing.stdout
        )
        assert not any(line.endswith(f"{dead}  (quorum)") for line in listing.stdout.splitlines())
        channel.queue_delete(queue)
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("flags", "arguments", "text"),
    [
        (
            {"durable": False},
            {},
            "invalid property 'non-durable' for queue '{q}' in vhost '/': "
            "quorum queues are durable, not exclusive, not auto-delete",
        ),
        (
            {"durable": True, "exclusive": True},
            {},
            "invalid property 'exclusive-owner' for queue '{q}' in vhost '/': "
            "quorum queues are durable, not exclusive, not auto-delete",
        ),
        (
            {"durable": True},
            {"x-max-priority": 10},
            "invalid arg 'x-max-priority' for queue '{q}' in vhost '/': quorum queues have no priorities",
        ),
    ],
)
def test_quorum_rules_are_406(shared_node: NodeProcess, flags, arguments, text) -> None:
    queue = _name("qq-bad")
    connection = pika.BlockingConnection(pika.URLParameters(shared_node.url()))
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            connection.channel().queue_declare(
                queue, arguments={"x-queue-type": "quorum", **arguments}, **flags
            )
        assert closed.value.reply_code == 406
        assert closed.value.reply_text == "PRECONDITION_FAILED - " + text.format(q=queue)
    finally:
        connection.close()


def test_quorum_queue_and_its_messages_survive_a_restart(tmp_path) -> None:
    node = start_node(tmp_path, data_dir=tmp_path / "data", name="quorum")
    try:
        connection = pika.BlockingConnection(pika.URLParameters(node.url()))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("orders", durable=True, arguments={"x-queue-type": "quorum"})
        channel.basic_publish("", "orders", b"kept", pika.BasicProperties(delivery_mode=2))
        connection.close()
        assert node.stop() == 0
        node = start_node(tmp_path, data_dir=tmp_path / "data", name="quorum")
        connection = pika.BlockingConnection(pika.URLParameters(node.url()))
        channel = connection.channel()
        # Redeclared as quorum: equivalent; as classic: not (the type was kept).
        assert channel.queue_declare("orders", durable=True, arguments={"x-queue-type": "quorum"})
        assert channel.basic_get("orders", auto_ack=True)[2] == b"kept"
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.queue_declare("orders", durable=True)
        assert closed.value.reply_code == 406
        connection.close()
    finally:
        node.stop()
