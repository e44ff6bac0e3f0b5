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
    assert_agrees(status, out, links + queues)


def test_a_dynamic_ring_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = validate("ring.toml", tmp_path, capsys)
    assert_agrees(
        status, out, [("link", "ring-a>ring-b"), ("link", "ring-c>ring-b"), ("queue", "ring-a/ring")]
    )


def test_a_node_killed_and_restarted_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = validate("chain-node-durable.toml", tmp_path, capsys)
    assert "killed b (SIGKILL)" in out
    assert_agrees(status, out, [("link", "a>b"), ("link", "b>c"), ("queue", "c/q")])


@pytest.mark.xfail(
    strict=True,
    reason="the model keeps forwarding over a dynamic hop for a transient route's binding that "
    "is gone while its link is down (docs/simulation.md, 'What is not modelled'): a>b 240 "
    "simulated, 231 live; queues agree",
)
def test_a_node_killed_in_front_of_a_transient_route_agrees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = validate("chain-node.toml", tmp_path, capsys)
    assert "killed b (SIGKILL)" in out
    # The transient route beyond b lost what b took in before c's link came back.
    assert compared(out)[("link", "b>c")][1] < compared(out)[("published", "a")][1]
    assert_agrees(status, out, [("link", "a>b"), ("link", "b>c"), ("queue", "c/q")])


def test_a_link_cut_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = validate("chain-link.toml", tmp_path, capsys)
    assert "cut a | b at 3.0 s" in out
    assert_agrees(status, out, [("link", "a>b"), ("link", "b>c"), ("queue", "b/q")])


def test_a_partition_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = validate("chain-partition.toml", tmp_path, capsys)
    assert "partition a | b,c at 3.0 s" in out
    assert_agrees(status, out, [("link", "a>b"), ("queue", "c/q")])
