"""The frame codec: the hand-made fast path must equal pamqp's encoding byte for byte."""

from __future__ import annotations

import datetime
import decimal
import struct

import pytest
from pamqp import body, commands, frame, header

from gateway.wire import AMQPError, Content, frames, make_method

FRAME_MAX = 4096
PROPERTIES = commands.Basic.Properties(
    content_type="application/json",
    content_encoding="gzip",
    headers={
        "nested": {"inner": {"deeper": [1, "two", 3.5, {"x": None}]}},
        "array": [True, False, -5, 70000, 2**40, "s" * 300],
        "price": decimal.Decimal("12.345"),
        "when": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC),
        "long": "ü" * 1000,
        "blob": bytearray(b"\x00\xff\x10"),
    },
    delivery_mode=2,
    priority=7,
    correlation_id="corr",
    reply_to="amq.rabbitmq.reply-to",
    expiration="60000",
    message_id="id-1",
    timestamp=datetime.datetime(2020, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
    message_type="kind",
    user_id="guest",
    app_id="app",
)


def pamqp_content(channel: int, props: commands.Basic.Properties, payload: bytes, frame_max: int) -> bytes:
    """What pamqp produces for a content header and the body split at frame_max - 8."""
    parts = [frame.marshal(header.ContentHeader(0, len(payload), props), channel)]
    step = frame_max - 8
    parts += [
        frame.marshal(body.ContentBody(payload[i : i + step]), channel) for i in range(0, len(payload), step)
    ]
    return b"".join(parts)


BODIES = [b"", b"x", b"y" * (FRAME_MAX - 8), b"z" * (FRAME_MAX - 7), bytes(range(256)) * 50]


@pytest.mark.parametrize("payload", BODIES, ids=lambda b: f"{len(b)}B")
@pytest.mark.parametrize("redelivered", [False, True])
def test_encode_deliver_equals_pamqp(payload: bytes, redelivered: bool) -> None:
    content = Content(PROPERTIES.marshal(), payload)
    ours = frames.encode_deliver(
        3, "ctag.1", 2**40 + 5, redelivered, "amq.topic", "a.b.#", content, FRAME_MAX
    )
    deliver = commands.Basic.Deliver("ctag.1", 2**40 + 5, redelivered, "amq.topic", "a.b.#")
    assert ours == frame.marshal(deliver, 3) + pamqp_content(3, PROPERTIES, payload, FRAME_MAX)


@pytest.mark.parametrize("payload", BODIES, ids=lambda b: f"{len(b)}B")
def test_encode_get_ok_equals_pamqp(payload: bytes) -> None:
    content = Content(PROPERTIES.marshal(), payload)
    ours = frames.encode_get_ok(9, 17, True, "", "queue-name", 41, content, FRAME_MAX)
    get_ok = commands.Basic.GetOk(17, True, "", "queue-name", 41)
    assert ours == frame.marshal(get_ok, 9) + pamqp_content(9, PROPERTIES, payload, FRAME_MAX)


@pytest.mark.parametrize("payload", BODIES, ids=lambda b: f"{len(b)}B")
def test_encode_return_equals_pamqp(payload: bytes) -> None:
    content = Content(commands.Basic.Properties().marshal(), payload)
    ours = frames.encode_return(65535, 312, "NO_ROUTE", "ex", "rk", content, FRAME_MAX)
    returned = commands.Basic.Return(312, "NO_ROUTE", "ex", "rk")
    assert ours == frame.marshal(returned, 65535) + pamqp_content(
        65535, commands.Basic.Properties(), payload, FRAME_MAX
    )


def test_fast_path_encodes_names_pamqp_refuses() -> None:
    content = Content(commands.Basic.Properties().marshal(), b"hi")
    name = "é" * 127  # 254 bytes: a valid shortstr that pamqp's validation refuses
    data = frames.encode_deliver(1, name, 1, False, name, name, content, FRAME_MAX)
    consumed, channel, deliver = frame.unmarshal(data)
    assert (channel, deliver.consumer_tag, deliver.exchange, deliver.routing_key) == (
        1,
        name,
        name,
        name,
    )
    with pytest.raises(ValueError):
        frames.encode_deliver(1, "x" * 256, 1, False, "", "", content, FRAME_MAX)


def _sample_value(kind: str, index: int) -> object:
    return {
        "shortstr": f"s{index}",
        "longstr": f"long-{index}",
        "octet": index % 256,
        "short": 1000 + index,
        "long": 70000 + index,
        "longlong": 2**40 + index,
        "bit": index % 3 == 0,
        "table": {"k": index, "t": {"nested": True}},
    }[kind]


_FIXED = {"ticket", "capabilities", "insist", "out_of_band", "channel_id", "known_hosts", "cluster_id"}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pamqp warns on Basic.RecoverAsync
@pytest.mark.parametrize("method_class", list(commands.INDEX_MAPPING.values()), ids=lambda c: c.name)
def test_encode_method_equals_pamqp_for_every_method(method_class: type) -> None:
    method = method_class()
    for index, name in enumerate(method_class.__slots__):
        if name not in _FIXED:
            setattr(method, name, _sample_value(method.amqp_type(name), index))
    assert frames.encode_method(7, method) == frame.marshal(method, 7)


def test_make_method_skips_pamqp_validation() -> None:
    name = "celery@host.celery.pidbox/ü" + "x" * 200
    declare_ok = make_method(commands.Queue.DeclareOk, queue=name, message_count=2, consumer_count=1)
    _, _, decoded = frame.unmarshal(frames.encode_method(1, declare_ok))
    assert (decoded.queue, decoded.message_count, decoded.consumer_count) == (name, 2, 1)
    with pytest.raises(TypeError):
        make_method(commands.Queue.DeclareOk, no_such_field=1)


@pytest.mark.parametrize(
    ("name", "detail"),
    [("é" * 128, "is 256 bytes of UTF-8; at most 255 are allowed"), ("a\udcff", "is not valid UTF-8")],
)
def test_make_method_refuses_what_a_shortstr_cannot_carry(name: str, detail: str) -> None:
    with pytest.raises(ValueError, match=detail) as raised:
        make_method(commands.Queue.Declare, queue=name)
    assert "Queue.Declare queue" in str(raised.value)


def _declare_with_arguments(table: bytes) -> bytes:
    return struct.pack(">IH", commands.Queue.Declare.index, 0) + b"\x01q\x00" + table


@pytest.mark.parametrize(
    ("entries", "detail"),
    [
        (b"\x01kS" + struct.pack(">I", 10) + b"abc", "arguments field 'k' runs past the end of its table"),
        (b"\x01kx" + struct.pack(">I", 10) + b"abc", "arguments field 'k' runs past the end of its table"),
        (
            b"\x01kF" + struct.pack(">I", 3) + b"\x01jSxx",
            "arguments field 'k' field 'j' runs past the end of its table",
        ),
        (b"\x01kA" + struct.pack(">I", 6) + b"S" + struct.pack(">I", 9) + b"a", "field 'k'[0] runs past"),
        (
            b"\x01kF" + struct.pack(">I", 6) + b"\x01jS\x00\x00",
            "arguments field 'k' runs past the end of its table",
        ),
        (b"\x01kI\x00\x00", "arguments field 'k' runs past the end of its table"),
        (b"\x09k", "a field name runs past the end of the table"),
        (b"\x01\xff" + b"V", "a field name is not valid UTF-8"),
    ],
)
def test_table_values_running_past_their_table_are_syntax_errors(entries: bytes, detail: str) -> None:
    """pamqp alone would read such a value from the bytes after the table (here 'tail')."""
    payload = _declare_with_arguments(struct.pack(">I", len(entries)) + entries) + b"tail" * 10
    with pytest.raises(AMQPError) as raised:
        frames.decode_method(payload)
    assert raised.value.reply_code == 502
    assert detail in raised.value.reply_text


def test_well_formed_tables_still_decode_with_every_value_type() -> None:
    declare = commands.Queue.Declare(queue="q", arguments=PROPERTIES.headers)
    decoded = frames.decode_method(_payload(declare))
    assert decoded.arguments == PROPERTIES.headers


def test_method_arguments_running_past_the_frame_are_syntax_errors() -> None:
    whole = _payload(commands.Connection.StartOk(client_properties={}, mechanism="PLAIN", response="\0u\0p"))
    for cut in (8, len(whole) - 1):
        with pytest.raises(AMQPError, match="runs past the end of the frame"):
            frames.decode_method(whole[:cut])


def _payload(method: commands.base.Frame) -> bytes:
    return frame.marshal(method, 1)[7:-1]


@pytest.mark.parametrize("mandatory", [False, True])
@pytest.mark.parametrize("immediate", [False, True])
def test_decode_publish(mandatory: bool, immediate: bool) -> None:
    publish = commands.Basic.Publish(0, "amq.direct", "route.ü", mandatory, immediate)
    assert frames.decode_publish(_payload(publish)) == ("amq.direct", "route.ü", mandatory, immediate)


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x3c\x00\x28\x00\x00",  # no exchange at all
        b"\x00\x3c\x00\x28\x00\x00\x05ab",  # exchange shorter than declared
        b"\x00\x3c\x00\x28\x00\x00\x00\x09rk",  # routing key shorter than declared
        b"\x00\x3c\x00\x28\x00\x00\x00\x00",  # bits missing
        b"\x00\x3c\x00\x28\x00\x00\x02\xc3\x28\x00\x00",  # exchange not UTF-8
        b"\x00\x3c\x00\x28\x00\x00\x00\x01\xff\x00",  # routing key not UTF-8
    ],
)
def test_decode_publish_rejects_malformed(payload: bytes) -> None:
    with pytest.raises(AMQPError) as info:
        frames.decode_publish(payload)
    assert (info.value.reply_code, info.value.class_id, info.value.method_id) == (502, 60, 40)


@pytest.mark.parametrize("multiple", [False, True])
def test_decode_ack(multiple: bool) -> None:
    ack = frames.decode_ack(_payload(commands.Basic.Ack(2**62 + 1, multiple)))
    assert isinstance(ack, commands.Basic.Ack)
    assert (ack.delivery_tag, ack.multiple) == (2**62 + 1, multiple)
    with pytest.raises(AMQPError) as info:
        frames.decode_ack(_payload(commands.Basic.Ack(1, multiple))[:-1])
    assert info.value.reply_code == 502


def test_decode_method_errors() -> None:
    with pytest.raises(AMQPError) as info:
        frames.decode_method(struct.pack(">HH", 60, 200))  # RabbitMQ's basic.credit: not ours
    assert info.value.reply_code == 540
    with pytest.raises(AMQPError) as info:
        frames.decode_method(struct.pack(">HH", 99, 1))
    assert info.value.reply_code == 540
    with pytest.raises(AMQPError) as info:
        frames.decode_method(b"\x00\x32")
    assert info.value.reply_code == 502
    bad_name = struct.pack(">HHH", 50, 10, 0) + b"\x02\xff\xfe" + b"\x00" * 5
    with pytest.raises(AMQPError) as info:
        frames.decode_method(bad_name)
    assert (info.value.reply_code, info.value.class_id, info.value.method_id) == (502, 50, 10)


def test_decode_content_header_keeps_properties_raw() -> None:
    raw = frame.marshal(header.ContentHeader(0, 123, PROPERTIES), 1)[7:-1]
    class_id, body_size, properties = frames.decode_content_header(raw)
    assert (class_id, body_size, properties) == (60, 123, PROPERTIES.marshal())
    with pytest.raises(AMQPError):
        frames.decode_content_header(raw[:13])


def test_heartbeat_frame_equals_pamqp() -> None:
    from pamqp import heartbeat

    assert frames.HEARTBEAT_FRAME == frame.marshal(heartbeat.Heartbeat(), 0)


@pytest.mark.parametrize(("tag", "multiple"), [(1, False), (77, True), (2**63 - 1, True)])
def test_basic_ack_fast_path_equals_pamqp(tag: int, multiple: bool) -> None:
    ack = commands.Basic.Ack(tag, multiple)
    assert frames.encode_method(3, ack) == frame.marshal(ack, 3)


def test_cached_shortstrs_stay_exact() -> None:
    content = Content(commands.Basic.Properties().marshal(), b"")
    for tag in ("a", "ü", "a", "ü"):
        consumed, _, deliver = frame.unmarshal(
            frames.encode_deliver(1, tag, 1, False, "", tag, content, FRAME_MAX)
        )
        assert (deliver.consumer_tag, deliver.routing_key) == (tag, tag)
    for _ in range(2):
        with pytest.raises(ValueError):
            frames.encode_deliver(1, "x" * 256, 1, False, "", "", content, FRAME_MAX)
