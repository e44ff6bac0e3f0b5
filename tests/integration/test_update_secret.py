"""Connection.Update-Secret (RabbitMQ's extension, to refresh credentials on a live connection)
with pika: the user's password is accepted with Update-Secret-Ok and the connection goes on; a
wrong one closes it with RabbitMQ's 530."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from pamqp import commands

from tests.nodes import NodeProcess
from tests.rawclient import RawClient


def test_update_secret_with_the_users_password_keeps_the_connection(shared_node: NodeProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(shared_node.url()))
    try:
        connection.update_secret("guest", "token refresh")  # waits for Update-Secret-Ok
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"after")
        assert channel.basic_get(queue, auto_ack=True)[2] == b"after"
    finally:
        connection.close()


def test_update_secret_with_a_wrong_secret_is_530(shared_node: NodeProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(shared_node.url()))
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        connection.update_secret("not-the-password", "token refresh")
    assert (closed.value.reply_code, closed.value.reply_text) == (
        530,
        "NOT_ALLOWED - New secret was refused by one of the backends",
    )


def test_update_secret_close_names_the_method(shared_node: NodeProcess) -> None:
    client = RawClient(shared_node.port)
    try:
        client.handshake()
        close = client.call(commands.Connection.UpdateSecret("x", "r"), 0)
        assert isinstance(close, commands.Connection.Close), close
        assert (close.reply_code, close.class_id, close.method_id) == (530, 10, 70)
    finally:
        client.close()
