"""The CLIs take passwords from a file, standard input, AMQ_PASSWORD or a prompt on a real
terminal (a pty), never needing them on the command line; against a node process whose users
file has the user, so a wrong password would fail."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.security import UsersDB
from gateway.security.passwords import hash_password
from tests.nodes import NodeProcess, start_node

BIN = Path(sys.executable).parent
SECRET = "s3cret with spaces"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> NodeProcess:
    workdir = tmp_path_factory.mktemp("passwords")
    users = workdir / "users.toml"
    users.write_text(f'[users.alice]\npassword = "{hash_password(SECRET)}"\ntags = ["administrator"]\n')
    started = start_node(workdir, "--users", str(users))
    yield started
    started.stop()


def run(command: list[str], stdin: str = "", **environment: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "AMQ_PASSWORD"}
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, timeout=60, env={**env, **environment}
    )


def amq_config(node: NodeProcess, *args: str) -> list[str]:
    return [str(BIN / "amq-config"), "-a", f"alice@127.0.0.1:{node.port}", *args]


def test_a_password_file(node: NodeProcess, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    done = run(amq_config(node, "--password-file", str(secret), "node"))
    assert done.returncode == 0, done.stderr
    assert "high watermark" in done.stdout
    done = run(amq_config(node, "--password-file", str(tmp_path / "missing"), "node"))
    assert done.returncode == 2
    assert "cannot read the password file" in done.stderr


def test_standard_input(node: NodeProcess) -> None:
    done = run(amq_config(node, "node", "--password-stdin"), stdin=SECRET + "\n")
    assert done.returncode == 0, done.stderr


def test_the_environment_and_that_the_password_is_the_one_checked(node: NodeProcess) -> None:
    done = run(amq_config(node, "queues"), AMQ_PASSWORD=SECRET)
    assert done.returncode == 0, done.stderr
    wrong = run(amq_config(node, "queues"), AMQ_PASSWORD="wrong")
    assert wrong.returncode == 1 and "ACCESS_REFUSED" in wrong.stderr
    route = run([str(BIN / "amq-route"), "link", "list", f"alice@127.0.0.1:{node.port}"], AMQ_PASSWORD=SECRET)
    assert route.returncode == 0, route.stderr


def test_no_source_and_no_terminal_is_a_usage_error(node: NodeProcess) -> None:
    done = run(amq_config(node, "node"))
    assert done.returncode == 2
    assert f"alice@127.0.0.1:{node.port}: no password: give it with --password-file FILE" in done.stderr


def test_a_prompt_on_a_terminal(node: NodeProcess) -> None:
    env = {key: value for key, value in os.environ.items() if key != "AMQ_PASSWORD"}
    pid, terminal = pty.fork()
    if pid == 0:  # the child: amq-config on the pty, as typed in a shell
        os.execve(str(BIN / "amq-config"), amq_config(node, "node"), env)
    output = b""
    deadline = time.monotonic() + 60
    while b"Password for alice" not in output:
        assert time.monotonic() < deadline, output
        output += os.read(terminal, 1024)
    os.write(terminal, SECRET.encode() + b"\n")
    while True:
        try:
            chunk = os.read(terminal, 1024)
        except OSError:  # the child closed the pty
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    os.close(terminal)
    assert os.waitstatus_to_exitcode(status) == 0, output
    assert b"high watermark" in output and SECRET.encode() not in output  # not echoed


def test_passwd_takes_a_file_or_the_environment(tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    secret = tmp_path / "secret"
    secret.write_text("from a file\n")
    gateway = [sys.executable, "-m", "gateway.cli", "passwd", str(users)]
    assert run([*gateway, "bob", "--password-file", str(secret)]).returncode == 0
    assert run([*gateway, "carol"], AMQ_PASSWORD="from the environment").returncode == 0
    db = UsersDB.load(users)
    assert db.verify("bob", "from a file") and db.verify("carol", "from the environment")
