"""Captured workloads (simulations.captured, simulations.grow): the file format read back as
written, `file:line: key` errors in a workload file and in a scenario's `[workload]`, `scale`
and `grow = {nodes = N}`, durations, and what capture infers from two readings."""

from __future__ import annotations

from pathlib import Path

import pytest

from federation.formatting import Record
from simulations.captured import (
    CapturedBinding,
    CapturedPublisher,
    Workload,
    WorkloadError,
    duration_seconds,
    load_workload_text,
    summary,
    workload_toml,
)
from simulations.cli import main
from simulations.grow import edge_nodes
from simulations.scenario import Scenario, ScenarioError, load_scenario
from topology.capture import CaptureFailed, Reading, infer, key_for
from topology.live import LiveNode
from topology.loader import load_topology

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
DEMO = CONFIGS / "topology-three-regions.toml"

WORKLOAD = f"""\
[capture]
topology = "{DEMO}"
seconds = 10.0

[[publishers]]
node = "edge-eu-1"
exchange = "fed.topic"
rate = 5.5
messages = 55
keys = ["orders.eu.new"]
size = 300

[[publishers]]
node = "hub-us"
exchange = "fed.topic"
rate = 2
keys = ["prices.us.x"]

[[bindings]]
node = "edge-eu-1"
exchange = "fed.topic"
queue = "audit"
key = "prices.#"
"""


def scenario_with(tmp_path: Path, workload_table: str, workload: str = WORKLOAD) -> Scenario:
    (tmp_path / "workload.toml").write_text(workload)
    path = tmp_path / "s.toml"
    path.write_text(
        f'[scenario]\nduration = 10\nstep = 1\n\n[topology]\nfile = "{DEMO}"\n\n[workload]\n{workload_table}'
    )
    return load_scenario(path)


def problems(tmp_path: Path, workload_table: str, workload: str = WORKLOAD) -> list[str]:
    with pytest.raises(ScenarioError) as raised:
        scenario_with(tmp_path, workload_table, workload)
    return raised.value.problems


def test_a_workload_reads_back_as_written() -> None:
    written = Workload(
        seconds=60.25,
        topology="../configs/topology-three-regions.toml",
        started="2026-11-28T04:00:00Z",
        publishers=(
            CapturedPublisher("edge-eu-1", "fed.topic", 9.975, ("orders.eu.new", 'q"uote'), 601, 120),
            CapturedPublisher("hub-eu", "amq.data", 0.5, ("",), 30),
        ),
        bindings=(
            CapturedBinding("hub-eu", "amq.headers", "h", "", {"x-match": "any", "n": 3, "on": True}),
            CapturedBinding("hub-eu", "fed.topic", "audit", "orders.#"),
        ),
        notes=("captured for a test",),
    )
    read = load_workload_text(workload_toml(written), "w.toml")
    assert read.publishers == written.publishers
    assert read.bindings == written.bindings
    assert (read.seconds, read.topology, read.started) == (60.25, written.topology, written.started)
    assert workload_toml(written).startswith("# captured for a test\n")


def test_names_from_the_nodes_cannot_write_into_the_workload_file_or_the_console() -> None:
    """An exchange's name is any client's string: a finding that quotes one with a newline
    stays a comment (no publisher of its own in the file), and the console shows it escaped."""
    evil = 'x\n[[publishers]]\nnode = "hub-eu"\nexchange = "t"\nrate = 1e6\nkeys = ["k"]\x1b[2J'
    written = Workload(
        seconds=1.0,
        publishers=(CapturedPublisher("hub-eu", evil, 1.0, ("k\x1b[31m",), 1),),
        findings=(f"hub-eu {evil}: not in the topology file",),
    )
    text = workload_toml(written)
    read = load_workload_text(text, "w.toml")
    assert read.publishers == written.publishers
    assert all(line.startswith("#") for line in text.split("[capture]")[0].splitlines() if line)
    for row in summary(written):
        assert "\n" not in row and "\x1b" not in row, row


def test_a_bad_workload_file_names_every_problem_at_its_line() -> None:
    text = WORKLOAD.replace("rate = 5.5", "rate = -1").replace('queue = "audit"', 'queue = "audit"\nkind = 1')
    with pytest.raises(WorkloadError) as raised:
        load_workload_text(text.replace("seconds = 10.0\n", ""), "w.toml")
    assert raised.value.problems == [
        "w.toml:1: capture: missing key 'seconds' (the window's length in seconds)",
        "w.toml:7: publishers[0].rate: expected a number 0-1e+09, got -1",
        "w.toml:22: bindings[0].kind: unknown key (known: node, exchange, queue, key, arguments)",
    ]


def test_a_scenario_uses_a_workload_as_is(tmp_path: Path) -> None:
    scenario = scenario_with(tmp_path, 'file = "workload.toml"\n')
    assert [(p.nodes, p.exchange, p.rate, p.keys, p.size) for p in scenario.publishers] == [
        ("edge-eu-1", "fed.topic", 5.5, ("orders.eu.new",), 300),
        ("hub-us", "fed.topic", 2.0, ("prices.us.x",), 1024),  # no size counted: the default
    ]
    # The workload's binding, with its queue; the topology's [[publishers]] need no rate.
    assert ("edge-eu-1", "audit") in {(q.node, q.name) for q in scenario.topology.queues}
    assert [b.key for b in scenario.topology.bindings if b.queue == "audit"] == ["prices.#"]
    assert len(scenario.topology.nodes) == 7


def test_scale_multiplies_every_rate(tmp_path: Path) -> None:
    scenario = scenario_with(tmp_path, 'file = "workload.toml"\nscale = 100\n')
    assert [p.rate for p in scenario.publishers] == [550.0, 200.0]


def test_grow_makes_every_edge_node_n_nodes(tmp_path: Path) -> None:
    assert edge_nodes(load_topology(DEMO)) == ["edge-eu-1", "edge-eu-2", "edge-us-1", "edge-ap-1"]
    scenario = scenario_with(tmp_path, 'file = "workload.toml"\ngrow = {nodes = 3}\n')
    topology = scenario.topology
    assert len(topology.nodes) == 7 + 4 * 2
    copy = topology.nodes["edge-eu-1.3"]
    assert (copy.region, copy.port) == ("eu", topology.nodes["edge-eu-1"].port)
    # Its routes and federation to its hub, its queues and bindings, its publishers.
    assert {
        (r.source, r.destination) for r in topology.routes if "edge-eu-1.3" in (r.source, r.destination)
    } == {
        ("edge-eu-1.3", "hub-eu"),
        ("hub-eu", "edge-eu-1.3"),
    }
    assert [(f.child, f.parent) for f in topology.federations if f.child == "edge-eu-1.3"] == [
        ("edge-eu-1.3", "hub-eu")
    ]
    assert {(b.queue, b.key) for b in topology.bindings if b.node == "edge-eu-1.3"} == {
        ("metrics", "metrics.#"),
        ("audit", "prices.#"),
    }
    assert [p.nodes for p in scenario.publishers] == ["edge-eu-1", "edge-eu-1.2", "edge-eu-1.3", "hub-us"]


def test_grow_and_scale_simulate_that_much_more(tmp_path: Path) -> None:
    from simulations import reference
    from simulations.validation import simulated_counts

    def published(table: str) -> int:
        counts = simulated_counts(reference.tables(scenario_with(tmp_path, table)))
        return sum(counts.published.values())

    alone = published('file = "workload.toml"\n')
    assert alone == 55 + 20  # 10 s at 5.5 and 2 msg/s
    assert published('file = "workload.toml"\ngrow = {nodes = 4}\nscale = 10\n') == 10 * (4 * 55 + 20)


def test_bad_workload_tables_are_errors_at_their_lines(tmp_path: Path) -> None:
    s = tmp_path / "s.toml"
    assert problems(tmp_path, 'file = "workload.toml"\nscale = 0\ngrow = {edges = 2}\n') == [
        f"{s}:10: workload.scale: expected a number 1e-06-1e+06, got 0",
        f"{s}:11: workload.grow: expected a table {{nodes = N}}: every edge node becomes N nodes, N 1-10000, got a table",
    ]
    assert problems(tmp_path, "scale = 2\n") == [f"{s}:8: workload: missing key 'file' (the workload file)"]


def test_a_workload_naming_what_the_topology_lacks_is_refused_at_its_line(tmp_path: Path) -> None:
    workload = WORKLOAD.replace('node = "hub-us"', 'node = "hub-xx"').replace(
        'exchange = "fed.topic"\nqueue', 'exchange = "nope"\nqueue'
    )
    w = tmp_path / "workload.toml"
    assert problems(tmp_path, 'file = "workload.toml"\n', workload) == [
        f"{w}:13: publishers[1]: node: the topology has no node 'hub-xx'",
        f"{w}:19: bindings[0]: exchange: the topology has no exchange 'nope' on edge-eu-1",
    ]


def test_a_topology_without_edge_nodes_cannot_grow(tmp_path: Path) -> None:
    ring = (CONFIGS / "topology-ring.toml").read_text()
    (tmp_path / "ring.toml").write_text(ring)
    (tmp_path / "workload.toml").write_text("[capture]\nseconds = 1\n")
    (tmp_path / "s.toml").write_text(
        '[scenario]\nduration = 1\nstep = 1\n[topology]\nfile = "ring.toml"\npublishers_rate = 0\n'
        '[workload]\nfile = "workload.toml"\ngrow = {nodes = 2}\n'
    )
    with pytest.raises(ScenarioError) as raised:
        load_scenario(tmp_path / "s.toml")
    assert raised.value.problems == [
        f"{tmp_path / 's.toml'}:9: workload.grow: the topology has no edge node to grow "
        "(a node joined to exactly one other, which is joined to more)"
    ]


@pytest.mark.parametrize(
    ("text", "seconds"), [("60s", 60.0), ("2m", 120.0), ("1.5h", 5400.0), ("500ms", 0.5), ("90", 90.0)]
)
def test_durations(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "-1s", "0", "10x", "inf", "nan"])
def test_bad_durations_say_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="give a positive number with s, m, h or ms"):
        duration_seconds(text)


def test_capture_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "w.toml")
    with pytest.raises(SystemExit) as exited:
        main(["capture", "--from", str(DEMO), "--duration", "soon", "-o", out])
    assert exited.value.code == 2
    assert "'soon' is not a duration" in capsys.readouterr().err
    assert main(["capture", "--from", str(DEMO), "-o", out]) == 2  # no live side handed in
    assert "use the amq-sim console script" in capsys.readouterr().err
    missing = tmp_path / "none.toml"
    assert main(["capture", "--from", str(missing), "-o", out], capture=lambda *_: Workload(1.0)) == 1
    assert str(missing) in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kind", "binding", "key"),
    [
        ("topic", "orders.#", "orders"),
        ("topic", "*.eu.*", "x.eu.x"),
        ("topic", "#", "x"),
        ("direct", "k", "k"),
        ("fanout", "anything", ""),
        ("headers", "", ""),
    ],
)
def test_a_key_made_from_a_binding_matches_it(kind: str, binding: str, key: str) -> None:
    from gateway.routing.matchers import matcher_for

    assert key_for(kind, binding) == key
    if kind in ("topic", "direct"):
        matcher = matcher_for(kind)
        matcher.bind(binding, {}, "q")
        assert matcher.match(key, {}) == {"q"}


def exchange(name: str, published: int, unroutable: int = 0) -> Record:
    return {"name": name, "type": "topic", "published": published, "unroutable": unroutable}


def route(messages: int, in_flight: int) -> Record:
    """beta's dynamic route pulling alpha's fed.topic (alpha at 127.0.0.1:5711)."""
    return {
        "kind": "dynamic", "dest": "beta", "src": "127.0.0.1:5711", "exchange": "fed.topic",
        "key": None, "queue": None, "src_local": False, "messages": messages, "bytes": 100 * messages,
        "in_flight": in_flight,
    }  # fmt: skip


def reading(at: float, alpha: list[Record], beta: list[Record], routes: list[Record]) -> Reading:
    return Reading(at, {"alpha": LiveNode(exchanges=alpha), "beta": LiveNode(exchanges=beta, routes=routes)})


PAIR = load_topology(CONFIGS / "topology-pair.toml")


def test_what_routes_delivered_or_had_in_flight_is_no_publish() -> None:
    first = reading(0.0, [exchange("fed.topic", 5)], [exchange("fed.topic", 3)], [route(3, 0)])
    last = reading(
        4.0,
        [exchange("fed.topic", 45, unroutable=2), exchange("app.x", 8)],
        # 40 more routed in, 3 more published by clients, 1 counted but not yet by the route.
        [exchange("fed.topic", 47)],
        [route(43, 1)],
    )
    workload = infer(PAIR, first, last)
    assert [(p.node, p.exchange, p.messages, p.rate, p.size) for p in workload.publishers] == [
        ("alpha", "app.x", 8, 2.0, None),
        ("alpha", "fed.topic", 40, 10.0, 100),
        ("beta", "fed.topic", 4, 1.0, 100),
    ]
    assert workload.findings == (
        "alpha app.x: not in the topology file: declare it there, or scenarios refuse this workload",
        "alpha fed.topic: 2 of 40 reached nothing (the simulation routes by the keys written)",
    )
    # Within what was in flight at the readings: transit across the window's edges.
    last = reading(4.0, [exchange("fed.topic", 45)], [exchange("fed.topic", 44)], [route(43, 1)])
    assert [p.node for p in infer(PAIR, first, last).publishers] == ["alpha"]
    assert infer(PAIR, first, last).findings == (
        "beta fed.topic: 1 left out, no more than the 1 in flight into it",
    )


def test_counters_that_went_back_stop_the_capture() -> None:
    first = reading(0.0, [exchange("fed.topic", 25)], [], [])
    with pytest.raises(CaptureFailed, match="alpha's counters went back"):
        infer(PAIR, first, reading(2.0, [exchange("fed.topic", 5)], [], []))
