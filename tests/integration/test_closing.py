"""Closing as RabbitMQ does: the client's Connection.Close with frames still in flight gets its
Close-Ok and a clean end of the connection (no reset), and a Connection.Close the node sends
releases the connection's exclusive queues at once."""

from __future__ import annotations

import socket
import uuid

from pamqp import commands, frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from tests.nodes import NodeProcess
from tests.rawclient import RawClient


def test_client_close_with_frames_in_flight_gets_close_ok_and_a_clean_end(shared_node: NodeProcess) -> None:
    client = RawClient(shared_node.port)
    try:
        client.handshake()
        client.open_channel()
        publish = (
            frame.marshal(commands.Basic.Publish(exchange="amq.fanout", routing_key="k"), 1)
            + frame.marshal(ContentHeader(body_size=1000), 1)
            + frame.marshal(ContentBody(b"x" * 1000), 1)
        )
        # The Close, then 500 kB the node will never handle: still in flight when it answers.
        client.send(frame.marshal(commands.Connection.Close(200, "bye", 0, 0), 0) + publish * 500)
        _, close_ok = client.read_frame()
        assert isinstance(close_ok, commands.Connection.CloseOk), close_ok
        client.sock.shutdown(socket.SHUT_WR)
        # The node read everything up to our end of file and then closed its side: EOF, no reset.
        assert client.sock.recv(65536) == b""
    finally:
        client.close()


def test_node_close_frees_exclusive_queues_before_close_ok(shared_node: NodeProcess) -> None:
    queue = f"excl-{uuid.uuid4().hex[:8]}"
    first = RawClient(shared_node.port)
    second = RawClient(shared_node.port)
    try:
        first.handshake()
        first.open_channel()
        assert isinstance(
            first.call(commands.Queue.Declare(queue=queue, exclusive=True)), commands.Queue.DeclareOk
        )
        first.send(b"\x07\x00\x01\x00\x00\x00\x01\xff\xce")  # no such frame type: 501
        _, close = first.read_frame()
        assert isinstance(close, commands.Connection.Close) and close.reply_code == 501, close
        # No Close-Ok yet (the node waits 3 s for it): the queue must be free already.
        second.handshake()
        second.open_channel()
        reply = second.call(commands.Queue.Declare(queue=queue, exclusive=True))
        assert isinstance(reply, commands.Queue.DeclareOk), reply
    finally:
        first.close()
        second.close()
