"""A queue's ready messages in delivery order: plain FIFO, or by priority (x-max-priority).

The kind is chosen when the queue is declared, so plain queues keep a bare deque on the hot
path and only priority queues pay for their levels. Both offer what `Queue` uses: append,
popleft, [index], len, iteration, clear, plus `put_back` (requeue) and `remove_all` (entries
delivered from behind the head).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.broker.message import Entry


class FifoReady(deque["Entry"]):
    """Enqueue order (a deque: its C methods are the hot path)."""

    __slots__ = ()

    def put_back(self, entries: list[Entry]) -> None:
        """Requeued entries go back to their places: before every entry enqueued after them."""
        back = sorted(entries, key=_seq)
        if not self or back[-1].seq < self[0].seq:
            self.extendleft(reversed(back))
            return
        merged = list(heapq.merge(back, self, key=_seq))
        self.clear()
        self.extend(merged)

    def remove_all(self, entries: set[Entry]) -> None:
        """Drop the given entries wherever they are, keeping the order of the rest."""
        kept = [entry for entry in self if entry not in entries]
        self.clear()
        self.extend(kept)


class PriorityReady:
    """Highest priority first, FIFO within a priority, as RabbitMQ's priority queues.

    A message without priority is priority 0; one above the queue's maximum counts as the
    maximum. One FifoReady per level; `top` is the highest level that may hold entries.
    """

    __slots__ = ("levels", "top", "size")

    def __init__(self, max_priority: int) -> None:
        self.levels = [FifoReady() for _ in range(max_priority + 1)]
        self.top = -1
        self.size = 0

    def _index(self, entry: Entry) -> int:
        """The entry's level (raising `top` to it: the caller is about to fill it)."""
        index = min(entry.message.content.priority or 0, len(self.levels) - 1)
        if index > self.top:
            self.top = index
        return index

    def _nonempty(self) -> Iterator[FifoReady]:
        """The levels holding entries, highest first (lowering `top` past empty ones)."""
        levels = self.levels
        while self.top >= 0 and not levels[self.top]:
            self.top -= 1
        for index in range(self.top, -1, -1):
            if levels[index]:
                yield levels[index]

    def append(self, entry: Entry) -> None:
        self.levels[self._index(entry)].append(entry)
        self.size += 1

    def popleft(self) -> Entry:
        for level in self._nonempty():
            self.size -= 1
            return level.popleft()
        raise IndexError("pop from an empty queue")

    def __getitem__(self, index: int) -> Entry:
        for level in self._nonempty():
            if index < len(level):
                return level[index]
            index -= len(level)
        raise IndexError("queue index out of range")

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[Entry]:
        for level in self._nonempty():
            yield from level

    def clear(self) -> None:
        for level in self.levels:
            level.clear()
        self.top = -1
        self.size = 0

    def put_back(self, back: list[Entry]) -> None:
        """Requeued entries go back to their places in their levels."""
        by_level: dict[int, list[Entry]] = {}
        for entry in back:
            by_level.setdefault(self._index(entry), []).append(entry)
        for index, entries in by_level.items():
            self.levels[index].put_back(entries)
        self.size += len(back)

    def remove_all(self, entries: set[Entry]) -> None:
        for level in self.levels:
            if level:
                level.remove_all(entries)
        self.size = sum(len(level) for level in self.levels)


def _seq(entry: Entry) -> int:
    return entry.seq
