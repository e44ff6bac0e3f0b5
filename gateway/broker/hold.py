"""Holds: why publishers must pause (the node's disk alarm, a full federation outbox), and
which sessions they pause.

A hold is pushed to each session's outbox (Outbox.block) after the publish that ran into it,
and every session it paused is told when it is released (Outbox.unblock): nobody polls. A
session is paused by one hold at a time, recorded in `Session.hold`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.broker.session import Session


class Hold:
    """One reason to pause publishers (`reason`, sent in Connection.Blocked)."""

    __slots__ = ("reason", "_sessions")

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self._sessions: set[Session] = set()

    def block(self, session: Session) -> None:
        """Pause `session`'s publishers, unless another hold already does."""
        if session.hold is None:
            session.hold = self
            self._sessions.add(session)
            session.outbox.block(self.reason)

    def forget(self, session: Session) -> None:
        """`session` is gone: nothing to release for it."""
        self._sessions.discard(session)

    def release(self) -> None:
        """Let every session this hold paused publish again."""
        sessions, self._sessions = self._sessions, set()
        for session in sessions:
            session.hold = None
            session.outbox.unblock()
