"""Per-vhost permissions with real clients (issue 26 section 1): what one user may do to another
user's queues and exchanges, operation by operation, as RabbitMQ decides it.

Every refusal is a channel error 403 with RabbitMQ's text; the refused operation changes
nothing, and the connection and its other channels go on. Before the check point, any user
who could log in could read, purge, bind to and delete another user's durable queue.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker, ProbableAccessDeniedError, UnroutableError

from gateway.security import set_password
from tests.integration.test_management_amqp import request
from tests.nodes import NodeProcess, start_node

USERS = r"""
[users.alice.permissions."/"]
configure = '^alice\.'
write = '^alice\.'
read = '^alice\.'

[users.carol.permissions."/"]
configure = '^(carol\.|amq\.gen-)'
write = '^(carol\.|amq\.gen-|amq\.topic$)'
read = '^(carol\.|amq\.gen-|amq\.topic$)'

[users.carol.topic_permissions."/"."amq.topic"]
write = '^{username}\.'
read = '^{username}\.'

[users.dave.permissions."prod"]
configure = '.*'
write = '.*'
read = '.*'

[users.watcher.permissions."/"]
configure = '^amq\.gen-'
write = '^amq\.gateway\.management$'
read = '^(amq\.gen-|alice\.)'
"""
PASSWORD = "pw"
MESSAGES = 3


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """bob (a `vhosts` list: full permissions, as users files had them), alice and carol
    (patterns), dave (only in vhost prod), watcher (monitoring) and admin; bob owns a durable
    queue bob.q holding MESSAGES persistent messages and a direct exchange bob.x."""
    workdir = tmp_path_factory.mktemp("permissions")
    users = workdir / "users.toml"
    for name in ("admin", "bob", "alice", "carol", "dave", "watcher"):
        set_password(users, name, PASSWORD, vhosts=["/"] if name == "bob" else None)
    text = users.read_text()
    text = text.replace("[users.admin]\n", '[users.admin]\ntags = ["administrator"]\n')
    text = text.replace("[users.watcher]\n", '[users.watcher]\ntags = ["monitoring"]\n')
    users.write_text(text + USERS)
    node = start_node(workdir, "--users", str(users), data_dir=workdir / "data")
    with connection(node, "bob") as bob:
        channel = bob.channel()
        channel.exchange_declare("bob.x", "direct", durable=True)
        for queue in ("bob.q", "bob.bound"):
            channel.queue_declare(queue, durable=True)
            channel.queue_bind(queue, "bob.x", routing_key=queue)
        channel.confirm_delivery()
        for number in range(MESSAGES):
            channel.basic_publish("bob.x", "bob.q", b"%d" % number, pika.BasicProperties(delivery_mode=2))
    with connection(node, "alice") as alice:
        channel = alice.channel()
        channel.exchange_declare("alice.x", "direct")
        channel.queue_declare("alice.q")
    yield node
    node.stop()


class connection:
    """A pika connection as `user`, closed at the end of a with block."""

    def __init__(self, node: NodeProcess, user: str, vhost: str = "%2F") -> None:
        self.connection = pika.BlockingConnection(pika.URLParameters(node.url(user, PASSWORD, vhost)))

    def __enter__(self) -> pika.BlockingConnection:
        return self.connection

    def __exit__(self, *exc: object) -> None:
        if self.connection.is_open:
            self.connection.close()


def refused(conn: pika.BlockingConnection, action: Callable[[BlockingChannel], Any]) -> str:
    """Run `action` on a new channel: it must be closed with 403; the text, without its name."""
    channel = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as closed:
        action(channel)
    assert closed.value.reply_code == 403, closed.value.reply_text
    assert conn.is_open, "a refusal closes the channel, not the connection"
    return str(closed.value.reply_text).removeprefix("ACCESS_REFUSED - ")


def messages(node: NodeProcess, queue: str) -> int:
    with connection(node, "bob") as bob:
        return bob.channel().queue_declare(queue, passive=True).method.message_count


def alice_refused(permission: str, kind: str, name: str) -> str:
    return f"{permission} access to {kind} '{name}' in vhost '/' refused for user 'alice'"


@pytest.mark.parametrize(
    ("operation", "permission"),
    [
        (lambda ch: ch.basic_get("bob.q"), "read"),
        (lambda ch: ch.basic_consume("bob.q", lambda *a: None), "read"),
        (lambda ch: ch.queue_purge("bob.q"), "read"),
        (lambda ch: ch.queue_delete("bob.q"), "configure"),
    ],
    ids=["basic.get", "basic.consume", "queue.purge", "queue.delete"],
)
def test_another_users_durable_queue_is_out_of_reach(
    node: NodeProcess, operation: Callable[[BlockingChannel], Any], permission: str
) -> None:
    with connection(node, "alice") as alice:
        other = alice.channel()
        assert refused(alice, operation) == alice_refused(permission, "queue", "bob.q")
        # The connection and its other channels go on.
        assert other.queue_declare("alice.q", passive=True).method.message_count == 0
        assert alice.channel().basic_get("alice.q") == (None, None, None)
    assert messages(node, "bob.q") == MESSAGES


def test_passive_declares_need_no_permission(node: NodeProcess) -> None:
    with connection(node, "alice") as alice:
        channel = alice.channel()
        assert channel.queue_declare("bob.q", passive=True).method.message_count == MESSAGES
        channel.exchange_declare("bob.x", passive=True)


@pytest.mark.parametrize(
    ("operation", "permission", "kind", "name"),
    [
        (lambda ch: ch.queue_bind("alice.q", "bob.x", routing_key="bob.q"), "read", "exchange", "bob.x"),
        (lambda ch: ch.queue_bind("bob.q", "alice.x", routing_key="k"), "write", "queue", "bob.q"),
        (
            lambda ch: ch.queue_unbind("bob.bound", "bob.x", routing_key="bob.bound"),
            "write",
            "queue",
            "bob.bound",
        ),
        (lambda ch: ch.exchange_bind("alice.x", "bob.x", routing_key="#"), "read", "exchange", "bob.x"),
        (lambda ch: ch.exchange_bind("bob.x", "alice.x", routing_key="#"), "write", "exchange", "bob.x"),
        (lambda ch: ch.exchange_unbind("alice.x", "bob.x", routing_key="#"), "read", "exchange", "bob.x"),
    ],
    ids=[
        "queue.bind-source",
        "queue.bind-queue",
        "queue.unbind",
        "exchange.bind-source",
        "exchange.bind-destination",
        "exchange.unbind",
    ],
)
def test_binding_to_or_from_another_users_objects_is_refused(
    node: NodeProcess, operation: Callable[[BlockingChannel], Any], permission: str, kind: str, name: str
) -> None:
    with connection(node, "alice") as alice:
        assert refused(alice, operation) == alice_refused(permission, kind, name)
    # bob's binding still routes, and nothing new does.
    before = messages(node, "bob.bound")
    with connection(node, "bob") as bob:
        channel = bob.channel()
        channel.confirm_delivery()
        channel.basic_publish("bob.x", "bob.bound", b"still bound", mandatory=True)
        with pytest.raises(UnroutableError):  # bob.q was not bound to alice.x
            channel.basic_publish("alice.x", "k", b"alice.x routes nowhere", mandatory=True)
        assert channel.queue_purge("bob.bound").method.message_count == before + 1


@pytest.mark.parametrize(
    ("operation", "kind", "name"),
    [
        (lambda ch: ch.exchange_declare("bob.y", "fanout"), "exchange", "bob.y"),
        (lambda ch: ch.exchange_delete("bob.x"), "exchange", "bob.x"),
        (lambda ch: ch.queue_declare("bob.z"), "queue", "bob.z"),
        (lambda ch: ch.queue_declare("bob.q", durable=True), "queue", "bob.q"),
    ],
    ids=["exchange.declare", "exchange.delete", "queue.declare", "queue.redeclare"],
)
def test_declaring_and_deleting_needs_configure(
    node: NodeProcess, operation: Callable[[BlockingChannel], Any], kind: str, name: str
) -> None:
    with connection(node, "alice") as alice:
        assert refused(alice, operation) == alice_refused("configure", kind, name)
    with connection(node, "bob") as bob:
        channel = bob.channel()
        channel.exchange_declare("bob.x", passive=True)
        with pytest.raises(ChannelClosedByBroker) as missing:
            channel.exchange_declare("bob.y", passive=True)
        assert missing.value.reply_code == 404


def test_an_alternate_exchange_needs_write_on_it(node: NodeProcess) -> None:
    """Messages would go to bob.x on alice's behalf (rabbit_channel checks the same)."""
    with connection(node, "alice") as alice:
        text = refused(
            alice,
            lambda ch: ch.exchange_declare("alice.ae", "direct", arguments={"alternate-exchange": "bob.x"}),
        )
        assert text == alice_refused("write", "exchange", "bob.x")
        text = refused(
            alice, lambda ch: ch.queue_declare("alice.dl", arguments={"x-dead-letter-exchange": "bob.x"})
        )
        assert text == alice_refused("write", "exchange", "bob.x")


@pytest.mark.parametrize(("exchange", "shown"), [("bob.x", "bob.x"), ("", "amq.default")])
def test_publishing_needs_write_on_the_exchange(node: NodeProcess, exchange: str, shown: str) -> None:
    """The default exchange is checked as amq.default, as in RabbitMQ."""

    def publish(channel: BlockingChannel) -> None:
        channel.confirm_delivery()
        channel.basic_publish(exchange, "bob.q", b"forged")

    with connection(node, "alice") as alice:
        assert refused(alice, publish) == alice_refused("write", "exchange", shown)
    assert messages(node, "bob.q") == MESSAGES


def test_a_server_named_queue_is_checked_under_its_generated_name(node: NodeProcess) -> None:
    with connection(node, "alice") as alice:
        text = refused(alice, lambda ch: ch.queue_declare("", exclusive=True))
        assert text.startswith("configure access to queue 'amq.gen-")
        assert text.endswith("' in vhost '/' refused for user 'alice'")
    with connection(node, "carol") as carol:
        assert carol.channel().queue_declare("", exclusive=True).method.queue.startswith("amq.gen-")


def test_topic_permissions_check_routing_keys(node: NodeProcess) -> None:
    with connection(node, "carol") as carol:
        channel = carol.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(queue, "amq.topic", routing_key="carol.#")
        channel.confirm_delivery()
        channel.basic_publish("amq.topic", "carol.news", b"mine")
        assert channel.basic_get(queue, auto_ack=True)[2] == b"mine"

        def publish(ch: BlockingChannel) -> None:
            ch.confirm_delivery()
            ch.basic_publish("amq.topic", "bob.news", b"not mine")

        assert refused(carol, publish) == (
            "write access to topic 'bob.news' in exchange 'amq.topic' in vhost '/' refused for user 'carol'"
        )
        assert refused(carol, lambda ch: ch.queue_bind(queue, "amq.topic", routing_key="#")) == (
            "read access to topic '#' in exchange 'amq.topic' in vhost '/' refused for user 'carol'"
        )
        assert channel.basic_get(queue) == (None, None, None)


def test_a_user_without_permissions_in_a_vhost_cannot_open_it(node: NodeProcess) -> None:
    with pytest.raises(ProbableAccessDeniedError) as closed:
        connection(node, "dave")
    assert str(closed.value) == (
        """ConnectionClosedByBroker: (530) "NOT_ALLOWED - access to vhost '/' refused for user 'dave'\""""
    )


def test_listings_show_a_monitoring_user_what_it_may_read_or_configure(node: NodeProcess) -> None:
    with connection(node, "watcher") as watcher:
        channel = watcher.channel()
        queues = {record["name"] for record in request(channel, "queues.list")["result"]}
        exchanges = {record["name"] for record in request(channel, "exchanges.list")["result"]}
        bindings = request(channel, "bindings.list")["result"]
    assert "alice.q" in queues
    assert {name for name in queues if not name.startswith("amq.gen-")} == {"alice.q"}
    assert exchanges == {"alice.x"}
    assert bindings == []
    with connection(node, "admin") as admin:
        listed = {record["name"] for record in request(admin.channel(), "queues.list")["result"]}
    assert {"alice.q", "bob.q", "bob.bound"} <= listed


def test_the_default_vhost_list_means_full_permissions(node: NodeProcess) -> None:
    """bob's users file entry has only `vhosts = ["/"]`: he may do everything there."""
    name = f"bob.tmp-{uuid.uuid4().hex[:6]}"
    with connection(node, "bob") as bob:
        channel = bob.channel()
        channel.queue_declare(name)
        channel.queue_bind(name, "amq.topic", routing_key="#")
        channel.queue_delete(name)


def test_refusals_leave_the_node_serving_others(node: NodeProcess) -> None:
    with connection(node, "alice") as alice:
        for _ in range(20):
            refused(alice, lambda ch: ch.basic_get("bob.q"))
        with connection(node, "carol") as carol:
            assert carol.channel().queue_declare("carol.q").method.message_count == 0
    assert messages(node, "bob.q") == MESSAGES
