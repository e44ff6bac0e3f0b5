"""`amq-sim` as a user runs it: check, generate, run with the reference engine, report. No
Spark here (the Spark engine's run is test_standalone_cluster.py's)."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from simulations.cli import main
from simulations.report import DRAWN_NODES, busiest_part
from tests.spark.conftest import SCENARIOS
from topology.checks import has_errors, run_checks
from topology.loader import load_topology

ROOT = Path(__file__).resolve().parents[2]


def test_check_says_what_a_scenario_holds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(ROOT / "simulations" / "small.toml")]) == 0
    assert "scenario small: 7 nodes, 14 routes, 2 federations" in capsys.readouterr().out


def test_check_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[scenario]\nduration = 1\nstep = 0\nspeed = 2\n[topology]\ngenerator = "hierarchy"\nhubs = 1\nedges = 1\n'
    )
    assert main(["check", str(bad)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{bad}:3: scenario.step: expected a number 0.001-1e+06, got 0",
        f"{bad}:4: scenario.speed: unknown key (known: name, seed, duration, step, restart)",
    ]


def test_generate_writes_a_topology_file_the_planner_accepts(tmp_path: Path) -> None:
    out = tmp_path / "ring.toml"
    assert main(["generate", "ring-of-regions:hubs=4,edges=2,seed=9", "-o", str(out)]) == 0
    topology = load_topology(out)
    assert len(topology.nodes) == 12 and not has_errors(run_checks(topology))


def test_run_then_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "corners"
    assert main(["run", str(SCENARIOS / "corners.toml"), "--engine", "reference", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "scenario corners (reference engine" in printed.out and "duplicates" in printed.out
    assert "amq-sim: events" in printed.err
    assert {p.name for p in out.iterdir()} == {"links", "nodes", "queues", "delays"}
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    for plot in ("busiest-links.png", "backlog.png", "delays.png", "topology.png"):
        assert f'src="{plot}"' in page and (out / plot).stat().st_size > 1000


def test_report_on_a_large_topology_draws_its_busiest_links(tmp_path: Path) -> None:
    """Past DRAWN_NODES nodes the topology plot keeps the busiest links and their ends: a
    spring layout of every node would be a blot, and networkx needs scipy for one past 500)."""
    scenario = tmp_path / "big.toml"
    scenario.write_text(
        """[scenario]
duration = 2
step = 1
[topology]
generator = "hierarchy"
hubs = 4
nodes = 600
[keys]
words = [4]
[[publishers]]
nodes = "edge-*"
exchange = "sim.topic"
rate = 2
[[subscribers]]
nodes = "*"
exchange = "sim.topic"
type = "topic"
count = 1
"""
    )
    out = tmp_path / "big"
    assert main(["run", str(scenario), "--engine", "reference", "--out", str(out)]) == 0
    assert main(["report", str(out)]) == 0
    assert (out / "topology.png").stat().st_size > 1000
    graph: nx.Graph[str] = nx.Graph()
    graph.add_edges_from((f"n{i}", f"n{i + 1}", {"load": i}) for i in range(2 * DRAWN_NODES))
    kept = busiest_part(graph)
    loads: list[int] = [kept.edges[edge]["load"] for edge in kept.edges]
    assert len(kept) == DRAWN_NODES and min(loads) > DRAWN_NODES  # the heaviest links, none other
