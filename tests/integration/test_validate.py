"""`amq-sim validate` end to end: scenarios run on live nodes (real processes, SIGKILL and
restart, links cut and partitioned through proxies) and their counts compared with the
simulation's, which must agree exactly; delays are reported beside the model's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.cli import amq_sim

SCENARIOS = Path(__file__).parent / "validate"


def validate(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = amq_sim(["validate", str(SCENARIOS / name), "--var", str(tmp_path / "var")])
    return status, capsys.readouterr().out


def compared(out: str) -> dict[tuple[str, str], tuple[int, int]]:
    """The side-by-side rows: (kind, object) -> (simulated, live)."""
    rows = {}
    for line in out.splitlines():
        found = re.fullmatch(r"(?:  |!=)(\w+)\s+(\S+)\s+([\d,]+)\s+([\d,]+)", line)
        if found:
            kind, name, simulated, live = found.groups()
            rows[(kind, name)] = (int(simulated.replace(",", "")), int(live.replace(",", "")))
    return rows


def assert_agrees(status: int, out: str, nonzero: list[tuple[str, str]]) -> None:
    rows = compared(out)
    assert status == 0 and "counts agree" in out, out
    # Counts were read, not assumed: these objects carried traffic, on both sides alike.
    for row in nonzero:
        assert rows[row][0] == rows[row][1] > 0, (row, out)


def test_every_route_kind_and_federation_type_agrees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = validate("kinds.toml", tmp_path, capsys)
    links = [("link", name) for name in ("a>b", "b>a", "b>c", "c>d", "d>a", "a>d")]
    queues = [("queue", name) for name in ("a/q", "b/q", "a/fq", "d/fq", "a/flq", "d/fpq", "d/fsq", "d/fvq")]
    # Copies arrive on an exchange by every kind of route and federation: the exchanges count them.
    exchanges = [("exchange", f"{node}/{name}") for node in "ad" for name in ("f", "fs", "fp", "fl", "fv")]
    exchanges += [("exchange", name) for name in ("a/t", "b/t", "c/t", "d/t")]
    assert_agrees(status, out, links + queues + exchanges)


def test_a_dynamic_ring_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = validate("ring.toml", tmp_path, capsys)
    assert_agrees(
        status, out, [("link", "ring-a>ring-b"), ("link", "ring-c>ring-b"), ("queue", "ring-a/ring")]
    )


def test_a_node_killed_and_restarted_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = validate("chain-node-durable.toml", tmp_path, capsys)
    assert "killed b (SIGKILL)" in out
    assert_agrees(status, out, [("link", "a>b"), ("link", "b>c"), ("queue", "c/q")])


def test_a_node_killed_in_front_of_a_transient_route_agrees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """b, the transient route's source, is killed at 3 s and ready at 10 s; c's link to b is
    back at 17 s. From 10 to 17 s b advertises no binding for the route, so a forwards only
    what b's own queues want (docs/simulation.md, "Failures and recovery"): a>b 337 of a's
    400 (the model counted 400 before)."""
    status, out = validate("chain-node.toml", tmp_path, capsys)
    assert "killed b (SIGKILL)" in out
    rows = compared(out)
    # The transient route beyond b lost what b took in before c's link came back, and a held
    # back what only that route wanted.
    assert rows[("link", "b>c")][1] < rows[("link", "a>b")][1] < rows[("published", "a")][1]
    assert_agrees(status, out, [("link", "a>b"), ("link", "b>c"), ("queue", "c/q"), ("exchange", "b/t")])


def test_a_link_cut_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = validate("chain-link.toml", tmp_path, capsys)
    assert "cut a | b at 3.0 s" in out
    assert_agrees(status, out, [("link", "a>b"), ("link", "b>c"), ("queue", "b/q")])


def test_a_partition_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = validate("chain-partition.toml", tmp_path, capsys)
    assert "partition a | b,c at 3.0 s" in out
    assert_agrees(status, out, [("link", "a>b"), ("queue", "c/q")])
