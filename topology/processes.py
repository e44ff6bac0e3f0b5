"""The node processes `amq-gateway up` runs: one `amq-gateway serve` per node of the topology
that lives on this host, each with its data and log under `<var>/<node>`.

A node is ready when this run of it logs its own ready line (gateway.ready), which it does
once its store is loaded and it listens: something answering on its port may be another `up`'s
node while this one died with "Address already in use". The log is appended to across runs, so
only what this run wrote counts. Stopping is SIGTERM and a bounded wait, then SIGKILL: a node
never outlives `up`.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import trio

from gateway.ready import ready_address
from gateway.store.opening import private_file
from topology.model import Node

#: Seconds a node has to log its ready line after it was started.
START_TIMEOUT = 30.0
#: Seconds a node has to exit after SIGTERM before it is killed.
STOP_TIMEOUT = 15.0
#: Lines of a node's log shown when it failed to start or exited.
LOG_TAIL = 15
#: Seconds between two looks at a starting node's log.
READY_POLL = 0.1


class StartFailed(Exception):
    """A node process exited or did not get ready in time; the message says which and why."""


def free_port() -> int:
    """A loopback port nothing listens on now, for a node that must be told its port in
    advance; the kernel does not hand it out again at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
    """One started node: its process, and where this run's part of its log starts."""

    node: Node
    process: trio.Process
    log_path: Path
    log_start: int

    def log_text(self) -> str:
        """What this run of the node has logged so far."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self.log_start)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self) -> str:
        return "\n".join(self.log_text().splitlines()[-LOG_TAIL:])

    def ended(self) -> str:
        """How the process ended: `exited with status 1`, `was killed by SIGKILL`."""
        status = self.process.returncode
        if status is not None and status < 0:
            try:
                return f"was killed by {signal.Signals(-status).name}"
            except ValueError:
                pass
        return f"exited with status {status}"

    def exit_report(self) -> str:
        """The process's end, with the end of what it logged."""
        return (
            f"node {self.node.name} (pid {self.process.pid}) {self.ended()}; "
            f"its log ({self.log_path}) ends:\n{self.log_tail()}"
        )


def serve_command(node: Node, data_dir: Path) -> list[str]:
    """The `amq-gateway serve` command line of one node."""
    command = [sys.executable, "-m", "gateway.cli", "serve", "--name", node.name]
    command += ["--host", node.host, "--port", str(node.port), "--data-dir", str(data_dir)]
    if node.users:
        command += ["--users", node.users]
    tls = {
        "--tls-port": node.tls_port,
        "--tls-cert": node.tls_cert,
        "--tls-key": node.tls_key,
        "--tls-ca": node.tls_ca,
    }
    for flag, value in tls.items():
        if value is not None:
            command += [flag, str(value)]
    return command


async def start(node: Node, var: Path) -> NodeProcess:
    """Start one node with its data in `var/<name>`, appending to its log `var/<name>/node.log`
    (readable by its owner only)."""
    data_dir = var / node.name
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "node.log"
    private_file(log_path)  # it names clients, queues and users: the store's mode, 0600
    with log_path.open("ab") as log:
        log_start = log.seek(0, os.SEEK_END)
        process = await trio.lowlevel.open_process(
            serve_command(node, data_dir),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches `up`, which stops its nodes in order
        )
    return NodeProcess(node, process, log_path, log_start)


async def wait_ready(started: NodeProcess, timeout: float = START_TIMEOUT) -> str:
    """The address the node listens on, once this run logged its ready line; StartFailed,
    with the end of its log, if it exits first or takes longer than `timeout`."""
    with trio.move_on_after(timeout):
        while True:
            exited = started.process.poll() is not None
            address = ready_address(started.log_text(), started.node.name)
            if address is not None:
                return address
            if exited:
                raise StartFailed(started.exit_report())
            await trio.sleep(READY_POLL)
    raise StartFailed(
        f"node {started.node.name} did not get ready on {started.node.endpoint} within {timeout:g} s; "
        f"its log ({started.log_path}) ends:\n{started.log_tail()}"
    )


async def stop_all(started: Iterable[NodeProcess], say: Callable[[str], None]) -> None:
    """SIGTERM every node, wait for each (bounded), SIGKILL what is left. Callers that may be
    cancelled shield it: a node never outlives `up`."""
    running = [each for each in started if each.process.poll() is None]
    for each in running:
        each.process.send_signal(signal.SIGTERM)
    for each in running:
        with trio.move_on_after(STOP_TIMEOUT):
            status = await each.process.wait()
            say(f"stopped {each.node.name} (exit status {status})")
            continue
        each.process.kill()
        await each.process.wait()
        say(f"killed {each.node.name}: it did not stop within {STOP_TIMEOUT:g} s of SIGTERM")
