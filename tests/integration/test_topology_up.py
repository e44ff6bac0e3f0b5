"""`amq-gateway up`, the main job: the demo topology's nodes start as processes, the file is
applied, the map and link states are shown, demo traffic arrives where the topology sends it,
and every node stops with `up` (after --exit, or Ctrl-C)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.nodes import on_free_ports

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
#: Bounds for a whole `up` run on 2 busy cores: start, apply, links up, traffic, stop.
RUN_TIMEOUT = 180.0


def listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def up_command(topology: Path, var: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", "up", str(topology), "--var", str(var), *extra]


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
