"""`amq-gateway` as an operator runs it: users file, config file, flags, and bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pika
import pika.exceptions
import pytest

from tests.nodes import start_node
from tests.rawclient import RawClient

CLI = [sys.executable, "-m", "gateway.cli"]


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_passwd_then_login_with_users_file(tmp_path) -> None:
    users = tmp_path / "users.toml"
    added = run_cli("passwd", str(users), "alice", "--password-stdin", stdin="s3cret\n")
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == "Added user 'alice'"
    assert "s3cret" not in users.read_text()
    changed = run_cli("passwd", str(users), "alice", "--password-stdin", stdin="n3w\n")
    assert changed.stdout.strip() == "Changed password for user 'alice'"

    node = start_node(tmp_path, "--users", str(users))
    try:
        connection = pika.BlockingConnection(pika.URLParameters(node.url("alice", "n3w")))
        assert connection.channel().is_open
        connection.close()
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(pika.URLParameters(node.url("alice", "s3cret")))
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(pika.URLParameters(node.url("guest", "guest")))
        assert "login refused" in node.log()
    finally:
        node.stop()


def test_config_file_with_flag_overrides(tmp_path) -> None:
    config = tmp_path / "node.toml"
    config.write_text('[node]\nname = "from-file"\nport = 1\nmemory = true\nheartbeat = 5\n')
    node = start_node(tmp_path, "--config", str(config), name="from-flag")
    try:
        assert "node 'from-flag' ready" in node.log()
        client = RawClient(node.port)
        assert client.handshake().heartbeat == 5
        client.close()
    finally:
        node.stop()


def test_bad_config_file_names_file_key_and_line(tmp_path) -> None:
    config = tmp_path / "node.toml"
    config.write_text('[node]\nname = "x"\nprot = 5672\n')
    result = run_cli("serve", "--config", str(config))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert str(config) in result.stderr and "node.prot" in result.stderr


def test_bad_flag_is_a_usage_error(tmp_path) -> None:
    result = run_cli("serve", "--port", "not-a-port")
    assert result.returncode == 2
    assert "--port" in result.stderr and "Traceback" not in result.stderr


def test_bad_disk_free_limit_is_one_line_naming_the_flag(tmp_path) -> None:
    result = run_cli("serve", "--memory", "--disk-free-limit", "50 mb")
    assert result.returncode == 1
    assert result.stderr == (
        "amq-gateway: error: --disk-free-limit: expected a size in bytes, optionally with a unit:"
        " kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024; also k, M, G, T),"
        " got '50 mb'\n"
    )


def test_port_in_use_is_a_clear_error(tmp_path) -> None:
    node = start_node(tmp_path)
    try:
        result = run_cli("serve", "--memory", "--host", "127.0.0.1", "--port", str(node.port))
        assert result.returncode == 1
        assert "Traceback" not in result.stderr
        assert f"127.0.0.1:{node.port}" in result.stderr
    finally:
        node.stop()


def test_vhosts_from_config_can_be_opened(tmp_path) -> None:
    config = tmp_path / "node.toml"
    config.write_text('[node]\nvhosts = ["prod"]\n')
    node = start_node(tmp_path, "--config", str(config))
    try:
        for vhost in ("prod", "%2F"):
            connection = pika.BlockingConnection(pika.URLParameters(node.url(vhost=vhost)))
            assert connection.channel().is_open
            connection.close()
    finally:
        node.stop()


def test_passwd_tags_give_management_rights_without_editing_the_file(tmp_path) -> None:
    """--tag administrator may manage, --tag monitoring may only read; the file's comments stay."""
    users = tmp_path / "users.toml"
    users.write_text("# who may use the demo node\n")
    for name, tag in (("root", "administrator"), ("watcher", "monitoring")):
        result = run_cli("passwd", str(users), name, "--tag", tag, "--password-stdin", stdin="pw\n")
        assert result.returncode == 0, result.stderr
    assert users.read_text().startswith("# who may use the demo node\n")
    node = start_node(tmp_path, "--users", str(users))
    try:
        amq_config = [str(Path(sys.executable).parent / "amq-config")]

        def config(user: str, *args: str) -> subprocess.CompletedProcess[str]:
            address = f"{user}/pw@127.0.0.1:{node.port}"
            return subprocess.run(
                [*amq_config, "-a", address, *args], capture_output=True, text=True, timeout=60
            )

        assert config("root", "add", "queue", "made-by-root").returncode == 0
        listed = config("watcher", "queues")
        assert listed.returncode == 0, listed.stderr
        assert "made-by-root" in listed.stdout
        refused = config("watcher", "add", "queue", "made-by-watcher")
        assert refused.returncode == 1
        assert "may only read this node's state (monitoring)" in refused.stdout + refused.stderr
    finally:
        node.stop()
    assert (
        run_cli(
            "passwd", str(users), "watcher", "--tag", "operator", "--password-stdin", stdin="pw\n"
        ).returncode
        == 2
    )
