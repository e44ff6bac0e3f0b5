"""AMQP 0-9-1 frame codec: pamqp for the many rare methods, struct by hand for the hot path.

Every message crosses Basic.Publish, a content header and body frames on the way in, and
Basic.Deliver (or Get-Ok / Return) plus content frames on the way out; those are encoded and
decoded here with precompiled structs, and the property section is never decoded or
re-encoded. The output is byte-for-byte what `pamqp.frame.marshal` produces (the tests check).

Decoders take a frame's payload (between the 7-byte frame header and the frame-end octet) and
raise `AMQPError` for what the peer got wrong; encoders trust their caller (ValueError for
strings that do not fit a shortstr).
"""

from __future__ import annotations

import struct
from typing import Any, TypeVar

from pamqp import base, commands, encode

from gateway.wire.content import Content
from gateway.wire.errors import frame_error, not_implemented, syntax_error, unexpected_frame
from gateway.wire.tables import check_arguments

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
#: Frame header (type, channel, size) plus the frame-end octet.
FRAME_OVERHEAD = 8
#: The smallest frame_max a peer may negotiate (the spec's frame-min-size).
FRAME_MIN_SIZE = 4096

FRAME_HEADER_STRUCT = struct.Struct(">BHI")
HEARTBEAT_FRAME = FRAME_HEADER_STRUCT.pack(FRAME_HEARTBEAT, 0, 0) + bytes((FRAME_END,))

BASIC_CLASS = 60
PUBLISH_INDEX = commands.Basic.Publish.index
ACK_INDEX = commands.Basic.Ack.index
DELIVER_INDEX = commands.Basic.Deliver.index

_KNOWN_FRAME_TYPES = frozenset({FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT})

_END = bytes((FRAME_END,))
_pack_frame_header = FRAME_HEADER_STRUCT.pack
_unpack_frame_header = FRAME_HEADER_STRUCT.unpack_from
# The previous frame's end octet, then type, channel, size, class id, weight, body size: a
# content header frame up to its properties, packed together with what precedes it.
_pack_end_content_header = struct.Struct(">BBHIHHQ").pack
# The previous frame's end octet and a body frame's header.
_pack_end_frame_header = struct.Struct(">BBHI").pack
_unpack_content_header = struct.Struct(">HHQ").unpack_from
_unpack_index = struct.Struct(">I").unpack_from
_pack_index = struct.Struct(">I").pack
_unpack_tag_bit = struct.Struct(">QB").unpack_from
_pack_tag_bit = struct.Struct(">QB").pack
# A whole Basic.Ack frame: type, channel, size, method index, delivery tag, multiple, end.
_pack_ack_frame = struct.Struct(">BHIIQBB").pack
_pack_code = struct.Struct(">H").pack
_pack_count = struct.Struct(">I").pack
# One-byte length prefixes, so a shortstr costs an index instead of a struct call.
_LENGTH = [bytes((n,)) for n in range(256)]

M = TypeVar("M", bound=base.Frame)

_DELIVER = _pack_index(commands.Basic.Deliver.index)
_GET_OK = _pack_index(commands.Basic.GetOk.index)
_RETURN = _pack_index(commands.Basic.Return.index)
# Basic.Publish's method index and its reserved ticket (always 0).
_PUBLISH = _pack_index(PUBLISH_INDEX) + bytes(2)


def peek_frame(buf: bytearray, pos: int, frame_max: int) -> tuple[int, int, int] | None:
    """The (type, channel, end) of the frame starting at `pos`, or None until all of it is
    buffered; `end` is the offset of its frame-end octet, so the payload is buf[pos + 7:end].

    Error handling: the frame header is checked before its payload is waited for, so a peer
    cannot make us buffer more than frame_max bytes of one frame. frame_max counts the whole
    frame (header and end octet too), but like RabbitMQ's reader (its FRAME_SIZE_FUDGE, for
    the clients that get it wrong by up to 8 bytes) we refuse only a payload over frame_max;
    what we send stays within frame_max - 8. Every error raised here is
    501 FRAME_ERROR and means framing is lost: nothing after it can be read.
    """
    if len(buf) - pos < 7:
        return None
    frame_type, channel, size = _unpack_frame_header(buf, pos)
    if frame_type not in _KNOWN_FRAME_TYPES:
        raise frame_error(f"unknown frame type {frame_type}")
    if size > frame_max:
        raise frame_error(f"frame payload of {size} bytes on channel {channel} exceeds frame_max {frame_max}")
    end = pos + 7 + size
    if len(buf) <= end:
        return None
    if buf[end] != FRAME_END:
        raise frame_error(f"frame-end octet is {buf[end]:#x}, not 0xce")
    return frame_type, channel, end


def take_frame(buf: bytearray, pos: int, frame_type: int, channel: int, frame_max: int) -> bytearray | None:
    """The payload of the frame at `pos` if it is whole, of `frame_type`, on `channel` and
    within frame_max; otherwise None, and the frame is left for `peek_frame` to judge.

    The content fast path: a message's content frames nearly always arrive in the same read
    as its method, and taking them at once saves a trip through the event loop per frame.
    The caller advances its offset by len(payload) + FRAME_OVERHEAD.
    """
    if len(buf) - pos < 7:
        return None
    kind, number, size = _unpack_frame_header(buf, pos)
    end = pos + 7 + size
    if (
        kind != frame_type
        or number != channel
        or size > frame_max
        or len(buf) <= end
        or buf[end] != FRAME_END
    ):
        return None
    return buf[pos + 7 : end]


def check_heartbeat(channel: int, size: int) -> None:
    """A heartbeat frame must be on channel 0 and empty (501 otherwise)."""
    if channel:
        raise frame_error(f"heartbeat frame on channel {channel}")
    if size:
        raise frame_error(f"heartbeat frame with a {size}-byte payload")


def method_index(payload: bytes | bytearray) -> int:
    """The (class id << 16 | method id) that starts a method frame's payload (pamqp's index)."""
    if len(payload) < 4:
        raise syntax_error("method frame too short to hold a class and method id")
    index: int = _unpack_index(payload)[0]
    return index


def decode_method(payload: bytes | bytearray) -> base.Frame:
    """Decode any method frame's payload with pamqp.

    Error handling: an unknown class/method id is 540 NOT_IMPLEMENTED, the spec's code for
    functionality the server lacks (RabbitMQ drops the connection without a Close instead,
    which tells the client nothing). Any failure to decode the arguments is 502 SYNTAX_ERROR:
    besides pamqp's own ValueError, its decoders let OverflowError (huge timestamps) and
    RecursionError (deeply nested tables) escape, and bytes from the peer must never crash us.
    """
    index = method_index(payload)
    method_class: type[base.Frame] | None = commands.INDEX_MAPPING.get(index)
    if method_class is None:
        class_id, method_id = index >> 16, index & 0xFFFF
        error = not_implemented(f"unknown method {class_id}.{method_id}")
        error.class_id, error.method_id = class_id, method_id
        raise error
    method = method_class.__new__(method_class)  # unmarshal sets every field; skip validation
    try:
        check_arguments(method_class, payload)  # pamqp would read past a length silently
        method.unmarshal(bytes(payload[4:]))
    except Exception as exc:  # see the docstring: any failure here is the peer's
        raise syntax_error(f"cannot decode {method_class.name}: {exc}", method) from exc
    return method


def decode_publish(payload: bytes | bytearray) -> tuple[str, str, bool, bool]:
    """Basic.Publish's (exchange, routing key, mandatory, immediate); the ticket is ignored."""
    try:
        end = 7 + payload[6]
        exchange = payload[7:end].decode()
        start = end + 1
        end = start + payload[end]
        routing_key = payload[start:end].decode()
        bits = payload[end]  # also proves neither string ran past the payload
    except IndexError:
        raise syntax_error("Basic.Publish is truncated", commands.Basic.Publish) from None
    except UnicodeDecodeError:
        raise syntax_error(
            "Basic.Publish exchange or routing key is not valid UTF-8", commands.Basic.Publish
        ) from None
    return exchange, routing_key, bool(bits & 1), bool(bits & 2)


def decode_ack(payload: bytes | bytearray) -> commands.Basic.Ack:
    """Basic.Ack from a client (confirming deliveries), without pamqp's generic decoder."""
    try:
        delivery_tag, bits = _unpack_tag_bit(payload, 4)
    except struct.error:
        raise syntax_error("Basic.Ack is truncated", commands.Basic.Ack) from None
    ack = commands.Basic.Ack.__new__(commands.Basic.Ack)
    ack.delivery_tag = delivery_tag
    ack.multiple = bool(bits & 1)
    return ack


def decode_content_header(payload: bytes | bytearray) -> tuple[int, int, bytes]:
    """A content header's (class id, body size, raw property section); weight is ignored."""
    if len(payload) < 14:  # class, weight, body size, and at least one property-flags word
        raise syntax_error("content header frame is truncated")
    class_id, _weight, body_size = _unpack_content_header(payload)
    return class_id, body_size, bytes(payload[12:])


def decode_basic_header(payload: bytes | bytearray, method: Any) -> tuple[int, Content]:
    """The content header of a Basic message carried by `method` (Publish, Deliver, Get-Ok,
    Return): its declared body size and a Content with the properties and an empty body.

    The property section is walked once here, so a truncated one is a 502 on receipt and not
    an exception later in whoever reads the message; a class other than Basic is a 505.
    """
    class_id, body_size, properties = decode_content_header(payload)
    if class_id != BASIC_CLASS:
        raise unexpected_frame(f"content header for class {class_id}, expected class 60", method)
    content = Content(properties, b"")
    try:
        content.delivery_mode  # noqa: B018 - the walk (cached for repeated sections)
    except ValueError as exc:
        raise syntax_error(f"content header properties: {exc}", method) from None
    return body_size, content


def check_body_frame(size: int, remaining: int, method: Any) -> None:
    """A body frame may not carry more than the content header declared is still to come."""
    if size > remaining:
        raise unexpected_frame(
            f"content body frame of {size} bytes exceeds the {remaining} bytes remaining", method
        )


def make_method(method_class: type[M], **fields: Any) -> M:
    """Build a pamqp method without its constructor's validation.

    pamqp refuses names over 127 characters or outside ``[a-zA-Z0-9-_.:@#,/+ ]``; RabbitMQ
    (and so we) accept any UTF-8 name up to 255 bytes, and must be able to echo it back, as
    in ``make_method(commands.Queue.DeclareOk, queue=name, ...)``.

    Each shortstr field is checked here instead: ValueError names the field when its value is
    over 255 bytes of UTF-8 or cannot be encoded as UTF-8 (a lone surrogate from JSON).
    """
    method = method_class()  # the defaults are valid
    for name, value in fields.items():
        if name not in method_class.__slots__:
            raise TypeError(f"{method_class.name} has no field {name!r}")
        if method_class.amqp_type(name) == "shortstr":
            _check_shortstr(f"{method_class.name} {name}", value)
        setattr(method, name, value)
    return method


def _check_shortstr(what: str, value: str) -> None:
    """ValueError, naming `what`, unless `value` fits an AMQP shortstr (255 bytes of UTF-8)."""
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        raise ValueError(f"{what} {value[:40]!r} is not valid UTF-8") from None
    if size > 255:
        raise ValueError(f"{what} {value[:40]!r}... is {size} bytes of UTF-8; at most 255 are allowed")


def encode_method(channel: int, method: base.Frame) -> bytes:
    """A method frame. Unlike pamqp's marshal, skips pamqp's validation (a 127-character limit
    and a character set on names) so the names RabbitMQ accepts can be echoed back."""
    if type(method) is commands.Basic.Ack:  # a publisher confirm: up to one per publish
        return encode_ack(channel, method.delivery_tag, method.multiple)
    arguments = _encode_arguments(method)
    return b"".join(
        (
            _pack_frame_header(FRAME_METHOD, channel, 4 + len(arguments)),
            _pack_index(method.index),
            arguments,
            _END,
        )
    )


def encode_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """A whole Basic.Ack frame: a publisher confirm from a server, a delivery ack from a client."""
    return _pack_ack_frame(
        FRAME_METHOD, channel, 13, ACK_INDEX, delivery_tag, 1 if multiple else 0, FRAME_END
    )


def _encode_arguments(method: base.Frame) -> bytes:
    """Encode fields in declaration order; runs of bit fields share octets, 8 per octet."""
    parts: list[bytes] = []
    bits = bit_count = 0
    for name in method.__slots__:
        kind = method.amqp_type(name)
        value: Any = getattr(method, name)
        if kind == "bit":
            if bit_count == 8:
                parts.append(_LENGTH[bits])
                bits = bit_count = 0
            if value:
                bits |= 1 << bit_count
            bit_count += 1
            continue
        if bit_count:
            parts.append(_LENGTH[bits])
            bits = bit_count = 0
        parts.append(encode.by_type(value, kind))
    if bit_count:
        parts.append(_LENGTH[bits])
    return b"".join(parts)


#: Encoded shortstrs (length octet + UTF-8) of recently seen names: consumer tags, exchanges and
#: routing keys repeat, and every delivery needs three of them.
_SHORTSTRS: dict[str, bytes] = {}
_SHORTSTRS_MAX = 4096


def truncate_shortstr(text: str) -> str:
    """Cut text to a shortstr's 255 bytes without splitting a UTF-8 sequence (reply texts)."""
    data = text.encode()
    return text if len(data) <= 255 else data[:255].decode(errors="ignore")


def _shortstr(value: str) -> bytes:
    """A shortstr's length octet and bytes (cached: see _SHORTSTRS)."""
    encoded = _SHORTSTRS.get(value)
    if encoded is None:
        data = value.encode()
        if len(data) > 255:
            raise ValueError(f"{value[:40]!r}... is longer than a shortstr's 255 bytes")
        if len(_SHORTSTRS) >= _SHORTSTRS_MAX:
            _SHORTSTRS.clear()
        encoded = _SHORTSTRS[value] = _LENGTH[len(data)] + data
    return encoded


def decode_deliver(payload: bytes | bytearray) -> tuple[str, int, bool, str, str]:
    """Basic.Deliver's (consumer tag, delivery tag, redelivered, exchange, routing key)."""
    try:
        end = 5 + payload[4]
        consumer_tag = payload[5:end].decode()
        delivery_tag, bits = _unpack_tag_bit(payload, end)
        start = end + 10
        end = start + payload[end + 9]
        exchange = payload[start:end].decode()
        start = end + 1
        end = start + payload[end]
        routing_key = payload[start:end].decode()
    except (IndexError, struct.error):
        raise syntax_error("Basic.Deliver is truncated", commands.Basic.Deliver) from None
    except UnicodeDecodeError:
        raise syntax_error(
            "Basic.Deliver has a name that is not valid UTF-8", commands.Basic.Deliver
        ) from None
    if end != len(payload):  # a slice never fails, so the last string's length is checked here
        raise syntax_error("Basic.Deliver is truncated or too long", commands.Basic.Deliver)
    return consumer_tag, delivery_tag, bool(bits & 1), exchange, routing_key


def encode_publish(
    channel: int, exchange: str, routing_key: str, mandatory: bool, content: Content, frame_max: int
) -> bytes:
    """Basic.Publish and its content frames (immediate is always off: RabbitMQ refuses it)."""
    method = b"".join((_PUBLISH, _shortstr(exchange), _shortstr(routing_key), _LENGTH[1 if mandatory else 0]))
    return _with_content(channel, method, content, frame_max)


def encode_deliver(
    channel: int,
    consumer_tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    content: Content,
    frame_max: int,
) -> bytes:
    """Basic.Deliver and its content frames."""
    return _with_content(
        channel,
        b"".join(
            (
                _DELIVER,
                _shortstr(consumer_tag),
                _pack_tag_bit(delivery_tag, 1 if redelivered else 0),
                _shortstr(exchange),
                _shortstr(routing_key),
            )
        ),
        content,
        frame_max,
    )


def encode_get_ok(
    channel: int,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    message_count: int,
    content: Content,
    frame_max: int,
) -> bytes:
    """Basic.Get-Ok and its content frames."""
    return _with_content(
        channel,
        b"".join(
            (
                _GET_OK,
                _pack_tag_bit(delivery_tag, 1 if redelivered else 0),
                _shortstr(exchange),
                _shortstr(routing_key),
                _pack_count(message_count),
            )
        ),
        content,
        frame_max,
    )


def encode_return(
    channel: int,
    reply_code: int,
    reply_text: str,
    exchange: str,
    routing_key: str,
    content: Content,
    frame_max: int,
) -> bytes:
    """Basic.Return and its content frames."""
    return _with_content(
        channel,
        b"".join(
            (
                _RETURN,
                _pack_code(reply_code),
                _shortstr(reply_text),
                _shortstr(exchange),
                _shortstr(routing_key),
            )
        ),
        content,
        frame_max,
    )


def _with_content(channel: int, method: bytes, content: Content, frame_max: int) -> bytes:
    """One bytes object: the method frame, the content header, and the body split at
    frame_max - 8 (no body frame at all for an empty body, as pamqp and RabbitMQ do).

    Each frame's end octet is packed with the next frame's header: fewer parts to join.
    """
    header = content.header
    body = content.body
    size = len(body)
    head = _pack_frame_header(FRAME_METHOD, channel, len(method))
    content_header = _pack_end_content_header(
        FRAME_END, FRAME_HEADER, channel, 12 + len(header), BASIC_CLASS, 0, size
    )
    limit = frame_max - FRAME_OVERHEAD
    if size <= limit:
        if not size:
            return b"".join((head, method, content_header, header, _END))
        body_header = _pack_end_frame_header(FRAME_END, FRAME_BODY, channel, size)
        return b"".join((head, method, content_header, header, body_header, body, _END))
    parts: list[bytes | memoryview] = [head, method, content_header, header]
    view = memoryview(body)
    for start in range(0, size, limit):
        chunk = view[start : start + limit]
        parts += (_pack_end_frame_header(FRAME_END, FRAME_BODY, channel, len(chunk)), chunk)
    parts.append(_END)
    return b"".join(parts)
