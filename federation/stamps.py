"""The two headers dynamic routing stamps on forwarded messages, read and written through caches.

- DEST_HEADER: the origins (node tags) the message must still reach; a node delivers to its
  own queues only if it is one of them.
- TRACE_HEADER: the nodes it passed, so that a message can never loop, even while paths change.

Every forwarded message is read at each hop and stamped again before the next one. Decoding and
encoding a field table costs more than routing the message, while the tables themselves repeat:
messages from one origin along one path, without headers of their own, all carry the same bytes.
So both directions go through small bounded caches keyed by the table's bytes; a table that is
unique per message (long, with ids) only costs a cache miss.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pamqp import encode

from gateway.wire.content import Content

DEST_HEADER = "x-gateway-dest"
TRACE_HEADER = "x-gateway-trace"

#: Entries per cache before it is cleared, and the longest table kept.
CACHE_MAX = 1024
CACHED_TABLE_SIZE = 512


class Stamp(NamedTuple):
    """What a node reads of an arriving message's headers. `headers` is shared between the
    messages of one cache entry: read it, never change it."""

    headers: dict[str, Any]
    destinations: frozenset[str] | None  # None: published on this node, not forwarded to it
    trace: tuple[str, ...]


_EMPTY = Stamp({}, None, ())
_read: dict[bytes, Stamp] = {}
_written: dict[tuple[bytes | None, frozenset[str], tuple[str, ...]], bytes] = {}


def read_stamp(content: Content) -> Stamp:
    """The message's headers and federation stamp; an undecodable table reads as empty (the
    message is then treated as published here)."""
    try:
        table = content.headers_table
    except ValueError:
        return _EMPTY
    if table is None:
        return _EMPTY
    stamp = _read.get(table)
    if stamp is None:
        stamp = _decode(content)
        _remember(_read, table, stamp, len(table))
    return stamp


def stamped(content: Content, stamp: Stamp, origins: frozenset[str], trace: tuple[str, ...]) -> Content:
    """A copy of `content` (read as `stamp`) to forward toward `origins`, having passed `trace`."""
    table_in = content.headers_table if stamp is not _EMPTY else None
    key = (table_in, origins, trace)
    table = _written.get(key)
    if table is None:
        headers = {**stamp.headers, DEST_HEADER: sorted(origins), TRACE_HEADER: list(trace)}
        table = encode.field_table(headers)
        _remember(_written, key, table, len(table_in or b""))
    return content.with_headers_table(table)


def _decode(content: Content) -> Stamp:
    try:
        headers = dict(content.headers or {})
    except ValueError:
        return _EMPTY
    destinations = _tags(headers.get(DEST_HEADER)) if DEST_HEADER in headers else None
    trace = _tags(headers.get(TRACE_HEADER)) or ()
    return Stamp(headers, None if destinations is None else frozenset(destinations), trace)


def _tags(value: Any) -> tuple[str, ...] | None:
    """A header's list of node tags, in order (AMQP arrays may hold bytes or str)."""
    if not isinstance(value, list):
        return None
    return tuple(item.decode() if isinstance(item, bytes) else str(item) for item in value)


def _remember(cache: dict[Any, Any], key: Any, value: Any, table_size: int) -> None:
    if table_size > CACHED_TABLE_SIZE:
        return
    if len(cache) >= CACHE_MAX:
        cache.clear()
    cache[key] = value
