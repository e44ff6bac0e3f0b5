"""Dead-lettering: the x-death history RabbitMQ clients read, and cycle detection."""

from __future__ import annotations

import datetime
from typing import Any

from gateway.broker.message import Message
from gateway.wire.content import Content


def dead_letter_content(message: Message, queue: str, reason: str, now: float) -> Content:
    """The content republished to the dead-letter exchange.

    The newest death comes first in x-death; a repeat of the same (queue, reason) bumps its
    count and moves it to the front, as RabbitMQ does. The per-message expiration is removed
    (kept as original-expiration) so the message does not expire again at once.
    """
    content = message.content
    try:
        headers: dict[str, Any] = dict(content.headers or {})
    except ValueError:
        # A table we cannot decode cannot get an x-death entry; the message still moves on.
        return content
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


def would_cycle(content: Content, queue: str) -> bool:
    """True if delivering to `queue` closes a dead-letter cycle with no client rejection in
    it: RabbitMQ drops such messages instead of looping forever."""
    try:
        deaths = (content.headers or {}).get("x-death") or []
    except ValueError:
        return False
    seen = False
    for death in deaths:
        if not isinstance(death, dict):
            continue
        if death.get("reason") == "rejected":
            return False
        if death.get("queue") == queue:
            seen = True
    return seen


def _timestamp(now: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(int(now), tz=datetime.UTC)
