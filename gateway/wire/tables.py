"""Bounds checks for what pamqp decodes loosely: field tables and method arguments.

pamqp slices strings without checking that their lengths fit: a longstr whose length runs
past its table's end is read from the bytes after the table, or comes back silently short at
the end of a frame. These walks check every length (and every string that must be UTF-8)
first, so that what pamqp then decodes is exactly what was sent; a malformed frame is refused
with a ValueError saying which field is wrong.
"""

from __future__ import annotations

import struct

from pamqp import base

#: Field value types of fixed width (RabbitMQ's errata, as pamqp reads them).
_VALUE_WIDTHS = {
    ord(kind): width
    for kind, width in (
        ("t", 1),
        ("b", 1),
        ("B", 1),
        ("s", 2),
        ("u", 2),
        ("I", 4),
        ("i", 4),
        ("l", 8),
        ("L", 8),
        ("f", 4),
        ("d", 8),
        ("D", 5),
        ("T", 8),
        ("V", 0),
        ("\x00", 0),
    )
}
#: Method argument types of fixed width (bits are counted apart: eight share an octet).
_ARGUMENT_WIDTHS = {"octet": 1, "short": 2, "long": 4, "longlong": 8, "timestamp": 8}
_unpack_size = struct.Struct(">I").unpack_from


def check_table(data: bytes | bytearray, offset: int, what: str) -> int:
    """The end offset of the field table at `offset`; ValueError, naming `what` and the field,
    when the table or anything in it runs past its end, or nests too deeply to walk."""
    try:
        return _check_table(data, offset, len(data), what, "the frame")
    except RecursionError:
        raise ValueError(f"{what} nests tables or arrays too deeply") from None


def _check_table(data: bytes | bytearray, pos: int, limit: int, what: str, where: str) -> int:
    end = _sized_end(data, pos, limit)
    if end > limit:
        raise ValueError(f"{what} runs past the end of {where}")
    pos += 4
    while pos < end:
        key_end = pos + 1 + data[pos]
        if key_end > end:
            raise ValueError(f"{what}: a field name runs past the end of the table")
        try:
            key = data[pos + 1 : key_end].decode()
        except UnicodeDecodeError:
            raise ValueError(f"{what}: a field name is not valid UTF-8") from None
        pos = _check_value(data, key_end, end, what, key)
    return end


def _check_array(data: bytes | bytearray, pos: int, limit: int, what: str) -> int:
    end = _sized_end(data, pos, limit)
    if end > limit:
        raise ValueError(f"{what} runs past the end of its table")
    pos += 4
    index = 0
    while pos < end:
        pos = _check_value(data, pos, end, what, index)
        index += 1
    return end


def _name(what: str, part: str | int) -> str:
    """A field's name in errors: `headers field 'k'`, `headers field 'a'[2]`. Built only
    when needed: this walk runs for every message with headers."""
    return f"{what}[{part}]" if isinstance(part, int) else f"{what} field {part!r}"


def _check_value(data: bytes | bytearray, pos: int, end: int, what: str, part: str | int) -> int:
    """The end of the field value (type octet and value) at `pos`, which must not pass `end`;
    `part` is its key in the table `what` (or its index in the array `what`)."""
    if pos >= end:
        raise ValueError(f"{_name(what, part)} has no value before the end of the table")
    kind = data[pos]
    pos += 1
    width = _VALUE_WIDTHS.get(kind)
    if width is not None:
        value_end = pos + width
    elif kind in b"Sx":
        value_end = _sized_end(data, pos, end)
    elif kind == ord("F"):
        value_end = _check_table(data, pos, end, _name(what, part), "its table")
    elif kind == ord("A"):
        value_end = _check_array(data, pos, end, _name(what, part))
    else:
        # Its width is unknown, so nothing after it can be located; pamqp's decoder refuses
        # the type when (if ever) the table is decoded.
        return end
    if value_end > end:
        raise ValueError(f"{_name(what, part)} runs past the end of its table")
    return value_end


def _sized_end(data: bytes | bytearray, pos: int, limit: int) -> int:
    """The end of the 4-byte size at `pos` and the bytes it counts; past `limit` when the
    size itself does not fit before `limit` (callers check)."""
    if pos + 4 > limit:
        return limit + 1
    end: int = pos + 4 + _unpack_size(data, pos)[0]
    return end


def check_arguments(method_class: type[base.Frame], payload: bytes | bytearray, pos: int = 4) -> None:
    """ValueError, naming the argument, unless the arguments of a `method_class` frame from
    `pos` on fit the payload, every shortstr is UTF-8 and every table is well formed."""
    size = len(payload)
    bits = 0
    for name in method_class.__slots__:
        kind = method_class.amqp_type(name)
        what = name
        if kind == "bit":
            if bits % 8 == 0:
                pos += 1
            bits += 1
        else:
            bits = 0
            if kind == "shortstr":
                start = pos + 1
                pos = start + payload[pos] if pos < size else size + 1
                if pos <= size:
                    try:
                        payload[start:pos].decode()
                    except UnicodeDecodeError:
                        raise ValueError(f"{what} is not valid UTF-8") from None
            elif kind == "longstr":
                pos = _sized_end(payload, pos, size)
            elif kind == "table":
                pos = check_table(payload, pos, what)
            else:
                pos += _ARGUMENT_WIDTHS[kind]
        if pos > size:
            raise ValueError(f"{what} runs past the end of the frame")
