"""Message bodies that stay in the store until a consumer needs them.

At start-up the store hands the model each stored message's properties and body size, not its
body (`PagedContent`), so a node restarts with a data dir many times its memory. While it runs,
a message enqueued only on queues that already hold more than their memory budget of ready
bodies (the broker's `queue_memory_budget`, or a flow_to_disk queue's limits) keeps only its
properties in memory too: a persistent message that every one of those queues stores has its
body read back from the store (`page_out`: from the batch until the commit), any other from the
node's spill file (`spill_out`), a scratch file of bodies discarded when the node starts and
freed there when the last reference to the message goes. A body is read when something first
needs it and kept until the message is gone. Queues read ahead: before a
dispatch hands out a paged message, the bodies of the next PAGE_AHEAD_COUNT messages (at most
PAGE_AHEAD_BYTES) are read in one store query, so consumers do not pay a query per message.

Reads are synchronous, on the model's thread, through the store's own read-only connection
(gateway.store): a body by primary key, in bounded batches, like the other bounded steps the
model takes on the event loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Protocol, cast

from gateway.wire.content import Content

if TYPE_CHECKING:
    from gateway.broker.message import Message

#: Bytes of ready bodies a queue keeps in memory before later messages keep only their
#: properties there (Broker.queue_memory_budget).
QUEUE_MEMORY_BUDGET = 16 << 20
#: How far a queue reads ahead of its consumers: messages, and bytes of bodies.
PAGE_AHEAD_COUNT = 256
PAGE_AHEAD_BYTES = 4 << 20


class BodyReader(Protocol):
    """Where paged bodies are read from (the store)."""

    def read_bodies(self, message_ids: Sequence[int]) -> dict[int, bytes]:
        """The stored bodies of these messages (a message no longer stored is left out)."""
        ...


class BodySpill(BodyReader, Protocol):
    """Where bodies the store does not keep go when they leave memory (gateway.store.spill)."""

    def put(self, message_id: int, body: bytes) -> bool:
        """Keep a body until `forget`, readable at once; False if it could not be written."""
        ...

    def forget(self, message_id: int, size: int) -> None:
        """The body (of `size` bytes) is no longer needed; called while objects are freed, so
        it must not fail or touch the file."""
        ...


class PagedContent(Content):
    """A stored message's properties, whose body is read from the store when first used."""

    __slots__ = ("message_id", "stored_size", "_reader", "_loaded")

    def __init__(self, header: bytes, message_id: int, size: int, reader: BodyReader) -> None:
        super().__init__(header, b"")
        self.message_id = message_id
        self.stored_size = size
        self._reader = reader
        self._loaded: bytes | None = None

    @property
    def body(self) -> bytes:
        loaded = self._loaded
        if loaded is None:
            loaded = self._reader.read_bodies([self.message_id]).get(self.message_id)
            if loaded is None:
                raise LookupError(f"message {self.message_id} is no longer in the store")
            self._loaded = loaded
        return loaded

    @body.setter
    def body(self, value: bytes) -> None:
        self._loaded = value or None  # Content.__init__'s placeholder leaves it unread

    @property
    def in_memory(self) -> bool:
        return self._loaded is not None

    def __len__(self) -> int:
        return self.stored_size

    def __repr__(self) -> str:
        where = "in memory" if self._loaded is not None else "in the store"
        return f"PagedContent(message {self.message_id}, body={self.stored_size} bytes {where})"


class SpilledContent(PagedContent):
    """A body in the spill file, freed there when the last reference to it goes."""

    __slots__ = ()

    def __init__(self, header: bytes, message_id: int, size: int, spill: BodySpill) -> None:
        """Only a spill file as the reader: __del__ tells it to forget the body."""
        super().__init__(header, message_id, size, spill)

    def __del__(self) -> None:
        cast(BodySpill, self._reader).forget(self.message_id, self.stored_size)


def page_in(contents: Iterable[Content]) -> None:
    """Read the bodies of the paged contents among the first PAGE_AHEAD_COUNT of `contents`, up
    to PAGE_AHEAD_BYTES, in one query per place they are in (the store, the spill file)."""
    wanted: dict[BodyReader, dict[int, PagedContent]] = {}
    budget = PAGE_AHEAD_BYTES
    for content in islice(contents, PAGE_AHEAD_COUNT):
        if budget <= 0:
            break
        if isinstance(content, PagedContent) and not content.in_memory:
            wanted.setdefault(content._reader, {})[content.message_id] = content
            budget -= content.stored_size
    for reader, contents_by_id in wanted.items():
        for message_id, body in reader.read_bodies(list(contents_by_id)).items():
            contents_by_id[message_id].body = body


def page_out(message: Message, reader: BodyReader) -> None:
    """Keep only the properties of a stored message in memory; its body is read back from
    `reader` (the store, which has it in its batch until the commit) when needed."""
    content = message.content
    message.content = PagedContent(content.header, message.id, message.size, reader)


def spill_out(message: Message, spill: BodySpill) -> None:
    """Move a message's body to the spill file, keeping only its properties in memory (the
    body stays if the file cannot take it)."""
    content = message.content
    if spill.put(message.id, content.body):
        message.content = SpilledContent(content.header, message.id, message.size, spill)
