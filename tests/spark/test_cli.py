"""`amq-sim` as a user runs it: check, generate, run with the reference engine, report. No
Spark here (the Spark engine's run is test_standalone_cluster.py's)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from simulations import auto
from simulations.cli import main
from simulations.events import scenario_events
from simulations.report import DRAWN_NODES, busiest_part
from simulations.scenario import load_scenario, load_scenario_text
from simulations.workload import with_subscribers
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
    assert {p.name for p in out.iterdir()} == {"links", "nodes", "queues", "delays", "exchanges"}
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


def test_auto_runs_a_small_scenario_on_the_reference_engine_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "small"
    assert main(["run", str(ROOT / "simulations" / "small.toml"), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    chose = [line for line in printed.err.splitlines() if "engine" in line]
    assert len(chose) == 1 and chose[0].startswith(
        "amq-sim: engine reference (auto: 28,200 publishes, 7 nodes, 28 bindings, 100 keys; "
        "the reference engine needs about 0.2 GB of the "
    )
    assert "scenario small (reference engine" in printed.out
    peak = re.search(r"^peak memory (\d+\.\d\d) GB \(amq-sim and its child processes", printed.out, re.M)
    assert peak is not None and float(peak.group(1)) > 0
    assert not (out / "spark.log").exists()


def test_auto_takes_spark_beyond_the_reference_engines_memory_or_given_a_master(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario = load_scenario(ROOT / "simulations" / "small.toml")
    size = auto.Size.of(scenario)
    assert (size.publishes, size.bindings, size.link_steps) == (
        sum(1 for _ in scenario_events(scenario)),
        len(with_subscribers(scenario).bindings),
        14 * scenario.steps,  # the 14 links of `links used` in the summary, every step
    )
    monkeypatch.setattr(auto, "free_memory", lambda: 300_000_000)
    choice = auto.choose(scenario, None)
    assert choice.engine == "spark" and choice.reason.endswith(
        "the reference engine needs about 0.2 GB of the 0.3 GB free, more than 50% of it"
    )
    assert auto.choose(scenario, "spark://127.0.0.1:7077") == auto.Choice(
        "spark",
        "28,200 publishes, 7 nodes, 28 bindings, 100 keys; a Spark master was given",
    )


@pytest.mark.parametrize(("cores", "engine"), [(2, "reference"), (8, "spark")])
def test_auto_takes_spark_for_many_publishes_on_many_cores(
    monkeypatch: pytest.MonkeyPatch, cores: int, engine: str
) -> None:
    scenario = load_scenario_text(
        '[scenario]\nduration = 100\nstep = 1\n[topology]\ngenerator = "hierarchy"\nhubs = 1\nedges = 1\n'
        '[[publishers]]\nnodes = "*"\nexchange = "sim.topic"\nrate = 20000\n',
        str(ROOT / "simulations" / "x.toml"),
    )
    assert auto.Size.of(scenario).publishes == 3 * 20_000 * 100 >= auto.SPARK_PUBLISHES
    monkeypatch.setattr(auto, "free_memory", lambda: 100 * 10**9)
    monkeypatch.setattr(auto.os, "cpu_count", lambda: cores)
    assert auto.choose(scenario, None).engine == engine


def test_a_jvm_that_does_not_start_is_said_with_where_its_output_is(tmp_path: Path) -> None:
    """Spark's output goes to the run's log from the JVM's start, so a JVM that fails says
    why there, and the console says where."""
    out = tmp_path / "corners"
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": "--no-such-option-for-amq-sim pyspark-shell"}
    result = subprocess.run(
        [sys.executable, "-m", "simulations.cli", "run", str(SCENARIOS / "corners.toml"), "--engine", "spark"]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"amq-sim: Spark did not start (JAVA_GATEWAY_EXITED); its output is in {out}/spark.log"
    )
    assert "Unrecognized option: --no-such-option-for-amq-sim" in (out / "spark.log").read_text()
    assert "no-such-option" not in result.stderr + result.stdout
