"""The broker model's root: vhosts, sessions, recovery, durable confirms and timers."""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.broker.access import UNRESTRICTED, Access
from gateway.broker.confirms import VERDICT_TIMEOUT
from gateway.broker.hold import Hold
from gateway.broker.message import Message, expiration_deadline
from gateway.broker.names import describe
from gateway.broker.outbox import Outbox, Return, ReturnTo
from gateway.broker.paging import QUEUE_MEMORY_BUDGET, BodySpill, page_out, spill_out
from gateway.broker.records import Snapshot
from gateway.broker.session import ExchangeHandler, Session
from gateway.broker.store import StoreWriter
from gateway.broker.vhost import VHost
from gateway.names import DEFAULT_VHOST
from gateway.wire.content import Content
from gateway.wire.errors import not_allowed

if TYPE_CHECKING:
    from gateway.broker.channel import Channel
    from gateway.broker.exchange import Exchange
    from gateway.broker.queue import Queue


class Broker:
    def __init__(
        self,
        store: StoreWriter | None = None,
        node_name: str = "amq-gateway",
        clock: Callable[[], float] = time.time,
        wall_clock: Callable[[], float] | None = None,
    ) -> None:
        """`clock` times every deadline of the model (TTLs, queue expiry); `wall_clock` (by
        default `clock` itself) is what the store records (routed_at), so that a monotonic
        `clock` whose origin changes with each process still finds stored deadlines."""
        self.store = store
        self.node_name = node_name
        self.clock = clock
        self.wall_clock = clock if wall_clock is None else wall_clock
        self.vhosts: dict[str, VHost] = {DEFAULT_VHOST: VHost(self, DEFAULT_VHOST)}
        self.sessions: dict[int, Session] = {}
        #: Ids for messages, unique across restarts (recover() moves this past stored ones).
        self.next_message_id = 1
        #: The last store ticket known to be committed, and the last one whose removals
        #: (acks) are committed too (see gateway.store's backlog).
        self.durable_ticket = 0
        self.settled_ticket = 0
        #: Called with a deadline earlier than the one tick() last returned (optional; the
        #: server uses it to re-arm its timer).
        self.on_deadline: Callable[[float], None] | None = None
        #: Called with each exchange created (federation attaches matching ones).
        self.on_exchange_created: Callable[[Exchange], None] | None = None
        #: Exchanges the node handles itself, by name, in every vhost: a publish there goes to
        #: the handler and to no queue, and nobody may bind to or from such an exchange, so no
        #: user can read what others send there (management requests carry passwords).
        self.exchange_handlers: dict[str, ExchangeHandler] = {}
        #: Set while the disk alarm holds every session that next publishes a message the
        #: store has to write (see Session.publish).
        self.disk_hold: Hold | None = None
        #: Set while the memory alarm holds every session that next publishes anything.
        self.memory_hold: Hold | None = None
        #: Set a little below the memory watermark (gateway.memoryalarm): while bodies not yet
        #: whole take `unfinished_limit` bytes or more, it holds every session that receives
        #: more of one, so unfinished messages cannot take the node to the watermark.
        self.content_hold: Hold | None = None
        #: Bytes of message bodies received and not yet whole, over every session.
        self.unfinished = 0
        self.unfinished_limit = sys.maxsize
        #: Queue arguments every queue of a vhost gets unless its declare gives them (the node
        #: config's [vhost."NAME"] capacities), by vhost name.
        self.queue_defaults: dict[str, dict[str, Any]] = {}
        #: How many queues a vhost may hold (RabbitMQ's vhost limit max-queues), by vhost name.
        self.max_queues: dict[str, int] = {}
        #: Bytes of ready bodies a queue keeps in memory (gateway.broker.paging).
        self.queue_memory_budget = QUEUE_MEMORY_BUDGET
        #: Where bodies the store does not keep go when they leave memory; None: they stay.
        self.spill: BodySpill | None = None
        #: Bytes of messages (bodies plus an overhead each) the node may still accept before
        #: `on_memory_budget` must read its memory again (gateway.memoryalarm); without a
        #: memory alarm, no limit.
        self.memory_budget = sys.maxsize
        self.on_memory_budget: Callable[[], None] | None = None
        self._next_session_id = 1
        self._confirm_waiters: set[Channel] = set()
        self._watched: set[Queue] = set()
        #: (deadline, publish) of confirms held for a federation parent's verdict, oldest
        #: first (one timeout for all, so deadlines come in order).
        self._verdicts: deque[tuple[float, ReturnTo]] = deque()
        self._next_deadline: float | None = None
        self._ticking = False
        #: Model work split into steps, so that no step holds the event loop for long (the
        #: requeue of a closed channel's 200,000 unacked messages): the server runs one step
        #: per turn of its loop, and `on_later` tells it there is one to run.
        self.later: deque[Callable[[], None]] = deque()
        self.on_later: Callable[[], None] | None = None

    def page_out(self, message: Message, stored: bool) -> None:
        """Keep only a message's properties in memory: its body is read back from the store if
        every queue holding it stores it (`stored`), else from the spill file."""
        if stored and self.store is not None:
            page_out(message, self.store)
        elif self.spill is not None:
            spill_out(message, self.spill)

    def add_vhost(self, name: str) -> VHost:
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VHost(self, name)
            if self.store is not None:
                self.store.put_vhost(name)
        return vhost

    def connect(
        self,
        outbox: Outbox,
        user: Any,
        vhost: str,
        client_properties: dict[str, Any],
        access: Access = UNRESTRICTED,
    ) -> Session:
        """A new session for an opened connection (530 if the vhost does not exist).

        `user` is whatever the server authenticated (a name or a user record); the model only
        keeps it for management and logs. `access` answers what the session may do: the
        node's own sessions (management, routes) may do anything.
        """
        host = self.vhosts.get(vhost)
        if host is None:
            raise not_allowed(f"vhost '{vhost}' not found")
        session = Session(self, self._next_session_id, outbox, user, host, client_properties, access)
        self._next_session_id += 1
        self.sessions[session.id] = session
        return session

    # -- what federation does to publishers ---------------------------------------------------

    def hold_publisher(self, session_id: int, hold: Hold) -> None:
        """Pause the publishers of the session that published a message (its origin), if it is
        still connected: see gateway.broker.hold."""
        session = self.sessions.get(session_id)
        if session is not None:
            hold.block(session)

    def return_to_publisher(
        self,
        return_to: ReturnTo,
        reply_code: int,
        reply_text: str,
        exchange: str,
        routing_key: str,
        content: Content,
    ) -> None:
        """Basic.Return a message published with mandatory that was found unroutable later (by
        a federation parent), if its publisher's channel is still open."""
        session_id, channel, _ = return_to
        session = self.sessions.get(session_id)
        if session is not None and channel in session.channels:
            session.outbox.send_return(
                Return(channel, reply_code, reply_text, exchange, routing_key, content)
            )
        self.release_verdict(return_to)

    def await_verdict(self, return_to: ReturnTo) -> None:
        """A federation forwarded this mandatory publish (routed nowhere here) to its parent:
        hold its publisher confirm until `release_verdict` (the parent's Return or confirm)
        or VERDICT_TIMEOUT, whichever comes first, so that a Return comes before the ack."""
        channel = self._confirming(return_to)
        if channel is None:
            return
        assert channel.confirms is not None
        channel.confirms.hold(return_to[2])
        deadline = self.clock() + VERDICT_TIMEOUT
        self._verdicts.append((deadline, return_to))
        self._deadline_at(deadline)

    def release_verdict(self, return_to: ReturnTo) -> None:
        """The parent returned or confirmed the publish (or it waited VERDICT_TIMEOUT): send
        its confirm and what waited behind it."""
        channel = self._confirming(return_to)
        if channel is None:
            return
        assert channel.confirms is not None
        channel.confirms.release(return_to[2], self.durable_ticket)
        if channel.confirms.pending:
            self.wait_for_durable(channel)

    def _confirming(self, return_to: ReturnTo) -> Channel | None:
        """The publisher's channel if it is still open and in confirm mode."""
        session_id, number, seq = return_to
        session = self.sessions.get(session_id)
        channel = session.channels.get(number) if session is not None and seq else None
        return channel if channel is not None and channel.confirms is not None else None

    # -- durability -------------------------------------------------------------------------

    def recover(self, snapshot: Snapshot) -> None:
        """Rebuild durable vhosts, exchanges, queues, bindings and messages from the store."""
        for name in snapshot.vhosts:
            self.add_vhost_silently(name)
        for record in snapshot.exchanges:
            vhost = self.add_vhost_silently(record.vhost)
            if record.name not in vhost.exchanges:
                vhost.create_exchange(
                    record.name,
                    record.type,
                    True,
                    record.auto_delete,
                    record.internal,
                    dict(record.arguments),
                    persist=False,
                )
        for queue_record in snapshot.queues:
            vhost = self.add_vhost_silently(queue_record.vhost)
            arguments = dict(queue_record.arguments)
            options = vhost.queue_options(
                arguments, describe("queue", queue_record.name, queue_record.vhost), durable=True
            )
            vhost.create_queue(
                queue_record.name, True, None, queue_record.auto_delete, arguments, options, persist=False
            )
        for binding in snapshot.bindings:
            vhost = self.add_vhost_silently(binding.vhost)
            source = vhost.exchanges.get(binding.source)
            table = vhost.queues if binding.destination_kind == "queue" else vhost.exchanges
            destination = table.get(binding.destination)
            if source is not None and destination is not None:
                vhost.bind(source, destination, binding.routing_key, dict(binding.arguments), persist=False)
        now = self.clock()
        wall_now = self.wall_clock()
        shared: dict[int, Message] = {}
        highest = 0
        for (vhost_name, queue_name), records in snapshot.messages.items():
            queue = self.add_vhost_silently(vhost_name).queues.get(queue_name)
            if queue is None:
                continue
            for stored in records:
                # Stored as wall-clock times, so deadlines run on across the restart (schema-1
                # records lack routed_at: theirs count from now).
                routed_at = now if stored.routed_at is None else now - (wall_now - stored.routed_at)
                message = shared.get(stored.message_id)
                if message is None:
                    content = stored.content
                    message = shared[stored.message_id] = Message(
                        stored.message_id,
                        stored.exchange,
                        stored.routing_key,
                        content,
                        True,
                        expiration_deadline(content, routed_at) if content.expiration is not None else None,
                        0,
                        size=len(content),  # a stored body stays in the store until it is needed
                    )
                    highest = max(highest, stored.message_id)
                queue.restore(message, stored.redelivered, routed_at)
        self.next_message_id = max(self.next_message_id, snapshot.next_message_id, highest + 1)

    def add_vhost_silently(self, name: str) -> VHost:
        """The vhost, created without a store write (recovery)."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VHost(self, name)
        return vhost

    def wait_for_durable(self, channel: Channel) -> None:
        self._confirm_waiters.add(channel)

    def forget_channel(self, channel: Channel) -> None:
        self._confirm_waiters.discard(channel)

    def on_durable(self, ticket: int, settled: int | None = None) -> None:
        """The store committed everything up to `ticket`, and removals up to `settled` (by
        default `ticket` too): send the confirms, Declare-Oks and Tx.Commit-Oks that waited."""
        settled = ticket if settled is None else settled
        if ticket <= self.durable_ticket and settled <= self.settled_ticket:
            return
        self.durable_ticket = max(ticket, self.durable_ticket)
        self.settled_ticket = max(settled, self.settled_ticket)
        for channel in list(self._confirm_waiters):
            if not channel.on_durable(self.durable_ticket, self.settled_ticket):
                self._confirm_waiters.discard(channel)

    def on_lost(self, ticket: int) -> None:
        """The store failed to write `ticket` (every earlier one is written): nack its
        publishes. The messages stay in their queues, in memory only (gateway.store says why)."""
        for channel in list(self._confirm_waiters):
            if not channel.on_lost(ticket):
                self._confirm_waiters.discard(channel)

    def defer(self, step: Callable[[], None]) -> None:
        """Run `step` on a later turn (at once when nobody runs steps: unit tests)."""
        if self.on_later is None:
            step()
            return
        self.later.append(step)
        self.on_later()

    # -- timers -----------------------------------------------------------------------------

    def watch(self, queue: Queue, deadline: float | None) -> None:
        """A queue has (or may get) a deadline: tick() will visit it."""
        self._watched.add(queue)
        if deadline is not None:
            self._deadline_at(deadline)

    def _deadline_at(self, deadline: float) -> None:
        """tick() has work at `deadline`: tell the node if that is earlier than it knew."""
        if self._next_deadline is None or deadline < self._next_deadline:
            self._next_deadline = deadline
            if self.on_deadline is not None and not self._ticking:
                self.on_deadline(deadline)

    def unwatch(self, queue: Queue) -> None:
        self._watched.discard(queue)

    def tick(self) -> float | None:
        """Expire message TTLs and unused x-expires queues, release confirms that waited
        VERDICT_TIMEOUT for a parent's verdict; returns the next deadline (clock time) at
        which tick() has work, or None if nothing is pending."""
        now = self.clock()
        earliest: float | None = None
        self._ticking = True
        self._next_deadline = None
        verdicts = self._verdicts
        while verdicts and verdicts[0][0] <= now:
            self.release_verdict(verdicts.popleft()[1])
        if verdicts:
            earliest = verdicts[0][0]
        for queue in list(self._watched):
            if queue.deleted:
                self._watched.discard(queue)
                continue
            deadline = queue.expire(now)
            if deadline is None:
                self._watched.discard(queue)
            elif earliest is None or deadline < earliest:
                earliest = deadline
        # Deadlines reported while expiring (dead-lettered messages) count too.
        if self._next_deadline is not None and (earliest is None or self._next_deadline < earliest):
            earliest = self._next_deadline
        self._ticking = False
        self._next_deadline = earliest
        return earliest
