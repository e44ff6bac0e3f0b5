"""ServerConnection, bytes in and bytes out: client frames are built with pamqp, and whatever
the connection sends back is decoded with pamqp."""

from __future__ import annotations

import random
import re
import struct
from pathlib import Path
from typing import Any

import pytest
from pamqp import body, commands, frame, header, heartbeat

from gateway.wire import (
    NEED_DATA,
    AMQPError,
    ChannelClosed,
    ChannelCloseRequested,
    ChannelOpened,
    ConnectionClosed,
    ConnectionCloseRequested,
    ConnectionState,
    Content,
    Event,
    HeartbeatReceived,
    LocalProtocolError,
    LoginRequested,
    MessageReceived,
    MethodReceived,
    Negotiated,
    ProtocolErrorOccurred,
    ProtocolHeaderRejected,
    SecretUpdateRequested,
    ServerConnection,
    VhostRequested,
    server_properties,
)
from gateway.wire.connection import CAPABILITIES

HEADER = b"AMQP\x00\x00\x09\x01"
CLIENT_PROPERTIES = {
    "product": "test",
    "capabilities": {"connection.blocked": True, "consumer_cancel_notify": True},
}


def m(method: Any, channel: int = 0) -> bytes:
    return frame.marshal(method, channel)


TERMINAL = (ProtocolHeaderRejected, ConnectionCloseRequested, ConnectionClosed)


def drain(conn: ServerConnection) -> list[Event]:
    """Events until NEED_DATA or the end (after which next_event only says ConnectionClosed)."""
    events: list[Event] = []
    while (event := conn.next_event()) is not NEED_DATA:
        events.append(event)
        if isinstance(event, TERMINAL):
            break
    return events


def sent(conn: ServerConnection) -> list[tuple[int, Any]]:
    """Decode everything the connection queued, with pamqp."""
    data = conn.data_to_send()
    out = []
    while data:
        consumed, channel, value = frame.unmarshal(data)
        out.append((channel, value))
        data = data[consumed:]
    return out


def feed(conn: ServerConnection, data: bytes) -> list[Event]:
    conn.receive_data(data)
    return drain(conn)


def start_ok(mechanism: str = "PLAIN") -> bytes:
    return m(commands.Connection.StartOk(CLIENT_PROPERTIES, mechanism, "\x00guest\x00guest", "en_US"))


def handshake(**options: Any) -> ServerConnection:
    conn = ServerConnection(**options)
    assert feed(conn, HEADER + start_ok()) == [
        LoginRequested("PLAIN", b"\x00guest\x00guest", CLIENT_PROPERTIES)
    ]
    conn.accept_login("guest")
    assert feed(conn, m(commands.Connection.TuneOk(0, 0, 0)) + m(commands.Connection.Open("/"))) == [
        VhostRequested("/")
    ]
    conn.accept_open()
    conn.data_to_send()
    assert conn.state is ConnectionState.OPEN
    return conn


def opened(channels: tuple[int, ...] = (1,), **options: Any) -> ServerConnection:
    conn = handshake(**options)
    for channel in channels:
        assert feed(conn, m(commands.Channel.Open(), channel)) == [ChannelOpened(channel)]
    conn.data_to_send()
    return conn


def publish(
    channel: int,
    payload: bytes,
    *,
    props: Any = None,
    frame_max: int = 131072,
    exchange: str = "amq.direct",
    routing_key: str = "rk",
    mandatory: bool = False,
) -> bytes:
    props = props or commands.Basic.Properties(delivery_mode=2)
    data = m(commands.Basic.Publish(0, exchange, routing_key, mandatory), channel)
    data += m(header.ContentHeader(0, len(payload), props), channel)
    step = frame_max - 8
    for start in range(0, len(payload), step):
        data += m(body.ContentBody(payload[start : start + step]), channel)
    return data


def raw_frame(frame_type: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + bytes((end,))


def plain(events: list[Event]) -> list[Any]:
    """Events as comparable values (Content compares by identity)."""
    return [
        (type(e).__name__, e.channel, e.exchange, e.routing_key, e.content.header, e.content.body)
        if isinstance(e, MessageReceived)
        else e
        for e in events
    ]


def assert_closed_with(
    conn: ServerConnection,
    events: list[Event],
    code: int,
    channel: int = 0,
    ids: tuple[int, int] | None = None,
) -> None:
    """The last event reports `code` on `channel`, and the matching Close went out."""
    assert isinstance(events[-1], ProtocolErrorOccurred), events
    error = events[-1].error
    assert (error.reply_code, events[-1].channel) == (code, channel), error
    out = sent(conn)
    assert out, "no Close was sent"
    close_channel, close = out[-1]
    expected = commands.Connection.Close if channel == 0 else commands.Channel.Close
    assert isinstance(close, expected)
    assert (close_channel, close.reply_code, close.reply_text) == (channel, code, error.reply_text)
    if ids is not None:
        assert (close.class_id, close.method_id) == ids
    if channel == 0:
        assert conn.state is ConnectionState.CLOSING


# ------------------------------------------------------------------ handshake


def test_handshake_bytes_in_bytes_out() -> None:
    conn = ServerConnection(channel_max=100, frame_max=65536, heartbeat=30)
    assert feed(conn, HEADER) == []
    [(channel, start)] = sent(conn)
    assert channel == 0 and isinstance(start, commands.Connection.Start)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert (start.mechanisms, start.locales) == ("PLAIN AMQPLAIN", "en_US")
    properties = start.server_properties
    assert (properties["product"], properties["platform"]) == ("amq-gateway", "Python/Trio")
    capabilities = properties["capabilities"]
    assert capabilities["publisher_confirms"] and capabilities["connection.blocked"]
    assert capabilities["direct_reply_to"] is False

    assert feed(conn, start_ok()) == [LoginRequested("PLAIN", b"\x00guest\x00guest", CLIENT_PROPERTIES)]
    assert conn.client_properties == CLIENT_PROPERTIES
    assert conn.client_capabilities == CLIENT_PROPERTIES["capabilities"]
    assert sent(conn) == []
    conn.accept_login("guest")
    [(_, tune)] = sent(conn)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (100, 65536, 30)
    assert conn.username == "guest"

    assert feed(conn, m(commands.Connection.TuneOk(50, 0, 10))) == []
    assert conn.negotiated == Negotiated(channel_max=50, frame_max=65536, heartbeat=10)
    assert feed(conn, m(commands.Connection.Open("vhost-ü"))) == [VhostRequested("vhost-ü")]
    conn.accept_open()
    [(_, open_ok)] = sent(conn)
    assert isinstance(open_ok, commands.Connection.OpenOk)
    assert conn.state is ConnectionState.OPEN


def test_custom_server_properties_and_mechanisms() -> None:
    conn = ServerConnection({"product": "x"}, mechanisms=("PLAIN",))
    feed(conn, HEADER)
    [(_, start)] = sent(conn)
    assert (start.server_properties, start.mechanisms) == ({"product": "x"}, "PLAIN")


def test_server_properties_name_the_node_and_are_fresh_each_time() -> None:
    named = server_properties("hub")
    assert named["cluster_name"] == "hub"
    assert "cluster_name" not in server_properties()
    assert named["capabilities"] == CAPABILITIES
    named["capabilities"]["direct_reply_to"] = True  # a caller's change stays its own
    assert server_properties("hub")["capabilities"]["direct_reply_to"] is False


def _documented_start() -> dict[str, str]:
    """docs/amqp.md's "Connection.Start" table: field -> value cell."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "amqp.md"
    section = docs.read_text().split("### Connection.Start", 1)[1].split("\n### ", 1)[0]
    return dict(re.findall(r"^\| (.+?) \| (.+?) \|$", section, re.MULTILINE))


def test_the_capabilities_are_those_docs_amqp_md_promises() -> None:
    cell = _documented_start()["`capabilities`"]
    promised_true, promised_false = cell.split("all `true`")
    expected = dict.fromkeys(re.findall(r"`([\w.]+)`", promised_true), True)
    expected |= dict.fromkeys(re.findall(r"`([\w.]+)` `false`", promised_false), False)
    assert expected["direct_reply_to"] is False
    assert CAPABILITIES == expected
    documented = _documented_start()
    assert documented["`platform`"] == f"`{server_properties()['platform']}`"
    assert documented["`server_properties.product`"] == f"`{server_properties()['product']}`"


def test_handshake_byte_by_byte_equals_whole() -> None:
    client = HEADER + start_ok()
    whole = ServerConnection()
    expected = feed(whole, client)
    piecewise = ServerConnection()
    events: list[Event] = []
    for byte in client:
        events += feed(piecewise, bytes([byte]))
    assert events == expected
    assert piecewise.data_to_send() == whole.data_to_send()


def _start_ok_with_raw_response(response: bytes) -> bytes:
    arguments = (
        struct.pack(">I", 0)  # empty client properties
        + b"\x05PLAIN"
        + struct.pack(">I", len(response))
        + response
        + b"\x05en_US"
    )
    return raw_frame(1, 0, struct.pack(">HH", 10, 11) + arguments)


@pytest.mark.parametrize("response", [b"\x00user\x00p\xc3\xa4ss", b"\x00user\x00p\xff\xfess", b""])
def test_login_response_keeps_exact_bytes(response: bytes) -> None:
    conn = ServerConnection()
    [event] = feed(conn, HEADER + _start_ok_with_raw_response(response))
    assert isinstance(event, LoginRequested)
    assert event.response == response


@pytest.mark.parametrize("bad", [b"AMQP\x00\x00\x09\x00", b"AMQP\x01\x01\x00\x09", b"GET / HTTP/1.1\r\n"])
def test_wrong_protocol_header_gets_ours_and_ends(bad: bytes) -> None:
    conn = ServerConnection()
    events = feed(conn, bad)
    assert isinstance(events[0], ProtocolHeaderRejected)
    assert bad.startswith(events[0].received)
    assert conn.data_to_send() == HEADER
    assert conn.state is ConnectionState.CLOSED
    assert conn.next_event() == ConnectionClosed()


def test_garbage_is_rejected_at_the_first_wrong_byte() -> None:
    conn = ServerConnection()
    assert feed(conn, b"AM") == []
    assert feed(conn, b"X") == [ProtocolHeaderRejected(b"AMX")]


def test_eof_during_protocol_header() -> None:
    conn = ServerConnection()
    assert feed(conn, b"AMQ") == []
    assert feed(conn, b"") == [ConnectionClosed()]
    with pytest.raises(LocalProtocolError):
        conn.receive_data(b"more")


def test_unsupported_mechanism_is_refused_like_rabbitmq() -> None:
    conn = ServerConnection()
    feed(conn, HEADER)
    sent(conn)
    events = feed(conn, start_ok("EXTERNAL"))
    assert_closed_with(conn, events, 503, ids=(10, 11))
    assert events[-1].error.reply_text == "COMMAND_INVALID - unknown authentication mechanism 'EXTERNAL'"
    assert feed(conn, m(commands.Connection.CloseOk())) == [ConnectionClosed()]


def test_refuse_login_sends_403_and_waits_for_close_ok() -> None:
    conn = ServerConnection()
    feed(conn, HEADER + start_ok())
    sent(conn)
    text = "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN."
    conn.refuse_login(text)
    [(channel, close)] = sent(conn)
    assert (channel, close.reply_code, close.class_id, close.method_id) == (0, 403, 10, 11)
    assert close.reply_text == text
    assert feed(conn, m(commands.Connection.Open("/"))) == []  # ignored while closing
    assert feed(conn, m(commands.Connection.CloseOk())) == [ConnectionClosed()]
    assert conn.state is ConnectionState.CLOSED


@pytest.mark.parametrize(
    ("tune_ok", "expected"),
    [
        ((0, 0, 0), Negotiated(2047, 131072, 0)),
        ((10, 4096, 5), Negotiated(10, 4096, 5)),
        ((2047, 131072, 600), Negotiated(2047, 131072, 600)),
    ],
)
def test_tune_ok_negotiation(tune_ok: tuple[int, int, int], expected: Negotiated) -> None:
    conn = ServerConnection()
    feed(conn, HEADER + start_ok())
    conn.accept_login("guest")
    assert feed(conn, m(commands.Connection.TuneOk(*tune_ok))) == []
    assert conn.negotiated == expected


@pytest.mark.parametrize("tune_ok", [(0, 131073, 0), (0, 4095, 0), (2048, 0, 0)])
def test_tune_ok_out_of_bounds_is_530(tune_ok: tuple[int, int, int]) -> None:
    conn = ServerConnection()
    feed(conn, HEADER + start_ok())
    conn.accept_login("guest")
    sent(conn)
    events = feed(conn, m(commands.Connection.TuneOk(*tune_ok)))
    assert_closed_with(conn, events, 530, ids=(10, 31))


def test_handshake_methods_out_of_order_are_503() -> None:
    conn = ServerConnection()
    feed(conn, HEADER)
    sent(conn)
    events = feed(conn, m(commands.Connection.Open("/")))
    assert_closed_with(conn, events, 503, ids=(10, 40))


def test_channels_before_open_are_504() -> None:
    conn = ServerConnection()
    feed(conn, HEADER + start_ok())
    sent(conn)
    events = feed(conn, m(commands.Channel.Open(), 1))
    assert_closed_with(conn, events, 504)


def test_local_misuse_raises() -> None:
    conn = ServerConnection()
    with pytest.raises(LocalProtocolError):
        conn.accept_login("guest")
    feed(conn, HEADER)
    with pytest.raises(LocalProtocolError):
        conn.accept_open()
    with pytest.raises(LocalProtocolError):
        conn.refuse_login("no")
    with pytest.raises(LocalProtocolError):
        conn.send_method(1, commands.Basic.QosOk())
    with pytest.raises(ValueError):
        ServerConnection(frame_max=4095)
    conn = opened()
    with pytest.raises(LocalProtocolError):
        conn.send_method(0, commands.Basic.QosOk())
    with pytest.raises(LocalProtocolError):
        conn.send_method(1, commands.Channel.Close(200, "", 0, 0))
    with pytest.raises(LocalProtocolError):
        conn.send_method(1, commands.Connection.Blocked("x"))


def test_close_before_protocol_header_just_ends() -> None:
    conn = ServerConnection()
    conn.close_connection(AMQPError(320, "CONNECTION_FORCED - shutdown"))
    assert conn.data_to_send() == b""
    assert conn.next_event() == ConnectionClosed()


# ------------------------------------------------------------------ channels and methods


def test_channel_open_and_client_close() -> None:
    conn = handshake()
    assert feed(conn, m(commands.Channel.Open(), 5)) == [ChannelOpened(5)]
    [(channel, open_ok)] = sent(conn)
    assert channel == 5 and isinstance(open_ok, commands.Channel.OpenOk)
    assert conn.is_channel_open(5)
    assert feed(conn, m(commands.Channel.Close(200, "bye", 0, 0), 5)) == [ChannelCloseRequested(5)]
    [(channel, close_ok)] = sent(conn)
    assert channel == 5 and isinstance(close_ok, commands.Channel.CloseOk)
    assert not conn.is_channel_open(5)
    assert feed(conn, m(commands.Channel.Open(), 5)) == [ChannelOpened(5)]


@pytest.mark.parametrize(
    "method",
    [
        commands.Channel.Flow(False),
        commands.Channel.FlowOk(True),
        commands.Exchange.Declare(
            exchange="x", exchange_type="topic", arguments={"alternate-exchange": "ae"}
        ),
        commands.Queue.Declare(queue="celery@host.celery.pidbox", arguments={"x-expires": 10000}),
        commands.Queue.Bind(queue="q", exchange="x", routing_key="a.*"),
        commands.Basic.Qos(prefetch_count=10),
        commands.Basic.Consume(queue="q", consumer_tag="ctag"),
        commands.Basic.Cancel("ctag"),
        commands.Basic.CancelOk("ctag"),
        commands.Basic.Get(queue="q"),
        commands.Basic.Nack(7, True, False),
        commands.Basic.Reject(8, True),
        commands.Basic.Recover(True),
        commands.Confirm.Select(),
        commands.Tx.Select(),
        commands.Tx.Commit(),
    ],
    ids=lambda method: method.name,
)
def test_client_methods_become_method_received(method: Any) -> None:
    conn = opened()
    [event] = feed(conn, m(method, 1))
    assert isinstance(event, MethodReceived) and event.channel == 1
    assert type(event.method) is type(method)
    assert dict(event.method) == dict(method)
    assert sent(conn) == []


def test_basic_ack_is_a_pamqp_ack() -> None:
    conn = opened()
    [event] = feed(conn, m(commands.Basic.Ack(42, True), 1))
    assert isinstance(event, MethodReceived) and isinstance(event.method, commands.Basic.Ack)
    assert (event.method.delivery_tag, event.method.multiple) == (42, True)


def test_long_unicode_names_are_accepted() -> None:
    conn = opened()
    name = "ü" * 127  # 254 bytes: RabbitMQ accepts it, pamqp's validation would not
    payload = (
        struct.pack(">HHH", 50, 10, 0) + bytes([len(name.encode())]) + name.encode() + b"\x00" + b"\x00" * 4
    )
    [event] = feed(conn, raw_frame(1, 1, payload))
    assert isinstance(event, MethodReceived) and event.method.queue == name


def test_send_method_and_drops_on_closed_channels() -> None:
    conn = opened()
    conn.send_method(1, commands.Basic.QosOk())
    conn.send_method(2, commands.Basic.QosOk())  # never opened: dropped, the broker may race
    conn.send_deliver(3, "c", 1, False, "", "q", Content(b"\x00\x00", b"x"))
    [(channel, qos_ok)] = sent(conn)
    assert channel == 1 and isinstance(qos_ok, commands.Basic.QosOk)


def test_send_deliver_get_ok_return_split_at_negotiated_frame_max() -> None:
    conn = ServerConnection()
    feed(conn, HEADER + start_ok())
    conn.accept_login("guest")
    feed(conn, m(commands.Connection.TuneOk(0, 4096, 0)) + m(commands.Connection.Open("/")))
    conn.accept_open()
    feed(conn, m(commands.Channel.Open(), 1))
    conn.data_to_send()
    content = Content(commands.Basic.Properties(delivery_mode=1).marshal(), b"a" * 10000)
    conn.send_deliver(1, "ctag", 1, True, "ex", "rk", content)
    conn.send_get_ok(1, 2, False, "ex", "rk", 0, content)
    conn.send_return(1, 312, "NO_ROUTE", "ex", "rk", content)
    assert conn.pending_output() > 30000
    out = sent(conn)
    assert conn.pending_output() == 0
    kinds = [type(value).__name__ for _, value in out]
    one_message = ["ContentHeader", "ContentBody", "ContentBody", "ContentBody"]
    assert kinds == ["Deliver", *one_message, "GetOk", *one_message, "Return", *one_message]
    assert [len(value) for _, value in out[2:5]] == [4088, 4088, 1824]


def test_send_heartbeat_and_heartbeat_received() -> None:
    conn = opened()
    conn.send_heartbeat()
    assert conn.data_to_send() == m(heartbeat.Heartbeat())
    assert feed(conn, m(heartbeat.Heartbeat())) == [HeartbeatReceived()]


def test_blocked_only_for_clients_that_announced_it() -> None:
    conn = opened()
    conn.send_blocked("low on memory")
    conn.send_unblocked()
    [(_, blocked), (_, unblocked)] = sent(conn)
    assert blocked.reason == "low on memory" and isinstance(unblocked, commands.Connection.Unblocked)
    conn = ServerConnection()
    feed(conn, HEADER + m(commands.Connection.StartOk({}, "PLAIN", "\x00a\x00b", "en_US")))
    conn.data_to_send()
    conn.send_blocked("low on memory")
    assert conn.data_to_send() == b""


# ------------------------------------------------------------------ publishing


PROPERTIES = commands.Basic.Properties(
    content_type="text/plain",
    headers={"a": {"b": [1, 2.5, "c"]}},
    delivery_mode=2,
    priority=3,
    reply_to="amq.rabbitmq.reply-to",
    expiration="1000",
)


def _expected_message(payload: bytes, channel: int = 1) -> list[Any]:
    return [("MessageReceived", channel, "amq.direct", "rk", PROPERTIES.marshal(), payload)]


def test_publish_split_across_frames_whole_bytewise_and_trailing() -> None:
    payload = bytes(range(256)) * 40  # 10240 bytes: three body frames at frame_max 4096
    data = publish(1, payload, props=PROPERTIES, frame_max=4096)

    whole = opened(frame_max=4096)
    events = feed(whole, data)
    assert plain(events) == _expected_message(payload)
    message = events[0]
    assert isinstance(message, MessageReceived)
    assert (message.mandatory, message.immediate) == (False, False)
    assert (message.content.delivery_mode, message.content.priority, message.content.expiration) == (
        2,
        3,
        "1000",
    )
    assert message.content.headers == {"a": {"b": [1, 2.5, "c"]}}

    bytewise = opened(frame_max=4096)
    events = []
    for byte in data:
        events += feed(bytewise, bytes([byte]))
    assert plain(events) == _expected_message(payload)

    trailing = opened(frame_max=4096)
    second = publish(1, b"second", props=PROPERTIES)
    assert plain(feed(trailing, data + second[:-3])) == _expected_message(payload)
    assert plain(feed(trailing, second[-3:])) == _expected_message(b"second")


def test_publish_empty_body_and_flags() -> None:
    conn = opened()
    [event] = feed(conn, publish(1, b"", mandatory=True))
    assert isinstance(event, MessageReceived)
    assert (event.content.body, event.mandatory) == (b"", True)


def test_interleaved_channels() -> None:
    conn = opened((1, 2))
    one, two = publish(1, b"one"), publish(2, b"two")
    # Frames of different channels may interleave; each channel's content stays in order.
    split_one = [one[: len(one) - 11], one[len(one) - 11 :]]
    events = feed(conn, split_one[0] + two + split_one[1])
    assert [(e.channel, e.content.body) for e in events if isinstance(e, MessageReceived)] == [
        (2, b"two"),
        (1, b"one"),
    ]


def _hand_made_properties() -> bytes:
    """Property bytes pamqp would re-encode differently: unsorted keys, 'l' for a small int,
    'x' byte arrays, 'V' voids, a decimal, a timestamp, an array and a long string."""
    table = (
        b"\x01z" + b"l" + struct.pack(">q", 1)
        + b"\x01a" + b"x" + struct.pack(">I", 3) + b"\x00\x01\x02"
        + b"\x01v" + b"V"
        + b"\x01d" + b"D" + b"\x02" + struct.pack(">i", 12345)
        + b"\x01t" + b"T" + struct.pack(">Q", 1700000000)
        + b"\x02ar" + b"A" + struct.pack(">I", 7) + b"b\x05" + b"t\x01" + b"s\x00\x02"
        + b"\x01F" + b"F" + struct.pack(">I", 9) + b"\x01n" + b"S" + struct.pack(">I", 2) + b"ok"
        + b"\x01L" + b"S" + struct.pack(">I", 70000) + b"y" * 70000
    )  # fmt: skip
    flags = 0x2000 | 0x1000 | 0x0040  # headers, delivery mode, timestamp
    return (
        struct.pack(">H", flags)
        + struct.pack(">I", len(table))
        + table
        + b"\x02"
        + struct.pack(">Q", 1600000000)
    )


def test_property_bytes_round_trip_byte_exact() -> None:
    properties = _hand_made_properties()
    conn = opened()
    data = (
        m(commands.Basic.Publish(0, "", "q"), 1)
        + raw_frame(2, 1, struct.pack(">HHQ", 60, 0, 3) + properties)
        + m(body.ContentBody(b"abc"), 1)
    )
    [event] = feed(conn, data)
    assert isinstance(event, MessageReceived)
    assert event.content.header == properties
    assert event.content.headers is not None and event.content.headers["L"] == "y" * 70000
    conn.send_deliver(1, "ctag", 1, False, "", "q", event.content)
    out = conn.data_to_send()
    method_size = struct.unpack_from(">I", out, 3)[0]
    header_frame = out[8 + method_size :]
    assert header_frame[7 + 12 : 7 + 12 + len(properties)] == properties
    _, _, decoded = frame.unmarshal(header_frame)
    assert decoded.body_size == 3 and decoded.properties.delivery_mode == 2


# ------------------------------------------------------------------ errors, with their reply codes


def test_frame_over_frame_max_is_refused_before_buffering() -> None:
    conn = ServerConnection(frame_max=4096)
    feed(conn, HEADER)
    sent(conn)
    # Only the 7-byte header of a 4097-byte frame has arrived: refused at once.
    events = feed(conn, struct.pack(">BHI", 1, 0, 4097))
    assert_closed_with(conn, events, 501)
    assert feed(conn, m(commands.Connection.CloseOk())) == []  # framing is lost: input dropped
    assert feed(conn, b"") == [ConnectionClosed()]


def test_payload_of_exactly_frame_max_is_accepted_and_one_more_byte_refused() -> None:
    """RabbitMQ's reader tolerates 8 bytes over frame_max (a payload of frame_max bytes), for
    clients that do not count the frame header and end octet; so do we, fed whole or bytewise."""
    for fed_bytewise in (False, True):
        conn = opened(frame_max=4096)
        data = publish(1, b"x" * 4096, frame_max=4096 + 8)  # one body frame of 4096 bytes
        events = [e for b in data for e in feed(conn, bytes([b]))] if fed_bytewise else feed(conn, data)
        assert [e.content.body for e in events] == [b"x" * 4096]
        conn = opened(frame_max=4096)
        events = feed(conn, publish(1, b"x" * 4097, frame_max=4097 + 8))
        assert_closed_with(conn, events, 501)


def test_update_secret_is_asked_of_the_server_and_answered_update_secret_ok() -> None:
    conn = opened()
    events = feed(conn, m(commands.Connection.UpdateSecret("new\u00e9", "token refresh"), 0))
    assert events == [SecretUpdateRequested("new\u00e9".encode(), "token refresh")]
    conn.accept_secret()
    assert [type(method) for _, method in sent(conn)] == [commands.Connection.UpdateSecretOk]
    assert conn.state is ConnectionState.OPEN


def test_channel_max_limits_open_channels_not_their_ids() -> None:
    """As in RabbitMQ: any id up to 65535, and 530 for one channel more than channel_max."""
    conn = ServerConnection(channel_max=2)
    feed(conn, HEADER + start_ok())
    conn.accept_login("guest")
    feed(conn, m(commands.Connection.TuneOk(0, 0, 0)) + m(commands.Connection.Open("/")))
    conn.accept_open()
    sent(conn)
    assert feed(conn, m(commands.Channel.Open(), 65535) + m(commands.Channel.Open(), 7)) == [
        ChannelOpened(65535),
        ChannelOpened(7),
    ]
    sent(conn)
    # A closed channel frees its place; a third open one is refused.
    assert feed(conn, m(commands.Channel.Close(200, "", 0, 0), 7)) == [ChannelCloseRequested(7)]
    assert feed(conn, m(commands.Channel.Open(), 3)) == [ChannelOpened(3)]
    sent(conn)
    events = feed(conn, m(commands.Channel.Open(), 4))
    assert_closed_with(conn, events, 530, ids=(20, 10))
    assert events[-1].error.reply_text == (
        "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
    )


def test_frame_max_after_tune_ok_is_the_negotiated_one() -> None:
    conn = ServerConnection()
    feed(conn, HEADER + start_ok())
    conn.accept_login("guest")
    feed(conn, m(commands.Connection.TuneOk(0, 8192, 0)) + m(commands.Connection.Open("/")))
    conn.accept_open()
    feed(conn, m(commands.Channel.Open(), 1))
    sent(conn)
    assert feed(conn, publish(1, b"x" * 8192, frame_max=8200))[0].content.body == b"x" * 8192
    events = feed(
        conn,
        m(commands.Basic.Publish(0, "", "q"), 1)
        + m(header.ContentHeader(0, 8193), 1)
        + struct.pack(">BHI", 3, 1, 8193),
    )
    assert_closed_with(conn, events, 501)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (raw_frame(1, 0, struct.pack(">HH", 10, 51), end=0x00), 501),  # bad frame-end
        (raw_frame(4, 0, b""), 501),  # unknown frame type
        (raw_frame(8, 1, b""), 501),  # heartbeat on a channel
        (raw_frame(8, 0, b"xx"), 501),  # heartbeat with a payload
        (raw_frame(1, 1, b"\x00"), 502),  # method frame too short
        (
            raw_frame(1, 1, struct.pack(">HHH", 50, 10, 0) + b"\x02\xc3\x28" + b"\x00" * 5),
            502,
        ),  # not UTF-8
        (raw_frame(1, 1, struct.pack(">HHH", 60, 40, 0) + b"\x01\xff\x00\x00"), 502),  # publish exchange
        (raw_frame(1, 1, struct.pack(">HH", 50, 10) + b"\x00"), 502),  # truncated
        (raw_frame(1, 1, struct.pack(">HH", 60, 999)), 540),  # unknown method
        (raw_frame(1, 1, struct.pack(">HH", 77, 10)), 540),  # unknown class
        (m(commands.Basic.Deliver("c", 1, False, "", "rk"), 1), 503),  # server-only
        (m(commands.Basic.GetOk(1, False, "", "rk", 0), 1), 503),
        (m(commands.Connection.Start(), 0), 503),
        (m(commands.Connection.TuneOk(), 0), 503),  # not in this state
        (m(commands.Connection.StartOk(), 1), 503),  # connection method on a channel
        (m(commands.Channel.CloseOk(), 1), 503),  # nothing to acknowledge
        (m(commands.Basic.Qos(), 2), 504),  # channel not open
        (m(commands.Channel.Open(), 1), 504),  # already open
        (m(commands.Channel.Open(), 0), 504),  # channel 0 is for connection methods
        (m(header.ContentHeader(0, 1), 1), 505),  # header without a publish
        (m(body.ContentBody(b"x"), 1), 505),  # body without a header
        (m(header.ContentHeader(0, 1), 0), 505),  # content on channel 0
        (m(body.ContentBody(b"x"), 2), 504),  # content on a channel not open
        (
            m(commands.Basic.Publish(0, "", "q"), 1) + m(commands.Basic.Qos(), 1),
            505,
        ),  # method, header due
        (
            m(commands.Basic.Publish(0, "", "q"), 1) + m(body.ContentBody(b"x"), 1),
            505,
        ),  # body, header due
        (publish(1, b"xy")[:-10] + m(commands.Basic.Qos(), 1), 505),  # method, body due
        (publish(1, b"xy")[:-10] + m(body.ContentBody(b"xyz"), 1), 505),  # body too big
        (publish(1, b"xy")[:-10] + m(header.ContentHeader(0, 2), 1), 505),  # second header
        (
            m(commands.Basic.Publish(0, "", "q"), 1) + raw_frame(2, 1, struct.pack(">HHQH", 50, 0, 1, 0)),
            505,
        ),
        (m(commands.Basic.Publish(0, "", "q"), 1) + raw_frame(2, 1, struct.pack(">HHQ", 60, 0, 1)), 502),
        (
            m(commands.Basic.Publish(0, "", "q"), 1)
            + raw_frame(2, 1, struct.pack(">HHQHB", 60, 0, 1, 0x8000, 9)),
            502,
        ),
    ],
)
def test_peer_errors_close_the_connection_with_the_right_code(data: bytes, code: int) -> None:
    conn = opened()
    events = feed(conn, data)
    assert_closed_with(conn, events, code)
    # Closing: everything but Close-Ok is ignored (or, after a framing error, everything).
    assert feed(conn, m(commands.Basic.Qos(), 1) + m(commands.Channel.Open(), 9)) == []


def test_unknown_method_close_names_it() -> None:
    conn = opened()
    feed(conn, raw_frame(1, 1, struct.pack(">HH", 60, 999)))
    [(_, close)] = sent(conn)
    assert (close.reply_code, close.class_id, close.method_id) == (540, 60, 999)


def test_syntax_errors_pamqp_lets_escape_become_502() -> None:
    nested = b""
    for _ in range(3000):  # deeper than Python's recursion limit
        nested = b"\x01k" + b"F" + struct.pack(">I", len(nested)) + nested
    arguments = struct.pack(">H", 0) + b"\x01q" + b"\x00" + struct.pack(">I", len(nested)) + nested
    deep = raw_frame(1, 1, struct.pack(">HH", 50, 10) + arguments)
    far_future = b"\x01t" + b"T" + struct.pack(">Q", 2**63)
    timestamp = struct.pack(">H", 0) + b"\x01q" + b"\x00" + struct.pack(">I", len(far_future)) + far_future
    for data in (deep, raw_frame(1, 1, struct.pack(">HH", 50, 10) + timestamp)):
        conn = opened(frame_max=131072)
        assert_closed_with(conn, feed(conn, data), 502, ids=(50, 10))


def test_connection_close_ok_ends_the_closing() -> None:
    conn = opened()
    assert_closed_with(conn, feed(conn, m(commands.Basic.Qos(), 7)), 504)
    assert feed(conn, publish(1, b"ignored")) == []
    assert feed(conn, m(commands.Connection.CloseOk())) == [ConnectionClosed()]
    assert conn.next_event() == ConnectionClosed()


def test_crossing_connection_close_is_answered() -> None:
    conn = opened()
    conn.close_connection(AMQPError(320, "CONNECTION_FORCED - broker shutdown"))
    [(_, close)] = sent(conn)
    assert (close.reply_code, close.reply_text) == (320, "CONNECTION_FORCED - broker shutdown")
    conn.close_connection(AMQPError(541, "again"))  # no-op while closing
    assert conn.data_to_send() == b""
    conn.send_deliver(1, "c", 1, False, "", "q", Content(b"\x00\x00", b""))  # dropped
    assert feed(conn, m(commands.Connection.Close(200, "bye", 0, 0))) == [ConnectionClosed()]
    [(_, close_ok)] = sent(conn)
    assert isinstance(close_ok, commands.Connection.CloseOk)


def test_client_connection_close() -> None:
    conn = opened()
    assert feed(conn, m(commands.Connection.Close(200, "Normal shutdown", 0, 0))) == [
        ConnectionCloseRequested(200, "Normal shutdown")
    ]
    [(_, close_ok)] = sent(conn)
    assert isinstance(close_ok, commands.Connection.CloseOk)
    assert conn.next_event() == ConnectionClosed()


def test_eof_processes_buffered_frames_first() -> None:
    conn = opened()
    conn.receive_data(publish(1, b"last words") + b"\x01\x00")
    conn.receive_data(b"")
    events = drain(conn)
    assert plain(events) == [
        (
            "MessageReceived",
            1,
            "amq.direct",
            "rk",
            commands.Basic.Properties(delivery_mode=2).marshal(),
            b"last words",
        ),
        ConnectionClosed(),
    ]


def test_close_channel_ignores_until_close_ok() -> None:
    conn = opened((1, 2))
    error = AMQPError(404, "NOT_FOUND - no queue 'q'", 50, 10)
    conn.close_channel(1, error)
    [(channel, close)] = sent(conn)
    assert (channel, close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        1, 404, "NOT_FOUND - no queue 'q'", 50, 10
    )  # fmt: skip
    assert not conn.is_channel_open(1)
    conn.close_channel(1, error)  # already closing: nothing more
    conn.send_method(1, commands.Basic.QosOk())  # dropped
    assert conn.data_to_send() == b""
    assert (
        feed(conn, publish(1, b"in flight") + m(commands.Channel.Open(), 1) + m(commands.Basic.Qos(), 1))
        == []
    )
    assert feed(conn, m(commands.Channel.Close(200, "", 0, 0), 1)) == []  # crossing: answered
    [(_, close_ok)] = sent(conn)
    assert isinstance(close_ok, commands.Channel.CloseOk)
    assert feed(conn, m(commands.Channel.CloseOk(), 1)) == [ChannelClosed(1)]
    assert feed(conn, m(commands.Channel.Open(), 1)) == [ChannelOpened(1)]
    assert plain(feed(conn, publish(2, b"other channel"))) == [
        (
            "MessageReceived",
            2,
            "amq.direct",
            "rk",
            commands.Basic.Properties(delivery_mode=2).marshal(),
            b"other channel",
        )
    ]


def test_close_channel_with_a_hard_error_closes_the_connection() -> None:
    conn = opened()
    conn.close_channel(1, AMQPError(541, "INTERNAL_ERROR - oops"))
    [(channel, close)] = sent(conn)
    assert (channel, type(close), close.reply_code) == (0, commands.Connection.Close, 541)


def test_message_over_max_size_closes_only_the_channel() -> None:
    conn = opened((1, 2), max_message_size=10)
    events = feed(conn, publish(1, b"x" * 11))
    assert_closed_with(conn, events, 406, channel=1, ids=(60, 40))
    assert conn.state is ConnectionState.OPEN
    assert plain(feed(conn, publish(2, b"x" * 10)))[0][-1] == b"x" * 10
    assert feed(conn, m(commands.Channel.CloseOk(), 1)) == [ChannelClosed(1)]


def test_content_in_flight_counts_unfinished_bodies_until_whole_or_dropped() -> None:
    conn = opened((1, 2, 3))
    whole = publish(1, b"a" * 10_000, frame_max=4096)
    cut = len(whole) - (1824 + 8)  # before the last body frame: two of 4088 bytes are in
    assert feed(conn, whole[:cut]) == [] and conn.content_in_flight == 2 * 4088
    other = publish(2, b"b" * 5000, frame_max=4096)
    feed(conn, other[: len(other) - (912 + 8)])
    assert conn.content_in_flight == 3 * 4088
    assert len(feed(conn, whole[cut:])) == 1 and conn.content_in_flight == 4088
    conn.close_channel(2, AMQPError(406, "PRECONDITION_FAILED - gone"))
    assert conn.content_in_flight == 0
    assert plain(feed(conn, publish(3, b"c" * 100)))[0][-1] == b"c" * 100
    assert conn.content_in_flight == 0


def test_a_channel_gate_refuses_channel_open_with_530_instead_of_open_ok() -> None:
    conn = opened((1,))
    reasons: list[str | None] = [None, "user limit reached"]
    conn.channel_gate = lambda: reasons.pop(0)
    assert feed(conn, m(commands.Channel.Open(), 2)) == [ChannelOpened(2)]
    conn.data_to_send()
    events = feed(conn, m(commands.Channel.Open(), 3))
    assert_closed_with(conn, events, 530, ids=(20, 10))
    assert conn.channel_count == 2


def test_close_texts_are_cut_to_255_bytes() -> None:
    conn = opened()
    conn.close_channel(1, AMQPError(406, "é" * 200))
    [(_, close)] = sent(conn)
    assert close.reply_text == "é" * 127


# ------------------------------------------------------------------ fuzz


def _valid_stream() -> list[bytes]:
    """Frames of a busy session, used as seeds for mutation."""
    return [
        m(commands.Channel.Open(), 2),
        m(commands.Queue.Declare(queue="q", arguments={"x-max-length": 10}), 1),
        m(commands.Basic.Consume(queue="q", consumer_tag="c"), 1),
        publish(1, b"payload" * 100, props=PROPERTIES, frame_max=4096),
        publish(1, b"", exchange="x" * 127, routing_key="ü" * 127),
        *_split_frames(publish(1, b"payload" * 1000, props=PROPERTIES, frame_max=4096)),
        m(commands.Basic.Ack(1, False), 1),
        m(heartbeat.Heartbeat()),
        m(commands.Channel.Close(200, "", 0, 0), 2),
        raw_frame(2, 1, struct.pack(">HHQ", 60, 0, 5) + _hand_made_properties()[:200]),
    ]


def _split_frames(data: bytes) -> list[bytes]:
    out = []
    while data:
        size = struct.unpack_from(">I", data, 3)[0]
        out.append(data[: 8 + size])
        data = data[8 + size :]
    return out


def _mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if choice < 0.5 and buf:
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif choice < 0.7 and buf:
            del buf[rng.randrange(len(buf)) :]
        elif choice < 0.85:
            position = rng.randrange(len(buf) + 1)
            buf[position:position] = rng.randbytes(rng.randint(1, 8))
        elif len(buf) > 7:  # keep the frame well-formed, garble the payload only
            payload = rng.randbytes(rng.randint(0, 40))
            buf = bytearray(buf[:3] + struct.pack(">I", 4 + len(payload)) + buf[7:11] + payload + b"\xce")
    return bytes(buf)


def test_fuzz_only_events_never_exceptions() -> None:
    """Either a valid event or ProtocolErrorOccurred, never any other exception."""
    rng = random.Random(20240601)
    seeds = _valid_stream()
    for _ in range(3000):
        conn = opened((1,), frame_max=4096)
        stream = b"".join(
            _mutate(rng, rng.choice(seeds)) if rng.random() < 0.3 else rng.choice(seeds)
            for _ in range(rng.randint(1, 6))
        )
        if rng.random() < 0.1:
            stream += rng.randbytes(rng.randint(1, 64))
        position = 0
        while position < len(stream):  # random chunking, as a socket would deliver it
            step = rng.randint(1, 64)
            for event in feed(conn, stream[position : position + step]):
                assert isinstance(event, Event)
            position += step
        assert all(isinstance(event, Event) for event in feed(conn, b""))
        assert conn.next_event() == ConnectionClosed()


def test_fuzz_handshake() -> None:
    rng = random.Random(7)
    seeds = [
        HEADER,
        start_ok(),
        m(commands.Connection.TuneOk(0, 0, 0)),
        m(commands.Connection.Open("/")),
    ]
    for _ in range(1000):
        conn = ServerConnection()
        data = b"".join(_mutate(rng, seed) if rng.random() < 0.4 else seed for seed in seeds)
        conn.receive_data(data)
        for event in drain(conn):
            assert isinstance(event, Event)
            if isinstance(event, LoginRequested):
                conn.accept_login("guest")
            elif isinstance(event, VhostRequested):
                conn.accept_open()


def _comparable(events: list[Event]) -> list[Any]:
    """plain() up to the end of the connection, errors and methods by value (they compare by
    identity)."""

    def value(e: Any) -> Any:
        if isinstance(e, ProtocolErrorOccurred):
            return ("error", e.channel, e.error.reply_code, e.error.reply_text)
        if isinstance(e, MethodReceived):
            return ("method", e.channel, e.method.name, [getattr(e.method, f) for f in e.method.__slots__])
        return e

    ends = [i for i, e in enumerate(events) if isinstance(e, TERMINAL)]
    return [value(e) for e in plain(events[: ends[0] + 1] if ends else events)]


def test_fuzz_whole_reads_match_byte_by_byte() -> None:
    """A publish's content frames found in the same read are taken by a fast path; whatever the
    bytes, it must produce the events and replies that frame-by-frame reading produces."""
    rng = random.Random(20261122)
    two = _split_frames(publish(2, b"two"))
    seeds = [
        *_valid_stream(),
        *_split_frames(publish(1, b"one")),
        *two,
        two[0] + publish(1, b"one")[len(two[0]) :],  # the content comes on another channel
        m(commands.Basic.Publish(0, "", "q"), 1) + raw_frame(2, 1, b"\x00" * 4097),  # over frame_max
        m(commands.Basic.Publish(0, "", "q"), 1) + raw_frame(3, 1, b"x"),  # body before header
    ]
    for _ in range(800):
        stream = b"".join(
            _mutate(rng, rng.choice(seeds)) if rng.random() < 0.3 else rng.choice(seeds)
            for _ in range(rng.randint(1, 6))
        )
        if not stream:  # b"" would be an EOF
            continue
        whole = opened((1, 2), frame_max=4096)
        bytewise = opened((1, 2), frame_max=4096)
        whole_events = feed(whole, stream)
        bytewise_events = [event for byte in stream for event in feed(bytewise, bytes([byte]))]
        assert _comparable(whole_events) == _comparable(bytewise_events)
        assert whole.data_to_send() == bytewise.data_to_send()
