"""A connection's view of the broker: its channels, exclusive queues, and the entry points the
server calls for every method, publish and ack it receives."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from pamqp import commands

from gateway.broker.access import UNRESTRICTED, Access
from gateway.broker.channel import Channel
from gateway.broker.exchange import Exchange
from gateway.broker.handlers import HANDLERS
from gateway.broker.hold import Hold
from gateway.broker.message import MESSAGE_OVERHEAD, expiration_deadline
from gateway.broker.names import describe
from gateway.broker.outbox import Outbox, Return
from gateway.broker.queue import Queue
from gateway.broker.vhost import VHost
from gateway.wire.content import Content
from gateway.wire.errors import (
    AMQPError,
    access_refused,
    channel_error,
    not_found,
    not_implemented,
    precondition_failed,
    resource_locked,
)

if TYPE_CHECKING:
    from gateway.broker.broker import Broker

#: Stands in for the Basic.Publish method in errors (class and method ids).
PUBLISH = commands.Basic.Publish()

Handler = Callable[["Session", Channel, Any], None]
#: A message published to an exchange the node handles itself (see Broker.exchange_handlers).
ExchangeHandler = Callable[["Session", Content], None]


class Session:
    __slots__ = (
        "broker",
        "id",
        "outbox",
        "user",
        "access",
        "vhost",
        "client_properties",
        "channels",
        "exclusive_queues",
        "cancel_notify",
        "hold",
        "unfinished",
        "_confirming",
    )

    def __init__(
        self,
        broker: Broker,
        session_id: int,
        outbox: Outbox,
        user: Any,
        vhost: VHost,
        client_properties: dict[str, Any],
        access: Access = UNRESTRICTED,
    ) -> None:
        self.broker = broker
        self.id = session_id
        self.outbox = outbox
        self.user = user
        #: What this session may do: asked before each operation changes anything.
        self.access = access
        self.vhost = vhost
        self.client_properties = client_properties
        self.channels: dict[int, Channel] = {}
        self.exclusive_queues: set[Queue] = set()
        #: Whether the client wants basic.cancel when its queue is deleted under it.
        self.cancel_notify = bool(outbox.client_capabilities.get("consumer_cancel_notify"))
        #: What pauses this session's publishers (a full federation outbox, the disk alarm),
        #: if anything: see gateway.broker.hold.
        self.hold: Hold | None = None
        #: Bytes of message bodies this connection has received and not yet finished.
        self.unfinished = 0
        #: Channels that settled publishes since the last flush_confirms.
        self._confirming: set[Channel] = set()

    def __repr__(self) -> str:
        return f"<Session {self.id} {self.user}@{getattr(self.outbox, 'peer', '?')}>"

    # -- channels ---------------------------------------------------------------------------

    def open_channel(self, number: int) -> None:
        if number in self.channels:
            raise channel_error(f"channel {number} is already open")
        self.channels[number] = Channel(number, self)

    def close_channel(self, number: int) -> None:
        """The channel is gone: cancel its consumers and requeue what it had not acked
        (including deliveries settled in an uncommitted transaction)."""
        channel = self.channels.pop(number, None)
        if channel is None:
            return
        channel.flowing = False
        self.broker.forget_channel(channel)
        consumers = list(channel.consumers.values())
        channel.consumers.clear()
        for consumer in consumers:
            consumer.queue.remove_consumer(consumer)
        if channel.tx is not None:
            for _, taken in channel.tx.settlements:
                channel.restore(taken)
            channel.tx = None
        channel.requeue_all(in_steps=True)

    def channel(self, number: int) -> Channel:
        channel = self.channels.get(number)
        if channel is None:
            raise channel_error(f"expected 'channel.open' on channel {number}")
        return channel

    # -- methods ----------------------------------------------------------------------------

    def handle_method(self, number: int, method: Any) -> None:
        """Carry out a method; replies go through the outbox, failures raise AMQPError."""
        channel = self.channel(number)
        handler = HANDLERS.get(type(method))
        if handler is None:
            raise not_implemented(f"method {method.name} is not implemented", method)
        handler(self, channel, method)

    def handle_publish(
        self, number: int, exchange: str, routing_key: str, mandatory: bool, immediate: bool, content: Content
    ) -> None:
        """A complete Basic.Publish (method, header and body)."""
        channel = self.channels.get(number)
        if channel is None:
            raise channel_error(f"expected 'channel.open' on channel {number}", PUBLISH)
        if immediate:
            raise not_implemented("immediate=true", PUBLISH)
        target = self.vhost.exchanges.get(exchange)
        refusal = self.access.publish(exchange, target.type if target is not None else "", routing_key)
        if refusal is not None:
            raise access_refused(refusal, PUBLISH)
        if target is None:
            raise not_found(f"no {describe('exchange', exchange, self.vhost.name)}", PUBLISH)
        if target.internal:
            raise access_refused(
                f"cannot publish to internal {describe('exchange', exchange, self.vhost.name)}", PUBLISH
            )
        handle = self.broker.exchange_handlers.get(exchange)
        if handle is not None:
            # Never routed, never part of a transaction: the node answers it now.
            handle(self, content)
            self._confirm(channel, 0, accepted=True)
            return
        if content.expiration is not None:
            try:
                expiration_deadline(content, 0.0)
            except ValueError as exc:
                raise precondition_failed(
                    f"invalid expiration '{content.expiration}': {exc}", PUBLISH
                ) from None
        if channel.tx is not None:
            channel.tx.publishes.append((exchange, routing_key, mandatory, content))
            return
        self.publish(channel, target, routing_key, mandatory, content)

    def publish(
        self, channel: Channel, exchange: Exchange, routing_key: str, mandatory: bool, content: Content
    ) -> None:
        """Route and enqueue now; then the Return (if unroutable and mandatory) and the confirm.

        Alarms hold the session after the publish (like RabbitMQ, which blocks a connection
        when it next publishes): the disk alarm a publish that writes to the store, so that
        management and transient traffic go on while the disk is full; the memory alarm
        every publish (management requests never get here). Each publish spends the memory
        budget; once it is spent, the memory alarm reads the node's memory again.
        """
        confirms = channel.confirms
        # The tag `_confirm` takes next: a federation parent's verdict on it may hold it.
        return_to = (self.id, channel.number, confirms.next_seq if confirms else 0) if mandatory else None
        reached, refused, stored = self.vhost.publish(exchange, routing_key, content, self.id, return_to)
        broker = self.broker
        if stored and broker.disk_hold is not None:
            broker.disk_hold.block(self)
        self._spend_memory(len(content.body) + MESSAGE_OVERHEAD)
        if broker.memory_hold is not None:
            broker.memory_hold.block(self)
        if not reached and mandatory:
            channel.in_order(
                partial(
                    self.outbox.send_return,
                    Return(channel.number, 312, "NO_ROUTE", exchange.name, routing_key, content),
                )
            )
        if channel.confirms is not None:
            store = self.broker.store
            self._confirm(channel, store.ticket() if stored and store is not None else 0, refused is None)
        elif refused is not None and refused.options.refusal_closes_channel:
            options = refused.options
            limit = f"{options.max_length} messages" if options.max_length is not None else ""
            if options.max_length_bytes is not None:
                limit += (" or " if limit else "") + f"{options.max_length_bytes} bytes"
            raise precondition_failed(
                f"{describe('queue', refused.name, self.vhost.name)} is full (at most {limit});"
                " message refused (qpid.policy_type reject)",
                PUBLISH,
            )

    def receiving(self, unfinished: int) -> None:
        """The connection now holds `unfinished` bytes of message bodies not yet whole.

        They count toward the memory watermark as they arrive (a whole message is counted
        again when published: that only brings the next reading forward). Near the watermark
        (the broker's content hold), while unfinished bodies take the broker's
        `unfinished_limit` or more, a session receiving more is held like a publisher (no
        more reads): N unfinished messages on N channels cannot take the node past the
        watermark, while a publisher of whole large messages is held between two of them.
        """
        grown = unfinished - self.unfinished
        self.unfinished = unfinished
        broker = self.broker
        broker.unfinished += grown
        if grown <= 0:
            return
        self._spend_memory(grown)
        hold = broker.content_hold
        if hold is not None and broker.unfinished >= broker.unfinished_limit:
            hold.block(self)

    def _spend_memory(self, size: int) -> None:
        """Take `size` bytes from the memory budget; once it is spent, read the memory again."""
        broker = self.broker
        broker.memory_budget -= size
        if broker.memory_budget < 0 and broker.on_memory_budget is not None:
            broker.on_memory_budget()

    def _confirm(self, channel: Channel, ticket: int, accepted: bool) -> None:
        """Settle the publish just handled on a channel in confirm mode (ack once `ticket` is
        durable, or nack) at the next flush_confirms; a channel not in confirm mode has
        nothing to settle."""
        confirms = channel.confirms
        if confirms is not None:
            confirms.settle(confirms.take_tag(), ticket, accepted)
            self._confirming.add(channel)

    def flush_confirms(self) -> None:
        """Send the confirms that are ready, a run of acks as one multiple ack: called at the
        end of each batch of input, so that a burst of publishes is confirmed by one frame
        (RabbitMQ coalesces likewise). Confirms still waiting for the store are sent by the
        commit that makes them durable (Broker.on_durable)."""
        confirming = self._confirming
        if not confirming:
            return
        broker = self.broker
        durable = broker.durable_ticket
        channels = self.channels
        for channel in confirming:
            confirms = channel.confirms
            if confirms is None or channels.get(channel.number) is not channel:
                continue  # closed since (its number may even be open again)
            confirms.flush(durable)
            if confirms.pending:
                broker.wait_for_durable(channel)
        confirming.clear()

    def handle_ack(self, number: int, delivery_tag: int, multiple: bool) -> None:
        """Basic.Ack without building a method object (the hot path)."""
        channel = self.channels.get(number)
        if channel is None:
            raise channel_error(f"expected 'channel.open' on channel {number}")
        if multiple or channel.tx is not None:
            channel.settle(
                None, channel.take(delivery_tag, multiple, commands.Basic.Ack(delivery_tag, multiple))
            )
            return
        entry = channel.unacked.pop(delivery_tag, None)
        if entry is None:
            raise precondition_failed(
                f"unknown delivery tag {delivery_tag}", commands.Basic.Ack(delivery_tag)
            )
        channel.release(entry)
        queue = entry.queue
        queue.settle(entry)
        if queue.ready and queue.consumers:
            queue.dispatch()
        if channel.prefetch_count or channel.prefetch_size:
            channel.redispatch()

    # -- lookups shared by the handlers -----------------------------------------------------

    def authorize(self, action: str, obj: str, name: str, properties: dict[str, str], method: Any) -> None:
        """Ask the access port before an operation changes anything: 403 if refused
        (gateway.broker.access gives the vocabulary)."""
        refusal = self.access.check(action, obj, name, properties)
        if refusal is not None:
            raise access_refused(refusal, method)

    def source_type(self, exchange: str) -> dict[str, str]:
        """The `type` property of a bind from `exchange`: its type, if it exists."""
        found = self.vhost.exchanges.get(exchange)
        return {"type": found.type} if found is not None else {}

    def find_exchange(self, name: str, method: Any) -> Exchange:
        exchange = self.vhost.exchanges.get(name)
        if exchange is None:
            raise not_found(f"no {describe('exchange', name, self.vhost.name)}", method)
        return exchange

    def queue_name(self, channel: Channel, name: str, method: Any) -> str:
        """'' means the channel's most recently declared queue (the spec's shortcut)."""
        if name:
            return name
        if not channel.last_queue:
            raise not_found("no previously declared queue", method)
        return channel.last_queue

    def find_queue(self, channel: Channel, name: str, method: Any) -> Queue:
        """The named queue, if it exists and this session may use it (404, 405)."""
        name = self.queue_name(channel, name, method)
        queue = self.vhost.queues.get(name)
        if queue is None:
            raise not_found(f"no {describe('queue', name, self.vhost.name)}", method)
        self.check_exclusive(queue, method)
        return queue

    def check_exclusive(self, queue: Queue, method: Any) -> None:
        """Another connection's exclusive queue is off limits (405)."""
        if queue.owner is not None and queue.owner is not self:
            raise self.locked(queue, method)

    def locked(self, queue: Queue, method: Any) -> AMQPError:
        return resource_locked(
            f"cannot obtain exclusive access to locked {describe('queue', queue.name, self.vhost.name)}",
            method,
        )

    # -- lifecycle --------------------------------------------------------------------------

    def disconnect(self) -> None:
        """The connection is gone: close its channels, delete its exclusive queues."""
        for number in list(self.channels):
            self.close_channel(number)
        for queue in list(self.exclusive_queues):
            self.vhost.delete_queue(queue)
        self.broker.sessions.pop(self.id, None)
        self.broker.unfinished -= self.unfinished
        self.unfinished = 0
        if self.hold is not None:
            self.hold.forget(self)

    def resume(self) -> None:
        """The outbox is writable again: deliver what back-pressure held back."""
        for channel in self.channels.values():
            channel.redispatch()
