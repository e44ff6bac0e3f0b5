"""Just enough blocking AMQP 0-9-1 for the load tool.

Setup (handshake, declares, binds) goes through pamqp because it happens once; the hot path
never builds a pamqp object: publishes are pre-encoded byte templates and acks are packed
with one struct call, so the tool spends almost nothing per message.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from typing import Any

from pamqp import base, body, commands, frame, header

FRAME_END = 0xCE
FRAME_HEADER = struct.Struct(">BHI")
METHOD_IDS = struct.Struct(">HH")
CHANNEL = 1
# Basic.Ack on channel 1: frame header, class 60 method 80, delivery tag, multiple bit, end.
_ACK = struct.Struct(">BHIHHQBB")


class AMQPClosed(Exception):
    """The broker closed the connection or channel, or answered out of protocol."""


def ack_frame(delivery_tag: int, multiple: bool) -> bytes:
    """Encode Basic.Ack without pamqp: the consumer sends one per 500 messages."""
    return _ACK.pack(1, CHANNEL, 13, 60, 80, delivery_tag, int(multiple), FRAME_END)


# What the body starts with: the send time (perf_counter_ns) and the message's sequence number.
STAMP = struct.Struct(">QQ")


def publish_template(
    exchange: str, routing_key: str, persistent: bool, body_size: int
) -> tuple[bytes, bytes]:
    """Return (prefix, suffix) such that prefix + STAMP + suffix is one message.

    The message is Basic.Publish + content header + one body frame whose first 16 bytes are the
    send time and a sequence number; everything else is the same for every message, so the
    publisher encodes its whole stream once and only patches the times in.
    """
    if body_size < STAMP.size:
        raise ValueError(f"the body must hold a {STAMP.size}-byte stamp")
    props = commands.Basic.Properties(delivery_mode=2 if persistent else 1)
    encoded = (
        frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), CHANNEL)
        + frame.marshal(header.ContentHeader(0, body_size, props), CHANNEL)
        + frame.marshal(body.ContentBody(bytes(body_size)), CHANNEL)
    )
    stamp_at = len(encoded) - 1 - body_size
    return encoded[:stamp_at], encoded[stamp_at + STAMP.size :]


def split_frame(buf: bytearray | bytes, pos: int) -> tuple[int, int, int] | None:
    """Return (frame type, channel, end offset) of the complete frame at pos, or None."""
    if len(buf) - pos < 7:
        return None
    ftype, channel, size = FRAME_HEADER.unpack_from(buf, pos)
    end = pos + 8 + size
    if len(buf) < end:
        return None
    if buf[end - 1] != FRAME_END:
        raise AMQPClosed(f"bad frame end at offset {pos}")
    return ftype, channel, end


def close_reason(buf: bytearray | bytes, pos: int) -> str:
    """Reply code and text of the Connection.Close or Channel.Close method frame at pos."""
    code, length = struct.unpack_from(">HB", buf, pos + 11)
    text = bytes(buf[pos + 14 : pos + 14 + length]).decode(errors="replace")
    return f"broker closed: {code} {text}"


def raise_if_close(frame_value: Any) -> None:
    """Turn a broker-initiated Connection.Close / Channel.Close into an exception."""
    if isinstance(frame_value, (commands.Connection.Close, commands.Channel.Close)):
        raise AMQPClosed(f"{frame_value.name}: {frame_value.reply_code} {frame_value.reply_text}")


class Connection:
    """A blocking connection with one channel, used for setup and as the hot path's socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.server_properties: dict[str, Any] = {}

    @classmethod
    def open(cls, host: str, port: int, timeout: float = 30.0, tls_ca: str | None = None) -> Connection:
        """Connect, authenticate as guest/guest with PLAIN, disable heartbeats, open channel 1;
        over TLS, checking the broker against `tls_ca`, when one is given."""
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls_ca is not None:
            sock = ssl.create_default_context(cafile=tls_ca).wrap_socket(sock, server_hostname=host)
        conn = cls(sock)
        sock.sendall(frame.marshal(header.ProtocolHeader(), 0))
        start = conn.expect(commands.Connection.Start)
        conn.server_properties = dict(start.server_properties or {})
        conn.send(
            commands.Connection.StartOk(
                client_properties={
                    "product": "amq-gateway benchmarks",
                    "capabilities": {"publisher_confirms": True, "basic.nack": True},
                },
                mechanism="PLAIN",
                response="\0guest\0guest",
            ),
            channel=0,
        )
        tune = conn.expect(commands.Connection.Tune)
        conn.send(
            commands.Connection.TuneOk(
                channel_max=tune.channel_max or 2047,
                frame_max=min(tune.frame_max or 131072, 131072),
                heartbeat=0,
            ),
            channel=0,
        )
        conn.send(commands.Connection.Open(virtual_host="/"), channel=0)
        conn.expect(commands.Connection.OpenOk)
        conn.call(commands.Channel.Open())
        return conn

    def send(self, method: base.Frame, channel: int = CHANNEL) -> None:
        self.sock.sendall(frame.marshal(method, channel))

    def read_frame(self) -> Any:
        """Read one frame with pamqp (setup only); raise if the broker closes us."""
        while (found := split_frame(self.buf, 0)) is None:
            self._fill()
        end = found[2]
        _, _, value = frame.unmarshal(bytes(self.buf[:end]))
        del self.buf[:end]
        raise_if_close(value)
        return value

    def expect(self, kind: type) -> Any:
        value = self.read_frame()
        if not isinstance(value, kind):
            raise AMQPClosed(f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    def call(self, method: base.Frame) -> Any:
        """Send a synchronous method on channel 1 and return its reply."""
        return self.call_many([method])[-1]

    def call_many(self, methods: list[base.Frame]) -> list[Any]:
        """Pipeline synchronous methods in one write, then read their replies in order."""
        self.sock.sendall(b"".join(frame.marshal(m, CHANNEL) for m in methods))
        return [self.read_frame() for _ in methods]

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise AMQPClosed("connection closed by the broker")
        self.buf += chunk

    def close(self, timeout: float = 5.0) -> None:
        """Close politely so the broker has handled every frame we sent before we go."""
        try:
            self.sock.settimeout(timeout)
            bye = commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
            self.send(bye, channel=0)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                value = self.read_frame()
                if isinstance(value, commands.Connection.CloseOk):
                    break
        except (OSError, AMQPClosed):
            pass
        finally:
            self.sock.close()
