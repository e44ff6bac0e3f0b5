"""Dynamic routing's stamp on message bytes: gateway.routing.stamps says what the two headers
mean; this module reads them from a message's content and writes them on a copy, through caches.

Every forwarded message is read at each hop and stamped again before the next one. Decoding and
encoding a field table costs more than routing the message, while the tables themselves repeat:
messages from one origin along one path, without headers of their own, all carry the same bytes.
So both directions go through small bounded caches keyed by the table's bytes; a table that is
unique per message (long, with ids) only costs a cache miss.
"""

from __future__ import annotations

from typing import Any

from pamqp import encode

from gateway.routing.stamps import DEST_HEADER, TRACE_HEADER, UNSTAMPED, Stamp, stamp_headers, stamp_of
from gateway.wire.content import Content

__all__ = ["DEST_HEADER", "TRACE_HEADER", "Stamp", "read_stamp", "stamped"]

#: Entries per cache before it is cleared, and the longest table kept.
CACHE_MAX = 1024
CACHED_TABLE_SIZE = 512

_read: dict[bytes, Stamp] = {}
_written: dict[tuple[bytes | None, frozenset[str], tuple[str, ...]], bytes] = {}


def read_stamp(content: Content) -> Stamp:
    """The message's headers and federation stamp; an undecodable table reads as empty (the
    message is then treated as published here)."""
    try:
        table = content.headers_table
    except ValueError:
        return UNSTAMPED
    if table is None:
        return UNSTAMPED
    stamp = _read.get(table)
    if stamp is None:
        stamp = _decode(content)
        _remember(_read, table, stamp, len(table))
    return stamp


def stamped(content: Content, stamp: Stamp, origins: frozenset[str], trace: tuple[str, ...]) -> Content:
    """A copy of `content` (read as `stamp`) to forward toward `origins`, having passed `trace`."""
    table_in = content.headers_table if stamp is not UNSTAMPED else None
    key = (table_in, origins, trace)
    table = _written.get(key)
    if table is None:
        table = encode.field_table(stamp_headers(stamp.headers, origins, trace))
        _remember(_written, key, table, len(table_in or b""))
    return content.with_headers_table(table)


def _decode(content: Content) -> Stamp:
    try:
        headers = content.headers
    except ValueError:
        return UNSTAMPED
    return stamp_of(headers)


def _remember(cache: dict[Any, Any], key: Any, value: Any, table_size: int) -> None:
    if table_size > CACHED_TABLE_SIZE:
        return
    if len(cache) >= CACHE_MAX:
        cache.clear()
    cache[key] = value
