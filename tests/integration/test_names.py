"""Queue and exchange names RabbitMQ accepts (any UTF-8 up to 255 bytes) work here too.

pamqp refuses names outside [a-zA-Z0-9-_.:@#,/+ ] or over 127 characters; the node used to build
Queue.Declare-Ok with pamqp's checking constructor, so such a queue was created, stored, and
answered with 541 INTERNAL_ERROR on every declare, before and after a restart.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pika
import pytest
from pamqp import commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from tests.nodes import NodeProcess
from tests.rawclient import RawClient, unchecked

#: 255 bytes: 127 two-byte characters and one more.
LONGEST = "é" * 127 + "z"
ODD_NAMES = ["café", "q*1", "a b", "#", "日本語", LONGEST]
TOO_LONG = LONGEST + "z"


def amq_config(node: NodeProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("amq-config")), "-a", f"127.0.0.1:{node.port}", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def declare_route_and_publish(channel, name: str) -> None:
    """Queue, direct exchange and binding all called `name`; one persistent message through them."""
    assert channel.queue_declare(name, durable=True).method.queue == name
    channel.exchange_declare(name, "direct", durable=True)
    channel.queue_bind(name, name, routing_key=name)
    channel.basic_publish(name, name, name.encode(), pika.BasicProperties(delivery_mode=2))


def test_odd_names_through_pika_survive_a_restart(nodes, tmp_path) -> None:
    assert len(LONGEST.encode()) == 255
    node = nodes("odd", data_dir=tmp_path / "data")
    connection = pika.BlockingConnection(pika.URLParameters(node.url()))
    channel = connection.channel()
    channel.confirm_delivery()
    for name in ODD_NAMES:
        declare_route_and_publish(channel, name)
        declare_route_and_publish(channel, name)  # redeclaring is fine, and a second message
        method, _, body = channel.basic_get(name, auto_ack=True)
        assert (method.exchange, method.routing_key, body) == (name, name, name.encode())
    connection.close()
    listing = amq_config(node, "queues")
    assert listing.returncode == 0, listing.stderr
    for name in ODD_NAMES:
        assert name in listing.stdout
    node.stop()

    node = nodes("odd", data_dir=tmp_path / "data")
    connection = pika.BlockingConnection(pika.URLParameters(node.url()))
    channel = connection.channel()
    for name in ODD_NAMES:
        declared = channel.queue_declare(name, durable=True).method
        assert (declared.queue, declared.message_count) == (name, 1)
        channel.exchange_declare(name, "direct", durable=True)
        for method, _, body in channel.consume(name, auto_ack=True, inactivity_timeout=5):
            assert method is not None, f"no delivery from {name!r} within 5 s"
            assert (method.exchange, method.routing_key, body) == (name, name, name.encode())
            break
        channel.cancel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
        channel.queue_declare("ü" * 127 + "x", passive=True)  # the reply text is cut to fit
    assert missing.value.reply_code == 404
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ShortStringTooLong):  # a client cannot even send it
        channel.queue_declare(TOO_LONG)
    connection.close()


def test_a_name_over_255_bytes_is_refused_by_management_with_its_size(shared_node) -> None:
    added = amq_config(shared_node, "add", "queue", TOO_LONG)
    assert added.returncode != 0
    assert "is 256 bytes of UTF-8; at most 255 are allowed" in added.stdout + added.stderr
    assert TOO_LONG not in amq_config(shared_node, "queues").stdout


def test_management_adds_odd_names(shared_node) -> None:
    names = [f"m.{name}" for name in ODD_NAMES[:-1]] + ["ü" * 127 + "m"]  # the shared node's own
    for name in names:
        added = amq_config(shared_node, "add", "exchange", "topic", name)
        assert added.returncode == 0, added.stdout + added.stderr
        added = amq_config(shared_node, "add", "queue", name)
        assert added.returncode == 0, added.stdout + added.stderr
    queues = amq_config(shared_node, "queues").stdout
    exchanges = amq_config(shared_node, "exchanges").stdout
    for name in names:
        assert name in queues
        assert name in exchanges


@pytest.mark.parametrize("name", ODD_NAMES, ids=["cafe", "star", "space", "hash", "japanese", "255"])
def test_odd_names_through_raw_frames(shared_node, name) -> None:
    client = RawClient(shared_node.port)
    try:
        client.handshake()
        client.open_channel()
        declare_ok = client.call(unchecked(commands.Queue.Declare, queue=name, exclusive=True))
        assert isinstance(declare_ok, commands.Queue.DeclareOk), declare_ok
        assert declare_ok.queue == name
        exchange = name
        reply = client.call(unchecked(commands.Exchange.Declare, exchange=exchange, exchange_type="direct"))
        assert isinstance(reply, commands.Exchange.DeclareOk), reply
        reply = client.call(unchecked(commands.Queue.Bind, queue=name, exchange=exchange, routing_key=name))
        assert isinstance(reply, commands.Queue.BindOk), reply
        for body in (b"one", b"two"):
            client.send_frame(unchecked(commands.Basic.Publish, exchange=exchange, routing_key=name), 1)
            client.send_frame(ContentHeader(body_size=len(body)), 1)
            client.send_frame(ContentBody(body), 1)
        client.send_frame(unchecked(commands.Basic.Get, queue=name, no_ack=True), 1)
        got, _, body = client.read_message()
        assert isinstance(got, commands.Basic.GetOk), got
        assert (got.exchange, got.routing_key, body) == (exchange, name, b"one")
        consume_ok = client.call(
            unchecked(commands.Basic.Consume, queue=name, consumer_tag=name, no_ack=True)
        )
        assert isinstance(consume_ok, commands.Basic.ConsumeOk) and consume_ok.consumer_tag == name
        deliver, _, body = client.read_message()
        assert isinstance(deliver, commands.Basic.Deliver), deliver
        assert (deliver.consumer_tag, deliver.exchange, deliver.routing_key, body) == (
            name,
            exchange,
            name,
            b"two",
        )
        # Unroutable with mandatory: Basic.Return carries the odd names back too.
        client.send_frame(
            unchecked(commands.Basic.Publish, exchange=exchange, routing_key="nowhere", mandatory=True), 1
        )
        client.send_frame(ContentHeader(body_size=0), 1)
        returned, _, _ = client.read_message()
        assert isinstance(returned, commands.Basic.Return), returned
        assert returned.exchange == exchange
    finally:
        client.close()


def test_raw_name_that_is_not_utf8_is_a_precise_syntax_error(shared_node) -> None:
    client = RawClient(shared_node.port)
    try:
        client.handshake()
        client.open_channel()
        payload = struct.pack(">HHH", 50, 10, 0) + b"\x04caf\xe9" + b"\x00" + struct.pack(">I", 0)
        client.send(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
        _, close = client.read_frame()
        assert isinstance(close, commands.Connection.Close), close
        assert close.reply_code == 502
        assert "queue is not valid UTF-8" in close.reply_text
    finally:
        client.close()
