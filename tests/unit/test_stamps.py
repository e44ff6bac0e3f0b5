"""The federation stamp: what a node reads of a forwarded message and what it writes on it,
through caches that must never mix up two messages."""

from __future__ import annotations

import struct

from pamqp import commands

from federation import stamps
from federation.stamps import DEST_HEADER, TRACE_HEADER, read_stamp, stamped
from gateway.wire import Content


def _content(headers: dict | None, **properties: object) -> Content:
    return Content.from_properties(commands.Basic.Properties(headers=headers, **properties), b"body")


def _arrived(content: Content) -> Content:
    """The message as the next node receives it: bytes only, nothing decoded yet."""
    return Content(content.header, content.body)


def test_a_message_published_here_has_no_destinations_and_an_empty_trace() -> None:
    for content in (_content(None), _content({"app": "x"})):
        stamp = read_stamp(content)
        assert stamp.destinations is None and stamp.trace == ()


def test_stamping_keeps_the_publishers_headers_and_every_other_property() -> None:
    original = _content({"app": "x"}, delivery_mode=2, correlation_id="c-1")
    forwarded = _arrived(stamped(original, read_stamp(original), frozenset({"c", "b"}), ("a",)))
    assert forwarded.properties.headers == {"app": "x", DEST_HEADER: ["b", "c"], TRACE_HEADER: ["a"]}
    assert forwarded.properties.correlation_id == "c-1" and forwarded.persistent
    stamp = read_stamp(forwarded)
    assert stamp.destinations == {"b", "c"} and stamp.trace == ("a",)


def test_the_trace_keeps_its_order_across_hops() -> None:
    message = _content(None)
    for hop in ("a", "b", "c"):
        stamp = read_stamp(message)
        message = _arrived(stamped(message, stamp, frozenset({"d"}), (*stamp.trace, hop)))
    assert read_stamp(message).trace == ("a", "b", "c")


def test_cached_stamps_belong_to_the_right_messages() -> None:
    """Same bytes share an entry; different tables, destinations or traces never do."""
    first, second = _content({"app": 1}), _content({"app": 2})
    one = stamped(first, read_stamp(first), frozenset({"b"}), ("a",))
    two = stamped(second, read_stamp(second), frozenset({"b"}), ("a",))
    three = stamped(first, read_stamp(first), frozenset({"c"}), ("a",))
    four = stamped(first, read_stamp(first), frozenset({"b"}), ("a", "x"))
    again = stamped(_arrived(first), read_stamp(_arrived(first)), frozenset({"b"}), ("a",))
    headers = [_arrived(c).properties.headers for c in (one, two, three, four, again)]
    assert headers[0] == {"app": 1, DEST_HEADER: ["b"], TRACE_HEADER: ["a"]}
    assert headers[1] == {"app": 2, DEST_HEADER: ["b"], TRACE_HEADER: ["a"]}
    assert headers[2][DEST_HEADER] == ["c"] and headers[3][TRACE_HEADER] == ["a", "x"]
    assert again.header == one.header


def test_long_tables_are_read_correctly_without_filling_the_cache() -> None:
    stamps._read.clear()
    stamps._written.clear()
    big = _content({"blob": "x" * (stamps.CACHED_TABLE_SIZE + 1), DEST_HEADER: ["b"], TRACE_HEADER: ["a"]})
    stamp = read_stamp(big)
    stamped(big, stamp, frozenset({"c"}), ("a", "b"))
    assert stamp.destinations == {"b"} and stamp.trace == ("a",)
    assert not stamps._read and not stamps._written


def test_the_caches_are_bounded() -> None:
    for n in range(stamps.CACHE_MAX + 10):
        read_stamp(_content({"n": n}))
    assert 0 < len(stamps._read) <= stamps.CACHE_MAX


def test_an_undecodable_headers_table_reads_as_published_here() -> None:
    table = struct.pack(">I", 3) + b"\x01a?"  # field type '?' does not exist
    content = _content(None).with_headers_table(table)
    stamp = read_stamp(content)
    assert stamp == (read_stamp(_content(None)))
    forwarded = _arrived(stamped(content, stamp, frozenset({"b"}), ("a",)))
    assert forwarded.properties.headers == {DEST_HEADER: ["b"], TRACE_HEADER: ["a"]}
