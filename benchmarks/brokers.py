"""Start and stop the brokers under test as plain child processes on spare loopback ports.

Neither broker is a system service here: each run gets its own temp dir, ports and logs, so a
benchmark never touches (or is disturbed by) a broker someone else is running.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from simulations.procstats import process_tree

from .wire import Connection

HOST = "127.0.0.1"
RABBITMQ_SCRIPT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
# The unwrapped CLI next to the server script: /usr/sbin/rabbitmqctl would su to the rabbitmq
# user and talk to the system node instead of ours.
RABBITMQCTL = RABBITMQ_SCRIPT.parent / "rabbitmqctl"


class BrokerUnavailable(Exception):
    """The broker is not installed or did not come up; the message says which and why."""


@dataclass(frozen=True)
class RunningBroker:
    name: str
    host: str
    port: int
    pid: int  # root of the process tree whose CPU and memory we measure
    log: Path
    # The environment it was started with; rabbitmqctl needs it to find the node (epmd port,
    # node name, cookie in HOME).
    env: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def spare_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _log_tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_for_port(proc: subprocess.Popen[bytes], port: int, log: Path, timeout: float) -> None:
    """Poll until the port accepts connections: logs are for people, the port is the contract."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrokerUnavailable(f"exited with {proc.returncode}:\n{_log_tail(log)}")
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise BrokerUnavailable(f"port {port} not open after {timeout:.0f} s:\n{_log_tail(log)}")


def _stop(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM (both brokers stop cleanly on it), then SIGKILL what is left of the tree."""
    if proc.poll() is None:
        tree = process_tree(proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            for pid in tree:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait()


@contextmanager
def _child(
    name: str, argv: list[str], env: dict[str, str], workdir: Path, port: int, boot: float
) -> Iterator[RunningBroker]:
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        _wait_for_port(proc, port, log, boot)
        yield RunningBroker(name, HOST, port, proc.pid, log, env)
    finally:
        _stop(proc, grace=60)


def server_properties(broker: RunningBroker) -> dict[str, str]:
    """What the broker says it is (product, version, platform), for the report."""
    probe = Connection.open(broker.host, broker.port)
    probe.close()
    wanted = ("product", "version", "platform")
    return {k: str(v) for k, v in probe.server_properties.items() if k in wanted}


def rabbitmq_installed() -> bool:
    return RABBITMQ_SCRIPT.exists() and shutil.which("epmd") is not None


def install_rabbitmq() -> None:
    """Install Debian's rabbitmq-server (as root, or through sudo) for the peer measurements;
    its service is not used (each run starts its own node), so it is stopped if apt started it."""
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print("benchmarks: installing rabbitmq-server with apt-get", file=sys.stderr)
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "rabbitmq-server"]):
        result = subprocess.run([*sudo, *command], env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise BrokerUnavailable(
                f"rabbitmq-server is not installed and `{' '.join(command)}` failed:"
                f" {result.stderr.strip()[-500:]}"
            )
    subprocess.run([*sudo, "service", "rabbitmq-server", "stop"], capture_output=True)


@contextmanager
def rabbitmq(workdir: Path, plugins: tuple[str, ...] = ()) -> Iterator[RunningBroker]:
    """A throwaway RabbitMQ node with its own mnesia, logs, node name, ports and epmd.

    We run our own epmd in the foreground on a spare port so that the Erlang VM does not
    daemonise one that would outlive the run, and only the plugins a scenario needs (the
    management plugin would add CPU and memory that the gateway has no counterpart for).
    Several nodes side by side each get their own workdir.
    """
    if not rabbitmq_installed():
        install_rabbitmq()
    workdir.mkdir(parents=True, exist_ok=True)
    port, dist_port, epmd_port = spare_port(), spare_port(), spare_port()
    (workdir / "enabled_plugins").write_text(f"[{','.join(plugins)}].\n")
    (workdir / "rabbitmq-env.conf").write_text("")
    env = {
        **os.environ,
        "HOME": str(workdir),  # the Erlang cookie goes here
        "ERL_EPMD_PORT": str(epmd_port),
        "RABBITMQ_NODENAME": f"bench{port}@localhost",
        "RABBITMQ_NODE_IP_ADDRESS": HOST,
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
        "RABBITMQ_LOG_BASE": str(workdir / "log"),
        "RABBITMQ_CONF_ENV_FILE": str(workdir / "rabbitmq-env.conf"),
        "RABBITMQ_CONFIG_FILE": str(workdir / "rabbitmq"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(workdir / "advanced.config"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "enabled_plugins"),
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
    }
    epmd_argv = [str(shutil.which("epmd")), "-port", str(epmd_port), "-address", HOST]
    epmd = subprocess.Popen(
        epmd_argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_for_port(epmd, epmd_port, workdir / "rabbitmq.log", 10)
        with _child("rabbitmq", [str(RABBITMQ_SCRIPT)], env, workdir, port, 120) as broker:
            yield broker
    finally:
        _stop(epmd, grace=5)


def rabbitmqctl(node: RunningBroker, *args: str, timeout: float = 60) -> str:
    """Run rabbitmqctl against a node the harness started; its output, or BrokerUnavailable."""
    argv = [str(RABBITMQCTL), "--node", node.env["RABBITMQ_NODENAME"], *args]
    try:
        done = subprocess.run(
            argv, env=dict(node.env), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise BrokerUnavailable(f"rabbitmqctl {args[0]}: no answer after {timeout:.0f} s") from None
    if done.returncode != 0:
        raise BrokerUnavailable(f"rabbitmqctl {' '.join(args)}: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def default_gateway_command() -> Path:
    """The amq-gateway console script of the virtualenv running the harness."""
    return Path(sys.executable).parent / "amq-gateway"


@contextmanager
def gateway(
    workdir: Path, command: Path, name: str = "bench", extra: Sequence[str] = ()
) -> Iterator[RunningBroker]:
    """Our node with a data dir, so the persistent scenario really writes to disk; `extra`
    flags go to `amq-gateway serve` (e.g. --attach).

    Nodes of one federation need distinct names: a node refuses a link whose peer has its name.
    """
    if not command.exists():
        raise BrokerUnavailable(f"{command} does not exist (pip install -e . in the venv)")
    workdir.mkdir(parents=True, exist_ok=True)
    port = spare_port()
    argv = [
        str(command),
        "serve",
        "--host",
        HOST,
        "--port",
        str(port),
        "--data-dir",
        str(workdir / "data"),
        "--name",
        name,
        *extra,
    ]
    with _child("gateway", argv, dict(os.environ), workdir, port, 60) as broker:
        yield broker
