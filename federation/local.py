"""Routes' two ends on this node, as internal sessions of the broker model: LocalSink, LocalSource.

Why sessions and not new broker hooks: a route that publishes through `Session.handle_publish`
and consumes through `Basic.Consume` gets every broker rule for free (routing, alternate
exchanges, queue limits, TTLs, dead-lettering, persistence) and the same error texts a client
would get. Each adapter is the Outbox of its own session, so what the model "sends to the
client" arrives here synchronously:

- LocalSink runs its channel in confirm mode. The model confirms a publish after routing it
  and, for a persistent message on a durable queue, only after the store committed it; that
  confirm is what lets a route acknowledge the source. A nack (a full queue with x-overflow
  reject-publish) surfaces as PublishNacked from `wait_for_confirm`, as the client's does.
- LocalSource consumes a local queue with prefetch = the route's credit; deliveries wait in a
  buffer the route task reads. `writable()` is the back-pressure valve: when the buffer is full
  the model holds further deliveries until the reader has drained half of it.

Errors: an AMQPError the model raises becomes LocalChannelClosed, a ChannelClosedByPeer with the
model's reply code and text, because to the link it is the same event: the broker refused one
route's channel, and the route is restarted after a delay while the others carry on.

Both call `want_commit` after each change so the node's group committer writes (and confirms)
without waiting for a client connection to wake it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import trio
from pamqp import commands

from federation.errors import ChannelClosedByPeer, ClientError, ConsumerCancelled, PublishNacked
from gateway.broker import Broker, Session
from gateway.broker.outbox import Delivery, DeliveryFields, NullOutbox
from gateway.wire import make_method
from gateway.wire.content import Content
from gateway.wire.errors import AMQPError

#: The internal sessions' only channel.
CHANNEL = 1
#: The user name internal sessions run as, for the model's management views and logs.
USER = "federation"


class LocalChannelClosed(ChannelClosedByPeer):
    """The local broker model refused an operation of a route's internal session."""

    def __str__(self) -> str:
        return f"local broker: {self.reply_text}"


class _InternalOutbox(NullOutbox):
    """An Outbox for an internal session: what a route does not need is ignored."""

    #: consumer_cancel_notify: a deleted queue must end the route's iteration, not hang it.
    client_capabilities: dict[str, Any] = {"consumer_cancel_notify": True}
    peer = "federation"

    def __init__(self, broker: Broker, want_commit: Callable[[], None], vhost: str = "/") -> None:
        self._want_commit = want_commit
        self._error: ClientError | None = None
        self._session: Session = broker.connect(self, USER, vhost, {})
        self._session.open_channel(CHANNEL)

    def _call(self, method: Any) -> None:
        """Run one AMQP method on our channel; the model's refusal is LocalChannelClosed."""
        self._check()
        try:
            self._session.handle_method(CHANNEL, method)
        except AMQPError as error:
            raise self._refused(error) from None
        finally:
            self._want_commit()

    def _refused(self, error: AMQPError) -> LocalChannelClosed:
        """Record a refusal: the channel is unusable from now on, as it would be for a client."""
        failure = LocalChannelClosed(error.reply_code, error.reply_text)
        self._fail(failure)
        return failure

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def _fail(self, error: ClientError) -> None:
        if self._error is None:
            self._error = error

    @property
    def session_id(self) -> int:
        """The internal session's id: what the messages it publishes carry as their origin."""
        return self._session.id

    def close(self) -> None:
        """End the session: unacked deliveries go back to their queues, private queues go."""
        self._fail(ClientError("internal session closed"))
        self._session.disconnect()
        self._want_commit()

    # -- Outbox: what a route does not need is ignored (NullOutbox); refusals end it --------

    def close_channel(self, channel: int, error: AMQPError) -> None:
        self._fail(LocalChannelClosed(error.reply_code, error.reply_text))

    def close_connection(self, error: AMQPError) -> None:
        self._fail(LocalChannelClosed(error.reply_code, error.reply_text))


class LocalSink(_InternalOutbox):
    """Publishes into this node's exchanges with publisher confirms, like a client channel.

    `publish` returns the confirm sequence number; `wait_for_confirm(seq)` returns once the
    model accepted the message (stored, if it had to be) and raises PublishNacked if it
    refused it. The model confirms strictly in publish order, so one number, the highest seq
    settled, says which publishes are done.
    """

    def __init__(self, broker: Broker, want_commit: Callable[[], None], vhost: str = "/") -> None:
        super().__init__(broker, want_commit, vhost)
        self._published = 0
        self._settled = 0
        self._nacked: set[int] = set()
        self._progress: trio.Event | None = None
        #: Set while the model holds this sink's publishers (the node's memory or disk alarm):
        #: what a forwarder waits for before it takes the next message from its source.
        self.resumed: trio.Event | None = None
        self._call(commands.Confirm.Select())

    def publish(self, exchange: str, routing_key: str, content: Content) -> int:
        """Route the message now; its sequence number to wait for."""
        self._check()
        try:
            self._session.handle_publish(CHANNEL, exchange, routing_key, False, False, content)
        except AMQPError as error:
            raise self._refused(error) from None
        self._session.flush_confirms()  # a route's publish is a batch of its own
        self._want_commit()
        self._published += 1
        return self._published

    def confirmed(self, seq: int) -> bool:
        """Whether `seq` is settled; PublishNacked if the model refused it."""
        if seq > self._settled:
            return False
        if seq in self._nacked:
            self._nacked.discard(seq)
            raise PublishNacked([seq])
        return True

    async def wait_for_confirm(self, seq: int) -> None:
        while seq > self._settled:
            self._check()
            if self._progress is None:
                self._progress = trio.Event()
            await self._progress.wait()
        if seq in self._nacked:
            self._nacked.discard(seq)
            raise PublishNacked([seq])

    def send_method(self, channel: int, method: Any) -> None:
        if isinstance(method, commands.Basic.Ack | commands.Basic.Nack):
            if isinstance(method, commands.Basic.Nack):
                self._nacked.add(method.delivery_tag)
            self._settled = max(self._settled, method.delivery_tag)
            self._wake()

    def block(self, reason: str) -> None:
        if self.resumed is None:
            self.resumed = trio.Event()

    def unblock(self) -> None:
        resumed, self.resumed = self.resumed, None
        if resumed is not None:
            resumed.set()

    def _fail(self, error: ClientError) -> None:
        super()._fail(error)
        self._wake()

    def _wake(self) -> None:
        if self._progress is not None:
            self._progress.set()
            self._progress = None


class LocalSource(_InternalOutbox):
    """Consumes one local queue with prefetch `credit`; acks go back through the session."""

    def __init__(
        self, broker: Broker, want_commit: Callable[[], None], *, credit: int, vhost: str = "/"
    ) -> None:
        super().__init__(broker, want_commit, vhost)
        self._capacity = max(credit, 1)
        self._buffer: deque[Delivery | ConsumerCancelled] = deque()
        self._arrived: trio.Event | None = None
        self._paused = False
        self._declared = ""
        self._call(commands.Basic.Qos(prefetch_count=credit))

    def declare_private_queue(self, exchange: str, routing_key: str) -> str:
        """A server-named exclusive auto-delete queue bound to `exchange` with `routing_key`,
        gone with this session; its name."""
        self._call(make_method(commands.Queue.Declare, queue="", exclusive=True, auto_delete=True))
        self._call(
            make_method(commands.Queue.Bind, queue=self._declared, exchange=exchange, routing_key=routing_key)
        )
        return self._declared

    def consume(self, queue: str) -> None:
        self._call(make_method(commands.Basic.Consume, queue=queue, consumer_tag="federation"))

    def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        self._check()
        try:
            self._session.handle_ack(CHANNEL, delivery_tag, multiple)
        except AMQPError as error:
            raise self._refused(error) from None
        self._want_commit()

    def deliveries(self) -> LocalSource:
        return self

    def __aiter__(self) -> LocalSource:
        return self

    async def __anext__(self) -> Delivery:
        while not self._buffer:
            self._check()
            self._arrived = trio.Event()
            await self._arrived.wait()
        item = self._buffer.popleft()
        if self._paused and len(self._buffer) <= self._capacity // 2:
            self._paused = False
            self._session.resume()
        if isinstance(item, ConsumerCancelled):
            self._fail(item)
            raise item
        return item

    # -- Outbox -----------------------------------------------------------------------------

    def writable(self) -> bool:
        if len(self._buffer) < self._capacity:
            return True
        self._paused = True
        return False

    def send_method(self, channel: int, method: Any) -> None:
        # pamqp types these fields optional (its constructors default them to None); the model
        # always sets them, so `or ""` only tells mypy so.
        if isinstance(method, commands.Queue.DeclareOk):
            self._declared = method.queue or ""
        elif isinstance(method, commands.Basic.Cancel):
            self._push(ConsumerCancelled(method.consumer_tag or ""))

    def send_deliver(self, delivery: DeliveryFields) -> None:
        self._push(Delivery._make(delivery))

    def _push(self, item: Delivery | ConsumerCancelled) -> None:
        self._buffer.append(item)
        if self._arrived is not None:
            self._arrived.set()
            self._arrived = None

    def _fail(self, error: ClientError) -> None:
        super()._fail(error)
        if self._arrived is not None:
            self._arrived.set()
            self._arrived = None
