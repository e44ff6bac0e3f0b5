"""Message content: the raw property section of a content header, and the body.

The property bytes are kept exactly as the publisher sent them. Deliveries reuse them without
re-encoding (fast, and byte-exact for tables pamqp would re-encode differently), and only the
few fields the broker reads are parsed, once, on first use.
"""

from __future__ import annotations

import contextlib
import enum
import struct
from collections.abc import Iterator
from typing import Any, Final, Literal

from pamqp import commands, decode, encode

from gateway.wire.tables import check_table

_CONTENT_TYPE = 1 << 15
_CONTENT_ENCODING = 1 << 14
_HEADERS = 1 << 13
_DELIVERY_MODE = 1 << 12
_PRIORITY = 1 << 11
_CORRELATION_ID = 1 << 10
_REPLY_TO = 1 << 9
_EXPIRATION = 1 << 8

#: The properties after expiration: (flag, width), width 0 for a shortstr.
_TAIL = ((1 << 7, 0), (1 << 6, 8), (1 << 5, 0), (1 << 4, 0), (1 << 3, 0), (1 << 2, 0))


class _Unscanned(enum.Enum):
    """The headers table is not decoded yet (None means there is none)."""

    UNSCANNED = "UNSCANNED"


_UNSCANNED: Final = _Unscanned.UNSCANNED

#: What `_scan` finds: (delivery mode, priority, reply-to, expiration, raw headers table).
_Fields = tuple[int | None, int | None, str | None, str | None, bytes | None]
#: Scans of recently seen property sections. Publishers tend to send the same few sections
#: (often just a delivery mode; a route's federation stamps), so most messages skip the walk
#: and its check of the headers table. Bounded: cleared when full, and long sections (usually
#: with per-message ids) are not kept.
_SCANS: dict[bytes, _Fields] = {}
_SCANS_MAX = 1024
_SCAN_CACHED_SIZE = 256


class Content:
    """A message's properties (raw) and body, with the broker-relevant fields decoded lazily."""

    __slots__ = (
        "header",
        "body",
        "_properties",
        "_fields",
        "_headers",
    )

    def __init__(self, header: bytes, body: bytes) -> None:
        self.header = header
        self.body = body
        self._properties: commands.Basic.Properties | None = None
        self._fields: _Fields | None = None
        self._headers: dict[str, Any] | None | Literal[_Unscanned.UNSCANNED] = _UNSCANNED

    @classmethod
    def from_properties(cls, properties: commands.Basic.Properties | None, body: bytes) -> Content:
        """Encode pamqp properties (None for none) into a new Content."""
        props = properties or commands.Basic.Properties()
        content = cls(props.marshal(), body)
        content._properties = props
        return content

    @property
    def properties(self) -> commands.Basic.Properties:
        """All properties, decoded by pamqp (slow path: only when a field beyond the scan is needed)."""
        if self._properties is None:
            flags = _flags(self.header)
            props = commands.Basic.Properties()
            with _decoding("properties"):
                props.unmarshal(flags, self.header[_flags_length(self.header) :])
            self._properties = props
        return self._properties

    def replace(self, **changes: Any) -> Content:
        """A new Content with some properties changed (None removes one), re-encoded."""
        current = self.properties
        values = {name: getattr(current, name) for name in current.__slots__}
        values.update(changes)
        # Set fields one by one: the constructor validates, and would refuse what publishers
        # may send and RabbitMQ accepts (a delivery mode other than 1 or 2, a cluster id).
        props = commands.Basic.Properties()
        for name, value in values.items():
            setattr(props, name, value)
        return Content.from_properties(props, self.body)

    def with_headers_table(self, table: bytes) -> Content:
        """A copy whose headers table is `table` (encoded, size-prefixed), every other property
        byte kept as sent.

        Federation stamps each forwarded message; splicing one table in costs a fraction of
        decoding and re-encoding every property (`replace`).
        """
        data = self.header
        flags = _flags(data)
        start = _flags_length(data)
        offset = start
        if flags & _CONTENT_TYPE:
            offset += 1 + data[offset]
        if flags & _CONTENT_ENCODING:
            offset += 1 + data[offset]
        flag_words = data[:start]
        if flags & _HEADERS:
            (size,) = struct.unpack_from(">I", data, offset)
            rest = data[offset + 4 + size :]
        else:
            rest = data[offset:]
            flag_words = struct.pack(">H", struct.unpack_from(">H", data)[0] | _HEADERS) + data[2:start]
        return Content(flag_words + data[start:offset] + table + rest, self.body)

    def without_header(self, name: str) -> Content:
        """A copy whose headers table lacks `name` (re-encoded; every other property byte kept),
        or this Content if its headers do not have it. ValueError for an unreadable table."""
        headers = self.headers
        if not headers or name not in headers:
            return self
        kept = {key: value for key, value in headers.items() if key != name}
        return self.with_headers_table(encode.field_table(kept))

    @property
    def delivery_mode(self) -> int | None:
        return (self._fields or self._scan())[0]

    @property
    def persistent(self) -> bool:
        return self.delivery_mode == 2

    @property
    def priority(self) -> int | None:
        return (self._fields or self._scan())[1]

    @property
    def reply_to(self) -> str | None:
        return (self._fields or self._scan())[2]

    @property
    def expiration(self) -> str | None:
        return (self._fields or self._scan())[3]

    @property
    def headers(self) -> dict[str, Any] | None:
        """The headers table, decoded on first use (headers exchanges, dead-lettering)."""
        if self._headers is _UNSCANNED:
            raw = self.headers_table
            with _decoding("headers"):
                self._headers = None if raw is None else decode.field_table(raw)[1]
        return self._headers

    @property
    def headers_table(self) -> bytes | None:
        """The headers table as sent (size-prefixed), or None: a key for caching what is
        decoded from it."""
        return (self._fields or self._scan())[4]

    def _scan(self) -> _Fields:
        """The fields the broker uses, from the cache or from one walk of the section."""
        data = self.header
        fields = _SCANS.get(data)
        if fields is None:
            fields = _walk(data)
            if len(data) <= _SCAN_CACHED_SIZE:
                if len(_SCANS) >= _SCANS_MAX:
                    _SCANS.clear()
                _SCANS[data] = fields
        self._fields = fields
        return fields

    def __len__(self) -> int:
        return len(self.body)

    def __repr__(self) -> str:
        return f"Content(header={self.header!r}, body={len(self.body)} bytes)"


@contextlib.contextmanager
def _decoding(what: str) -> Iterator[None]:
    """Make every failure of pamqp's decoders a ValueError.

    Besides ValueError they let struct.error, OverflowError or OSError (timestamps beyond
    datetime's range) and RecursionError (deeply nested tables) escape, and these bytes come
    from a publisher: callers should have one exception to catch.
    """
    try:
        yield
    except (ValueError, struct.error, ArithmeticError, OSError, RecursionError, TypeError) as exc:
        raise ValueError(f"content {what} cannot be decoded: {exc}") from exc


def _walk(data: bytes) -> _Fields:
    """Walk the property list once, up to expiration, picking out the fields the broker uses.

    The headers table is checked entry by entry: pamqp, decoding it later, would read a value
    whose length runs past the table's end from whatever follows, or silently cut it short.
    """
    flags = _flags(data)
    offset = _flags_length(data)
    delivery_mode = priority = reply_to = expiration = headers_raw = None
    try:
        if flags & _CONTENT_TYPE:
            offset += 1 + data[offset]
        if flags & _CONTENT_ENCODING:
            offset += 1 + data[offset]
        if flags & _HEADERS:
            end = check_table(data, offset, "headers")
            headers_raw = data[offset:end]
            offset = end
        if flags & _DELIVERY_MODE:
            delivery_mode = data[offset]
            offset += 1
        if flags & _PRIORITY:
            priority = data[offset]
            offset += 1
        if flags & _CORRELATION_ID:
            offset += 1 + data[offset]
        if flags & _REPLY_TO:
            length = data[offset]
            reply_to = data[offset + 1 : offset + 1 + length].decode("utf-8", "replace")
            offset += 1 + length
        if flags & _EXPIRATION:
            length = data[offset]
            expiration = data[offset + 1 : offset + 1 + length].decode("utf-8", "replace")
            offset += 1 + length
        # The broker needs nothing further, but walking to the end proves the section is
        # whole: slices above do not fail when a length points past the end.
        for flag, width in _TAIL:
            if flags & flag:
                offset += width or 1 + data[offset]
    except (IndexError, struct.error) as exc:
        raise ValueError("content header properties are truncated") from exc
    if offset > len(data):
        raise ValueError("content header properties are truncated")
    return delivery_mode, priority, reply_to, expiration, headers_raw


def _flags(data: bytes) -> int:
    """The property flags: 16-bit words, the lowest bit of each saying another word follows."""
    flags = index = offset = 0
    while True:
        if len(data) < offset + 2:
            raise ValueError("content header property flags are truncated")
        word: int
        (word,) = struct.unpack_from(">H", data, offset)
        flags |= (word & 0xFFFE) << (16 * index)
        offset += 2
        index += 1
        if not word & 1:
            return flags


def _flags_length(data: bytes) -> int:
    offset = 0
    while data[offset + 1] & 1:
        offset += 2
    return offset + 2
