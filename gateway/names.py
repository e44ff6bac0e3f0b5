"""Names every part of amq-gateway agrees on: the default vhost and port, the transports a link
may use, the exchange types, the exchanges every vhost has, those a node handles itself, the
prefix reserved for them, and the user tags.

Written once here; the broker, management, federation, the planner and the CLIs import them.
The exchange types are the one exception to "written here": gateway.routing owns them (a type
exists because routing has a matcher for it) and this module re-exports them. That keeps
gateway.routing free of the rest of the project (tests/test_layers.py), and this module loads
nothing but the standard library and gateway.routing.
"""

from __future__ import annotations

from gateway.routing.matchers import EXCHANGE_TYPES as EXCHANGE_TYPES

#: The product a node announces (server property): a peer sending it is a node, whose
#: cluster_name is its own name.
GATEWAY_PRODUCT = "amq-gateway"
#: The vhost every node has from the start, and the one a request means when it names none.
DEFAULT_VHOST = "/"
#: IANA's AMQP port: where a node listens, and where an address without a port points.
DEFAULT_PORT = 5672
#: Where a node listens for AMQP over TLS when TLS is configured and no port given (IANA's amqps).
DEFAULT_TLS_PORT = 5671
#: The transports a link can use: qpid-route's tcp and ssl (TLS, with `tls` taken as a synonym,
#: see `transport_name`). qpid-route also knows rdma; we refuse it rather than connect some
#: other way than the operator asked.
DEFAULT_TRANSPORT = "tcp"
TLS_TRANSPORT = "ssl"
TRANSPORTS: tuple[str, ...] = (DEFAULT_TRANSPORT, TLS_TRANSPORT)
_TRANSPORT_SYNONYMS = {"tls": TLS_TRANSPORT}
#: Every spelling a command or file may use for a transport.
TRANSPORT_SPELLINGS: tuple[str, ...] = (*TRANSPORTS, *_TRANSPORT_SYNONYMS)


def transport_name(text: str) -> str:
    """A transport as links store it: `tls` is spelled `ssl`, as qpid-route spells it."""
    return _TRANSPORT_SYNONYMS.get(text, text)


#: Management requests (gateway.management_amqp): publishing here is how tools manage a node.
MANAGEMENT_EXCHANGE = "amq.gateway.management"
#: Dynamic routes' adverts (federation.dynamic_route), published by a downstream node.
CONTROL_EXCHANGE = "amq.gateway.federation"
#: Exchanges that cannot be federated (besides internal ones): the default exchange and the
#: two the node handles itself.
SYSTEM_EXCHANGES = frozenset({"", MANAGEMENT_EXCHANGE, CONTROL_EXCHANGE})

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

#: User tags with a meaning (as RabbitMQ's): administrators may manage the node, monitoring
#: users read its state; a federation login may advertise dynamic routes' interest, as the node
#: of its own name only (gateway.security.users.User.speaks_for).
ADMINISTRATOR_TAG = "administrator"
MONITORING_TAG = "monitoring"
FEDERATION_TAG = "federation"
TAGS: tuple[str, ...] = (ADMINISTRATOR_TAG, MONITORING_TAG, FEDERATION_TAG)
