"""The frame size boundary on a real socket: RabbitMQ accepts a frame whose payload is exactly
frame_max bytes (8 over, counting the header and end octet) and one client sends such frames;
a payload one byte longer is 501 FRAME_ERROR."""

from __future__ import annotations

import struct
import uuid

from pamqp import commands

from tests.nodes import NodeProcess
from tests.rawclient import RawClient

FRAME_MAX = 4096


def _publish_one_body_frame(client: RawClient, queue: str, size: int) -> None:
    client.send_frame(commands.Basic.Publish(exchange="", routing_key=queue), 1)
    header = struct.pack(">HHQH", 60, 0, size, 0)
    client.send(struct.pack(">BHI", 2, 1, len(header)) + header + b"\xce")
    client.send(struct.pack(">BHI", 3, 1, size) + b"b" * size + b"\xce")


def test_payload_of_frame_max_is_accepted(shared_node: NodeProcess) -> None:
    queue = f"frame-size-{uuid.uuid4().hex[:8]}"
    client = RawClient(shared_node.port)
    try:
        client.handshake(frame_max=FRAME_MAX)
        client.open_channel()
        client.call(commands.Queue.Declare(queue=queue, exclusive=True))
        _publish_one_body_frame(client, queue, FRAME_MAX)
        client.send_frame(commands.Basic.Get(queue=queue, no_ack=True), 1)
        method, _, body = client.read_message()  # the node splits it at frame_max - 8 itself
        assert isinstance(method, commands.Basic.GetOk), method
        assert body == b"b" * FRAME_MAX
    finally:
        client.close()


def test_payload_over_frame_max_is_frame_error(shared_node: NodeProcess) -> None:
    client = RawClient(shared_node.port)
    try:
        client.handshake(frame_max=FRAME_MAX)
        client.open_channel()
        _publish_one_body_frame(client, "anywhere", FRAME_MAX + 1)
        _, close = client.read_frame()
        assert isinstance(close, commands.Connection.Close), close
        assert close.reply_code == 501, close.reply_text
        assert (
            close.reply_text
            == "FRAME_ERROR - frame payload of 4097 bytes on channel 1 exceeds frame_max 4096"
        )
    finally:
        client.close()
