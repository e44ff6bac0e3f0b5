"""Recording fakes for the broker model's unit tests: an Outbox, a Store, a clock."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from pamqp import commands

from gateway.broker import Broker, Session, outbox
from gateway.wire.content import Content


@dataclass
class Delivery:
    channel: int
    consumer_tag: str
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    content: Content
    return_to: tuple[int, int, int] | None

    @property
    def body(self) -> bytes:
        return self.content.body


@dataclass
class GetOk:
    channel: int
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    message_count: int
    content: Content

    @property
    def body(self) -> bytes:
        return self.content.body


@dataclass
class Returned:
    channel: int
    reply_code: int
    reply_text: str
    exchange: str
    routing_key: str
    content: Content


class FakeOutbox:
    def __init__(self, cancel_notify: bool = True) -> None:
        self.client_capabilities: dict[str, Any] = {"consumer_cancel_notify": cancel_notify}
        self.peer = "127.0.0.1:5555"
        self.sent: list[Any] = []
        self.open = True
        #: Why the model blocked this publisher, until it unblocks it.
        self.blocked: str | None = None

    def send_method(self, channel: int, method: Any) -> None:
        self.sent.append((channel, method))

    # The model's value objects are named tuples; recorded as dataclasses, so that `methods()`
    # tells them apart from (channel, method) pairs.

    def send_deliver(self, delivery: outbox.DeliveryFields) -> None:
        self.sent.append(Delivery(*delivery))

    def send_get_ok(self, get_ok: outbox.GetOk) -> None:
        self.sent.append(GetOk(*get_ok))

    def send_return(self, returned: outbox.Return) -> None:
        self.sent.append(Returned(*returned))

    def close_channel(self, channel, error) -> None:
        self.sent.append(("close_channel", channel, error))

    def close_connection(self, error) -> None:
        self.sent.append(("close_connection", error))

    def writable(self) -> bool:
        return self.open

    def block(self, reason: str) -> None:
        self.blocked = reason

    def unblock(self) -> None:
        self.blocked = None

    # -- reading what was sent --

    def take(self) -> list[Any]:
        sent, self.sent = self.sent, []
        return sent

    def deliveries(self) -> list[Delivery]:
        return [item for item in self.take() if isinstance(item, Delivery)]

    def methods(self, kind: type | None = None) -> list[Any]:
        """Take the methods sent so far (of one kind), leaving deliveries and the rest."""
        found, kept = [], []
        for item in self.sent:
            is_method = isinstance(item, tuple) and isinstance(item[0], int)
            if is_method and (kind is None or isinstance(item[1], kind)):
                found.append(item[1])
            else:
                kept.append(item)
        self.sent = kept
        return found


class FakeStore:
    """Records writes; `commit()` closes the current batch like gateway.store would."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.batch = 1
        self.pending = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("put_", "delete_", "add_", "remove_", "mark_")):
            return lambda *args: self._record(name, *args)
        raise AttributeError(name)

    def _record(self, name: str, *args: Any) -> None:
        self.calls.append((name, *args))
        self.pending = True

    def ticket(self) -> int:
        return self.batch

    def commit(self) -> int:
        done = self.batch
        self.batch += 1
        self.pending = False
        return done

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [call[1:] for call in self.calls if call[0] == name]


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def content(body: bytes = b"hello", **properties: Any) -> Content:
    return Content.from_properties(commands.Basic.Properties(**properties), body)


def undecodable_headers(body: bytes = b"m") -> Content:
    """A content header whose headers table holds a field type no decoder knows ('Z')."""
    entries = b"\x01kZ\x00"
    return Content(struct.pack(">HI", 1 << 13, len(entries)) + entries, body)


class Client:
    """A session with one open channel and shortcuts for the common methods."""

    def __init__(
        self, broker: Broker, channel: int = 1, cancel_notify: bool = True, vhost: str = "/"
    ) -> None:
        self.broker = broker
        self.outbox = FakeOutbox(cancel_notify)
        self.session: Session = broker.connect(self.outbox, "guest", vhost, {})
        self.ch = channel
        self.session.open_channel(channel)

    def call(self, method: Any, channel: int | None = None) -> Any:
        """Run a method; return the reply method sent for it (if any, the last one)."""
        self.session.handle_method(self.ch if channel is None else channel, method)
        self.session.flush_confirms()  # each call is a read of its own, as the server sees it
        replies = self.outbox.methods()
        return replies[-1] if replies else None

    def declare(self, queue: str = "q", **kwargs: Any) -> commands.Queue.DeclareOk:
        return self.call(commands.Queue.Declare(queue=queue, **kwargs))

    def exchange(self, name: str, kind: str = "direct", **kwargs: Any) -> Any:
        return self.call(commands.Exchange.Declare(exchange=name, exchange_type=kind, **kwargs))

    def bind(self, queue: str, exchange: str, key: str = "", arguments: dict | None = None) -> Any:
        return self.call(
            commands.Queue.Bind(queue=queue, exchange=exchange, routing_key=key, arguments=arguments)
        )

    def consume(self, queue: str = "q", tag: str = "", **kwargs: Any) -> str:
        reply = self.call(commands.Basic.Consume(queue=queue, consumer_tag=tag, **kwargs))
        return reply.consumer_tag if reply is not None else tag

    def publish(
        self, exchange: str, key: str, body: bytes = b"m", mandatory: bool = False, **properties: Any
    ) -> None:
        self.session.handle_publish(self.ch, exchange, key, mandatory, False, content(body, **properties))
        self.session.flush_confirms()

    def get(self, queue: str = "q", no_ack: bool = False) -> Any:
        self.session.handle_method(self.ch, commands.Basic.Get(queue=queue, no_ack=no_ack))
        sent = self.outbox.take()
        return sent[-1] if isinstance(sent[-1], GetOk) else sent[-1][1]

    def ack(self, tag: int, multiple: bool = False) -> None:
        self.session.handle_ack(self.ch, tag, multiple)

    def bodies(self) -> list[bytes]:
        return [d.body for d in self.outbox.deliveries()]
