"""Start real node processes for tests: `amq-gateway serve` on a free loopback port.

The node's log goes to a file (no pipe to fill up); the port is read from its ready line, so
tests never guess ports. Every wait is bounded.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from topology.processes import free_port

# A node on every interface (`--host "*"`) reports 0.0.0.0 first.
READY = re.compile(r"ready: AMQP 0-9-1 listening on (?:127\.0\.0\.1|0\.0\.0\.0):(\d+)")
#: A node with a TLS listener logs this line first (a --tls-only node logs only this one).
TLS_READY = re.compile(r"ready: AMQP 0-9-1 over TLS listening on (?:127\.0\.0\.1|0\.0\.0\.0):(\d+)")
START_TIMEOUT = 20.0
STOP_TIMEOUT = 15.0


@dataclass
class NodeProcess:
    """A running `amq-gateway serve` and where to reach it."""

    process: subprocess.Popen[bytes]
    log_path: Path
    data_dir: Path | None
    port: int = 0
    args: list[str] = field(default_factory=list)
    #: The TLS listener's port (0: none).
    tls_port: int = 0

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def url(self, user: str = "guest", password: str = "guest", vhost: str = "%2F") -> str:
        return f"amqp://{user}:{password}@127.0.0.1:{self.port}/{vhost}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: the crash that durability tests need."""
        self.process.kill()
        self.process.wait(STOP_TIMEOUT)

    def stop(self) -> int:
        """SIGTERM and wait for a clean exit; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT)
                raise AssertionError(f"node did not stop on SIGTERM; log:\n{self.log()}") from None
        return self.process.returncode


#: Every node this process started, in order; `running()` filters out the ones that ended.
_STARTED: list[NodeProcess] = []


def running() -> list[NodeProcess]:
    """The nodes this process started that are still running (ready or not), oldest first:
    what a test waiting for the federation to settle looks at."""
    alive = [node for node in _STARTED if node.process.poll() is None and node.port]
    _STARTED[:] = [node for node in _STARTED if node.process.poll() is None]
    return alive


def start_node(
    workdir: Path,
    *extra: str,
    data_dir: Path | None = None,
    name: str = "test",
    port: int = 0,
    prefix: Sequence[str] = (),
) -> NodeProcess:
    """Start a node on 127.0.0.1 (in memory unless data_dir is given) and wait for its ready
    line; `prefix` runs it under another program (`prlimit --as=...`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}-{time.monotonic_ns()}.log"
    storage = ["--data-dir", str(data_dir)] if data_dir else ["--memory"]
    args = [
        *prefix,
        sys.executable,
        "-m",
        "gateway.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--name",
        name,
        *storage,
        *extra,
    ]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    node = NodeProcess(process, log_path, data_dir, args=args)
    _STARTED.append(node)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        log = node.log()
        match = READY.search(log)
        tls = TLS_READY.search(log)
        if match or (tls and "--tls-only" in args):
            node.port = int(match.group(1)) if match else 0
            node.tls_port = int(tls.group(1)) if tls else 0
            return node
        if process.poll() is not None:
            raise AssertionError(f"node exited with {process.returncode}; log:\n{node.log()}")
        time.sleep(0.05)
    node.process.kill()
    raise AssertionError(f"node not ready within {START_TIMEOUT}s; log:\n{node.log()}")


def on_free_ports(source: Path, target: Path) -> list[int]:
    """`source` with every node's port (and TLS port) replaced by a free one, written to `target`."""
    ports: list[int] = []

    def replace(match: re.Match[str]) -> str:
        ports.append(free_port())
        return f"{match.group(1)}{ports[-1]}"

    target.write_text(re.sub(r"(?m)^((?:tls_)?port\s*=\s*)\d+", replace, source.read_text()))
    return ports
