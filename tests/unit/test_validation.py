"""amq-sim validate's comparison and its command line, with the live side handed in (the
live runs themselves: tests/integration/test_validate.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulations import reference
from simulations.cli import main
from simulations.scenario import Scenario, load_scenario
from simulations.validation import LiveCounts, LiveRunFailed, compare, report_lines, simulated_counts

KINDS = Path(__file__).parent.parent / "integration" / "validate" / "kinds.toml"


def test_the_simulated_counts_sum_the_tables() -> None:
    tables = reference.tables(load_scenario(KINDS))
    counts = simulated_counts(tables)
    queues = tables["queues"].set_index(["node", "queue"])["delivered"]
    assert counts.queues == {key: int(value) for key, value in queues.items()}
    links = tables["links"]
    a_b = links[links["link"] == "a>b"]
    assert counts.links["a>b"] == int((a_b["messages"] - a_b["lost"]).sum()) > 0
    assert sum(counts.published.values()) == int(tables["nodes"]["published"].sum()) > 0


def test_every_count_either_side_has_is_compared() -> None:
    model = LiveCounts(queues={("a", "q"): 3}, links={"a>b": 2}, published={"a": 5})
    live = LiveCounts(queues={("a", "q"): 3, ("b", "q"): 1}, links={"a>b": 2}, published={"a": 5})
    rows = compare(model, live)
    assert [(row.kind, row.name, row.simulated, row.live, row.agrees) for row in rows] == [
        ("queue", "a/q", 3, 3, True),
        ("queue", "b/q", 0, 1, False),
        ("link", "a>b", 2, 2, True),
        ("published", "a", 5, 5, True),
    ]
    lines = report_lines(rows)
    assert lines[2].startswith("!=queue") and lines[-1] == "validate: 1 of 4 counts differ (marked !=)"


def test_validate_exits_1_on_a_difference_and_0_on_none(capsys: pytest.CaptureFixture[str]) -> None:
    simulated = simulated_counts(reference.tables(load_scenario(KINDS)))

    def agreeing(scenario: Scenario, var: Path, say: object) -> LiveCounts:
        return LiveCounts(dict(simulated.queues), dict(simulated.links), dict(simulated.published))

    def one_lost(scenario: Scenario, var: Path, say: object) -> LiveCounts:
        counts = agreeing(scenario, var, say)
        counts.queues[("a", "q")] -= 1
        return counts

    rows = len(compare(simulated, simulated))
    assert main(["validate", str(KINDS)], live=agreeing) == 0
    assert f"validate: all {rows} counts agree" in capsys.readouterr().out
    assert main(["validate", str(KINDS)], live=one_lost) == 1
    out = capsys.readouterr().out
    assert "!=queue      a/q" in out and f"validate: 1 of {rows} counts differ" in out


def test_a_live_run_that_cannot_follow_the_scenario_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    def failing(scenario: Scenario, var: Path, say: object) -> LiveCounts:
        raise LiveRunFailed("link a>b was not back within 130 s of 9 s")

    assert main(["validate", str(KINDS)], live=failing) == 1
    assert capsys.readouterr().err == "amq-sim validate: link a>b was not back within 130 s of 9 s\n"


def test_validate_needs_the_live_side(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(KINDS)]) == 2
    assert "use the amq-sim console script" in capsys.readouterr().err
