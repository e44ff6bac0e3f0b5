"""The node processes `amq-gateway up` runs: one `amq-gateway serve` per node of the topology
that lives on this host, each with its data and log under `<var>/<node>`.

A node is ready when its management answers, not merely when its port accepts, so what comes
next (apply) never races a node still restoring its store. Stopping is SIGTERM and a bounded
wait, then SIGKILL: a node never outlives `up`.
"""

from __future__ import annotations

import ipaddress
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import trio

from federation.management_client import ManagementClient, ManagementFailed
from topology.model import Node

#: Seconds a node has to answer management after it was started.
START_TIMEOUT = 30.0
#: Seconds a node has to exit after SIGTERM before it is killed.
STOP_TIMEOUT = 15.0
#: Lines of a node's log shown when it failed to start.
LOG_TAIL = 15


class StartFailed(Exception):
    """A node process exited or did not answer in time; the message says which and why."""


def is_local(host: str) -> bool:
    """Whether `host` names this machine: loopback, an any-address, or one of its own names
    and addresses (a node elsewhere is expected to be running already)."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        if host in ("localhost", socket.gethostname(), socket.getfqdn()):
            return True
        try:
            # typeshed allows an (int, bytes) address, which IPv4 and IPv6 results never are.
            resolved = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
        except OSError:
            return False
        return any(is_local(found) for found in resolved)
    if address.is_loopback or address.is_unspecified:
        return True
    return str(address) in _own_addresses()


def _own_addresses() -> set[str]:
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        return set()


@dataclass
class NodeProcess:
    """One started node: its process and where its log is."""

    node: Node
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-LOG_TAIL:])


def serve_command(node: Node, data_dir: Path) -> list[str]:
    """The `amq-gateway serve` command line of one node."""
    command = [sys.executable, "-m", "gateway.cli", "serve", "--name", node.name]
    command += ["--host", node.host, "--port", str(node.port), "--data-dir", str(data_dir)]
    if node.users:
        command += ["--users", node.users]
    return command


def start(node: Node, var: Path) -> NodeProcess:
    """Start one node with its data in `var/<name>` and its log in `var/<name>/node.log`."""
    data_dir = var / node.name
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "node.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            serve_command(node, data_dir),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches `up`, which stops its nodes in order
        )
    return NodeProcess(node, process, log_path)


async def wait_ready(started: NodeProcess, timeout: float = START_TIMEOUT) -> None:
    """Until the node answers a management request; StartFailed if it exits or times out."""
    node = started.node
    with trio.move_on_after(timeout):
        while started.process.poll() is None:
            try:
                async with ManagementClient.connect(node.address, 2) as client:
                    await client.call("node.info")
                return
            except ManagementFailed:
                await trio.sleep(0.2)
        raise StartFailed(
            f"node {node.name} exited with status {started.process.returncode}; "
            f"its log ({started.log_path}) ends:\n{started.log_tail()}"
        )
    raise StartFailed(f"node {node.name} did not answer on {node.endpoint} within {timeout:g} s")


def stop_all(started: Iterable[NodeProcess], say: Callable[[str], None]) -> None:
    """SIGTERM every node, wait for each (bounded), SIGKILL what is left."""
    running = [each for each in started if each.process.poll() is None]
    for each in running:
        each.process.send_signal(signal.SIGTERM)
    for each in running:
        try:
            status = each.process.wait(STOP_TIMEOUT)
            say(f"stopped {each.node.name} (exit status {status})")
        except subprocess.TimeoutExpired:
            each.process.kill()
            each.process.wait()
            say(f"killed {each.node.name}: it did not stop within {STOP_TIMEOUT:g} s of SIGTERM")
