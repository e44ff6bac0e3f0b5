"""`amq-sim validate` on what a held link drops (simulations.holding), live and in the model
alike: messages with a TTL held by a route's queue while a link is cut expire there, and
messages that are not persistent held by a node that is killed are lost with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_validate import assert_agrees, compared, validate


def test_messages_expiring_in_a_bridge_queue_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """holding-ttl.toml: of a's 140 publishes, the 20 the route's queue on a held for 6 s (TTL 5 s)
    expire there; the 40 it held for 4 and 2 s reach b's queue late."""
    status, out = validate("holding-ttl.toml", tmp_path, capsys)
    assert "cut a | b at 4.0 s" in out
    assert_agrees(status, out, [("link", "a>b"), ("queue", "b/q")])
    assert compared(out)[("queue", "b/q")] == (120, 120)
    assert compared(out)[("published", "a")] == (140, 140)


def test_non_persistent_messages_held_by_a_killed_node_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """holding-kill.toml: b is killed holding, in its bridge queue for c, the 20 messages a
    published at 2 and 3 s (not persistent): c's queue gets the other 100, 40 of them late."""
    status, out = validate("holding-kill.toml", tmp_path, capsys)
    assert "killed b (SIGKILL)" in out
    assert_agrees(status, out, [("link", "a>b"), ("link", "b>c"), ("queue", "c/q")])
    assert compared(out)[("queue", "c/q")] == (100, 100)
