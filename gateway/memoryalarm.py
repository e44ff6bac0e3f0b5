"""The memory alarm: publishers wait while the node holds more memory than its high watermark.

As RabbitMQ's `vm_memory_high_watermark`: a publisher faster than its consumers must not grow
the node until the kernel kills it. The watermark is a fraction of the memory the node may use
(the machine's, or its cgroup's limit when lower) or an absolute size. Above it the broker's
memory hold pauses every connection that publishes (Connection.Blocked with the reason, and
the server reads nothing more from it, so TCP pushes back on the client), while consumers,
acks and management go on: they are what frees memory. Federation routes feeding this node
stop taking messages from their sources the same way. Below RESUME_FRACTION of the watermark
the hold is released and each paused connection gets Connection.Unblocked.

What is measured: the node's resident set (RSS), read every CHECK_INTERVAL seconds and again
whenever the messages published since the last reading could have crossed the watermark (the
node's own accounting: each message's body plus
MESSAGE_OVERHEAD, in gateway.broker.message). So a burst of large
messages is stopped within a reading's worth of bytes, not a second's worth. While the alarm
is on, freed heap memory is handed back to the system before each reading (glibc keeps freed
medium-sized blocks otherwise, and RSS would stay above the resume mark after every consumer
has drained its queue).

Bodies still being received count as they arrive (Session.receiving). Once the node reaches
CONTENT_FRACTION of its watermark (the broker's content hold), while unfinished bodies take
UNFINISHED_FRACTION of the watermark or more, a connection receiving more of one is held like
a publisher: one user with many channels each sending part of a large body cannot take the
node to the watermark (and hold everybody) with messages that never end, while whole
messages, consumers and management go on below the watermark.

Like the disk limit it is a watermark, not a reservation: one publish (or one read of a body)
per connection, and what the federation links already hold, may still go over it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from gateway.broker.hold import Hold

if TYPE_CHECKING:
    from gateway.broker import Broker

LOGGER = logging.getLogger("gateway.memory")

#: Seconds between readings of the node's memory when nobody publishes.
CHECK_INTERVAL = 1.0
#: The hold is released once the node is under this fraction of its watermark (hysteresis, so
#: that publishers are not blocked and unblocked at every reading near the mark).
RESUME_FRACTION = 0.9
#: Connections receiving bodies not yet whole are held from this fraction of the watermark
#: (the content mark), released under RESUME_FRACTION of that mark: below the alarm that holds
#: every publisher, so that unfinished messages (whose memory nothing but their end frees)
#: cannot set it...
CONTENT_FRACTION = 0.9
#: ... while unfinished bodies take this fraction of the watermark or more: a publisher of
#: whole large messages (a few in flight at a time) is held by the alarm between two of them.
UNFINISHED_FRACTION = 0.1
#: The least publishing the node accepts between two unscheduled readings, so that a node
#: just under its watermark does not read its memory at every publish.
MIN_BUDGET = 1 << 20

_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)


@dataclass(frozen=True)
class Watermark:
    """Either a fraction of the memory available to the node or a number of bytes."""

    fraction: float | None = None
    size: int | None = None

    def bytes(self, available: int) -> int:
        """The watermark in bytes, given the memory available to the node."""
        if self.size is not None:
            return self.size
        assert self.fraction is not None
        return int(self.fraction * available)

    def __str__(self) -> str:
        return f"{self.size} bytes" if self.size is not None else f"{self.fraction:g} of the memory available"


#: RabbitMQ's default vm_memory_high_watermark.
DEFAULT_WATERMARK = Watermark(fraction=0.4)


def available_memory() -> int:
    """The memory this node may use: the machine's RAM, or when lower its cgroup's limit or
    its address-space limit (`prlimit --as`, `ulimit -v`)."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        total = min(total, soft)
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def resident_bytes() -> int:
    """This process's resident set size (Linux: /proc/self/statm's second field)."""
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


_LIBC = _libc()
_MALLOC_TRIM: Callable[[int], int] | None = getattr(_LIBC, "malloc_trim", None)
_MALLOPT: Callable[[int, int], int] | None = getattr(_LIBC, "mallopt", None)
#: glibc's mallopt parameter: how many heaps (arenas) the process's threads may have.
_M_ARENA_MAX = -8


def release_free_memory() -> None:
    """Hand freed heap pages back to the system (glibc's malloc_trim; elsewhere nothing)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def one_heap() -> None:
    """Let every thread allocate from glibc's main heap (process-wide, for `serve`).

    Each further heap glibc gives a thread reserves 64 MiB of address space and keeps freed
    memory of its own. The node's threads (a password check's 16 MiB scrypt, the store's
    writer) allocate little and seldom, so one heap costs them nothing measurable, and a node
    under an address-space cap (`ulimit -v`, `prlimit --as`) keeps that cap for its messages:
    128 MiB was 57 MiB for the node, 72 MiB for the thread of the first login's check, and the
    next 1 MB message failed with MemoryError."""
    if _MALLOPT is not None:
        _MALLOPT(_M_ARENA_MAX, 1)


class MemoryAlarm:
    """Sets and clears the broker's memory hold from the node's memory and its watermark."""

    def __init__(
        self,
        broker: Broker,
        watermark: int,
        resident: Callable[[], int] = resident_bytes,
        release: Callable[[], None] = release_free_memory,
    ) -> None:
        self.broker = broker
        self.watermark = watermark
        self.resume = int(watermark * RESUME_FRACTION)
        self.content_mark = int(watermark * CONTENT_FRACTION)
        self.content_resume = int(self.content_mark * RESUME_FRACTION)
        broker.unfinished_limit = int(watermark * UNFINISHED_FRACTION)
        self._resident = resident
        self._release = release
        #: RSS at the last reading.
        self.used = 0
        broker.on_memory_budget = self.check

    @property
    def on(self) -> bool:
        return self.broker.memory_hold is not None

    def check(self) -> None:
        """Read the node's memory now; raise or release the hold on a change, and give the
        broker the bytes it may accept before the next unscheduled reading."""
        broker = self.broker
        if self.on or broker.content_hold is not None:
            self._release()
        try:
            self.used = used = self._resident()
        except OSError as exc:
            LOGGER.error("cannot read the node's memory use: %s", exc)
            broker.memory_budget = MIN_BUDGET
            return
        hold = broker.memory_hold
        if hold is None and used >= self.watermark:
            broker.memory_hold = Hold(
                f"low on memory: the node uses {used} bytes, its memory_high_watermark is {self.watermark}"
            )
            LOGGER.warning(
                "memory alarm set: the node uses %d bytes, over its memory_high_watermark of %d bytes;"
                " holding publishers until it is under %d bytes",
                used,
                self.watermark,
                self.resume,
            )
        elif hold is not None and used < self.resume:
            broker.memory_hold = None
            hold.release()
            LOGGER.info(
                "memory alarm cleared: the node uses %d bytes, under %d bytes (memory_high_watermark %d);"
                " publishers resume",
                used,
                self.resume,
                self.watermark,
            )
        self._check_content(used)
        mark = self.content_mark if used < self.content_mark else self.watermark
        broker.memory_budget = max(mark - used, MIN_BUDGET)

    def _check_content(self, used: int) -> None:
        """Raise or release the content hold (bodies still being received) at its own marks."""
        broker = self.broker
        hold = broker.content_hold
        if hold is None and used >= self.content_mark:
            broker.content_hold = Hold(
                f"low on memory: the node uses {used} bytes; message bodies still being received"
                f" wait under {self.content_resume} bytes"
            )
            LOGGER.warning(
                "memory: the node uses %d bytes (content mark %d, memory_high_watermark %d); holding"
                " connections with message bodies still being received until it is under %d bytes",
                used,
                self.content_mark,
                self.watermark,
                self.content_resume,
            )
        elif hold is not None and used < self.content_resume:
            broker.content_hold = None
            hold.release()
            LOGGER.info("memory: the node uses %d bytes; message bodies still being received resume", used)

    async def run(self) -> None:
        """Read every CHECK_INTERVAL seconds, until cancelled."""
        while True:
            self.check()
            await trio.sleep(CHECK_INTERVAL)
