"""Origin stamps: the two headers dynamic routing puts on a forwarded message, over a plain
headers mapping.

- DEST_HEADER: the origins (node tags) the message must still reach; a node delivers to its
  own queues only if it is one of them (`InterestTable.delivers_locally`).
- TRACE_HEADER: the nodes it passed, so that a message can never loop, even while paths change.

Reading and writing message bytes (and caching both, since the tables repeat) is
federation.stamps' job; what a stamp says is decided here, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

DEST_HEADER = "x-gateway-dest"
TRACE_HEADER = "x-gateway-trace"


class Stamp(NamedTuple):
    """What a node reads of an arriving message's headers. `headers` may be shared between
    messages: read it, never change it."""

    headers: dict[str, Any]
    destinations: frozenset[str] | None  # None: published on this node, not forwarded to it
    trace: tuple[str, ...]


#: A message without headers (or with a table that cannot be read): published here.
UNSTAMPED = Stamp({}, None, ())


def stamp_of(headers: Mapping[str, Any] | None) -> Stamp:
    """The stamp in a message's headers (a message without DEST_HEADER was published here)."""
    headers = dict(headers or {})
    destinations = _tags(headers.get(DEST_HEADER)) if DEST_HEADER in headers else None
    trace = _tags(headers.get(TRACE_HEADER)) or ()
    return Stamp(headers, None if destinations is None else frozenset(destinations), trace)


def stamp_headers(
    headers: Mapping[str, Any], origins: frozenset[str], trace: tuple[str, ...]
) -> dict[str, Any]:
    """`headers` with the stamp of a copy forwarded toward `origins`, having passed `trace`
    (origins sorted, so equal stamps are equal tables)."""
    return {**headers, DEST_HEADER: sorted(origins), TRACE_HEADER: list(trace)}


def _tags(value: Any) -> tuple[str, ...] | None:
    """A header's list of node tags, in order (AMQP arrays may hold bytes or str)."""
    if not isinstance(value, list):
        return None
    return tuple(item.decode() if isinstance(item, bytes) else str(item) for item in value)
