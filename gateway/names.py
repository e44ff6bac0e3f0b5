"""Names every part of amq-gateway agrees on: the exchanges every vhost has, those a node
handles itself, and the prefix reserved for them.

Written once here; the broker, management, federation and the CLIs import them.
"""

from __future__ import annotations

#: Management requests (gateway.management_amqp): publishing here is how tools manage a node.
MANAGEMENT_EXCHANGE = "amq.gateway.management"
#: Dynamic routes' adverts (federation.dynamic_route), published by a downstream node.
CONTROL_EXCHANGE = "amq.gateway.federation"

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
