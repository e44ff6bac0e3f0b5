"""ClientConnection, bytes in and bytes out: paired in memory with our ServerConnection (h11's
ConnectionPair), and fed hand-made server frames built with pamqp for what our server never
sends (malformed input, other protocol versions)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pamqp import base, body, commands, frame, header

from gateway.wire import (
    NEED_DATA,
    Acked,
    ChannelClosed,
    ChannelClosedByPeer,
    ChannelCloseRequested,
    ChannelOpened,
    ClientConnection,
    ClientState,
    ConnectionClosed,
    ConnectionClosedByPeer,
    ConnectionCloseRequested,
    ConnectionOpened,
    Content,
    Event,
    HeartbeatReceived,
    LocalProtocolError,
    LoginRefused,
    LoginRequested,
    MessageDelivered,
    MessageGot,
    MessageReceived,
    MessageReturned,
    MethodReceived,
    Nacked,
    Negotiated,
    ProtocolErrorOccurred,
    ProtocolHeaderRejected,
    ServerConnection,
    VhostRequested,
    frames,
)
from gateway.wire.errors import AMQPError

HEADER = b"AMQP\x00\x00\x09\x01"
TERMINAL = (ProtocolHeaderRejected, LoginRefused, ConnectionClosedByPeer, ConnectionClosed)
PROPERTIES = commands.Basic.Properties(content_type="text/plain", delivery_mode=2, headers={"k": "v"})


def drain(conn: Any) -> list[Event]:
    """Events until NEED_DATA or a terminal one (after which only ConnectionClosed follows)."""
    events: list[Event] = []
    while (event := conn.next_event()) is not NEED_DATA:
        events.append(event)
        if isinstance(event, (*TERMINAL, ConnectionCloseRequested)):
            break
    return events


class ConnectionPair:
    """A ClientConnection and a ServerConnection joined in memory; each `*_events` call moves
    the other side's queued bytes across first."""

    def __init__(self, **client_options: Any) -> None:
        self.client = ClientConnection("guest", "secret", "/v", **client_options)
        self.server = ServerConnection(frame_max=8192, channel_max=16, heartbeat=30)

    def server_events(self) -> list[Event]:
        self.server.receive_data(self.client.data_to_send())
        return drain(self.server)

    def client_events(self) -> list[Event]:
        self.client.receive_data(self.server.data_to_send())
        return drain(self.client)

    def open(self) -> ConnectionPair:
        """The whole handshake, checking what each side reports on the way."""
        assert self.server_events() == []  # our header: the server queues Start
        assert self.client_events() == []  # Start: we queue Start-Ok
        [login] = self.server_events()
        assert isinstance(login, LoginRequested)
        assert login.response == b"\x00guest\x00secret"
        self.server.accept_login("guest")
        assert self.client_events() == []
        assert self.server_events() == [VhostRequested("/v")]
        self.server.accept_open()
        [opened] = self.client_events()
        assert isinstance(opened, ConnectionOpened)
        assert opened.server_properties["product"] == "amq-gateway"
        return self

    def channel(self, number: int = 1) -> None:
        self.client.open_channel(number)
        assert self.server_events() == [ChannelOpened(number)]
        assert self.client_events() == [ChannelOpened(number)]


def shape(value: Any) -> Any:
    """Events and frames with their pamqp methods made comparable (pamqp methods have no __eq__)."""
    if isinstance(value, (list, tuple)):
        return type(value)(shape(item) for item in value)
    if isinstance(value, MethodReceived):
        return ("MethodReceived", value.channel, shape(value.method))
    if isinstance(value, base.Frame):
        return (value.name, {name: getattr(value, name) for name in value.__slots__})
    return value


def server_frames(conn: ClientConnection) -> list[tuple[int, Any]]:
    """Decode what the client queued (after its protocol header), with pamqp."""
    data = conn.data_to_send()
    if data.startswith(HEADER):
        data = data[len(HEADER) :]
    out = []
    while data:
        consumed, channel, value = frame.unmarshal(data)
        out.append((channel, value))
        data = data[consumed:]
    return out


def m(method: Any, channel: int = 0) -> bytes:
    return frame.marshal(method, channel)


def content_frames(channel: int, payload: bytes, frame_max: int = 8192) -> bytes:
    data = m(header.ContentHeader(0, len(payload), PROPERTIES), channel)
    step = frame_max - 8
    for start in range(0, len(payload), step):
        data += m(body.ContentBody(payload[start : start + step]), channel)
    return data


def opened_client(**options: Any) -> ClientConnection:
    """A client fed a scripted handshake (Start, Tune 8192, Open-Ok) and channel 1 open."""
    conn = ClientConnection(**options)
    start = commands.Connection.Start(server_properties={"product": "scripted"}, mechanisms="PLAIN")
    tune = commands.Connection.Tune(channel_max=16, frame_max=8192, heartbeat=30)
    conn.receive_data(m(start) + m(tune) + m(commands.Connection.OpenOk()))
    assert drain(conn) == [ConnectionOpened({"product": "scripted"})]
    conn.open_channel(1)
    conn.receive_data(m(commands.Channel.OpenOk(), 1))
    assert drain(conn) == [ChannelOpened(1)]
    conn.data_to_send()
    return conn


def feed(conn: ClientConnection, data: bytes) -> list[Event]:
    conn.receive_data(data)
    return drain(conn)


# ---------------------------------------------------------------- handshake


def test_handshake_sends_header_plain_capabilities_and_negotiates() -> None:
    pair = ConnectionPair(client_properties={"connection_name": "link to b"}, heartbeat=5)
    assert pair.client.pending_output() == len(HEADER)  # queued at construction
    pair.open()
    properties = pair.server.client_properties
    assert properties["connection_name"] == "link to b"
    assert properties["product"] == "amq-gateway federation"
    assert pair.server.client_capabilities == {
        "publisher_confirms": True,
        "consumer_cancel_notify": True,
        "basic.nack": True,
        "connection.blocked": True,
        "authentication_failure_close": True,
    }
    # Server proposes 16 channels and 8192 bytes: lower than ours; the heartbeat is ours.
    assert pair.server.negotiated == Negotiated(16, 8192, 5)
    assert pair.client.negotiated == Negotiated(16, 8192, 5)
    assert pair.client.state is ClientState.OPEN


def test_external_sends_no_credentials_and_a_server_offering_it_takes_it() -> None:
    client = ClientConnection("guest", "secret", "/", mechanism="EXTERNAL")
    server = ServerConnection(mechanisms=("PLAIN", "AMQPLAIN", "EXTERNAL"))
    server.receive_data(client.data_to_send())
    assert drain(server) == []
    client.receive_data(server.data_to_send())
    assert drain(client) == []
    server.receive_data(client.data_to_send())
    [login] = drain(server)
    assert isinstance(login, LoginRequested)
    assert (login.mechanism, login.response) == ("EXTERNAL", b"")


def test_a_server_not_offering_external_refuses_it_with_503() -> None:
    client = ClientConnection(mechanism="EXTERNAL")
    server = ServerConnection()  # a plain connection: PLAIN and AMQPLAIN only
    events: list[Event] = []
    for _ in range(2):
        server.receive_data(client.data_to_send())
        drain(server)
        client.receive_data(server.data_to_send())
        events += drain(client)
    assert events[0] == ConnectionClosedByPeer(
        503, "COMMAND_INVALID - unknown authentication mechanism 'EXTERNAL'"
    )


@pytest.mark.parametrize(
    ("ours", "theirs", "expected"),
    [
        ((2047, 131072), (0, 0), (2047, 131072)),  # 0: no limit on their side
        ((10, 4096), (2047, 131072), (10, 4096)),
        ((2047, 131072), (5, 65536), (5, 65536)),
    ],
)
def test_tune_takes_the_lower_nonzero_limit(
    ours: tuple[int, int], theirs: tuple[int, int], expected: tuple[int, int]
) -> None:
    conn = ClientConnection(channel_max=ours[0], frame_max=ours[1], heartbeat=0)
    conn.data_to_send()
    tune = commands.Connection.Tune(channel_max=theirs[0], frame_max=theirs[1], heartbeat=60)
    assert feed(conn, m(commands.Connection.Start()) + m(tune)) == []
    [(_, _start_ok), (_, tune_ok), (_, open_)] = server_frames(conn)
    assert (tune_ok.channel_max, tune_ok.frame_max, tune_ok.heartbeat) == (*expected, 0)
    assert open_.virtual_host == "/"
    assert conn.negotiated == Negotiated(*expected, 0)


def test_handshake_byte_by_byte_equals_whole() -> None:
    data = (
        m(commands.Connection.Start(server_properties={"a": 1}))
        + m(commands.Connection.Tune(16, 8192, 0))
        + m(commands.Connection.OpenOk())
    )
    whole = ClientConnection()
    expected = feed(whole, data)
    bytewise = ClientConnection()
    events: list[Event] = []
    for byte in data:
        events += feed(bytewise, bytes([byte]))
    assert events == expected == [ConnectionOpened({"a": 1})]
    assert bytewise.data_to_send() == whole.data_to_send()


def test_wrong_password_is_login_refused_with_the_servers_text() -> None:
    pair = ConnectionPair()
    pair.server_events()
    pair.client_events()
    pair.server_events()
    pair.server.refuse_login("ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN")
    assert pair.client_events() == [
        LoginRefused("ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN")
    ]
    assert pair.client.next_event() == ConnectionClosed()
    assert pair.server_events() == [ConnectionClosed()]  # our Close-Ok ended its closing


def test_other_close_during_handshake_is_closed_by_peer() -> None:
    pair = ConnectionPair()
    pair.server_events()
    pair.client_events()
    pair.server_events()
    pair.server.accept_login("guest")
    pair.client_events()
    assert pair.server_events() == [VhostRequested("/v")]
    pair.server.close_connection(AMQPError(530, "NOT_ALLOWED - vhost /v not found", 10, 40))
    assert pair.client_events() == [ConnectionClosedByPeer(530, "NOT_ALLOWED - vhost /v not found")]


@pytest.mark.parametrize(
    "answer", [b"AMQP\x00\x01\x00\x00", b"AMQP\x01\x01\x00\x0a", b"HTTP/1.1 400 Bad Request\r\n"]
)
def test_a_server_answering_another_protocol_is_reported(answer: bytes) -> None:
    conn = ClientConnection()
    assert feed(conn, answer) == [ProtocolHeaderRejected(answer[:8])]
    assert conn.next_event() == ConnectionClosed()


def test_a_short_foreign_answer_then_eof_is_reported() -> None:
    conn = ClientConnection()
    assert feed(conn, b"AMQP") == []
    conn.receive_data(b"")
    assert drain(conn) == [ProtocolHeaderRejected(b"AMQP")]


def test_eof_during_handshake_is_connection_closed() -> None:
    conn = ClientConnection()
    conn.receive_data(b"")
    assert drain(conn) == [ConnectionClosed()]


# ---------------------------------------------------------------- messages


@pytest.mark.parametrize("size", [0, 1, 8192 - 8, 8192 - 7, 50_000])
def test_publish_reaches_the_server_split_at_frame_max(size: int) -> None:
    pair = ConnectionPair().open()
    pair.channel()
    payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    content = Content.from_properties(PROPERTIES, payload)
    pair.client.send_publish(1, "amq.topic", "a.b", True, content)
    [message] = pair.server_events()
    assert message == MessageReceived(1, "amq.topic", "a.b", True, False, message.content)
    assert message.content.body == payload
    assert message.content.header == content.header


def test_encode_publish_equals_pamqp() -> None:
    content = Content.from_properties(PROPERTIES, b"y" * 10_000)
    ours = frames.encode_publish(3, "ex", "rk", True, content, 4096)
    publish = commands.Basic.Publish(exchange="ex", routing_key="rk", mandatory=True)
    assert ours == m(publish, 3) + content_frames(3, b"y" * 10_000, 4096)


@pytest.mark.parametrize("size", [0, 5, 20_000])
def test_deliver_get_ok_and_return_from_the_server(size: int) -> None:
    pair = ConnectionPair().open()
    pair.channel(2)
    content = Content.from_properties(PROPERTIES, b"d" * size)
    pair.server.send_deliver(2, "ctag", 7, True, "amq.direct", "rk", content)
    pair.server.send_get_ok(2, 8, False, "", "q", 41, content)
    pair.server.send_return(2, 312, "NO_ROUTE", "ex", "nowhere", content)
    events = pair.client_events()
    assert events == [
        MessageDelivered(2, "ctag", 7, True, "amq.direct", "rk", events[0].content),
        MessageGot(2, 8, False, "", "q", 41, events[1].content),
        MessageReturned(2, 312, "NO_ROUTE", "ex", "nowhere", events[2].content),
    ]
    for event in events:
        assert event.content.body == content.body  # type: ignore[attr-defined]
        assert event.content.header == content.header  # type: ignore[attr-defined]


def test_decode_deliver_reads_pamqps_encoding() -> None:
    deliver = commands.Basic.Deliver("tag-ü", 2**40 + 3, True, "amq.topic", "a.b.c")
    payload = m(deliver, 1)[7:-1]
    assert frames.decode_deliver(payload) == ("tag-ü", 2**40 + 3, True, "amq.topic", "a.b.c")


@pytest.mark.parametrize("cut", [5, 14, 20, 26])
def test_truncated_deliver_is_a_502(cut: int) -> None:
    payload = m(commands.Basic.Deliver("tag", 1, False, "amq.topic", "a.b.c"), 1)[7:-1]
    with pytest.raises(AMQPError) as caught:
        frames.decode_deliver(payload[:cut])
    assert caught.value.reply_code == 502


def test_deliveries_split_byte_by_byte_equal_whole_reads() -> None:
    data = b"".join(
        m(commands.Basic.Deliver(f"c{i}", i, False, "ex", "rk"), 1) + content_frames(1, b"p" * (i * 3000))
        for i in range(1, 5)
    )
    whole = feed(opened_client(), data)
    bytewise_conn = opened_client()
    bytewise: list[Event] = []
    for byte in data:
        bytewise += feed(bytewise_conn, bytes([byte]))
    assert len(whole) == 4
    assert [(e.consumer_tag, e.content.body) for e in whole] == [  # type: ignore[attr-defined]
        (e.consumer_tag, e.content.body)  # type: ignore[attr-defined]
        for e in bytewise
    ]


def test_interleaved_channels_keep_their_own_content() -> None:
    conn = opened_client()
    conn.open_channel(2)
    feed(conn, m(commands.Channel.OpenOk(), 2))
    data = (
        m(commands.Basic.Deliver("a", 1, False, "", "q1"), 1)
        + m(commands.Basic.Deliver("b", 1, False, "", "q2"), 2)
        + content_frames(2, b"two")
        + content_frames(1, b"one")
    )
    events = feed(conn, data)
    assert [(e.channel, e.content.body) for e in events] == [(2, b"two"), (1, b"one")]  # type: ignore[attr-defined]


def test_ack_goes_out_byte_exact() -> None:
    pair = ConnectionPair().open()
    pair.channel()
    pair.client.send_ack(1, 2**40, True)
    assert shape(pair.server_events()) == shape([MethodReceived(1, commands.Basic.Ack(2**40, True))])


def test_confirms_become_acked_and_nacked() -> None:
    pair = ConnectionPair().open()
    pair.channel()
    pair.client.send_method(1, commands.Confirm.Select())
    pair.server_events()
    pair.server.send_method(1, commands.Confirm.SelectOk())
    pair.server.send_method(1, commands.Basic.Ack(3, True))
    pair.server.send_method(1, commands.Basic.Nack(4, False))
    assert shape(pair.client_events()) == [
        shape(MethodReceived(1, commands.Confirm.SelectOk())),
        Acked(1, 3, True),
        Nacked(1, 4, False),
    ]


def test_replies_and_notifications_are_method_received() -> None:
    conn = opened_client()
    events = feed(
        conn,
        m(commands.Queue.DeclareOk("q", 3, 1), 1)
        + m(commands.Basic.Cancel("ctag"), 1)
        + m(commands.Basic.GetEmpty(), 1)
        + m(commands.Connection.Blocked("low on memory")),
    )
    assert shape(events) == shape(
        [
            MethodReceived(1, commands.Queue.DeclareOk("q", 3, 1)),
            MethodReceived(1, commands.Basic.Cancel("ctag")),
            MethodReceived(1, commands.Basic.GetEmpty()),
            MethodReceived(0, commands.Connection.Blocked("low on memory")),
        ]
    )


def test_channel_flow_is_answered() -> None:
    conn = opened_client()
    events = feed(conn, m(commands.Channel.Flow(False), 1))
    assert shape(events) == shape([MethodReceived(1, commands.Channel.Flow(False))])
    assert shape(server_frames(conn)) == shape([(1, commands.Channel.FlowOk(False))])


def test_heartbeats_both_ways() -> None:
    pair = ConnectionPair().open()
    pair.client.send_heartbeat()
    assert pair.server_events() == [HeartbeatReceived()]
    pair.server.send_heartbeat()
    assert pair.client_events() == [HeartbeatReceived()]


# ---------------------------------------------------------------- closing


def test_channel_close_by_us_and_by_the_server() -> None:
    pair = ConnectionPair().open()
    pair.channel(1)
    pair.channel(2)
    pair.client.close_channel(1)
    assert pair.server_events() == [ChannelCloseRequested(1)]
    assert pair.client_events() == [ChannelClosed(1)]
    pair.server.close_channel(2, AMQPError(404, "NOT_FOUND - no queue 'x'", 50, 10))
    assert pair.client_events() == [ChannelClosedByPeer(2, 404, "NOT_FOUND - no queue 'x'")]
    assert pair.server_events() == [ChannelClosed(2)]  # the Close-Ok was answered for us
    assert not pair.client.is_channel_open(2)
    pair.channel(2)  # the id is free again


def test_crossing_channel_closes_wait_for_our_close_ok() -> None:
    conn = opened_client()
    conn.close_channel(1)
    conn.data_to_send()
    assert feed(conn, m(commands.Channel.Close(406, "crossing", 0, 0), 1)) == []
    assert shape(server_frames(conn)) == shape([(1, commands.Channel.CloseOk())])
    assert feed(conn, m(commands.Channel.CloseOk(), 1)) == [ChannelClosed(1)]


def test_a_closing_channel_ignores_deliveries_in_flight() -> None:
    conn = opened_client()
    conn.close_channel(1)
    data = m(commands.Basic.Deliver("c", 1, False, "", "q"), 1) + content_frames(1, b"late")
    assert feed(conn, data + m(commands.Channel.CloseOk(), 1)) == [ChannelClosed(1)]


def test_connection_close_by_us_and_by_the_server() -> None:
    pair = ConnectionPair().open()
    pair.client.close()
    assert pair.server_events() == [ConnectionCloseRequested(200, "Normal shutdown")]
    assert pair.client_events() == [ConnectionClosed()]

    pair = ConnectionPair().open()
    pair.server.close_connection(AMQPError(320, "CONNECTION_FORCED - shutdown"))
    assert pair.client_events() == [ConnectionClosedByPeer(320, "CONNECTION_FORCED - shutdown")]
    assert pair.server_events() == [ConnectionClosed()]


def test_crossing_connection_close_is_answered() -> None:
    conn = opened_client()
    conn.close()
    conn.data_to_send()
    assert feed(conn, m(commands.Connection.Close(320, "bye", 0, 0))) == [ConnectionClosed()]
    assert shape(server_frames(conn)) == shape([(0, commands.Connection.CloseOk())])


def test_eof_reports_buffered_frames_first() -> None:
    conn = opened_client()
    conn.receive_data(m(commands.Basic.Ack(1, False), 1))
    conn.receive_data(b"")
    assert drain(conn) == [Acked(1, 1, False), ConnectionClosed()]
    with pytest.raises(LocalProtocolError):
        conn.receive_data(b"more")


def test_local_misuse_raises_and_closed_channels_drop() -> None:
    conn = ClientConnection()
    with pytest.raises(LocalProtocolError):
        conn.open_channel(1)
    with pytest.raises(LocalProtocolError):
        conn.send_method(1, commands.Basic.Qos())
    conn = opened_client()
    with pytest.raises(LocalProtocolError):
        conn.open_channel(1)  # in use
    with pytest.raises(LocalProtocolError):
        conn.open_channel(17)  # above the negotiated channel_max
    with pytest.raises(LocalProtocolError):
        conn.send_method(1, commands.Channel.Close())
    with pytest.raises(LocalProtocolError):
        conn.send_method(0, commands.Connection.Close())
    conn.send_ack(5, 1)  # never opened: dropped, as the server may have closed it
    conn.close_channel(1)
    conn.data_to_send()
    conn.send_publish(1, "", "q", False, Content(b"\x00\x00", b""))
    assert conn.data_to_send() == b""
    with pytest.raises(ValueError, match="frame_max"):
        ClientConnection(frame_max=100)


# ---------------------------------------------------------------- the server's mistakes


def close_code(conn: ClientConnection, data: bytes) -> int:
    """Feed `data`; the client must report a connection-level error and queue its Close."""
    events = feed(conn, data)
    assert len(events) == 1 and isinstance(events[0], ProtocolErrorOccurred), events
    assert events[0].channel == 0
    [(channel, close)] = server_frames(conn)
    assert channel == 0 and isinstance(close, commands.Connection.Close)
    assert close.reply_code == events[0].error.reply_code
    assert conn.state is ClientState.CLOSING
    return close.reply_code


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x09\x00\x00\x00\x00\x00\x00\xce", 501),  # unknown frame type
        (b"\x01\x00\x01\x00\x00\x40\x00", 501),  # over frame_max, refused from the header
        (m(commands.Basic.Ack(1, False), 1)[:-1] + b"\x00", 501),  # no frame end
        (b"\x08\x00\x01\x00\x00\x00\x00\xce", 501),  # heartbeat on a channel
        (b"\x01\x00\x01\x00\x00\x00\x05\x00\x3c\x00\x3c\x00\xce", 502),  # truncated Deliver
        (m(commands.Basic.Publish(), 1), 503),  # client-only method
        (m(commands.Connection.Start()), 503),  # out of sequence
        (m(commands.Queue.DeclareOk("q", 0, 0), 0), 504),  # channel 0 for a channel class
        (m(commands.Queue.DeclareOk("q", 0, 0), 9), 504),  # a channel never opened
        (content_frames(1, b"x"), 505),  # content without a content method
        (m(commands.Basic.Deliver("c", 1, False, "", "q"), 1) + m(commands.Basic.GetEmpty(), 1), 505),
        (b"\x01\x00\x01\x00\x00\x00\x04\x00\x63\x00\x01\xce", 540),  # unknown class 99
    ],
)
def test_server_mistakes_close_the_connection_with_the_right_code(data: bytes, code: int) -> None:
    assert close_code(opened_client(), data) == code


def test_body_larger_than_declared_is_505() -> None:
    conn = opened_client()
    data = (
        m(commands.Basic.Deliver("c", 1, False, "", "q"), 1)
        + m(header.ContentHeader(0, 2, PROPERTIES), 1)
        + m(body.ContentBody(b"abc"), 1)
    )
    assert close_code(conn, data) == 505


def test_after_a_framing_error_nothing_more_is_read() -> None:
    conn = opened_client()
    close_code(conn, b"\x09" + bytes(7))
    assert feed(conn, m(commands.Connection.CloseOk())) == []
    conn.receive_data(b"")
    assert drain(conn) == [ConnectionClosed()]


def test_after_a_protocol_error_close_ok_ends_the_connection() -> None:
    conn = opened_client()
    close_code(conn, m(commands.Basic.Publish(), 1))
    assert feed(conn, m(commands.Basic.Ack(1), 1) + m(commands.Connection.CloseOk())) == [ConnectionClosed()]


def test_fuzz_only_events_never_exceptions() -> None:
    rng = random.Random(7)
    valid = m(commands.Basic.Deliver("c", 1, False, "ex", "rk"), 1) + content_frames(1, b"x" * 100)
    for _ in range(500):
        data = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        conn = opened_client()
        conn.receive_data(bytes(data))
        conn.receive_data(b"")
        events = drain(conn)
        assert events and all(isinstance(event, Event) for event in events)
