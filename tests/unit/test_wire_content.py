"""Content: the fixes the wire layer relies on (truncation found on receipt, one exception type
for undecodable publisher bytes, re-encoding what RabbitMQ accepts)."""

from __future__ import annotations

import struct

import pytest
from pamqp import commands, encode

from gateway.wire import Content


def test_truncated_fields_after_expiration_are_detected() -> None:
    props = commands.Basic.Properties(expiration="10", message_id="m" * 20, app_id="app").marshal()
    assert Content(props, b"").delivery_mode is None
    with pytest.raises(ValueError):
        Content(props[:-2], b"").delivery_mode  # noqa: B018
    timestamp = struct.pack(">H", 1 << 6) + b"\x00" * 7  # one byte short
    with pytest.raises(ValueError):
        Content(timestamp, b"").delivery_mode  # noqa: B018


def test_undecodable_headers_raise_value_error() -> None:
    far_future = b"\x01t" + b"T" + struct.pack(">Q", 2**63)
    header = struct.pack(">H", 1 << 13) + struct.pack(">I", len(far_future)) + far_future
    content = Content(header, b"")
    assert content.delivery_mode is None  # the scan itself only skips the table
    with pytest.raises(ValueError):
        content.headers  # noqa: B018
    with pytest.raises(ValueError):
        content.properties  # noqa: B018
    nested = b""
    for _ in range(3000):
        nested = b"\x01k" + b"F" + struct.pack(">I", len(nested)) + nested
    deep = Content(struct.pack(">H", 1 << 13) + struct.pack(">I", len(nested)) + nested, b"")
    with pytest.raises(ValueError):
        deep.headers  # noqa: B018


def test_replace_keeps_values_pamqp_would_refuse() -> None:
    header = struct.pack(">H", (1 << 12) | (1 << 2)) + b"\x07" + b"\x03abc"  # mode 7, cluster id
    replaced = Content(header, b"body").replace(priority=4)
    props = replaced.properties
    assert (props.delivery_mode, props.priority, props.cluster_id) == (7, 4, "abc")
    assert replaced.body == b"body"


def test_scans_of_equal_sections_are_shared_but_errors_are_not_cached() -> None:
    props = commands.Basic.Properties(delivery_mode=2, expiration="5", reply_to="r").marshal()
    first, second = Content(props, b""), Content(bytes(props), b"")
    assert (first.delivery_mode, first.expiration, first.reply_to) == (2, "5", "r")
    assert (second.delivery_mode, second.expiration, second.reply_to, second.priority) == (2, "5", "r", None)
    for _ in range(2):
        with pytest.raises(ValueError):
            Content(props[:-1], b"").expiration  # noqa: B018


@pytest.mark.parametrize(
    "properties",
    [
        commands.Basic.Properties(),
        commands.Basic.Properties(content_type="text/plain", delivery_mode=2, message_id="m"),
        commands.Basic.Properties(
            content_type="a/b",
            content_encoding="gzip",
            headers={"old": 1, "x-gateway-dest": ["z"]},
            priority=3,
            reply_to="r",
            expiration="100",
            app_id="app",
        ),
    ],
)
def test_with_headers_table_splices_the_table_and_keeps_every_other_property(properties) -> None:
    original = Content.from_properties(properties, b"body")
    before = Content(original.header, original.body).properties
    table = encode.field_table({"x-gateway-dest": ["b", "c"], "x-gateway-trace": ["a"]})
    stamped = original.with_headers_table(table)
    after = Content(stamped.header, stamped.body).properties
    assert after.headers == {"x-gateway-dest": ["b", "c"], "x-gateway-trace": ["a"]}
    for name in before.__slots__:
        if name != "headers":
            assert getattr(after, name) == getattr(before, name), name
    assert stamped.body == b"body"
