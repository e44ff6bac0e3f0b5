"""A queue: ready messages in order, its consumers, and the rules that drop messages.

This is the hot path: publish appends (or hands the message straight to a waiting consumer),
dispatch pops from a deque and round-robins over consumers that have credit.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any

from gateway.broker.arguments import QueueOptions
from gateway.broker.message import Entry, Message

if TYPE_CHECKING:
    from gateway.broker.channel import Channel, Consumer
    from gateway.broker.exchange import Exchange
    from gateway.broker.session import Session
    from gateway.broker.store import StoreWriter
    from gateway.broker.vhost import VHost


#: How deep dispatch looks past a head that only no-local consumers are waiting on.
NO_LOCAL_SCAN = 1000


class Queue:
    __slots__ = (
        "vhost",
        "name",
        "durable",
        "owner",
        "auto_delete",
        "arguments",
        "options",
        "ready",
        "ready_bytes",
        "consumers",
        "sources",
        "next_seq",
        "had_consumer",
        "last_used",
        "store",
        "deleted",
        "watched",
        "limited",
        "stuck",
    )

    def __init__(
        self,
        vhost: VHost,
        name: str,
        durable: bool,
        owner: Session | None,
        auto_delete: bool,
        arguments: dict[str, Any],
        options: QueueOptions,
        store: StoreWriter | None,
    ) -> None:
        self.vhost = vhost
        self.name = name
        self.durable = durable
        #: The session of an exclusive queue.
        self.owner = owner
        self.auto_delete = auto_delete
        self.arguments = arguments
        self.options = options
        self.ready: deque[Entry] = deque()
        self.ready_bytes = 0
        self.consumers: deque[Consumer] = deque()
        #: Bindings to this queue: identity -> (source exchange, key, arguments).
        self.sources: dict[tuple[str, str, Hashable], tuple[Exchange, str, dict[str, Any]]] = {}
        self.next_seq = 0
        self.had_consumer = False
        self.last_used = vhost.broker.clock()
        #: Where persistent messages go: the store for durable queues, else None.
        self.store = store
        self.deleted = False
        #: Queues with TTLs or x-expires are visited by Broker.tick.
        self.watched = options.message_ttl is not None or options.expires is not None
        self.limited = options.max_length is not None or options.max_length_bytes is not None
        #: The head the last dispatch could hand to no consumer (see `publish`), else None.
        self.stuck: Entry | None = None
        if self.watched:
            unused_until = self.last_used + options.expires / 1000.0 if options.expires is not None else None
            vhost.broker.watch(self, unused_until)

    def __repr__(self) -> str:
        return f"<Queue {self.name!r}>"

    # -- publishing -------------------------------------------------------------------------

    def publish(self, message: Message) -> bool:
        """Enqueue (or deliver at once); False if x-overflow refused the message."""
        options = self.options
        if self.limited and options.overflow != "drop-head" and self._full(message.size):
            if options.overflow == "reject-publish-dlx":
                self.vhost.dead_letter(self, [message], "maxlen")
            return False
        expires_at = message.expires_at
        if options.message_ttl is not None:
            deadline = self.vhost.broker.clock() + options.message_ttl / 1000.0
            if expires_at is None or deadline < expires_at:
                expires_at = deadline
        entry = Entry(message, self, self.next_seq, False, expires_at)
        self.next_seq += 1
        if self.store is not None and message.persistent:
            self.store.add_message(
                self.vhost.name, self.name, message.id, message.exchange, message.routing_key, message.content
            )
        ready = self.ready
        if not ready and self.consumers:
            consumer = self._next_consumer(entry)
            if consumer is not None:
                self._deliver(consumer, entry)
                return True
        ready.append(entry)
        self.ready_bytes += message.size
        if self.limited:
            self._drop_over_limit()
        if expires_at is not None:
            if not self.watched:
                self.watched = True
                self.vhost.broker.watch(self, expires_at)
            elif len(ready) == 1:
                self.vhost.broker.watch(self, expires_at)
        # Behind a head the last dispatch could not place, trying again is futile: whatever
        # could unblock it (credit, flow, a writable outbox, a new consumer) dispatches itself.
        if self.consumers and ready[0] is not self.stuck:
            self.dispatch()
        return True

    def restore(self, message: Message, redelivered: bool) -> None:
        """Append a recovered message in stored order, without writing it to the store again."""
        expires_at = message.expires_at
        if self.options.message_ttl is not None:
            deadline = self.vhost.broker.clock() + self.options.message_ttl / 1000.0
            if expires_at is None or deadline < expires_at:
                expires_at = deadline
        self.ready.append(Entry(message, self, self.next_seq, redelivered, expires_at))
        self.next_seq += 1
        self.ready_bytes += message.size
        if expires_at is not None:
            self.watched = True
            self.vhost.broker.watch(self, self.ready[0].expires_at)

    def _full(self, size: int) -> bool:
        options = self.options
        if options.max_length is not None and len(self.ready) >= options.max_length:
            return True
        limit = options.max_length_bytes
        return limit is not None and self.ready_bytes + size > limit

    def _drop_over_limit(self) -> None:
        options = self.options
        ready = self.ready
        max_length = options.max_length if options.max_length is not None else float("inf")
        max_bytes = options.max_length_bytes if options.max_length_bytes is not None else float("inf")
        dropped = []
        while ready and (len(ready) > max_length or self.ready_bytes > max_bytes):
            dropped.append(self._take())
        if dropped:
            self._discard(dropped, "maxlen")

    # -- delivering -------------------------------------------------------------------------

    def _take(self) -> Entry:
        """Pop the head; when a watched queue gets a new head with a deadline, tell the broker."""
        ready = self.ready
        entry = ready.popleft()
        self.ready_bytes -= entry.message.size
        if self.watched and ready:
            deadline = ready[0].expires_at
            if deadline is not None:
                self.vhost.broker.watch(self, deadline)
        return entry

    def _next_consumer(self, entry: Entry) -> Consumer | None:
        """The next consumer in round-robin order with credit for this entry, rotating past it."""
        consumers = self.consumers
        size = entry.message.size
        for _ in range(len(consumers)):
            consumer = consumers[0]
            consumers.rotate(-1)
            if consumer.can_take(size) and not (
                consumer.no_local and consumer.session_id == entry.message.origin
            ):
                return consumer
        return None

    def dispatch(self) -> None:
        """Hand ready messages to consumers with credit until one side runs out."""
        ready = self.ready
        now = None
        while ready and self.consumers:
            head = ready[0]
            if head.expires_at is not None:
                if now is None:
                    now = self.vhost.broker.clock()
                if head.expires_at <= now:
                    self._discard([self._take()], "expired")
                    continue
            consumer = self._next_consumer(head)
            if consumer is None:
                if self._unwanted_by_owner(head):
                    self._discard([self._take()], None)
                    continue
                if any(c.no_local for c in self.consumers):
                    # The head may wait only for a consumer on another connection; what
                    # others published behind it must not wait with it. Never "stuck": a
                    # publish from another connection may be deliverable at once.
                    if self._deliver_behind_head():
                        continue
                    return
                if head.expires_at is None:  # one that expires is worth another look
                    self.stuck = head
                return
            self._take()
            self._deliver(consumer, head)

    def _deliver_behind_head(self) -> bool:
        """Deliver the first message after the head that some consumer may take now (no-local
        keeps the head back); looks at most NO_LOCAL_SCAN entries deep. True if one went."""
        ready = self.ready
        for index in range(1, min(len(ready), NO_LOCAL_SCAN)):
            entry = ready[index]
            consumer = self._next_consumer(entry)
            if consumer is not None:
                del ready[index]
                self.ready_bytes -= entry.message.size
                self._deliver(consumer, entry)
                return True
        return False

    def _unwanted_by_owner(self, entry: Entry) -> bool:
        """An exclusive queue's own no-local consumers will never take the owner's messages."""
        owner = self.owner
        return (
            owner is not None
            and entry.message.origin == owner.id
            and all(consumer.no_local and consumer.session_id == owner.id for consumer in self.consumers)
        )

    def _deliver(self, consumer: Consumer, entry: Entry) -> None:
        channel = consumer.channel
        message = entry.message
        tag = channel.next_tag
        channel.next_tag = tag + 1
        if consumer.no_ack:
            if self.store is not None and message.persistent:
                self.store.remove_message(self.vhost.name, self.name, message.id)
        else:
            entry.consumer = consumer
            channel.unacked[tag] = entry
            consumer.held += 1
            consumer.held_bytes += message.size
            channel.held += 1
            channel.held_bytes += message.size
            if self.store is not None and message.persistent and not entry.redelivered:
                self.store.mark_delivered(self.vhost.name, self.name, message.id)
        channel.outbox.send_deliver(
            channel.number,
            consumer.tag,
            tag,
            entry.redelivered,
            message.exchange,
            message.routing_key,
            message.content,
        )

    def get(self, channel: Channel, no_ack: bool) -> Entry | None:
        """Take the head for basic.get (expired heads are dropped first); None when empty."""
        self.last_used = self.vhost.broker.clock()
        ready = self.ready
        while ready:
            entry = self._take()
            if entry.expires_at is not None and entry.expires_at <= self.last_used:
                self._discard([entry], "expired")
                continue
            message = entry.message
            if self.store is not None and message.persistent:
                if no_ack:
                    self.store.remove_message(self.vhost.name, self.name, message.id)
                elif not entry.redelivered:
                    self.store.mark_delivered(self.vhost.name, self.name, message.id)
            return entry
        return None

    # -- settling ---------------------------------------------------------------------------

    def settle(self, entry: Entry) -> None:
        """An acknowledged (or dropped) delivery leaves the queue for good."""
        message = entry.message
        if self.store is not None and message.persistent and not self.deleted:
            self.store.remove_message(self.vhost.name, self.name, message.id)

    def reject(self, entries: list[Entry]) -> None:
        """Rejected without requeue: dead-letter (if configured) and forget."""
        if not self.deleted:
            self._discard(entries, "rejected")

    def requeue(self, entries: Iterable[Entry]) -> None:
        """Put entries back at their original positions (before later ones), redelivered."""
        back = sorted(entries, key=_seq)
        if self.deleted or not back:
            return
        for entry in back:
            entry.redelivered = True
            entry.consumer = None
            self.ready_bytes += entry.message.size
        ready = self.ready
        if not ready or back[-1].seq < ready[0].seq:
            ready.extendleft(reversed(back))
        else:
            merged = list(heapq.merge(back, ready, key=_seq))
            ready.clear()
            ready.extend(merged)
        if self.watched and ready[0].expires_at is not None:
            self.vhost.broker.watch(self, ready[0].expires_at)
        # Like RabbitMQ: requeued messages are let back in whatever the limit; only drop-head
        # then trims from the head. reject-publish refuses publishes, never a requeue.
        if self.limited and self.options.overflow == "drop-head":
            self._drop_over_limit()
        self.dispatch()

    def _discard(self, entries: list[Entry], reason: str | None) -> None:
        """Remove entries from the store and dead-letter them for `reason` (None: just drop)."""
        store = self.store
        if store is not None:
            for entry in entries:
                if entry.message.persistent:
                    store.remove_message(self.vhost.name, self.name, entry.message.id)
        if reason is not None and self.options.dead_letter_exchange is not None:
            self.vhost.dead_letter(self, [entry.message for entry in entries], reason)

    def purge(self) -> int:
        """Drop every ready message (unacked ones stay with their channels); returns how many."""
        count = len(self.ready)
        self._discard(list(self.ready), None)
        self.ready.clear()
        self.ready_bytes = 0
        return count

    # -- consumers and expiry ---------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.had_consumer = True
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Forget a consumer; an auto-delete queue goes with its last one."""
        try:
            self.consumers.remove(consumer)
        except ValueError:
            return
        self.stuck = None  # the head may now be unwanted by the remaining consumers
        if self.consumers:
            return
        self.last_used = self.vhost.broker.clock()
        if self.auto_delete and self.had_consumer:
            self.vhost.delete_queue(self)
        elif self.options.expires is not None:
            self.vhost.broker.watch(self, self.last_used + self.options.expires / 1000.0)

    def expire(self, now: float) -> float | None:
        """Drop expired messages at the head, delete the queue if x-expires ran out; returns
        the next deadline that matters, or None."""
        ready = self.ready
        expired = []
        while ready and ready[0].expires_at is not None and ready[0].expires_at <= now:
            expired.append(self._take())
        if expired:
            self._discard(expired, "expired")
        deadline = ready[0].expires_at if ready else None
        if self.options.expires is not None and not self.consumers:
            unused_until = self.last_used + self.options.expires / 1000.0
            if unused_until <= now:
                self.vhost.delete_queue(self)
                return None
            if deadline is None or unused_until < deadline:
                deadline = unused_until
        return deadline


def _seq(entry: Entry) -> int:
    return entry.seq
