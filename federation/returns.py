"""Which publish a parent's Return belongs to, across any number of federation levels.

A child forwards a mandatory publish with its own id in the header `x-gateway-return` (a table:
node name -> id). The parent's Return carries the message back, so it names the publish
exactly, where matching by routing key and body cannot when two publishers send the same
message. Each level adds its entry on the way up and takes it out on the way down, so the
original publisher gets its message back as it sent it.

A parent that is itself a child holds its confirm of a forwarded publish until its own
parent's verdict, but only for VERDICT_TIMEOUT (gateway.broker.confirms): a Return may come
later still, so the confirm does not end the wait. A publish stays
claimable for RETURN_WINDOW seconds after it was sent; a later Return is logged and dropped.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable

from gateway.broker.outbox import ReturnTo
from gateway.wire import Content
from gateway.wire.events import MessageReturned

RETURN_HEADER = "x-gateway-return"
#: Seconds a mandatory publish can be returned after it was sent (through any levels).
RETURN_WINDOW = 60.0
#: Publishes kept at most; beyond, the oldest are forgotten.
MAX_PENDING = 100_000


def with_return_id(content: Content, node: str, return_id: int) -> Content:
    """`content` with this node's id added to its return header (other levels' ids kept)."""
    try:
        headers = dict(content.headers or {})
    except ValueError:
        headers = {}  # an undecodable table cannot be forwarded with ours spliced in
    ids = headers.get(RETURN_HEADER)
    headers[RETURN_HEADER] = {**(ids if isinstance(ids, dict) else {}), node: return_id}
    return content.replace(headers=headers)


def take_return_id(content: Content, node: str) -> tuple[int | None, Content]:
    """This node's id from a returned message, and the message without it."""
    try:
        headers = dict(content.headers or {})
    except ValueError:
        return None, content
    ids = headers.get(RETURN_HEADER)
    if not isinstance(ids, dict) or node not in ids:
        return None, content
    remaining = dict(ids)
    return_id = remaining.pop(node)
    if remaining:
        headers[RETURN_HEADER] = remaining
    else:
        del headers[RETURN_HEADER]
    return (return_id if isinstance(return_id, int) else None), content.replace(headers=headers or None)


class PendingReturns:
    """Mandatory publishes in flight to one parent, by id, oldest first."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        # Ids start at random so a Return of a publish sent before a restart of this node
        # (ids are not stored) cannot claim a new publish that happens to reuse its id.
        self._next_id = secrets.randbits(48)
        #: id -> (sent at, where its Return goes)
        self._pending: OrderedDict[int, tuple[float, ReturnTo]] = OrderedDict()

    def add(self, return_to: ReturnTo) -> int:
        """Remember a publish about to be sent; its return id."""
        self._prune()
        return_id = self._next_id
        self._next_id += 1
        self._pending[return_id] = (self._clock(), return_to)
        return return_id

    def take(self, return_id: int | None) -> ReturnTo | None:
        """Where the Return of publish `return_id` goes, once; None if unknown or forgotten."""
        entry = self._pending.pop(return_id, None) if return_id is not None else None
        return entry[1] if entry is not None else None

    def __len__(self) -> int:
        return len(self._pending)

    def _prune(self) -> None:
        horizon = self._clock() - RETURN_WINDOW
        pending = self._pending
        while pending and (len(pending) >= MAX_PENDING or next(iter(pending.values()))[0] < horizon):
            pending.popitem(last=False)


def describe_return(event: MessageReturned) -> str:
    """A Return in log lines: its code, text and routing key."""
    return f"{event.reply_code} {event.reply_text} (routing key '{event.routing_key}')"
