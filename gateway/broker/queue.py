"""A queue: ready messages in order, its consumers, and the rules that drop messages.

This is the hot path: publish appends (or hands the message straight to a waiting consumer),
dispatch pops from a deque and round-robins over consumers that have credit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any

from gateway.broker.arguments import QueueOptions
from gateway.broker.flow import QueueFlow
from gateway.broker.message import Entry, Message
from gateway.broker.paging import PagedContent, page_in
from gateway.broker.ready import FifoReady, PriorityReady

if TYPE_CHECKING:
    from gateway.broker.channel import Channel, Consumer
    from gateway.broker.exchange import Exchange
    from gateway.broker.session import Session
    from gateway.broker.store import StoreWriter
    from gateway.broker.vhost import VHost


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
        "dropped",
        "recovered",
        "delivered",
        "acknowledged",
        "dead_lettered",
        "stuck",
        "waiting",
        "flow",
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
        self.ready = PriorityReady(options.max_priority) if options.max_priority else FifoReady()
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
        #: Counters since the queue was created or the node started (not stored; see
        #: docs/federation.md, "Counters"): messages recovered at start (`enqueued` is what
        #: `next_seq` counts beyond them), deliveries to consumers and basic.get
        #: (redeliveries too), explicit acks, messages handed to the dead-letter exchange, and
        #: messages the length limit dropped (drop-head) or refused (reject-publish,
        #: reject-publish-dlx).
        self.recovered = 0
        self.delivered = 0
        self.acknowledged = 0
        self.dead_lettered = 0
        self.dropped = 0
        #: The head the last dispatch could hand to no consumer (see `publish`), else None.
        self.stuck: Entry | None = None
        #: With `stuck`: the consumers owed an earlier message, which may take nothing behind
        #: it (FIFO), when some others may (kept off the head by no-local only); else None.
        self.waiting: set[Consumer] | None = None
        #: Producer flow control, for a queue declared with a capacity.
        self.flow = (
            None
            if options.capacity is None or options.flow_resume_capacity is None
            else QueueFlow(self, options.capacity, options.flow_resume_capacity)
        )
        if self.watched:
            unused_until = self.last_used + options.expires / 1000.0 if options.expires is not None else None
            vhost.broker.watch(self, unused_until)

    def __repr__(self) -> str:
        return f"<Queue {self.name!r}>"

    @property
    def enqueued(self) -> int:
        """Messages the queue accepted since it was created or the node started: every entry
        it numbered, but those recovered at start (no increment of its own per message)."""
        return self.next_seq - self.recovered

    # -- publishing -------------------------------------------------------------------------

    def publish(self, message: Message) -> bool:
        """Enqueue (or deliver at once); False if x-overflow refused the message."""
        options = self.options
        if self.limited and options.overflow != "drop-head" and self._full(message.size):
            self.dropped += 1
            if options.overflow == "reject-publish-dlx":
                self.vhost.dead_letter(self, [message], "maxlen")
            return False
        expires_at = message.expires_at
        if options.message_ttl is not None:
            expires_at = _with_ttl(expires_at, self.vhost.broker.clock(), options.message_ttl)
        entry = Entry(message, self, self.next_seq, False, expires_at)
        self.next_seq += 1
        if self.store is not None and message.persistent:
            self.store.add_message(
                self.vhost.name,
                self.name,
                message.id,
                message.exchange,
                message.routing_key,
                message.content,
                self.vhost.broker.wall_clock(),
            )
        ready = self.ready
        if self.consumers:
            if not ready:
                consumer = self._next_consumer(entry)
            elif self.waiting is not None and ready[0] is self.stuck:
                # Behind a head held back by no-local: only this message is new (see _hold).
                consumer = self._next_consumer(entry, self.waiting)
            else:
                consumer = None
            if consumer is not None:
                self._deliver(consumer, entry)
                return True
        ready.append(entry)
        self.ready_bytes += message.size
        if self.limited:
            self._drop_over_limit()
        flow = self.flow
        if flow is not None and self.ready_bytes > flow.capacity:
            flow.overfull(message.origin)
        if expires_at is not None:
            if not self.watched:
                self.watched = True
                self.vhost.broker.watch(self, expires_at)
            elif ready[0] is entry:  # a new head (priority queues: not only in an empty one)
                self.vhost.broker.watch(self, expires_at)
        # Behind a head the last dispatch could not place, trying again is futile: whatever
        # could unblock it (credit, flow, a writable outbox, a new consumer) dispatches itself.
        if self.consumers and ready[0] is not self.stuck:
            self.dispatch()
        return True

    def restore(self, message: Message, redelivered: bool, routed_at: float) -> None:
        """Append a recovered message in stored order, without writing it to the store again;
        x-message-ttl counts from `routed_at`, when it was first enqueued, not from now."""
        expires_at = message.expires_at
        ttl = self.options.message_ttl
        if ttl is not None:
            expires_at = _with_ttl(expires_at, routed_at, ttl)
        self.ready.append(Entry(message, self, self.next_seq, redelivered, expires_at))
        self.next_seq += 1
        self.recovered += 1
        self.ready_bytes += message.size
        if expires_at is not None:
            self.watched = True
            self.vhost.broker.watch(self, self.ready[0].expires_at)

    def over_memory_budget(self, budget: int) -> bool:
        """Whether messages enqueued now keep only their properties in memory: over `budget`
        bytes of ready bodies (the broker's), or over a flow_to_disk queue's limits."""
        if self.ready_bytes > budget:
            return True
        options = self.options
        if options.flow_to_disk_bytes is not None and self.ready_bytes > options.flow_to_disk_bytes:
            return True
        return options.flow_to_disk_count is not None and len(self.ready) > options.flow_to_disk_count

    def paged_bytes(self) -> int:
        """Bytes of ready bodies not in memory (in the store or the spill file): a walk over
        the queue, for listings only."""
        return sum(
            entry.message.size
            for entry in self.ready
            if isinstance(entry.message.content, PagedContent) and not entry.message.content.in_memory
        )

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
            self.dropped += len(dropped)
            self._discard(dropped, "maxlen")

    # -- delivering -------------------------------------------------------------------------

    def _take(self) -> Entry:
        """Pop the head; when a watched queue gets a new head with a deadline, tell the broker."""
        ready = self.ready
        entry = ready.popleft()
        self.ready_bytes -= entry.message.size
        if self.flow is not None:
            self.flow.drained()
        if self.watched and ready:
            deadline = ready[0].expires_at
            if deadline is not None:
                self.vhost.broker.watch(self, deadline)
        return entry

    def _next_consumer(self, entry: Entry, waiting: set[Consumer] | None = None) -> Consumer | None:
        """The next consumer in round-robin order with credit for this entry, rotating past it.

        With `waiting` (behind a held-back head, see `_hold`): consumers in it are skipped, and
        one that may receive the entry but has no credit now joins it.
        """
        consumers = self.consumers
        message = entry.message
        size = message.size
        for _ in range(len(consumers)):
            consumer = consumers[0]
            consumers.rotate(-1)
            if consumer.no_local and consumer.session_id == message.origin:
                continue
            if waiting is None:
                if consumer.can_take(size):
                    return consumer
            elif consumer not in waiting:
                if consumer.can_take(size):
                    return consumer
                waiting.add(consumer)
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
                self._hold(head)
                return
            content = head.message.content
            if isinstance(content, PagedContent) and not content.in_memory:
                # Stored bodies not read since the restart: this one and the next few at once.
                page_in(entry.message.content for entry in ready)
            self._take()
            self._deliver(consumer, head)

    def _hold(self, head: Entry) -> None:
        """The head can go to no consumer now, so it waits, and each consumer that may receive
        it waits for it (FIFO). Consumers kept off it by no-local alone are not owed it: they
        take the later messages they may receive (a walk of the queue, only in that case).
        Until something dispatches again, `publish` offers each new message to them only."""
        consumers = self.consumers
        waiting: set[Consumer] = set()
        delivered: set[Entry] = set()
        now = None
        for entry in self.ready:
            if len(waiting) == len(consumers):
                break
            if entry.expires_at is not None:
                now = self.vhost.broker.clock() if now is None else now
                if entry.expires_at <= now:
                    continue  # left to expire when it reaches the head
            consumer = self._next_consumer(entry, waiting)
            if consumer is not None:
                delivered.add(entry)
                self._deliver(consumer, entry)
        if delivered:
            self.ready.remove_all(delivered)
            self.ready_bytes -= sum(entry.message.size for entry in delivered)
            if self.flow is not None:
                self.flow.drained()
        self.waiting = waiting if len(waiting) < len(consumers) else None
        if head.expires_at is None:  # one that expires is worth another look
            self.stuck = head

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
        self.delivered += 1
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
        channel.outbox.send_deliver(  # DeliveryFields
            (
                channel.number,
                consumer.tag,
                tag,
                entry.redelivered,
                message.exchange,
                message.routing_key,
                message.content,
                message.return_to,
            )
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
            self.delivered += 1
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
        """An acknowledged delivery leaves the queue for good."""
        self.acknowledged += 1
        message = entry.message
        if self.store is not None and message.persistent and not self.deleted:
            self.store.remove_message(self.vhost.name, self.name, message.id)

    def reject(self, entries: list[Entry]) -> None:
        """Rejected without requeue: dead-letter (if configured) and forget."""
        if not self.deleted:
            self._discard(entries, "rejected")

    def requeue(self, entries: Iterable[Entry]) -> None:
        """Put entries back at their original positions (before later ones), redelivered."""
        back = list(entries)
        if self.deleted or not back:
            return
        if self.options.delivery_limit is not None:
            back = self._within_delivery_limit(back)
            if not back:
                return
        for entry in back:
            entry.redelivered = True
            entry.consumer = None
            self.ready_bytes += entry.message.size
        ready = self.ready
        ready.put_back(back)
        if self.watched and ready[0].expires_at is not None:
            self.vhost.broker.watch(self, ready[0].expires_at)
        # Like RabbitMQ: requeued messages are let back in whatever the limit; only drop-head
        # then trims from the head. reject-publish refuses publishes, never a requeue.
        if self.limited and self.options.overflow == "drop-head":
            self._drop_over_limit()
        self.dispatch()

    def _within_delivery_limit(self, entries: list[Entry]) -> list[Entry]:
        """Count a return of each entry; those returned more than x-delivery-limit times are
        dead-lettered (reason delivery_limit) or dropped, as a quorum queue does. The rest."""
        limit = self.options.delivery_limit
        assert limit is not None
        kept: list[Entry] = []
        over: list[Entry] = []
        for entry in entries:
            entry.returns += 1
            (over if entry.returns > limit else kept).append(entry)
        if over:
            self._discard(over, "delivery_limit")
        return kept

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
        if self.flow is not None:
            self.flow.drained()
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
            if self.consumers:
                self.dispatch()  # the new head may be one a consumer can take
        deadline = ready[0].expires_at if ready else None
        if self.options.expires is not None and not self.consumers:
            unused_until = self.last_used + self.options.expires / 1000.0
            if unused_until <= now:
                self.vhost.delete_queue(self)
                return None
            if deadline is None or unused_until < deadline:
                deadline = unused_until
        return deadline


def _with_ttl(expires_at: float | None, enqueued_at: float, ttl: int) -> float:
    """The sooner of a message's own deadline and the queue's x-message-ttl (ms)."""
    deadline = enqueued_at + ttl / 1000.0
    return deadline if expires_at is None or deadline < expires_at else expires_at
