"""How the store fails."""

from __future__ import annotations


class StoreError(Exception):
    """The durable store cannot be used; the message names the data dir or file and why."""


class StoreLocked(StoreError):
    """Another node (possibly this process) holds the data dir's lock."""


class WriteFailed(StoreError):
    """A commit failed (a full disk, an I/O error): the publishes of `ticket` are not durable.

    The store stays usable; `Store.commit` says what is retried and what is given up.
    """

    def __init__(self, ticket: int, message: str) -> None:
        super().__init__(message)
        self.ticket = ticket
