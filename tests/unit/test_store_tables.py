"""The store's field-table encoding gives back exactly what the broker stored, types included."""

from __future__ import annotations

import datetime
import decimal
import math
import struct
from typing import Any

import pytest
from pamqp import decode

from gateway.store.tables import canonical, dump_table, load_table


def assert_identical(actual: Any, expected: Any) -> None:
    """Equality that also compares types (1 == 1.0 == True in Python, not in a field table)."""
    assert type(actual) is type(expected), (actual, expected)
    if isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_identical(actual[key], expected[key])
    elif isinstance(expected, list):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_identical(a, e)
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(actual)
    else:
        assert actual == expected
        if isinstance(expected, float):
            assert math.copysign(1, actual) == math.copysign(1, expected)
        if isinstance(expected, decimal.Decimal):
            assert actual.as_tuple() == expected.as_tuple()
        if isinstance(expected, datetime.datetime):
            assert actual.utcoffset() == expected.utcoffset()


def wire_field(name: str, kind: bytes, payload: bytes) -> bytes:
    return bytes([len(name)]) + name.encode() + kind + payload


def pamqp_decoded_table() -> dict[str, Any]:
    """A table as pamqp decodes it off the wire, with the types its encoder cannot write back."""
    fields = b"".join(
        [
            wire_field("double", b"d", struct.pack(">d", 0.1)),
            wire_field("not-utf8", b"S", struct.pack(">I", 3) + b"\xff\xfe\x00"),
            wire_field("decimal", b"D", b"\x03" + struct.pack(">i", -3140)),
            wire_field("stamp", b"T", struct.pack(">Q", 1_600_000_000)),
            wire_field("bytes", b"x", struct.pack(">I", 2) + b"\x00\x01"),
            wire_field("long", b"l", struct.pack(">q", -(2**63))),
        ]
    )
    table = decode.field_table(struct.pack(">I", len(fields)) + fields)[1]
    assert isinstance(table["not-utf8"], bytes) and isinstance(table["bytes"], bytearray)
    return table


NASTY: dict[str, Any] = {
    "": "empty key",
    "ünïcode ключ": "värde \u2603",
    "ints": [0, -1, 2**31, -(2**63), 2**64 + 1],
    "bools": [True, False],
    "none": None,
    "floats": [1.5, -0.0, float("inf"), float("-inf"), 1e-310],
    "decimals": [decimal.Decimal("3.140"), decimal.Decimal("-0"), decimal.Decimal("1E+5")],
    "times": [
        datetime.datetime(2024, 2, 29, 23, 59, 59, 999999),
        datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=-3, minutes=-30))),
    ],
    "bytes": b"\x00\xff" * 300,
    "bytearray": bytearray(b"raw"),
    "nested": {"a": {"b": [{"c": [[], {}, [None]]}]}, "empty": {}},
    "x-dead-letter-exchange": "dlx",
    "from-the-wire": pamqp_decoded_table(),
}


def test_nasty_table_round_trips_exactly() -> None:
    assert_identical(load_table(dump_table(NASTY)), NASTY)


def test_nan_round_trips() -> None:
    assert math.isnan(load_table(dump_table({"nan": float("nan")}))["nan"])


def test_empty_table() -> None:
    assert load_table(dump_table({})) == {}


@pytest.mark.parametrize("value", [object(), (1, 2), {1, 2}, 1j])
def test_unstorable_value_is_refused_when_buffered(value: Any) -> None:
    with pytest.raises(TypeError):
        dump_table({"k": value})


def test_non_string_key_is_refused() -> None:
    with pytest.raises(TypeError):
        dump_table({1: "v"})  # type: ignore[dict-item]


@pytest.mark.parametrize("data", [b"", b"\x00\x00\x00\x01", dump_table(NASTY)[:-3], b"\x00" * 4 + b"!"])
def test_malformed_bytes_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        load_table(data)


def test_canonical_ignores_key_order_at_every_level() -> None:
    one = {"b": 1, "a": {"y": [{"q": 1, "p": 2}], "x": 2}}
    two = {"a": {"x": 2, "y": [{"p": 2, "q": 1}]}, "b": 1}
    assert dump_table(canonical(one)) == dump_table(canonical(two))
    assert canonical(one) == one
