"""How the store fails."""

from __future__ import annotations


class StoreError(Exception):
    """The durable store cannot be used; the message names the data dir or file and why."""


class StoreLocked(StoreError):
    """Another node (possibly this process) holds the data dir's lock."""
