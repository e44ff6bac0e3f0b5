"""A scenario's publish events (simulations.events, `amq-sim events`): the workload's draws,
in time order across nodes, with their messages and properties, written to Parquet or CSV
and read back equal. No Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from simulations import events as events_module
from simulations.cli import main
from simulations.events import SCHEMA, Event, scenario_events
from simulations.scenario import Scenario, load_scenario_text
from simulations.workload import events, headers_of, publisher_draws, publishing, routing_key

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = """[scenario]
seed = 5
duration = 3
step = 0.1
[topology]
generator = "hierarchy"
hubs = 2
edges = 2
[keys]
words = [3, 2]
distribution = "zipf"
[[publishers]]
nodes = "edge-*"
exchange = "sim.topic"
rate = 40
pattern = "bursts"
burst_every = 1
burst_length = 0.3
[[publishers]]
nodes = "hub-*"
exchange = "sim.topic"
rate = 25
keys = ["orders.eu", "orders.us", "a1.b0"]
persistent = false
ttl_ms = 1500
[[publishers]]
nodes = "root"
exchange = "sim.fanout"
rate = 7
key = "audit"
mandatory = true
"""


@pytest.fixture
def scenario(tmp_path: Path) -> Scenario:
    (tmp_path / "s.toml").write_text(SCENARIO)
    return load_scenario_text(SCENARIO, str(tmp_path / "s.toml"))


def test_the_events_are_the_workloads_in_time_order(scenario: Scenario) -> None:
    """Every node's events as the engines draw them, merged by step: within a step by
    publisher entry and node, then in the node's own order."""
    draws = publisher_draws(scenario)
    expected = []
    for number, (entry, node) in enumerate(publishing(scenario)):
        drawn = events(scenario, entry, node, draws[entry])
        p = scenario.publishers[entry]
        for index, (step, key, size) in enumerate(zip(*drawn.values(), strict=True)):
            message = (
                node,
                p.exchange,
                routing_key(scenario.keys, int(key)),
                headers_of(scenario.keys, int(key)),
            )
            expected.append(
                ((int(step), number, index), (*message, int(size), p.persistent, p.mandatory, p.ttl_ms))
            )
    expected.sort(key=lambda row: row[0])
    found = list(scenario_events(scenario))
    assert [
        (e.node, e.exchange, e.routing_key, e.headers, e.size, e.persistent, e.mandatory, e.ttl_ms)
        for e in found
    ] == [row for _, row in expected]
    assert [e.step for e in found] == [step for (step, _, _), _ in expected]
    assert all(e.time == e.step * scenario.step_ms / 1000 for e in found)
    assert {e.routing_key for e in found if e.node.startswith("hub-")} == {"orders.eu", "orders.us", "a1.b0"}
    assert {(e.routing_key, e.mandatory, e.ttl_ms) for e in found if e.node == "root"} == {
        ("audit", True, None)
    }


def test_windows_of_steps_change_nothing(scenario: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = list(scenario_events(scenario))
    monkeypatch.setattr(events_module, "WINDOW_EVENTS", 37)  # windows end inside bursts
    assert len(list(events_module.windows(scenario))) > 10
    assert list(scenario_events(scenario)) == whole


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_an_events_file_reads_back_as_the_events(
    scenario: Scenario, tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / f"events{suffix}"
    assert main(["events", scenario.path, "-o", str(out)]) == 0
    expected = list(scenario_events(scenario))
    assert capsys.readouterr().out == f"wrote {out}: {len(expected):,} events of scenario s\n"
    if suffix == ".parquet":
        table = pq.read_table(out)
    else:
        options = pa_csv.ConvertOptions(column_types=SCHEMA, strings_can_be_null=False)
        table = pa_csv.read_csv(out, convert_options=options)
    assert table.schema == SCHEMA
    rows = table.to_pylist()
    assert [Event(**(row | {"headers": json.loads(row["headers"])})) for row in rows] == expected


def test_an_events_file_of_another_kind_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["events", str(ROOT / "simulations" / "small.toml"), "-o", str(tmp_path / "events.json")])
    assert exited.value.code == 2
    assert f"events: {tmp_path}/events.json must end in .parquet or .csv" in capsys.readouterr().err
    assert not (tmp_path / "events.json").exists()
