"""Bad input on a real socket: the right reply code on the right scope, and nobody else hurt.

Each test breaks one connection in one way, then checks that a second connection to the same
node still works, as the issue demands.
"""

from __future__ import annotations

import struct

import pika
import pytest
from pamqp import commands

from tests.nodes import NodeProcess
from tests.rawclient import PROTOCOL_HEADER, RawClient


def assert_node_still_serves(node: NodeProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(node.url()))
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.basic_publish("", queue, b"alive")
    assert channel.basic_get(queue, auto_ack=True)[2] == b"alive"
    connection.close()


def expect_connection_close(client: RawClient, code: int) -> commands.Connection.Close:
    channel, close = client.read_frame()
    assert isinstance(close, commands.Connection.Close), close
    assert channel == 0
    assert close.reply_code == code, close.reply_text
    return close


@pytest.fixture
def client(shared_node: NodeProcess):
    raw = RawClient(shared_node.port)
    yield raw
    raw.close()


def test_wrong_protocol_header_gets_supported_header_back(shared_node, client) -> None:
    client.send(b"AMQP\x01\x01\x00\x0a")
    assert client.read_bytes(8) == PROTOCOL_HEADER
    assert client.read_until_closed()
    assert_node_still_serves(shared_node)


def test_http_request_gets_supported_header_back(shared_node, client) -> None:
    client.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert client.read_bytes(8) == PROTOCOL_HEADER
    assert client.read_until_closed()


def test_garbage_after_handshake_is_frame_error(shared_node, client) -> None:
    client.handshake()
    client.send(b"\x07\x00\x01\x00\x00\x00\x01\xff\xce")  # frame type 7 does not exist
    expect_connection_close(client, 501)
    client.send_frame(commands.Connection.CloseOk())
    assert client.read_until_closed()
    assert_node_still_serves(shared_node)


def test_bad_frame_end_is_frame_error(shared_node, client) -> None:
    client.handshake()
    client.send(struct.pack(">BHI", 1, 1, 4) + b"\x00\x14\x00\x0a" + b"\x00")
    expect_connection_close(client, 501)


def test_oversized_frame_is_rejected_before_it_is_buffered(shared_node, client) -> None:
    client.handshake(frame_max=4096)
    client.open_channel()
    client.send(struct.pack(">BHI", 3, 1, 10_000_000))  # announces 10 MB; we never send it
    expect_connection_close(client, 501)
    assert_node_still_serves(shared_node)


def test_truncated_frame_then_disconnect_leaves_node_serving(shared_node, client) -> None:
    client.handshake()
    client.open_channel()
    client.send(struct.pack(">BHI", 1, 1, 100) + b"\x00\x3c\x00\x28")
    client.close()
    assert_node_still_serves(shared_node)


def test_malformed_method_arguments_are_syntax_error(shared_node, client) -> None:
    client.handshake()
    client.open_channel()
    payload = struct.pack(">HHH", 50, 10, 0) + b"\x05ab"  # Queue.Declare, name cut short
    client.send(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    expect_connection_close(client, 502)
    assert_node_still_serves(shared_node)


def test_non_utf8_queue_name_is_syntax_error(shared_node, client) -> None:
    client.handshake()
    client.open_channel()
    payload = struct.pack(">HHH", 50, 10, 0) + b"\x02\xff\xfe" + b"\x00" + b"\x00\x00\x00\x00"
    client.send(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    expect_connection_close(client, 502)


def test_unknown_method_is_refused(shared_node, client) -> None:
    client.handshake()
    client.open_channel()
    payload = struct.pack(">HH", 60, 999)
    client.send(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    close = expect_connection_close(client, 540)
    assert close.class_id == 60 and close.method_id == 999
    assert_node_still_serves(shared_node)


def test_method_on_unopened_channel_is_channel_error(shared_node, client) -> None:
    client.handshake()
    client.send_frame(commands.Queue.Declare(queue="q"), 5)
    expect_connection_close(client, 504)


def test_body_without_header_is_unexpected_frame(shared_node, client) -> None:
    client.handshake()
    client.open_channel()
    client.send(struct.pack(">BHI", 3, 1, 3) + b"abc\xce")
    expect_connection_close(client, 505)
    assert_node_still_serves(shared_node)


def test_server_method_from_client_is_command_invalid(shared_node, client) -> None:
    client.handshake()
    client.open_channel()
    client.send_frame(
        commands.Basic.Deliver(consumer_tag="x", delivery_tag=1, exchange="", routing_key="k"), 1
    )
    expect_connection_close(client, 503)


def test_channel_error_keeps_connection_open(shared_node, client) -> None:
    client.handshake()
    client.open_channel(1)
    client.open_channel(2)
    reply = client.call(commands.Queue.Declare(queue="surely-missing", passive=True), 1)
    assert isinstance(reply, commands.Channel.Close) and reply.reply_code == 404
    assert reply.class_id == 50 and reply.method_id == 10
    client.send_frame(commands.Channel.CloseOk(), 1)
    reply = client.call(commands.Queue.Declare(queue="", exclusive=True), 2)
    assert isinstance(reply, commands.Queue.DeclareOk)


def test_properties_round_trip_byte_exact(shared_node, client) -> None:
    """Whatever encoding a publisher chose for its tables comes back bit for bit."""
    client.handshake()
    client.open_channel()
    queue = client.call(commands.Queue.Declare(queue="", exclusive=True)).queue
    # A 64-bit integer holding 1 and a byte array: encodings pamqp would not choose itself.
    entries = b"\x01nl" + struct.pack(">q", 1) + b"\x01xx" + struct.pack(">I", 3) + b"abc"
    table = struct.pack(">I", len(entries)) + entries
    flags = (1 << 15) | (1 << 13) | (1 << 12) | (1 << 7)
    custom_header = struct.pack(">H", flags) + b"\x0atext/plain" + table + b"\x01" + b"\xc8" + b"m" * 200
    client.publish_raw_properties(1, "", queue, custom_header, b"payload")
    client.send_frame(commands.Basic.Get(queue=queue, no_ack=True), 1)
    method, received, body = client.read_message()
    assert isinstance(method, commands.Basic.GetOk)
    assert received == custom_header
    assert body == b"payload"


def test_heartbeat_timeout_closes_silent_client(shared_node, client) -> None:
    client.handshake(heartbeat=1)
    host, port = client.sock.getsockname()[:2]
    assert client.read_until_closed(timeout=8)  # silent for two intervals, plus the check period
    # Why the node closed, in its own words (written before the close): our silence.
    assert f"{host}:{port}: missed heartbeats from client, timeout: 1s; closing" in shared_node.log()
    assert_node_still_serves(shared_node)


def test_node_sends_heartbeats(shared_node, client) -> None:
    client.handshake(heartbeat=1)
    channel, value = client.read_frame(skip_heartbeats=False)
    assert channel == 0 and type(value).__name__ == "Heartbeat"


def test_unknown_vhost_closes_with_530_naming_connection_open(shared_node) -> None:
    second = RawClient(shared_node.port)
    try:
        second.send(PROTOCOL_HEADER)
        second.read_frame()
        second.send_frame(
            commands.Connection.StartOk(client_properties={}, mechanism="PLAIN", response="\0guest\0guest")
        )
        second.read_frame()  # Tune
        second.send_frame(commands.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=0))
        second.send_frame(commands.Connection.Open(virtual_host="nowhere"))
        close = expect_connection_close(second, 530)
        assert (close.class_id, close.method_id) == (10, 40)
        assert close.reply_text == "NOT_ALLOWED - vhost 'nowhere' not found"
    finally:
        second.close()


def _overrunning_table() -> bytes:
    """A table whose only value, a longstr, says it is 100 bytes long but the table ends after 3.

    pamqp alone reads such a value from whatever follows the table, or cuts it short at the end
    of the frame: the node used to accept it silently.
    """
    entries = b"\x01kS" + struct.pack(">I", 100) + b"abc"
    return struct.pack(">I", len(entries)) + entries


def test_method_table_value_running_past_the_table_is_syntax_error(shared_node, client) -> None:
    client.handshake()
    client.open_channel()
    # Queue.Declare "t", all bits off, then the arguments table, followed by more bytes the
    # longstr would otherwise swallow.
    payload = struct.pack(">HHH", 50, 10, 0) + b"\x01t" + b"\x00" + _overrunning_table() + b"x" * 200
    client.send(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    close = expect_connection_close(client, 502)
    assert "arguments field 'k' runs past the end of its table" in close.reply_text
    assert (close.class_id, close.method_id) == (50, 10)
    assert_node_still_serves(shared_node)


def test_headers_table_value_running_past_the_table_is_syntax_error(shared_node, client) -> None:
    client.handshake()
    client.open_channel()
    queue = client.call(commands.Queue.Declare(queue="", exclusive=True)).queue
    # headers, then delivery mode 2 and a correlation id the longstr would run into.
    properties = (
        struct.pack(">H", (1 << 13) | (1 << 12) | (1 << 10)) + _overrunning_table() + b"\x02\x05abcde"
    )
    client.publish_raw_properties(1, "", queue, properties, b"payload")
    close = expect_connection_close(client, 502)
    assert "headers field 'k' runs past the end of its table" in close.reply_text
    assert_node_still_serves(shared_node)
