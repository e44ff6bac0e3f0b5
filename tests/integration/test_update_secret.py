"""Connection.Update-Secret (RabbitMQ's extension, to refresh credentials on a live connection):
answered Update-Secret-Ok whatever the secret, as RabbitMQ's internal users are, since a
password never expires and there is nothing to refresh. pika's, amqplib's and aiormq's own
suites send an arbitrary secret and expect the connection to go on (docs/clients.md)."""

from __future__ import annotations

import pika
import pytest
from pamqp import commands

from tests.nodes import NodeProcess
from tests.rawclient import RawClient


@pytest.mark.parametrize("secret", ["guest", "new secret"])
def test_update_secret_keeps_the_connection(shared_node: NodeProcess, secret: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(shared_node.url()))
    try:
        connection.update_secret(secret, "token refresh")  # waits for Update-Secret-Ok
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"after")
        assert channel.basic_get(queue, auto_ack=True)[2] == b"after"
    finally:
        connection.close()


def test_update_secret_is_answered_on_channel_zero(shared_node: NodeProcess) -> None:
    client = RawClient(shared_node.port)
    try:
        client.handshake()
        answer = client.call(commands.Connection.UpdateSecret("x", "r"), 0)
        assert isinstance(answer, commands.Connection.UpdateSecretOk), answer
    finally:
        client.close()
