"""Names the broker generates, and RabbitMQ-style resource descriptions."""

from __future__ import annotations

import base64
import os


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
