"""`amq-sim capture` end to end: a federation run by `amq-gateway up`, a known workload
published with pika during the capture's window, and the workload file checked against it:
what clients published per node and exchange (not what routes, a push route and a federation
delivered into the other nodes' exchanges), the keys, the sizes and the bindings made live."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from simulations.captured import load_workload
from tests.integration.test_topology_up import RunningUp, running
from tests.nodes import on_free_ports
from tests.running import RunningCommand

TOPOLOGY = Path(__file__).parent / "capture" / "star-topology.toml"
#: The capture's window: long enough for the publishes below and their hops on 2 busy cores.
WINDOW = 5
#: Bound on the capture's whole run (two readings and the window).
CAPTURE_TIMEOUT = 90.0

#: (node, exchange, routing key, body bytes, messages) published during the window.
PUBLISHED = [
    ("edge-1", "t", "orders.eu.new", 100, 30),
    ("edge-2", "t", "prices.y", 100, 6),
    ("edge-2", "amq.data", "metrics.edge-2", 50, 12),
    ("hub", "x", "k", 20, 9),
]


@pytest.fixture
def federation(tmp_path: Path) -> Iterator[tuple[Path, dict[str, int]]]:
    """The star topology running under `amq-gateway up`: its file and each node's port."""
    topology = tmp_path / "star.toml"
    ports = dict(zip(("hub", "edge-1", "edge-2"), on_free_ports(TOPOLOGY, topology), strict=True))
    up = RunningUp(topology, tmp_path / "var")
    try:
        up.expect(running)
        yield topology, ports
    finally:
        up.close()


def channel(port: int) -> pika.adapters.blocking_connection.BlockingChannel:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    opened = connection.channel()
    opened.confirm_delivery()
    return opened


class Capture(RunningCommand):
    """`amq-sim capture` running in the background, its output read line by line."""

    def __init__(self, topology: Path, output: Path) -> None:
        super().__init__(
            [
                sys.executable,
                "-c",
                "import sys; from gateway.cli import amq_sim; sys.exit(amq_sim())",
                "capture",
                "--from",
                str(topology),
                "--duration",
                f"{WINDOW}s",
                "-o",
                str(output),
            ]
        )

    def finish(self) -> str:
        self.process.wait(CAPTURE_TIMEOUT)
        self.rest(CAPTURE_TIMEOUT)
        return "".join(self.seen)


def capture_published(topology: Path, ports: dict[str, int], output: Path) -> str:
    """Run `amq-sim capture` into `output` while PUBLISHED is published (confirmed) in its
    window; its output."""
    capture = Capture(topology, output)
    try:
        capture.expect(lambda line: line.startswith("capture: read 3 nodes"), CAPTURE_TIMEOUT)
        for node, exchange, key, size, count in PUBLISHED:
            publishing = channel(ports[node])
            for _ in range(count):
                publishing.basic_publish(exchange, key, b"x" * size)
            publishing.connection.close()
        out = capture.finish()
    finally:
        if capture.process.poll() is None:
            capture.process.kill()
            capture.process.wait()
    assert capture.process.returncode == 0, out
    return out


def test_capture_writes_what_clients_published(
    federation: tuple[Path, dict[str, int]], tmp_path: Path
) -> None:
    topology, ports = federation
    # A queue an application binds live: not in the file, so the workload carries it.
    hub = channel(ports["hub"])
    hub.queue_declare("audit")
    hub.queue_bind("audit", "t", "prices.*")
    output = tmp_path / "workload.toml"
    try:
        out = capture_published(topology, ports, output)
    finally:
        hub.connection.close()
    workload = load_workload(output)
    found = {(p.node, p.exchange): p for p in workload.publishers}
    # Exactly the clients' publishes: the 30 orders edge-1 sent are in hub's and edge-2's `t`
    # too, hub's 9 on x in edge-1's (a push route), edge-2's metrics in hub's amq.data (a
    # federation); none of those is a publisher.
    assert {at: p.messages for at, p in found.items()} == {
        (node, exchange): count for node, exchange, _, _, count in PUBLISHED
    }, out
    for p in workload.publishers:
        assert p.rate == pytest.approx(p.messages / workload.seconds, abs=0.001)
    assert workload.seconds >= WINDOW
    # Keys: the file's [[publishers]] key for edge-1; else one per binding on the exchange.
    assert found[("edge-1", "t")].keys == ("orders.eu.new",)
    assert sorted(found[("edge-2", "t")].keys) == ["orders", "orders.eu.x", "prices.x"]
    assert found[("edge-2", "amq.data")].keys == ("metrics",)
    assert found[("hub", "x")].keys == ("k",)
    # Sizes: what routes and the federation carried on each exchange, per message.
    assert {at: p.size for at, p in found.items()} == {
        ("edge-1", "t"): 100,
        ("edge-2", "t"): 100,
        ("edge-2", "amq.data"): 50,
        ("hub", "x"): 20,
    }
    assert [(b.node, b.exchange, b.queue, b.key) for b in workload.bindings] == [
        ("hub", "t", "audit", "prices.*")
    ]
    assert workload.topology == "star.toml"


def test_a_captured_workload_validates_at_scale_1(
    federation: tuple[Path, dict[str, int]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The workload as captured, simulated and run live by `amq-sim validate`: equal counts."""
    from gateway.cli import amq_sim
    from tests.integration.test_validate import assert_agrees

    topology, ports = federation
    capture_published(topology, ports, tmp_path / "workload.toml")
    scenario = tmp_path / "captured.toml"
    scenario.write_text(
        '[scenario]\nname = "captured"\nduration = 4\nstep = 0.5\n\n'
        '[topology]\nfile = "star.toml"\n\n[workload]\nfile = "workload.toml"\n'
    )
    status = amq_sim(["validate", str(scenario), "--var", str(tmp_path / "validate")])
    out = capsys.readouterr().out
    assert_agrees(status, out, [("queue", "hub/orders"), ("queue", "edge-2/eu"), ("queue", "edge-1/xq")])
