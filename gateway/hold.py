"""A Session hold (gateway.broker.session.Hold) on a Trio event: the held publishers' reads
wait until it is released. The disk alarm and full federation outboxes hold with it."""

from __future__ import annotations

import trio


class EventHold:
    """Why publishers are held (`reason`, sent in Connection.Blocked), and their release."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self._released = trio.Event()

    async def released(self) -> None:
        await self._released.wait()

    def release(self) -> None:
        self._released.set()
