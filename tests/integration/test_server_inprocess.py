"""The Trio server in this process, for faults a client cannot provoke from outside."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from pamqp import commands

from gateway.broker import Session
from gateway.node import TICK_RETRY, Node
from gateway.security import UsersDB
from tests.rawclient import RawClient


async def start(nursery: trio.Nursery) -> tuple[Node, int]:
    node = Node(name="inprocess", users=UsersDB.default())
    listeners = await nursery.start(node.serve, "127.0.0.1", 0)
    return node, listeners[0].socket.getsockname()[1]


def purge_then_declare(port: int) -> tuple[object, object]:
    """One client hits the faulty method; a second one then uses the node normally."""
    broken = RawClient(port)
    broken.handshake()
    broken.open_channel()
    close = broken.call(commands.Queue.Purge(queue="anything"))
    broken.close()
    healthy = RawClient(port)
    healthy.handshake()
    healthy.open_channel()
    declared = healthy.call(commands.Queue.Declare(queue="", exclusive=True))
    healthy.close()
    return close, declared


async def test_a_bug_in_the_model_costs_one_connection_not_the_node(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Session.handle_method

    def faulty(self: Session, channel: int, method: object) -> None:
        if isinstance(method, commands.Queue.Purge):
            raise RuntimeError("simulated bug")
        original(self, channel, method)

    monkeypatch.setattr(Session, "handle_method", faulty)
    _, port = await start(nursery)
    close, declared = await trio.to_thread.run_sync(purge_then_declare, port)
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 541
    assert close.reply_text == "INTERNAL_ERROR - failed to handle Queue.Purge; see the node's log"
    assert isinstance(declared, commands.Queue.DeclareOk)
    nursery.cancel_scope.cancel()


async def test_a_failing_timer_pass_is_retried(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    """Retried after TICK_RETRY, not at once: measured on Trio's virtual clock, which jumps
    while every task waits, so the test takes no wall time and asserts none."""
    node, _ = await start(nursery)
    calls = []

    def failing_tick() -> float | None:
        calls.append(trio.current_time())
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(node.broker, "tick", failing_tick)
    node.broker.on_deadline(0.0)
    with trio.fail_after(10):
        while len(calls) < 2:
            await trio.sleep(0.05)
    assert calls[1] - calls[0] == pytest.approx(TICK_RETRY, abs=0.01)
    nursery.cancel_scope.cancel()
