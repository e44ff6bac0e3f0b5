"""Qpid's queue limit policies with pika and publisher confirms, against a node process (the
shared one): what an application written for qpid-config's queues sees."""

from __future__ import annotations

import uuid

import pika
import pika.exceptions
import pytest

from tests.nodes import NodeProcess


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def bodies(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> list[bytes]:
    got = []
    while True:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return got
        got.append(body)


def test_each_policy_with_pika(shared_node: NodeProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(shared_node.url()))
    try:
        confirming = connection.channel()
        confirming.confirm_delivery()
        # reject: a confirming publisher gets a nack for the message over the limit.
        rejecting = unique("reject")
        confirming.queue_declare(rejecting, arguments={"qpid.max_count": 2, "qpid.policy_type": "reject"})
        confirming.basic_publish("", rejecting, b"1")
        confirming.basic_publish("", rejecting, b"2")
        with pytest.raises(pika.exceptions.NackError):
            confirming.basic_publish("", rejecting, b"3")
        # ring and ring_strict: the oldest ready message goes, the publish is confirmed.
        for policy in ("ring", "ring_strict"):
            ring = unique(policy)
            confirming.queue_declare(
                ring, durable=True, arguments={"qpid.max_count": 2, "qpid.policy_type": policy}
            )
            for body in (b"1", b"2", b"3"):
                confirming.basic_publish("", ring, body, pika.BasicProperties(delivery_mode=2))
            assert bodies(confirming, ring) == [b"2", b"3"]
            confirming.queue_delete(ring)
        assert bodies(confirming, rejecting) == [b"1", b"2"]
        # reject without confirms: Qpid's exception is a channel error (406).
        plain = connection.channel()
        plain.basic_publish("", rejecting, b"1")
        plain.basic_publish("", rejecting, b"2")
        plain.basic_publish("", rejecting, b"3")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            plain.basic_get(rejecting)  # the next round trip sees the close
        assert closed.value.reply_code == 406
        assert "is full (at most 2 messages)" in closed.value.reply_text
        # flow_to_disk, Qpid's default for durable queues: nothing refused or dropped.
        flowing = unique("durable")
        confirming.queue_declare(flowing, durable=True, arguments={"qpid.max_count": 2})
        for body in (b"1", b"2", b"3", b"4"):
            confirming.basic_publish("", flowing, body, pika.BasicProperties(delivery_mode=2))
        assert bodies(confirming, flowing) == [b"1", b"2", b"3", b"4"]
        confirming.queue_delete(flowing)
        confirming.queue_delete(rejecting)
    finally:
        connection.close()
