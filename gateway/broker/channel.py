"""Per-channel delivery state: consumers, unacked deliveries, prefetch credit, tx buffers."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from pamqp import commands

from gateway.broker.confirms import Confirms
from gateway.broker.message import Entry
from gateway.wire.content import Content
from gateway.wire.errors import precondition_failed, resource_error

#: Unacked deliveries of a closed channel requeued per step (see Channel.requeue_all).
REQUEUE_STEP = 5000

if TYPE_CHECKING:
    from gateway.broker.outbox import Outbox
    from gateway.broker.queue import Queue
    from gateway.broker.session import Session


class Consumer:
    __slots__ = (
        "tag",
        "channel",
        "queue",
        "no_ack",
        "exclusive",
        "no_local",
        "session_id",
        "prefetch_count",
        "prefetch_size",
        "held",
        "held_bytes",
    )

    def __init__(
        self, tag: str, channel: Channel, queue: Queue, no_ack: bool, exclusive: bool, no_local: bool
    ) -> None:
        self.tag = tag
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.no_local = no_local
        self.session_id = channel.session.id
        #: basic.qos global=false applies per consumer, fixed when the consumer starts (RabbitMQ).
        self.prefetch_count = channel.consumer_prefetch_count
        self.prefetch_size = channel.consumer_prefetch_size
        self.held: int = 0
        self.held_bytes: int = 0

    def can_take(self, size: int) -> bool:
        """Whether a message of `size` bytes may be delivered now (flow, back-pressure, qos)."""
        channel = self.channel
        if not channel.flowing or channel.held_replies or not channel.outbox.writable():
            return False
        if self.no_ack:
            return True
        limit = self.prefetch_count
        if limit and self.held >= limit:
            return False
        limit = self.prefetch_size
        if limit and self.held and self.held_bytes + size > limit:
            return False
        limit = channel.prefetch_count
        if limit and channel.held >= limit:
            return False
        limit = channel.prefetch_size
        return not (limit and channel.held and channel.held_bytes + size > limit)


class Transaction:
    """Work buffered by tx.select until commit: publishes, and settled deliveries."""

    __slots__ = ("publishes", "settlements")

    def __init__(self) -> None:
        self.publishes: list[tuple[str, str, bool, Content]] = []
        #: (requeue-or-None-for-ack, [(delivery tag, entry)]); requeue False means reject.
        self.settlements: list[tuple[bool | None, list[tuple[int, Entry]]]] = []


class Channel:
    __slots__ = (
        "number",
        "session",
        "outbox",
        "consumers",
        "unacked",
        "next_tag",
        "held",
        "held_bytes",
        "prefetch_count",
        "prefetch_size",
        "consumer_prefetch_count",
        "consumer_prefetch_size",
        "flowing",
        "confirms",
        "tx",
        "commit_oks",
        "held_replies",
        "last_queue",
    )

    def __init__(self, number: int, session: Session) -> None:
        self.number = number
        self.session = session
        self.outbox: Outbox = session.outbox
        self.consumers: dict[str, Consumer] = {}
        #: Deliveries awaiting ack, by delivery tag (insertion order is tag order).
        self.unacked: dict[int, Entry] = {}
        self.next_tag = 1
        #: Unacked consumer deliveries (not basic.get ones), for the channel-wide prefetch.
        self.held: int = 0
        self.held_bytes: int = 0
        self.prefetch_count = 0
        self.prefetch_size = 0
        self.consumer_prefetch_count = 0
        self.consumer_prefetch_size = 0
        #: False after channel.flow(active=false) or once the channel is closing.
        self.flowing = True
        self.confirms: Confirms | None = None
        self.tx: Transaction | None = None
        #: Store tickets that committed transactions wait for before their Tx.Commit-Ok.
        self.commit_oks: deque[int] = deque()
        #: Sends held until a store ticket is durable: a durable declare's OK, then whatever the
        #: channel answers after it (ticket 0), oldest first.
        self.held_replies: deque[tuple[int, Callable[[], None]]] = deque()
        #: The queue name that '' stands for in later queue methods (the spec's shortcut).
        self.last_queue = ""

    def send(self, method: Any) -> None:
        """Send a reply, after the held ones (replies on a channel keep their order)."""
        if self.held_replies:
            self.held_replies.append((0, partial(self.outbox.send_method, self.number, method)))
        else:
            self.outbox.send_method(self.number, method)

    def in_order(self, send: Callable[[], None]) -> None:
        """Send what is not a plain method (a Get-Ok, a Return) now, or after the held replies."""
        if self.held_replies:
            self.held_replies.append((0, send))
        else:
            send()

    def send_when_durable(self, method: Any, ticket: int, durable_ticket: int) -> bool:
        """Send `method` once the store has committed `ticket` (0: nothing to wait for), in
        order with the channel's other replies; True if it has to wait."""
        if ticket <= durable_ticket:
            self.send(method)
            return False
        self.held_replies.append((ticket, partial(self.outbox.send_method, self.number, method)))
        return True

    def commit_ok_after(self, ticket: int, settled_ticket: int) -> bool:
        """Send Tx.Commit-Ok once the store has committed `ticket` with its acks (0: nothing
        to wait for), never before an earlier commit's; True if it has to wait."""
        if self.commit_oks:
            ticket = max(ticket, self.commit_oks[-1])
        if ticket <= settled_ticket:
            self.send(commands.Tx.CommitOk())
            return False
        self.commit_oks.append(ticket)
        return True

    def on_durable(self, ticket: int, settled: int) -> bool:
        """The store committed up to `ticket` (removals up to `settled`): release what waited;
        True if more still waits."""
        held = self.held_replies
        if held:
            while held and held[0][0] <= ticket:
                held.popleft()[1]()
            if not held:
                self.redispatch()
        commit_oks = self.commit_oks
        while commit_oks and commit_oks[0] <= settled:
            commit_oks.popleft()
            self.send(commands.Tx.CommitOk())
        confirms = self.confirms
        if confirms is not None:
            confirms.flush(ticket)
        return self._waiting()

    def on_lost(self, ticket: int) -> bool:
        """The store failed to write `ticket` (every earlier one is written): nack its publishes;
        True if more still waits.

        A transaction committed in that ticket cannot be told so with Tx.Commit-Ok, so its
        channel is closed with 506 instead. A held Declare-Ok waits on: the store writes the
        declaration again with the next batch, whose ticket releases it.
        """
        if ticket in self.commit_oks:
            self.outbox.close_channel(
                self.number,
                resource_error("the store failed to write the transaction", commands.Tx.Commit()),
            )
            self.session.close_channel(self.number)
            return False
        confirms = self.confirms
        if confirms is not None:
            confirms.flush(ticket, lost=True)
        return self._waiting()

    def _waiting(self) -> bool:
        confirms = self.confirms
        return bool(self.held_replies or self.commit_oks or (confirms is not None and confirms.pending))

    # -- acknowledgements -------------------------------------------------------------------

    def take(self, delivery_tag: int, multiple: bool, method: Any) -> list[tuple[int, Entry]]:
        """Remove deliveries from the unacked set: one tag, or every tag up to it (0 = all)."""
        unacked = self.unacked
        if multiple and delivery_tag == 0:
            taken = list(unacked.items())
            unacked.clear()
            return taken
        if delivery_tag not in unacked:
            raise precondition_failed(f"unknown delivery tag {delivery_tag}", method)
        if not multiple:
            return [(delivery_tag, unacked.pop(delivery_tag))]
        tags = []
        for tag in unacked:
            if tag > delivery_tag:
                break
            tags.append(tag)
        return [(tag, unacked.pop(tag)) for tag in tags]

    def settle(self, requeue: bool | None, taken: list[tuple[int, Entry]]) -> None:
        """Ack (requeue None), requeue (True) or reject (False) taken deliveries, or buffer
        them in the open transaction."""
        if self.tx is not None:
            self.tx.settlements.append((requeue, taken))
            return
        self.apply(requeue, taken)

    def apply(self, requeue: bool | None, taken: list[tuple[int, Entry]]) -> None:
        by_queue: dict[Queue, list[Entry]] = {}
        for _, entry in taken:
            self.release(entry)
            queue = entry.queue
            if requeue is None:
                queue.settle(entry)
            by_queue.setdefault(queue, []).append(entry)
        for queue, entries in by_queue.items():
            if requeue:
                queue.requeue(entries)
                continue
            if requeue is False:
                queue.reject(entries)
            if queue.consumers:
                queue.dispatch()
        if self.prefetch_count or self.prefetch_size:
            self.redispatch()

    def release(self, entry: Entry) -> None:
        """Give back the prefetch credit an unacked delivery held."""
        consumer = entry.consumer
        if consumer is not None:
            size = entry.message.size
            consumer.held -= 1
            consumer.held_bytes -= size
            self.held -= 1
            self.held_bytes -= size
            entry.consumer = None

    def requeue_all(self, in_steps: bool = False) -> None:
        """basic.recover / channel close: every unacked delivery goes back, redelivered.

        A closed channel's (`in_steps`) go back REQUEUE_STEP at a time, one step per turn of
        the server's loop: requeueing 200,000 at once held every other connection (and their
        publisher confirms) for a tenth of a second.
        """
        if in_steps:
            self._requeue_step()
            return
        taken = list(self.unacked.items())
        self.unacked.clear()
        if taken:
            self.apply(True, taken)

    def _requeue_step(self) -> None:
        """Requeue the last REQUEUE_STEP unacked deliveries (popped from the end of `unacked`,
        nothing copied), so that each step's entries go in front of what the queue holds (a
        cheap extendleft, not a merge with the whole queue); the rest on a later turn."""
        unacked = self.unacked
        taken = [unacked.popitem() for _ in range(min(REQUEUE_STEP, len(unacked)))]
        if unacked:
            self.session.broker.defer(self._requeue_step)
        if taken:
            taken.reverse()
            self.apply(True, taken)

    def restore(self, taken: list[tuple[int, Entry]]) -> None:
        """tx.rollback: deliveries settled in the transaction are unacked again."""
        self.unacked.update(taken)
        self.unacked = dict(sorted(self.unacked.items()))

    def redispatch(self) -> None:
        """Credit came back for the whole channel: let each consumed queue deliver again."""
        for queue in {consumer.queue for consumer in self.consumers.values()}:
            if queue.ready:
                queue.dispatch()
