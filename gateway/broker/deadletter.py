"""Dead-lettering: the copy republished to a dead-letter exchange, with the x-death history
RabbitMQ clients read, and cycle detection."""

from __future__ import annotations

import datetime
from typing import Any

from gateway.broker.message import Message, expiration_deadline
from gateway.wire.content import Content

#: (queue, reason) of each death of a message, newest first.
Deaths = tuple[tuple[str, str], ...]


class UnmarkedCopy(Message):
    """The dead-lettered copy of a message whose headers table cannot be decoded.

    No x-death entry can be added to such a table, so the copy goes on unchanged (properties,
    expiration included, as published) and its deaths are kept here, for the cycle check
    only. They are not stored: after a restart such a copy may go round a cycle once more.
    """

    __slots__ = ("deaths",)

    def __init__(self, message: Message, exchange: str, routing_key: str, deaths: Deaths, now: float) -> None:
        content = message.content
        expires_at = expiration_deadline(content, now) if content.expiration is not None else None
        super().__init__(0, exchange, routing_key, content, message.persistent, expires_at, 0)
        self.deaths = deaths


def dead_letter_copy(
    message: Message, queue: str, reason: str, now: float, exchange: str, routing_key: str
) -> Message:
    """The copy of `message` that leaves `queue` for `reason`, to be routed through `exchange`
    with `routing_key`; its id is 0 until the caller knows it goes somewhere."""
    try:
        content = _with_death(message, queue, reason, now)
    except ValueError:
        earlier = message.deaths if isinstance(message, UnmarkedCopy) else ()
        return UnmarkedCopy(message, exchange, routing_key, ((queue, reason), *earlier), now)
    return Message(0, exchange, routing_key, content, message.persistent, None, 0)


def _with_death(message: Message, queue: str, reason: str, now: float) -> Content:
    """The content with this death recorded (ValueError if its headers cannot be decoded).

    The newest death comes first in x-death; a repeat of the same (queue, reason) bumps its
    count and moves it to the front, as RabbitMQ does. The per-message expiration is removed
    (kept as original-expiration) so the message does not expire again at once.
    """
    content = message.content
    headers: dict[str, Any] = dict(content.headers or {})
    deaths = [dict(death) for death in headers.get("x-death") or () if isinstance(death, dict)]
    for index, death in enumerate(deaths):
        if death.get("queue") == queue and death.get("reason") == reason:
            death["count"] = int(death.get("count", 0)) + 1
            death["time"] = _timestamp(now)
            deaths.insert(0, deaths.pop(index))
            break
    else:
        death = {
            "count": 1,
            "reason": reason,
            "queue": queue,
            "time": _timestamp(now),
            "exchange": message.exchange,
            "routing-keys": [message.routing_key],
        }
        if content.expiration is not None:
            death["original-expiration"] = content.expiration
        deaths.insert(0, death)
    headers["x-death"] = deaths
    headers.setdefault("x-first-death-reason", reason)
    headers.setdefault("x-first-death-queue", queue)
    headers.setdefault("x-first-death-exchange", message.exchange)
    return content.replace(headers=headers, expiration=None)


def would_cycle(copy: Message, queue: str) -> bool:
    """True if delivering the copy to `queue` closes a dead-letter cycle with no client
    rejection in it: RabbitMQ drops such messages instead of looping forever."""
    deaths = copy.deaths if isinstance(copy, UnmarkedCopy) else _x_deaths(copy.content)
    seen = False
    for death_queue, reason in deaths:
        if reason == "rejected":
            return False
        if death_queue == queue:
            seen = True
    return seen


def _x_deaths(content: Content) -> tuple[tuple[object, object], ...]:
    """The (queue, reason) pairs of a copy's x-death header (which dead_letter_copy wrote, but
    a client may have sent its own: anything, or nothing, in either place)."""
    deaths = (content.headers or {}).get("x-death") or ()
    return tuple((death.get("queue"), death.get("reason")) for death in deaths if isinstance(death, dict))


def _timestamp(now: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(int(now), tz=datetime.UTC)
