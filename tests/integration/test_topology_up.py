"""`amq-gateway up`, the main job: the demo topology's nodes start as processes, the file is
applied, the map and link states are shown, demo traffic arrives where the topology sends it,
a node that dies is reported and restarted, and every node stops with `up` (after --exit, or
Ctrl-C)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import trio

from tests.nodes import on_free_ports
from tests.running import RunningCommand

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
#: Bounds for a whole `up` run on 2 busy cores: start, apply, links up, traffic, stop.
RUN_TIMEOUT = 180.0


def listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def up_command(topology: Path, var: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", "up", str(topology), "--var", str(var), *extra]


class RunningUp(RunningCommand):
    """`amq-gateway up` running in the background, its output read line by line with bounds."""

    def __init__(self, topology: Path, var: Path, *extra: str) -> None:
        super().__init__(up_command(topology, var, *extra))

    def expect(self, wanted: Callable[[str], bool], timeout: float = RUN_TIMEOUT) -> str:
        return super().expect(wanted, timeout)

    def pid_of(self, node: str) -> int:
        """The pid of `node` as up's last `started`/`restarted` line gave it."""
        for line in reversed(self.seen):
            match = re.match(rf"(?:re)?started {node} on \S+ \(pid (\d+);", line)
            if match:
                return int(match.group(1))
        raise AssertionError(f"no started line for {node}:\n" + "".join(self.seen))

    def interrupt(self) -> str:
        """Ctrl-C, and the rest of the output once up has ended."""
        self.process.send_signal(signal.SIGINT)
        self.process.wait(60)
        return self.rest(10)

    def close(self) -> None:
        """Stop up (and so its nodes) if a test failed before it did."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def running(line: str) -> bool:
    return line.startswith("up: running")


def starts(prefix: str) -> Callable[[str], bool]:
    return lambda line: line.startswith(prefix)


def test_up_runs_the_demo_and_stops_every_node(tmp_path: Path) -> None:
    topology = tmp_path / "demo.toml"
    ports = on_free_ports(CONFIGS / "topology-three-regions.toml", topology)
    result = subprocess.run(
        up_command(topology, tmp_path / "var", "--traffic", "3", "--exit"),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    started = [line.split()[1] for line in out.splitlines() if line.startswith("started ")]
    assert len(started) == len(ports)
    assert "Finding Linked Brokers:" in out and "Dynamic Routes:" in out
    assert "Failed" not in out
    assert "Traffic: every message arrived where the topology sends it." in out
    assert out.count("stopped ") == len(ports)
    assert not any(listening(port) for port in ports)
    assert sorted(path.name for path in (tmp_path / "var").iterdir()) == sorted(started)


def test_ctrl_c_stops_up_and_its_nodes(tmp_path: Path) -> None:
    topology = tmp_path / "pair.toml"
    ports = on_free_ports(CONFIGS / "topology-pair.toml", topology)
    up = subprocess.Popen(
        up_command(topology, tmp_path / "var"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        lines: list[str] = []
        deadline = time.monotonic() + RUN_TIMEOUT
        assert up.stdout is not None
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            assert line, "up ended before it was running:\n" + "".join(lines)
            lines.append(line)
            if line.startswith("up: running"):
                break
        assert all(listening(port) for port in ports)
        up.send_signal(signal.SIGINT)
        rest, _ = up.communicate(timeout=60)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    assert up.returncode == 0, "".join(lines) + rest
    assert "received SIGINT: stopping" in rest
    assert rest.count("stopped ") == len(ports)
    assert not any(listening(port) for port in ports)


def test_up_refuses_a_bad_file_and_starts_nothing(tmp_path: Path) -> None:
    topology = tmp_path / "bad.toml"
    topology.write_text('[nodes.a]\nhost = "127.0.0.1"\nport = 5999\nprot = 5\n')
    result = subprocess.run(
        up_command(topology, tmp_path / "var", "--exit"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert f"{topology}:4: nodes.a.prot: unknown key" in result.stderr
    assert not (tmp_path / "var").exists()


def test_a_node_that_cannot_start_stops_the_others(tmp_path: Path) -> None:
    topology = tmp_path / "pair.toml"
    ports = on_free_ports(CONFIGS / "topology-pair.toml", topology)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", ports[1]))
        squatter.listen()
        result = subprocess.run(
            up_command(topology, tmp_path / "var", "--exit"),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
    assert result.returncode == 1
    assert "exited with status" in result.stderr and "its log" in result.stderr
    assert not listening(ports[0])


def test_a_second_up_of_the_same_file_fails_with_its_own_nodes_logs(tmp_path: Path) -> None:
    """The second `up` used to see the first one's nodes answer, say "started" and exit 0."""
    topology = tmp_path / "pair.toml"
    ports = on_free_ports(CONFIGS / "topology-pair.toml", topology)
    var = tmp_path / "var"
    first = RunningUp(topology, var)
    try:
        first.expect(running)
        for second_var, error in (
            (var, "is in use by another node"),
            (tmp_path / "other", "Address already in use"),
        ):
            second = subprocess.run(
                up_command(topology, second_var, "--exit"),
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT,
            )
            assert second.returncode == 1, second.stdout + second.stderr
            assert "started " not in second.stdout
            # The nodes start at once: whichever fails first is reported.
            assert re.search(r"amq-gateway up: node (alpha|beta) \(pid ", second.stderr), second.stderr
            assert "its log (" in second.stderr
            assert error in second.stderr
        for command in (["clean", str(topology)], ["up", str(topology), "--fresh", "--exit"]):
            refused = subprocess.run(
                [sys.executable, "-m", "gateway.cli", *command, "--var", str(var)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert refused.returncode == 1
            assert f"not removing {var / 'alpha'}: data dir" in refused.stderr
            assert "stop that node" in refused.stderr
        assert (var / "alpha" / "store.db").exists() and (var / "beta" / "store.db").exists()
        assert all(listening(port) for port in ports)
        rest = first.interrupt()
    finally:
        first.close()
    assert "up: node" not in "".join(first.seen) + rest  # the first up's nodes never ended
    assert rest.count("stopped ") == 2
    cleaned = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "clean", str(topology), "--var", str(var)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cleaned.returncode == 0, cleaned.stderr
    assert cleaned.stdout.splitlines() == [f"removed {var / 'alpha'}", f"removed {var / 'beta'}"]
    assert list(var.iterdir()) == []


def test_a_killed_node_is_reported_and_restarted(tmp_path: Path) -> None:
    topology = tmp_path / "pair.toml"
    ports = on_free_ports(CONFIGS / "topology-pair.toml", topology)
    up = RunningUp(topology, tmp_path / "var")
    try:
        up.expect(running)
        killed = up.pid_of("beta")
        os.kill(killed, signal.SIGKILL)
        report = up.expect(starts("up: node beta"))
        log = tmp_path / "var" / "beta" / "node.log"
        assert report == f"up: node beta (pid {killed}) was killed by SIGKILL; its log ({log}) ends:\n"
        up.expect(starts("up: restarting beta in 2 s"))
        tail = up.seen[up.seen.index(report) + 1 : -1]
        assert tail and all(line in log.read_text() for line in tail)
        restarted = up.expect(starts("restarted beta on "))
        assert up.pid_of("beta") != killed, restarted
        assert listening(ports[1])
        rest = up.interrupt()
    finally:
        up.close()
    assert rest.count("stopped ") == 2
    assert not any(listening(port) for port in ports)


def test_no_restart_reports_the_end_and_leaves_the_node_down(tmp_path: Path) -> None:
    topology = tmp_path / "pair.toml"
    ports = on_free_ports(CONFIGS / "topology-pair.toml", topology)
    up = RunningUp(topology, tmp_path / "var", "--no-restart")
    try:
        up.expect(running)
        killed = up.pid_of("alpha")
        os.kill(killed, signal.SIGKILL)
        up.expect(starts(f"up: node alpha (pid {killed}) was killed by SIGKILL"))
        up.expect(starts("up: alpha is not restarted (--no-restart)"))
        rest = up.interrupt()
    finally:
        up.close()
    assert "restart" not in rest.replace("--no-restart", "")
    assert rest.count("stopped ") == 1 and "stopped beta" in rest
    assert not any(listening(port) for port in ports)

    # --fresh starts from nothing: the killed run's data and log are gone.
    var = tmp_path / "var"
    fresh = subprocess.run(
        up_command(topology, var, "--fresh", "--exit"), capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    lines = fresh.stdout.splitlines()
    assert lines.index(f"removed {var / 'alpha'}") < min(
        i for i, line in enumerate(lines) if line.startswith("started ")
    )
    assert f"removed {var / 'beta'}" in lines
    assert (var / "alpha" / "node.log").read_text().count("ready: AMQP 0-9-1 listening") == 1


def test_up_writes_node_logs_readable_by_their_owner_only(tmp_path: Path) -> None:
    """A node's log names its clients, queues and users: 0600 like the store, also when an
    older run left it readable by others."""
    from topology.model import Node
    from topology.processes import start, stop_all, wait_ready

    var = tmp_path / "var"
    (var / "older").mkdir(parents=True)
    (var / "older" / "node.log").write_text("an older run's line\n")
    os.chmod(var / "older" / "node.log", 0o644)

    async def run() -> None:
        started = [await start(Node(name, "127.0.0.1", 0), var) for name in ("fresh", "older")]
        try:
            for each in started:
                await wait_ready(each)
        finally:
            await stop_all(started, lambda line: None)

    trio.run(run)
    for name in ("fresh", "older"):
        log = var / name / "node.log"
        assert os.stat(log).st_mode & 0o777 == 0o600, name
        assert "ready: AMQP 0-9-1 listening" in log.read_text()
