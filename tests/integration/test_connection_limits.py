"""Node processes and pika: connection limits per node (max_connections), per vhost
(max-connections in the node config's [vhost] tables) and per user (max-connections and
max-channels in the users file), each refused with RabbitMQ's 530 NOT_ALLOWED and text and a
log line, while the node serves everyone else."""

from __future__ import annotations

from pathlib import Path

import pika
import pika.exceptions
import pytest

from gateway.config import load_node_config
from gateway.security import UsersDB, UsersFileError
from gateway.security.passwords import hash_password
from gateway.tomlfile import ConfigError
from tests.nodes import NodeProcess, start_node


def connect(
    node: NodeProcess, user: str = "guest", password: str = "guest", vhost: str = "/"
) -> pika.BlockingConnection:
    credentials = pika.PlainCredentials(user, password)
    return pika.BlockingConnection(pika.ConnectionParameters(node.host, node.port, vhost, credentials))


def refused(node: NodeProcess, *args: str) -> str:
    """What a connection refused at Connection.Open reports: pika names the broker's Close
    (code and text) in the error it raises there."""
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as failure:
        connect(node, *args)
    return str(failure.value).replace("\\'", "'")


def works(connection: pika.BlockingConnection) -> None:
    channel = connection.channel()
    name = channel.queue_declare("", exclusive=True).method.queue
    channel.basic_publish("", name, b"still served")
    assert channel.basic_get(name, auto_ack=True)[2] == b"still served"
    channel.queue_delete(name)
    channel.close()


def test_the_node_connection_limit(tmp_path: Path) -> None:
    node = start_node(tmp_path, "--max-connections", "2")
    first, second = connect(node), connect(node)
    try:
        text = "NOT_ALLOWED - connection refused: node connection limit (2) is reached"
        assert f"(530) {text!r}" in refused(node)
        works(first)
        second.close()
        third = connect(node)  # a connection that ended no longer counts
        works(third)
        third.close()
    finally:
        first.close()
        node.stop()
    assert f": channel 0: {text}" in node.log()


def test_vhost_connection_and_queue_limits(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text('[vhost."small"]\nmax-connections = 1\nmax-queues = 2\n')
    node = start_node(tmp_path, "--config", str(config))
    first = connect(node, vhost="small")
    try:
        text = (
            "NOT_ALLOWED - access to vhost 'small' refused for user 'guest': connection limit (1) is reached"
        )
        assert f"(530) {text!r}" in refused(node, "guest", "guest", "small")
        other = connect(node)  # another vhost is not limited
        works(other)
        works(first)
        other.close()
        channel = first.channel()
        channel.queue_declare("one")
        channel.queue_declare("two")
        channel.queue_declare("one")  # an existing queue is no new one
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as full:
            channel.queue_declare("three")
        queues = "cannot declare queue 'three': queue limit in vhost 'small' (2) is reached"
        assert (full.value.reply_code, full.value.reply_text) == (406, f"PRECONDITION_FAILED - {queues}")
    finally:
        first.close()
        node.stop()
    assert text in node.log() and queues in node.log()


def test_user_connection_and_channel_limits(tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    users.write_text(
        f'[users.alice]\npassword = "{hash_password("secret")}"\n'
        "limits = { max-connections = 2, max-channels = 3 }\n"
        f'[users.bob]\npassword = "{hash_password("secret")}"\n'
    )
    node = start_node(tmp_path, "--users", str(users))
    a, b = connect(node, "alice", "secret"), connect(node, "alice", "secret")
    try:
        text = "NOT_ALLOWED - Connection refused for user 'alice': user connection limit (2) is reached"
        assert f"(530) {text!r}" in refused(node, "alice", "secret")
        bob = connect(node, "bob", "secret")  # another user is not limited by alice's
        kept = [a.channel(), a.channel()]
        b.channel()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            b.channel()
        assert closed.value.reply_code == 530
        channels = (
            "number of channels opened for user 'alice' has reached the maximum allowed user limit of (3)"
        )
        assert closed.value.reply_text == f"NOT_ALLOWED - {channels}"
        kept[0].basic_qos(prefetch_count=1)  # alice's first connection goes on
        works(bob)
        bob.close()
    finally:
        for connection in (a, b):
            if connection.is_open:
                connection.close()
        node.stop()
    log = node.log()
    assert text in log and channels in log


def test_limits_in_files_are_checked_with_file_line_and_key(tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    users.write_text(
        f'[users.alice]\npassword = "{hash_password("x")}"\nlimits = {{ max-connections = -1 }}\n'
    )
    with pytest.raises(
        UsersFileError, match=r"users\.toml:3: users\.alice\.limits\.max-connections: expected an integer"
    ):
        UsersDB.load(users)
    users.write_text(
        f'[users.alice]\npassword = "{hash_password("x")}"\n[users.alice.limits]\nmax-queues = 1\n'
    )
    with pytest.raises(UsersFileError, match=r"users\.toml:4: users\.alice\.limits\.max-queues: unknown key"):
        UsersDB.load(users)
    config = tmp_path / "node.toml"
    config.write_text('[node]\nmax_connections = "many"\n[vhost."v"]\nmax-queues = 2\n')
    with pytest.raises(ConfigError, match=r"node\.toml:2: node\.max_connections: expected an integer"):
        load_node_config(config)
    config.write_text('[node]\nmax_connections = 10\n[vhost."v"]\nmax-queues = 2\nmax-connections = 3\n')
    loaded = load_node_config(config)
    assert loaded.max_connections == 10 and loaded.vhost_limits == {
        "v": {"max-queues": 2, "max-connections": 3}
    }
    assert "v" in loaded.vhosts
