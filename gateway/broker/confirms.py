"""Publisher confirms for one channel: sent in publish order, coalesced into multiple acks.

A publish is confirmable once the store ticket of its writes is durable (ticket 0: nothing to
wait for), and is nacked if the store failed to write that ticket. Confirms leave strictly in
order, so a run of acks can be one `multiple=True` ack; nacks go one by one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from pamqp import commands


class Confirms:
    __slots__ = ("next_seq", "pending", "_send")

    def __init__(self, send: Callable[[Any], None]) -> None:
        self.next_seq = 1
        #: (delivery tag, store ticket, ack?) waiting for the store, oldest first.
        self.pending: deque[tuple[int, int, bool]] = deque()
        self._send = send

    def take_tag(self) -> int:
        seq = self.next_seq
        self.next_seq = seq + 1
        return seq

    def settle(self, seq: int, ticket: int, ack: bool, durable: int) -> bool:
        """Record the outcome of publish `seq`; True if it still waits for the store."""
        if not self.pending and ticket <= durable:
            self._send(commands.Basic.Ack(seq) if ack else commands.Basic.Nack(seq, requeue=False))
            return False
        self.pending.append((seq, ticket, ack))
        self.flush(durable)
        return bool(self.pending)

    def flush(self, durable: int, lost: bool = False) -> None:
        """Send every confirm whose ticket is now settled, up to the first that is not: as
        recorded if the store wrote up to `durable`, a nack for each if it `lost` that ticket."""
        pending = self.pending
        run_end = 0
        run_length = 0
        while pending and pending[0][1] <= durable:
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
