"""Management over AMQP with an ordinary client (pika), as any tool could do it."""

from __future__ import annotations

import json
import uuid

import pika
import pytest

from gateway.security import set_password
from tests.nodes import NodeProcess, start_node


def request(channel, method: str, body: bytes | None = None, **arguments) -> dict:
    """Publish one management request and wait for its reply on an exclusive queue."""
    reply_queue = channel.queue_declare("", exclusive=True).method.queue
    correlation = uuid.uuid4().hex
    payload = body if body is not None else json.dumps({"method": method, "arguments": arguments}).encode()
    channel.basic_publish(
        "amq.gateway.management",
        "",
        payload,
        pika.BasicProperties(reply_to=reply_queue, correlation_id=correlation),
    )
    for method_frame, properties, reply in channel.consume(reply_queue, auto_ack=True, inactivity_timeout=5):
        assert method_frame is not None, "no management reply within 5 s"
        assert properties.correlation_id == correlation
        assert properties.content_type == "application/json"
        channel.cancel()
        return json.loads(reply)
    raise AssertionError("unreachable")


@pytest.fixture
def channel(shared_node: NodeProcess):
    connection = pika.BlockingConnection(pika.URLParameters(shared_node.url()))
    yield connection.channel()
    connection.close()


def test_add_and_list_over_amqp(channel) -> None:
    name = f"mgmt-{uuid.uuid4().hex[:6]}"
    assert request(channel, "exchanges.add", name=name, type="topic") == {"ok": True, "result": None}
    listed = request(channel, "exchanges.list")
    assert listed["ok"] and name in {e["name"] for e in listed["result"]}
    channel.exchange_declare(name, "topic", passive=True)


def test_errors_come_back_as_replies(channel) -> None:
    assert request(channel, "queues.delete", name="no-such-queue") == {
        "ok": False,
        "error": {"kind": "NOT_FOUND", "message": "no queue 'no-such-queue' in vhost '/'"},
    }
    bad = request(channel, "", body=b"{not json")
    assert bad["ok"] is False and bad["error"]["kind"] == "usage"


def test_only_administrators_may_manage(tmp_path) -> None:
    users = tmp_path / "users.toml"
    set_password(users, "app", "pw")
    node = start_node(tmp_path, "--users", str(users))
    try:
        connection = pika.BlockingConnection(pika.URLParameters(node.url("app", "pw")))
        reply = request(connection.channel(), "queues.add", name="sneaky")
        assert reply == {
            "ok": False,
            "error": {
                "kind": "access",
                "message": "user 'app' may not manage this node (not an administrator)",
            },
        }
        connection.close()
    finally:
        node.stop()
