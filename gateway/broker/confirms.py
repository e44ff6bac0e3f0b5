"""Publisher confirms for one channel: sent in publish order, coalesced into multiple acks.

A publish is confirmable once the store ticket of its writes is durable (ticket 0: nothing to
wait for), and is nacked if the store failed to write that ticket. Confirms leave strictly in
order, so a run of acks can be one `multiple=True` ack; nacks go one by one.

Nothing is sent when a publish is settled: the session flushes at the end of each batch of
input (Session.flush_confirms), and the store's commits flush what waited for them, so the
publishes of one read, transient ones included, get one multiple ack, as RabbitMQ does.

A mandatory publish that a federation forwarded to its parent is held (`hold`) until the
parent's verdict or VERDICT_TIMEOUT, so that a Return from the parent comes before the ack,
as clients expect of a mandatory publish.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from pamqp import commands

#: Seconds a mandatory publish that a federation forwarded waits for its parent's verdict (a
#: Return, or the parent's own confirm) before it is confirmed anyway (Broker.await_verdict).
VERDICT_TIMEOUT = 5.0


class Confirms:
    __slots__ = ("next_seq", "pending", "held", "_send")

    def __init__(self, send: Callable[[Any], None]) -> None:
        self.next_seq = 1
        #: (delivery tag, store ticket, ack?) waiting for the store, oldest first.
        self.pending: deque[tuple[int, int, bool]] = deque()
        #: Tags whose confirm also waits for a federation parent's verdict (`hold`).
        self.held: set[int] = set()
        self._send = send

    def take_tag(self) -> int:
        seq = self.next_seq
        self.next_seq = seq + 1
        return seq

    def settle(self, seq: int, ticket: int, ack: bool) -> None:
        """Record the outcome of publish `seq`, to be sent by a later `flush`."""
        self.pending.append((seq, ticket, ack))

    def hold(self, seq: int) -> None:
        """Publish `seq`'s confirm (and every later one) waits until `release(seq)`: a Return
        for it may still come from a federation parent, and must come first."""
        self.held.add(seq)

    def release(self, seq: int, durable: int) -> None:
        """Publish `seq` has its verdict: send what is ready."""
        if seq in self.held:
            self.held.discard(seq)
            self.flush(durable)

    def flush(self, durable: int, lost: bool = False) -> None:
        """Send every confirm whose ticket is now settled, up to the first that is not: as
        recorded if the store wrote up to `durable`, a nack for each if it `lost` that ticket."""
        pending = self.pending
        held = self.held
        run_end = 0
        run_length = 0
        while pending and pending[0][1] <= durable and not (held and pending[0][0] in held):
            seq, _, ack = pending.popleft()
            if ack and not lost:
                run_end = seq
                run_length += 1
                continue
            if run_length:
                self._send(commands.Basic.Ack(run_end, multiple=run_length > 1))
                run_length = 0
            self._send(commands.Basic.Nack(seq, requeue=False))
        if run_length:
            self._send(commands.Basic.Ack(run_end, multiple=run_length > 1))
