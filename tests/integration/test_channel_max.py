"""channel_max as RabbitMQ applies it: it limits how many channels are open at once, not which
ids they use (clients test both, and pika numbers channels as the application asks)."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from pamqp import commands

from tests.nodes import NodeProcess
from tests.rawclient import RawClient


def test_any_channel_id_up_to_65535_is_accepted(shared_node: NodeProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(shared_node.url()))
    try:
        channel = connection.channel(channel_number=65535)
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"high")
        assert channel.basic_get(queue, auto_ack=True)[2] == b"high"
    finally:
        connection.close()


def test_one_channel_more_than_channel_max_is_530(shared_node: NodeProcess) -> None:
    params = pika.URLParameters(shared_node.url() + "?channel_max=3")
    connection = pika.BlockingConnection(params)
    try:
        for number in (10, 2000, 30000):
            connection.channel(channel_number=number)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            connection.channel(channel_number=4)
        assert closed.value.reply_code == 530
        assert closed.value.reply_text == (
            "NOT_ALLOWED - number of channels opened (3) has reached the negotiated channel_max (3)"
        )
    finally:
        if connection.is_open:
            connection.close()


def test_channel_max_counts_open_channels_on_raw_frames(shared_node: NodeProcess) -> None:
    client = RawClient(shared_node.port)
    try:
        client.send(b"AMQP\x00\x00\x09\x01")
        client.read_frame()
        client.send_frame(
            commands.Connection.StartOk(client_properties={}, mechanism="PLAIN", response="\0guest\0guest")
        )
        client.read_frame()
        client.send_frame(commands.Connection.TuneOk(channel_max=1, frame_max=131072, heartbeat=0))
        client.send_frame(commands.Connection.Open(virtual_host="/"))
        assert isinstance(client.read_frame()[1], commands.Connection.OpenOk)
        client.open_channel(65535)
        assert isinstance(client.call(commands.Channel.Close(200, "", 0, 0), 65535), commands.Channel.CloseOk)
        client.open_channel(65534)  # the closed one freed its place
        close = client.call(commands.Channel.Open(), 1)
        assert isinstance(close, commands.Connection.Close), close
        assert (close.reply_code, close.class_id, close.method_id) == (530, 20, 10), close.reply_text
    finally:
        client.close()
