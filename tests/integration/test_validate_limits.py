"""`amq-sim validate` on what a held link drops (simulations.holding): messages with a TTL
held in a bridge queue while a link is cut expire there, live and in the model alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_validate import assert_agrees, compared, validate


def test_messages_expiring_in_a_bridge_queue_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """holding-ttl.toml: of a's 140 publishes, the 20 a's bridge queue held for 6 s (TTL 5 s)
    expire there; the 40 it held for 4 and 2 s reach b's queue late."""
    status, out = validate("holding-ttl.toml", tmp_path, capsys)
    assert "cut a | b at 4.0 s" in out
    assert_agrees(status, out, [("link", "a>b"), ("queue", "b/q")])
    assert compared(out)[("queue", "b/q")] == (120, 120)
    assert compared(out)[("published", "a")] == (140, 140)
