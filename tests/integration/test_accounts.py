"""Users and vhosts changed while the node runs, with amq-config as an operator would: each
change applies at once to new logins, a deleted user's or vhost's open connections get 320
CONNECTION_FORCED, and everything survives a restart, the node's record winning over the users
file's. A real node process with a data dir, pika for the users."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from pika.exceptions import (
    ChannelClosedByBroker,
    ConnectionClosedByBroker,
    ProbableAccessDeniedError,
    ProbableAuthenticationError,
)

from gateway.security import set_password
from tests.nodes import NodeProcess, start_node

BIN = Path(sys.executable).parent


class Operator:
    """A node with a data dir and a users file (admin, bob who may use '/', and grafana, a
    monitoring user), managed with
    amq-config as admin; `restart` stops it and starts it again on the same data."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.users = tmp_path / "users.toml"
        set_password(self.users, "admin", "secret", tags=["administrator"])
        set_password(self.users, "bob", "bob-pw", vhosts=["/"])
        set_password(self.users, "grafana", "g", tags=["monitoring"])
        self.node = self._start()
        self.connections: list[pika.BlockingConnection] = []

    def _start(self) -> NodeProcess:
        return start_node(self.tmp_path, "--users", str(self.users), data_dir=self.tmp_path / "data")

    def restart(self) -> None:
        self.stop()
        self.node = self._start()

    def stop(self) -> None:
        """Close the test's connections first: a pika connection nobody reads from would
        keep the node waiting for its Close-Ok."""
        for connection in self.connections:
            if connection.is_open:
                connection.close()
        self.connections.clear()
        assert self.node.stop() == 0

    def config(self, *args: str, stdin: str = "", status: int = 0) -> str:
        result = subprocess.run(
            [str(BIN / "amq-config"), "-a", f"admin/secret@127.0.0.1:{self.node.port}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == status, f"amq-config {' '.join(args)}: {result.stderr}"
        return result.stdout if status == 0 else result.stderr

    def connect(self, user: str, password: str, vhost: str = "%2F") -> pika.BlockingConnection:
        connection = pika.BlockingConnection(pika.URLParameters(self.node.url(user, password, vhost)))
        self.connections.append(connection)
        return connection


@pytest.fixture
def operator(tmp_path: Path) -> Iterator[Operator]:
    node = Operator(tmp_path)
    yield node
    node.stop()


def test_a_user_added_at_runtime_logs_in_at_once_and_after_a_restart(operator: Operator) -> None:
    assert (
        operator.config(
            "user", "add", "alice", "--tag", "monitoring", "--new-password-stdin", stdin="alice-pw\n"
        )
        == ""
    )
    listing = operator.config("users")
    assert listing.splitlines()[0].split() == ["User", "Tags", "Source"]
    assert ["alice", "monitoring", "node"] in [line.split() for line in listing.splitlines()]
    assert ["bob", "file"] in [line.split() for line in listing.splitlines()]
    # The password is known at once; with no permissions yet, no vhost opens (530, not 403).
    with pytest.raises(ProbableAccessDeniedError):
        operator.connect("alice", "alice-pw")
    with pytest.raises(ProbableAuthenticationError):
        operator.connect("alice", "wrong")
    operator.restart()
    assert ["alice", "monitoring", "node"] in [line.split() for line in operator.config("users").splitlines()]
    with pytest.raises(ProbableAccessDeniedError):
        operator.connect("alice", "alice-pw")


def test_a_password_changed_at_runtime_replaces_the_files_and_stays_after_a_restart(
    operator: Operator,
) -> None:
    operator.connect("bob", "bob-pw").close()
    operator.config("user", "passwd", "bob", "--new-password-stdin", stdin="new-pw\n")
    with pytest.raises(ProbableAuthenticationError):
        operator.connect("bob", "bob-pw")
    operator.connect("bob", "new-pw").close()
    operator.restart()
    with pytest.raises(ProbableAuthenticationError):
        operator.connect("bob", "bob-pw")
    operator.connect("bob", "new-pw").close()
    assert "user 'bob': the users file's entry is ignored" in operator.node.log()


def test_deleting_a_user_closes_its_connections_and_it_stays_deleted(operator: Operator) -> None:
    connection = operator.connect("bob", "bob-pw")
    channel = connection.channel()
    operator.config("user", "del", "bob")
    with pytest.raises(ConnectionClosedByBroker) as closed:
        while True:
            channel.queue_declare("", exclusive=True)
            connection.process_data_events(0.05)
    assert closed.value.reply_code == 320
    assert closed.value.reply_text == "CONNECTION_FORCED - user 'bob' was deleted"
    with pytest.raises(ProbableAuthenticationError):
        operator.connect("bob", "bob-pw")
    operator.restart()  # the users file still names bob: the node's record (deleted) wins
    with pytest.raises(ProbableAuthenticationError):
        operator.connect("bob", "bob-pw")
    assert "bob" not in operator.config("users")


def test_a_vhost_added_and_deleted_at_runtime(operator: Operator) -> None:
    operator.config("vhost", "add", "prod")
    assert operator.config("vhosts").split() == ["Vhost", "=" * 5, "/", "prod"]
    connection = operator.connect("admin", "secret", "prod")
    channel = connection.channel()
    channel.queue_declare("orders", durable=True)
    channel.basic_publish("", "orders", b"kept", pika.BasicProperties(delivery_mode=2))
    operator.restart()
    assert "prod" in operator.config("vhosts").split()
    connection = operator.connect("admin", "secret", "prod")
    channel = connection.channel()
    assert channel.queue_declare("orders", passive=True).method.message_count == 1
    operator.config("vhost", "del", "prod")
    with pytest.raises(ConnectionClosedByBroker) as closed:
        while True:
            connection.process_data_events(0.05)
    assert closed.value.reply_text == "CONNECTION_FORCED - vhost 'prod' is deleted"
    operator.restart()
    assert operator.config("vhosts").split() == ["Vhost", "=" * 5, "/"]
    with pytest.raises(ProbableAccessDeniedError):
        operator.connect("admin", "secret", "prod")
    error = operator.config("vhost", "del", "/", status=1)
    assert error == "Failed: PRECONDITION_FAILED - the default vhost '/' cannot be deleted\n"


def test_only_administrators_see_or_manage_users(operator: Operator) -> None:
    result = subprocess.run(
        [str(BIN / "amq-config"), "-a", f"grafana/g@127.0.0.1:{operator.node.port}", "users"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr == (
        "Failed: access - user 'grafana' may only read this node's state (monitoring), not call 'users.list'\n"
    )
    error = operator.config("user", "add", "bob", "--new-password-stdin", stdin="x\n", status=1)
    assert error == "Failed: PRECONDITION_FAILED - user 'bob' already exists\n"
    error = operator.config("user", "add", "carol", "--new-password-stdin", status=1)
    assert error == "Failed: usage - no password on the first line of standard input\n"
    assert "carol" not in operator.config("users")


def test_permissions_set_at_runtime_apply_at_once_to_open_connections_and_stay(operator: Operator) -> None:
    operator.config("user", "add", "alice", "--new-password-stdin", stdin="alice-pw\n")
    operator.config(
        "permissions", "set", "-p", "/", "alice", "^alice\\.", "^(alice\\.|amq\\.topic$)", "^alice\\."
    )
    operator.config("topic-permissions", "set", "alice", "amq.topic", "^alice\\.", ".*")
    assert ["/", "alice", "'^alice\\.'", "'^(alice\\.|amq\\.topic$)'", "'^alice\\.'"] in [
        line.split() for line in operator.config("permissions", "-p", "/").splitlines()
    ]
    assert ["/", "alice", "amq.topic", "'^alice\\.'", "'.*'"] in [
        line.split() for line in operator.config("topic-permissions").splitlines()
    ]
    connection = operator.connect("alice", "alice-pw")
    channel = connection.channel()
    channel.queue_declare("alice.inbox", durable=True)
    channel.basic_publish("amq.topic", "alice.news", b"allowed")
    with pytest.raises(ChannelClosedByBroker) as refused:
        connection.channel().queue_declare("bob.inbox")
    assert refused.value.reply_text == (
        "ACCESS_REFUSED - configure access to queue 'bob.inbox' in vhost '/' refused for user 'alice'"
    )
    topic = connection.channel()
    topic.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as refused:
        topic.basic_publish("amq.topic", "bob.news", b"refused")
    assert refused.value.reply_text == (
        "ACCESS_REFUSED - write access to topic 'bob.news' in exchange 'amq.topic' in vhost '/'"
        " refused for user 'alice'"
    )
    operator.restart()
    connection = operator.connect("alice", "alice-pw")
    connection.channel().queue_declare("alice.inbox", passive=True)
    operator.config("permissions", "clear", "-p", "/", "alice")
    with pytest.raises(ChannelClosedByBroker) as refused:
        connection.channel().queue_declare("alice.other")  # the open connection's next operation
    assert refused.value.reply_code == 403
    with pytest.raises(ProbableAccessDeniedError):
        operator.connect("alice", "alice-pw")
    error = operator.config("permissions", "set", "-p", "/", "alice", "(", ".*", ".*", status=1)
    assert error.startswith("Failed: SYNTAX_ERROR - invalid regular expression '(':")


def test_changing_a_users_file_user_keeps_its_other_vhosts(operator: Operator) -> None:
    """bob may use '/' from the users file; permissions set for him in a new vhost add to that."""
    operator.config("vhost", "add", "prod")
    operator.config("permissions", "set", "-p", "prod", "bob", "", "", "^reports$")
    rows = [line.split()[:2] for line in operator.config("permissions").splitlines()[2:]]
    assert ["/", "bob"] in rows and ["prod", "bob"] in rows
    operator.connect("bob", "bob-pw").channel().queue_declare("anything")
    operator.connect("bob", "bob-pw", "prod").close()


def test_a_topology_file_applies_users_vhosts_and_permissions(operator: Operator, tmp_path: Path) -> None:
    topology = tmp_path / "access.toml"
    topology.write_text(
        f"""
[credentials.admin]
username = "admin"
password = "secret"

[nodes.hub]
host = "127.0.0.1"
port = {operator.node.port}
credentials = "admin"

[[vhosts]]
name = "orders"

[[users]]
name = "orders-app"
password_env = "ORDERS_APP_PASSWORD"

[[permissions]]
user = "orders-app"
vhost = "orders"
configure = '^orders-app\\.'
write = ".*"
read = ".*"
"""
    )

    def route(*args: str) -> str:
        result = subprocess.run(
            [str(BIN / "amq-route"), "topology", *args, str(topology)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={**os.environ, "ORDERS_APP_PASSWORD": "from-the-environment"},
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    assert "  + user orders-app" in route("plan")
    applied = route("apply")
    assert "hub: created user orders-app" in applied and "hub: set permission" in applied
    connection = operator.connect("orders-app", "from-the-environment", "orders")
    connection.channel().queue_declare("orders-app.inbox")
    connection.close()
    assert route("plan").splitlines()[-1] == f"No changes. The live nodes match {topology}."
