"""RabbitMQ's sender-selected distribution with pika: CC and BCC add routing keys, and BCC is
gone from what consumers receive."""

from __future__ import annotations

import uuid

import pika
import pika.exceptions
import pytest

from tests.nodes import NodeProcess


def test_cc_and_bcc_route_with_extra_keys_and_bcc_is_removed(shared_node: NodeProcess) -> None:
    tag = uuid.uuid4().hex[:8]
    exchange = f"cc-x-{tag}"
    queues = {key: f"cc-{key}-{tag}" for key in ("to", "cc", "bcc", "other")}
    connection = pika.BlockingConnection(pika.URLParameters(shared_node.url()))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.exchange_declare(exchange, "direct", auto_delete=True)
        for key, queue in queues.items():
            channel.queue_declare(queue, exclusive=True)
            channel.queue_bind(queue, exchange, key)
        headers = {"CC": ["cc"], "BCC": ["bcc"], "app": "x"}
        channel.basic_publish(exchange, "to", b"memo", pika.BasicProperties(headers=headers), mandatory=True)
        for key in ("to", "cc", "bcc"):
            method, properties, body = channel.basic_get(queues[key], auto_ack=True)
            assert body == b"memo", key
            assert properties.headers == {"CC": ["cc"], "app": "x"}, key
        assert channel.basic_get(queues["other"], auto_ack=True)[0] is None
        # The default exchange takes CC keys as queue names, as RabbitMQ does.
        channel.basic_publish(
            "", queues["to"], b"direct", pika.BasicProperties(headers={"BCC": [queues["cc"]]})
        )
        assert channel.basic_get(queues["cc"], auto_ack=True)[2] == b"direct"
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.basic_publish(exchange, "to", b"bad", pika.BasicProperties(headers={"CC": "cc"}))
        assert closed.value.reply_code == 406
        assert closed.value.reply_text == (
            "PRECONDITION_FAILED - invalid message: the CC header must be an array of routing keys"
        )
    finally:
        connection.close()
