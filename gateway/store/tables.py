"""A lossless encoding of AMQP field tables (declare and bind arguments) for what we store:
the message store, and the federation store's bindings made on a parent.

Not pamqp's wire encoder: it cannot write `bytes` (which its decoder yields for non-UTF-8 long
strings), narrows doubles to 32-bit floats and truncates timestamps to whole seconds, so
arguments would not come back equal to what the client declared, and a redeclare after a
restart would then fail with 406. Here every value keeps its exact Python value and type.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Callable, Mapping
from typing import Any

_LENGTH = struct.Struct(">I")
_DOUBLE = struct.Struct(">d")


def dump_table(table: Mapping[str, Any]) -> bytes:
    """Encode a field table; TypeError for a value a field table cannot hold."""
    out = bytearray()
    _dump_table(table, out)
    return bytes(out)


def load_table(data: bytes) -> dict[str, Any]:
    """Decode what dump_table wrote; ValueError if the bytes are not such an encoding."""
    try:
        table, end = _load_table(data, 0)
    except (IndexError, KeyError, ValueError, struct.error, decimal.InvalidOperation) as exc:
        raise ValueError(f"malformed stored field table: {exc!r}") from exc
    if end != len(data):
        raise ValueError("malformed stored field table: trailing bytes")
    return table


def canonical(table: Mapping[str, Any]) -> dict[str, Any]:
    """The same table with keys sorted at every level: binding identity ignores key order."""
    return {key: _canonical_value(table[key]) for key in sorted(table)}


def _canonical_value(value: Any) -> Any:
    if isinstance(value, dict):
        return canonical(value)
    if isinstance(value, list):
        return [_canonical_value(item) for item in value]
    return value


def _dump_table(table: Mapping[str, Any], out: bytearray) -> None:
    out += _LENGTH.pack(len(table))
    for key, value in table.items():
        if not isinstance(key, str):
            raise TypeError(f"field table keys must be str, not {type(key).__name__}")
        _blob(key.encode("utf-8", "surrogatepass"), out)
        _dump_value(value, out)


def _dump_value(value: Any, out: bytearray) -> None:
    if value is None:
        out += b"V"
    elif isinstance(value, bool):
        out += b"t" if value else b"f"
    elif isinstance(value, int):
        out += b"I"
        _blob(str(value).encode(), out)
    elif isinstance(value, float):
        out += b"d" + _DOUBLE.pack(value)
    elif isinstance(value, str):
        out += b"S"
        _blob(value.encode("utf-8", "surrogatepass"), out)
    elif isinstance(value, bytes):
        out += b"x"
        _blob(value, out)
    elif isinstance(value, bytearray):
        out += b"y"
        _blob(value, out)
    elif isinstance(value, decimal.Decimal):
        out += b"D"
        _blob(str(value).encode(), out)
    elif isinstance(value, datetime.datetime):
        out += b"T"
        _blob(value.isoformat().encode(), out)
    elif isinstance(value, dict):
        out += b"F"
        _dump_table(value, out)
    elif isinstance(value, list):
        out += b"A" + _LENGTH.pack(len(value))
        for item in value:
            _dump_value(item, out)
    else:
        raise TypeError(f"a field table cannot hold a {type(value).__name__}: {value!r}")


def _blob(data: bytes | bytearray, out: bytearray) -> None:
    out += _LENGTH.pack(len(data))
    out += data


def _load_blob(data: bytes, offset: int) -> tuple[bytes, int]:
    (size,) = _LENGTH.unpack_from(data, offset)
    start = offset + 4
    if start + size > len(data):
        raise IndexError("length runs past the end")
    return data[start : start + size], start + size


def _load_table(data: bytes, offset: int) -> tuple[dict[str, Any], int]:
    (count,) = _LENGTH.unpack_from(data, offset)
    offset += 4
    table: dict[str, Any] = {}
    for _ in range(count):
        key, offset = _load_blob(data, offset)
        table[key.decode("utf-8", "surrogatepass")], offset = _load_value(data, offset)
    return table, offset


def _load_value(data: bytes, offset: int) -> tuple[Any, int]:
    tag = data[offset : offset + 1]
    offset += 1
    if tag in _CONSTANTS:
        return _CONSTANTS[tag], offset
    if tag == b"d":
        return _DOUBLE.unpack_from(data, offset)[0], offset + 8
    if tag == b"F":
        return _load_table(data, offset)
    if tag == b"A":
        (count,) = _LENGTH.unpack_from(data, offset)
        offset += 4
        items = []
        for _ in range(count):
            item, offset = _load_value(data, offset)
            items.append(item)
        return items, offset
    raw, offset = _load_blob(data, offset)
    return _FROM_BLOB[tag](raw), offset


_CONSTANTS: dict[bytes, Any] = {b"V": None, b"t": True, b"f": False}
_FROM_BLOB: dict[bytes, Callable[[bytes], Any]] = {
    b"I": lambda raw: int(raw.decode()),
    b"S": lambda raw: raw.decode("utf-8", "surrogatepass"),
    b"x": bytes,
    b"y": bytearray,
    b"D": lambda raw: decimal.Decimal(raw.decode()),
    b"T": lambda raw: datetime.datetime.fromisoformat(raw.decode()),
}
