"""Names the broker generates or reserves, and RabbitMQ-style resource descriptions."""

from __future__ import annotations

import base64
import os

from gateway.names import CONTROL_EXCHANGE, MANAGEMENT_EXCHANGE

#: Exchanges every vhost has, with their types (the last three are OpenAMQ's ESB exchanges).
STANDARD_EXCHANGES: tuple[tuple[str, str], ...] = (
    ("", "direct"),
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
    ("amq.service", "direct"),
    ("amq.data", "topic"),
    ("amq.dataex", "headers"),
    # Handled by the node itself (Broker.exchange_handlers), never routed to queues.
    (MANAGEMENT_EXCHANGE, "direct"),
    (CONTROL_EXCHANGE, "direct"),
)

RESERVED_PREFIX = "amq."


def _random_suffix() -> str:
    return base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode("ascii")


def generated_queue_name() -> str:
    """A server-named queue, shaped like RabbitMQ's so clients that parse it are happy."""
    return "amq.gen-" + _random_suffix()


def generated_consumer_tag() -> str:
    return "amq.ctag-" + _random_suffix()


def describe(kind: str, name: str, vhost: str) -> str:
    """RabbitMQ's rendering of a resource in error texts: "queue 'q' in vhost '/'"."""
    return f"{kind} '{name}' in vhost '{vhost}'"
