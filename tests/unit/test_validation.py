"""amq-sim validate's comparison and its command line, with the live side handed in (the
live runs themselves: tests/integration/test_validate.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from simulations import reference
from simulations.cli import main
from simulations.scenario import Scenario, load_scenario, load_scenario_text
from simulations.validation import LiveCounts, LiveRunFailed, compare, report_lines, simulated_counts
from topology.validate import MAX_NODES, ValidateFailed, Wires, moments, validate

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
    exchanges = tables["exchanges"].set_index(["node", "exchange"])["published"]
    assert counts.exchanges == {key: int(value) for key, value in exchanges.items()}
    # Into b's "t" only what arrives over a>b (b publishes its own 40 too), into c's only over b>c.
    b_c = links[links["link"] == "b>c"]
    assert counts.exchanges[("b", "t")] == 40 + counts.links["a>b"]
    assert counts.exchanges[("c", "t")] == int((b_c["messages"] - b_c["lost"]).sum()) > 0


def test_every_count_either_side_has_is_compared() -> None:
    model = LiveCounts(
        queues={("a", "q"): 3}, links={"a>b": 2}, published={"a": 5}, exchanges={("b", "t"): 2}
    )
    live = LiveCounts(
        queues={("a", "q"): 3, ("b", "q"): 1},
        links={"a>b": 2},
        published={"a": 5},
        exchanges={("b", "t"): 2, ("a", "t"): 5},
        looped={("a", "t"): 1},
    )
    rows = compare(model, live)
    assert [(row.kind, row.name, row.simulated, row.live, row.agrees) for row in rows] == [
        ("queue", "a/q", 3, 3, True),
        ("queue", "b/q", 0, 1, False),
        ("link", "a>b", 2, 2, True),
        ("published", "a", 5, 5, True),
        ("exchange", "a/t", 0, 5, False),
        ("exchange", "b/t", 2, 2, True),
        ("looping", "a/t", 0, 1, False),
    ]
    lines = report_lines(rows)
    assert lines[2].startswith("!=queue") and lines[-1] == "validate: 3 of 7 counts differ (marked !=)"


def test_validate_exits_1_on_a_difference_and_0_on_none(capsys: pytest.CaptureFixture[str]) -> None:
    simulated = simulated_counts(reference.tables(load_scenario(KINDS)))

    def agreeing(scenario: Scenario, var: Path, say: object) -> LiveCounts:
        return copy.deepcopy(simulated)

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


def test_the_live_run_follows_the_models_moments_in_order() -> None:
    scenario = load_scenario(KINDS.parent / "chain-node.toml")
    found = moments(scenario, {"b>c": [(3.0, 17.0)], "a>b": [(3.0, 10.0)]})
    assert [(m.at, m.action, m.node or m.link) for m in found] == [
        (3.0, "kill", "b"),
        (9.5, "restart", "b"),
        (10.0, "ready", "b"),  # the failure's end and its restart time (0.5 s)
        (10.0, "link-up", "a>b"),  # a link is waited for once its node is ready
        (17.0, "link-up", "b>c"),
    ]


def test_a_partition_cuts_the_proxies_between_its_groups_only() -> None:
    wires = Wires(load_scenario(KINDS).topology)
    cut = wires.between((("a",), ("b",), ("c", "d")))
    pairs = {pair for pair, proxy in wires.proxies.items() if proxy in cut}
    assert pairs == {(x, y) for x in "abcd" for y in "abcd" if x != y} - {("c", "d"), ("d", "c")}


def test_a_scenario_too_large_to_run_here_is_refused_before_any_node_starts(tmp_path: Path) -> None:
    scenario = load_scenario_text(
        f'[scenario]\nduration = 1\nstep = 1\n[topology]\ngenerator = "hierarchy"\nhubs = 1\nedges = {MAX_NODES}\n',
        str(tmp_path / "big.toml"),
    )
    with pytest.raises(ValidateFailed, match=f"at most {MAX_NODES}"):
        validate(scenario, tmp_path / "var", lambda line: None)
    assert not (tmp_path / "var").exists()
