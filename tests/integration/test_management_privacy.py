"""The exchanges a node handles itself (management requests, federation adverts) are private:
nobody can bind to them, a reply goes only to the requester, a hostile body is refused cleanly,
and the node's data files are readable by its own user only."""

from __future__ import annotations

import json
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from gateway.security import set_password
from tests.integration.test_management_amqp import request
from tests.nodes import NodeProcess, start_node

HANDLED = ("amq.gateway.management", "amq.gateway.federation")


@pytest.fixture
def app_node(tmp_path: Path) -> Iterator[NodeProcess]:
    """A node with an administrator and an ordinary user 'app'."""
    users = tmp_path / "users.toml"
    set_password(users, "admin", "secret")
    set_password(users, "app", "pw")
    text = users.read_text().replace("[users.admin]\n", '[users.admin]\ntags = ["administrator"]\n')
    users.write_text(text)
    node = start_node(tmp_path, "--users", str(users))
    yield node
    node.stop()


def _connect(node: NodeProcess, user: str, password: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(node.url(user, password)))


def _refused(connection: pika.BlockingConnection, action) -> ChannelClosedByBroker:
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as refused:
        action(channel)
    return refused.value


@pytest.mark.parametrize("user", [("app", "pw"), ("admin", "secret")])
@pytest.mark.parametrize("exchange", HANDLED)
def test_nobody_may_bind_a_queue_to_a_handled_exchange(app_node: NodeProcess, user, exchange: str) -> None:
    connection = _connect(app_node, *user)
    try:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        error = _refused(connection, lambda ch: ch.queue_bind(queue, exchange, routing_key=""))
        assert error.reply_code == 403
        assert error.reply_text == (
            f"ACCESS_REFUSED - cannot bind to or from exchange '{exchange}' in vhost '/':"
            " the node handles what is published there and routes it to no queue"
        )
    finally:
        connection.close()


@pytest.mark.parametrize("exchange", HANDLED)
def test_nobody_may_bind_a_handled_exchange_to_or_from_another(app_node: NodeProcess, exchange: str) -> None:
    connection = _connect(app_node, "admin", "secret")
    try:
        as_source = _refused(connection, lambda ch: ch.exchange_bind("amq.topic", exchange, routing_key="#"))
        as_destination = _refused(
            connection, lambda ch: ch.exchange_bind(exchange, "amq.topic", routing_key="#")
        )
        assert as_source.reply_code == as_destination.reply_code == 403
    finally:
        connection.close()


def test_an_administrators_request_reaches_no_one_else(app_node: NodeProcess) -> None:
    """The exploit of the issue: 'app' listens on the management exchange while an administrator
    adds a link with a password. The bind is refused, and the request still works."""
    spy = _connect(app_node, "app", "pw")
    admin = _connect(app_node, "admin", "secret")
    try:
        spy_channel = spy.channel()
        spy_channel.queue_declare("spy")
        _refused(spy, lambda ch: ch.queue_bind("spy", "amq.gateway.management", routing_key=""))
        reply = request(admin.channel(), "queues.add", name=f"q-{uuid.uuid4().hex[:6]}")
        assert reply == {"ok": True, "result": None}
        assert spy.channel().queue_declare("spy", passive=True).method.message_count == 0
    finally:
        spy.close()
        admin.close()


@pytest.mark.parametrize("reply_to", ["victim", None])
def test_a_reply_goes_only_to_an_exclusive_queue_of_the_requester(
    app_node: NodeProcess, reply_to: str | None
) -> None:
    """Replies to someone else's queue (or to none) are refused with 406 on the publishing channel,
    and nothing reaches that queue."""
    victim = _connect(app_node, "app", "pw")
    admin = _connect(app_node, "admin", "secret")
    try:
        victim.channel().queue_declare("victim")
        channel = admin.channel()
        properties = pika.BasicProperties(reply_to=reply_to, correlation_id="1")
        body = json.dumps({"method": "node.info"}).encode()
        channel.basic_publish("amq.gateway.management", "", body, properties)
        with pytest.raises(ChannelClosedByBroker) as refused:
            channel.queue_declare("", exclusive=True)  # the next synchronous call sees the close
        named = "queue 'victim' in vhost '/'" if reply_to else "no queue"
        assert (refused.value.reply_code, refused.value.reply_text) == (
            406,
            "PRECONDITION_FAILED - a management request's reply_to must name an exclusive queue"
            f" of the requesting connection; it names {named}",
        )
        assert victim.channel().queue_declare("victim", passive=True).method.message_count == 0
        assert request(admin.channel(), "node.info")["ok"] is True
    finally:
        victim.close()
        admin.close()


def test_deeply_nested_json_is_refused_without_harm(shared_node: NodeProcess) -> None:
    """A hundred thousand nested arrays: adverts are dropped with a log line, a management
    request gets a usage error; the connection stays open and confirms its publishes."""
    connection = pika.BlockingConnection(pika.URLParameters(shared_node.url()))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        nested = b"[" * 100_000 + b"]" * 100_000
        channel.basic_publish("amq.gateway.federation", "", nested)  # raises if nacked or closed
        reply = request(channel, "", body=nested)
        assert reply == {
            "ok": False,
            "error": {
                "kind": "usage",
                "message": "the request is not JSON: JSON nested deeper than 32 levels",
            },
        }
        assert channel.is_open and connection.is_open
    finally:
        connection.close()
    log = shared_node.log()
    assert "malformed federation adverts: JSON nested deeper than 32 levels; ignored" in log
    assert "RecursionError" not in log


def test_data_files_are_private(fresh_node: NodeProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(fresh_node.url()))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("kept", durable=True)
    channel.basic_publish("", "kept", b"x", pika.BasicProperties(delivery_mode=2))
    connection.close()
    assert fresh_node.data_dir is not None
    files = {path.name: stat.S_IMODE(path.stat().st_mode) for path in fresh_node.data_dir.iterdir()}
    assert {"store.db", "store.db-wal", "LOCK", "federation.db"} <= set(files)
    assert files == {name: 0o600 for name in files}
