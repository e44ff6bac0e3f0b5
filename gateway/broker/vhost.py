"""A virtual host: its exchanges, queues and bindings, and the operations that keep them
consistent (auto-delete, exclusive owners, durable writes, dead-lettering)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pamqp import commands

from gateway.broker.arguments import QueueOptions, parse_queue_arguments
from gateway.broker.deadletter import dead_letter_copy, would_cycle
from gateway.broker.exchange import Exchange, route, sender_selected
from gateway.broker.message import Message, expiration_deadline
from gateway.broker.outbox import ReturnTo
from gateway.broker.queue import Queue
from gateway.names import STANDARD_EXCHANGES
from gateway.routing.bindings import freeze
from gateway.wire.content import Content
from gateway.wire.errors import AMQPError

if TYPE_CHECKING:
    from gateway.broker.broker import Broker
    from gateway.broker.session import Session

Destination = Queue | Exchange


class VHost:
    __slots__ = ("broker", "name", "exchanges", "queues")

    def __init__(self, broker: Broker, name: str) -> None:
        self.broker = broker
        self.name = name
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        for exchange_name, exchange_type in STANDARD_EXCHANGES:
            self.exchanges[exchange_name] = Exchange(
                self, exchange_name, exchange_type, True, False, False, {}
            )

    # -- publishing -------------------------------------------------------------------------

    def publish(
        self,
        exchange: Exchange,
        routing_key: str,
        content: Content,
        origin: int,
        return_to: ReturnTo | None = None,
    ) -> tuple[int, Queue | None, bool]:
        """Route a message and enqueue it: (queues reached, a queue that refused it (x-overflow
        or qpid's reject policy) or None, written to store). Its CC and BCC headers add routing
        keys; BCC is removed from what is enqueued."""
        # Only a message with headers can have CC or BCC (the test first: a call less per publish).
        extra_keys, content = ((), content) if content.headers_table is None else sender_selected(content)
        broker = self.broker
        expires_at = None if content.expiration is None else expiration_deadline(content, broker.clock())
        message_id = broker.next_message_id
        broker.next_message_id = message_id + 1
        message = Message(
            message_id,
            exchange.name,
            routing_key,
            content,
            content.delivery_mode == 2,
            expires_at,
            origin,
            return_to,
        )
        budget = broker.queue_memory_budget
        if exchange.is_default and not extra_keys:
            exchange.published += 1
            queue = self.queues.get(routing_key)
            if queue is None:
                exchange.missed += 1
                return 0, None, False
            if queue.publish(message):
                stored = message.persistent and queue.store is not None
                if queue.over_memory_budget(budget):
                    broker.page_out(message, stored)
                return 1, None, stored
            return 1, queue, False
        queues = route(exchange, message, extra_keys)  # may refuse it (502): not counted then
        exchange.published += 1
        if not queues:
            exchange.missed += 1
        refused: Queue | None = None
        accepted = stored = False
        everywhere_stored = over_budget = True
        for queue in queues:
            if queue.publish(message):
                accepted = True
                if message.persistent and queue.store is not None:
                    stored = True
                else:
                    everywhere_stored = False
                over_budget = over_budget and queue.over_memory_budget(budget)
            else:
                refused = queue
        if accepted and over_budget:
            broker.page_out(message, everywhere_stored)
        if message.persistent and not stored and exchange.federation is not None:
            # Federation may store copies of its own (dynamic routing's durable bridge queues,
            # written during `route`): the confirm then waits for the batch holding them.
            stored = broker.store is not None and broker.store.pending
        return len(queues), refused, stored

    def queue_options(self, arguments: dict[str, Any], description: str, durable: bool) -> QueueOptions:
        """A queue's options from its declare's arguments over the vhost's queue defaults
        (406 for a bad one); `arguments` stay as given, for the redeclare comparison."""
        defaults = self.broker.queue_defaults.get(self.name)
        return parse_queue_arguments(
            {**defaults, **arguments} if defaults else arguments, description, durable
        )

    def enqueue(self, queue: Queue, exchange: str, routing_key: str, content: Content) -> None:
        """Put a message into one queue as if `exchange` had routed it there, without routing
        (dynamic routing's forwarding into a bridge queue, management's replies; the queue's
        limits still apply). The exchange's counters do not count it.

        Its origin is no session, and its expiration property sets no deadline here: the
        node it is forwarded to applies it.
        """
        broker = self.broker
        message_id = broker.next_message_id
        broker.next_message_id = message_id + 1
        queue.publish(Message(message_id, exchange, routing_key, content, content.persistent, None, 0))

    def dead_letter(self, queue: Queue, messages: list[Message], reason: str) -> None:
        """Republish messages dropped from `queue` to its dead-letter exchange, if it exists."""
        options = queue.options
        exchange = self.exchanges.get(options.dead_letter_exchange or "")
        if exchange is None or options.dead_letter_exchange is None:
            return
        broker = self.broker
        now = broker.clock()
        queue.dead_lettered += len(messages)
        exchange.published += len(messages)
        for message in messages:
            routing_key = options.dead_letter_routing_key or message.routing_key
            copy = dead_letter_copy(message, queue.name, reason, now, exchange.name, routing_key)
            try:
                reached = route(exchange, copy)
            except AMQPError:
                # Only a headers exchange fails here, on a table it cannot decode; nobody
                # published this message now, so there is no one to tell: it is dropped.
                exchange.missed += 1
                continue
            targets = [q for q in reached if not would_cycle(copy, q.name)]
            if not targets:
                exchange.missed += 1
                continue
            copy.id = broker.next_message_id
            broker.next_message_id += 1
            for target in targets:
                target.publish(copy)

    # -- exchanges --------------------------------------------------------------------------

    def create_exchange(
        self,
        name: str,
        exchange_type: str,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Any],
        persist: bool = True,
    ) -> Exchange:
        exchange = Exchange(self, name, exchange_type, durable, auto_delete, internal, arguments)
        self.exchanges[name] = exchange
        store = self.broker.store
        if durable and persist and store is not None:
            store.put_exchange(self.name, name, exchange_type, auto_delete, internal, arguments)
        if self.broker.on_exchange_created is not None:
            self.broker.on_exchange_created(exchange)
        return exchange

    def delete_exchange(self, exchange: Exchange) -> None:
        """Delete an exchange and every binding from or to it."""
        if exchange.deleted:
            return
        exchange.deleted = True
        del self.exchanges[exchange.name]
        for key, arguments, destination in exchange.matcher.bindings():
            self._remove_binding(exchange, destination, key, arguments, auto_delete=False)
        for source, key, arguments in list(exchange.sources.values()):
            self._remove_binding(source, exchange, key, arguments)
        store = self.broker.store
        if exchange.durable and store is not None:
            store.delete_exchange(self.name, exchange.name)

    # -- bindings ---------------------------------------------------------------------------

    def bind(
        self,
        source: Exchange,
        destination: Destination,
        key: str,
        arguments: dict[str, Any],
        persist: bool = True,
    ) -> None:
        """Add a binding (ValueError for headers arguments the matcher refuses)."""
        if not source.matcher.bind(key, arguments, destination):
            return
        destination.sources[(source.name, key, freeze(arguments))] = (source, key, arguments)
        if source.federation is not None and isinstance(destination, Queue):
            source.federation.bound(key, arguments)
        store = self.broker.store
        if persist and store is not None and _durable_binding(source, destination):
            store.put_binding(self.name, source.name, _kind(destination), destination.name, key, arguments)

    def unbind(self, source: Exchange, destination: Destination, key: str, arguments: dict[str, Any]) -> None:
        self._remove_binding(source, destination, key, arguments)

    def _remove_binding(
        self,
        source: Exchange,
        destination: Destination,
        key: str,
        arguments: dict[str, Any],
        auto_delete: bool = True,
    ) -> None:
        if not source.matcher.unbind(key, arguments, destination):
            return
        destination.sources.pop((source.name, key, freeze(arguments)), None)
        if source.federation is not None and isinstance(destination, Queue):
            source.federation.unbound(key, arguments)
        store = self.broker.store
        if store is not None and _durable_binding(source, destination):
            store.delete_binding(self.name, source.name, _kind(destination), destination.name, key, arguments)
        if auto_delete and source.auto_delete and not len(source.matcher):
            self.delete_exchange(source)

    # -- queues -----------------------------------------------------------------------------

    def create_queue(
        self,
        name: str,
        durable: bool,
        owner: Session | None,
        auto_delete: bool,
        arguments: dict[str, Any],
        options: QueueOptions,
        persist: bool = True,
    ) -> Queue:
        """A new queue; durable non-exclusive queues are stored (exclusive ones die with
        their connection, so there is nothing to recover)."""
        store = self.broker.store if durable and owner is None else None
        queue = Queue(self, name, durable, owner, auto_delete, arguments, options, store)
        self.queues[name] = queue
        if owner is not None:
            owner.exclusive_queues.add(queue)
        if store is not None and persist:
            store.put_queue(self.name, name, auto_delete, arguments)
        return queue

    def delete_queue(self, queue: Queue) -> int:
        """Delete a queue: cancel its consumers (telling clients that asked to be told), drop
        its bindings and ready messages; returns how many messages it held."""
        if queue.deleted:
            return 0
        queue.deleted = True
        del self.queues[queue.name]
        count = len(queue.ready)
        consumers = list(queue.consumers)
        queue.consumers.clear()
        for consumer in consumers:
            channel = consumer.channel
            channel.consumers.pop(consumer.tag, None)
            if channel.session.cancel_notify:
                channel.send(commands.Basic.Cancel(consumer_tag=consumer.tag, nowait=True))
        for source, key, arguments in list(queue.sources.values()):
            self._remove_binding(source, queue, key, arguments)
        if queue.store is not None:
            queue.store.delete_queue(self.name, queue.name)
        queue.ready.clear()
        queue.ready_bytes = 0
        if queue.flow is not None:
            queue.flow.release()
        if queue.owner is not None:
            queue.owner.exclusive_queues.discard(queue)
        self.broker.unwatch(queue)
        return count


def _kind(destination: Destination) -> str:
    return "queue" if isinstance(destination, Queue) else "exchange"


def _durable_binding(source: Exchange, destination: Destination) -> bool:
    if not source.durable or source.is_default:
        return False
    if isinstance(destination, Queue):
        return destination.store is not None
    return destination.durable
