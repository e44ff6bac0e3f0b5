"""A deliberately naive AMQP client on a plain socket, for tests that send what no library would.

It builds frames with pamqp and reads them back with pamqp, so the bytes the node sends are
checked by a codec the node does not share code with.
"""

from __future__ import annotations

import socket
import struct
import time

from pamqp import commands, frame
from pamqp.body import ContentBody
from pamqp.heartbeat import Heartbeat

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
READ_TIMEOUT = 5.0


def unchecked(method_class, **fields):
    """A pamqp method without pamqp's name check (127 characters of [a-zA-Z0-9-_.:@#,/+ ]),
    for the names RabbitMQ accepts: any UTF-8 up to 255 bytes."""
    loose = type(method_class.__name__, (method_class,), {"validate": lambda self: None})
    return loose(**fields)


class RawClient:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port), timeout=READ_TIMEOUT)
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, value, channel: int = 0) -> None:
        self.send(frame.marshal(value, channel))

    def read_bytes(self, count: int) -> bytes:
        while len(self.buffer) < count:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed by peer after {self.buffer!r}")
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def read_frame(self, skip_heartbeats: bool = True):
        """The next (channel, frame) from the node."""
        while True:
            head = self.read_bytes(7)
            size = struct.unpack(">I", head[3:7])[0]
            rest = self.read_bytes(size + 1)
            _, channel, value = frame.unmarshal(head + rest)
            if skip_heartbeats and isinstance(value, Heartbeat):
                continue
            return channel, value

    def read_until_closed(self, timeout: float = READ_TIMEOUT) -> bool:
        """True when the node closes the socket within timeout."""
        deadline = time.monotonic() + timeout
        self.sock.settimeout(0.2)
        try:
            while time.monotonic() < deadline:
                try:
                    if not self.sock.recv(65536):
                        return True
                except TimeoutError:
                    continue
                except ConnectionResetError:
                    return True
            return False
        finally:
            self.sock.settimeout(READ_TIMEOUT)

    def handshake(
        self,
        heartbeat: int = 0,
        vhost: str = "/",
        frame_max: int = 131072,
        client_properties: dict | None = None,
    ) -> commands.Connection.Tune:
        self.send(PROTOCOL_HEADER)
        _, start = self.read_frame()
        assert isinstance(start, commands.Connection.Start)
        self.send_frame(
            commands.Connection.StartOk(
                client_properties=client_properties or {"product": "rawclient"},
                mechanism="PLAIN",
                response="\0guest\0guest",
            )
        )
        _, tune = self.read_frame()
        assert isinstance(tune, commands.Connection.Tune), tune
        self.send_frame(
            commands.Connection.TuneOk(channel_max=tune.channel_max, frame_max=frame_max, heartbeat=heartbeat)
        )
        self.send_frame(commands.Connection.Open(virtual_host=vhost))
        _, open_ok = self.read_frame()
        assert isinstance(open_ok, commands.Connection.OpenOk), open_ok
        return tune

    def open_channel(self, channel: int = 1) -> None:
        self.send_frame(commands.Channel.Open(), channel)
        _, reply = self.read_frame()
        assert isinstance(reply, commands.Channel.OpenOk), reply

    def call(self, method, channel: int = 1):
        self.send_frame(method, channel)
        return self.read_frame()[1]

    def publish_raw_properties(
        self, channel: int, exchange: str, key: str, properties: bytes, body: bytes
    ) -> None:
        """Publish with a content header whose property section is given verbatim."""
        self.send_frame(commands.Basic.Publish(exchange=exchange, routing_key=key), channel)
        payload = struct.pack(">HHQ", 60, 0, len(body)) + properties
        self.send(struct.pack(">BHI", 2, channel, len(payload)) + payload + b"\xce")
        if body:
            self.send_frame(ContentBody(body), channel)

    def read_message(self):
        """(method, raw property section, body) of the next Deliver or Get-Ok."""
        _, method = self.read_frame()
        head = self.read_bytes(7)
        size = struct.unpack(">I", head[3:7])[0]
        payload = self.read_bytes(size + 1)[:-1]
        body_size = struct.unpack(">Q", payload[4:12])[0]
        properties = payload[12:]
        body = b""
        while len(body) < body_size:
            _, part = self.read_frame()
            body += part.value
        return method, properties, body
