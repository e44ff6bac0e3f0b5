"""Producer flow control on one queue: Qpid's `capacity` and `flowResumeCapacity`.

A queue with a capacity is overfull once the bytes of its ready messages exceed it; each
session that then publishes to it is held after that publish (gateway.broker.hold: the
connection gets Connection.Blocked and is not read, an internal session such as a federation
route stops taking messages from its source). It becomes underfull again when its ready
bytes fall below the resume capacity (the capacity unless set lower), and every session it
held is released. A session held by one queue that then publishes to another overfull one is
held again, so a producer goes on only once every queue it feeds is underfull.

The log lines are Qpid's QUE-1003 and QUE-1004, with the queue as Qpid names it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway.broker.hold import Hold

if TYPE_CHECKING:
    from gateway.broker.queue import Queue

LOGGER = logging.getLogger("gateway.queue")


class QueueFlow:
    """The capacity, resume capacity and, while overfull, the hold of one queue."""

    __slots__ = ("queue", "capacity", "resume", "hold")

    def __init__(self, queue: Queue, capacity: int, resume: int) -> None:
        self.queue = queue
        self.capacity = capacity
        self.resume = resume
        self.hold: Hold | None = None

    def overfull(self, origin: int) -> None:
        """The queue's ready bytes just went over its capacity with a message from the session
        `origin`: hold it (and say so once, when the queue becomes overfull)."""
        queue = self.queue
        if self.hold is None:
            self.hold = Hold(
                f"queue '{queue.name}' in vhost '{queue.vhost.name}' is overfull:"
                f" {queue.ready_bytes} bytes, capacity {self.capacity}"
            )
            LOGGER.warning(
                "[vh(%s)/qu(%s)] QUE-1003 : Overfull : Size : %d bytes, Capacity : %d, Resume Capacity : %d",
                queue.vhost.name,
                queue.name,
                queue.ready_bytes,
                self.capacity,
                self.resume,
            )
        queue.vhost.broker.hold_publisher(origin, self.hold)

    def drained(self) -> None:
        """Ready messages left the queue: release its publishers once it is underfull."""
        hold = self.hold
        if hold is not None and self.queue.ready_bytes < self.resume:
            self.release()

    def release(self) -> None:
        hold, self.hold = self.hold, None
        if hold is not None:
            queue = self.queue
            LOGGER.info(
                "[vh(%s)/qu(%s)] QUE-1004 : Underfull : Size : %d bytes, Resume Capacity : %d",
                queue.vhost.name,
                queue.name,
                queue.ready_bytes,
                self.resume,
            )
            hold.release()
