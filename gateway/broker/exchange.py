"""Exchanges, and routing a message through the exchange graph of their vhost (the walk itself,
default exchange, exchange-to-exchange bindings and alternates, is gateway.routing.graph's)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Protocol

from gateway.routing.graph import reach as walk
from gateway.routing.matchers import Matcher, matcher_for
from gateway.routing.sender_selected import BCC_HEADER, ENCODED_KEYS, extra_routing_keys
from gateway.wire.content import Content
from gateway.wire.errors import precondition_failed, syntax_error

if TYPE_CHECKING:
    from gateway.broker.message import Message
    from gateway.broker.queue import Queue
    from gateway.broker.vhost import VHost


class Exchange:
    __slots__ = (
        "vhost",
        "name",
        "type",
        "durable",
        "auto_delete",
        "internal",
        "arguments",
        "alternate",
        "matcher",
        "uses_headers",
        "is_default",
        "sources",
        "deleted",
        "federation",
        "published",
        "missed",
        "forwarded_only",
        "dropped_looping",
    )

    def __init__(
        self,
        vhost: VHost,
        name: str,
        exchange_type: str,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Any],
    ) -> None:
        self.vhost = vhost
        self.name = name
        self.type = exchange_type
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments = arguments
        alternate = arguments.get("alternate-exchange")
        self.alternate: str | None = alternate.decode() if isinstance(alternate, bytes) else alternate
        self.matcher: Matcher = matcher_for(exchange_type)
        #: Only headers exchanges make routing decode the message's headers table.
        self.uses_headers = exchange_type == "headers"
        #: The default exchange routes by queue name without bindings.
        self.is_default = name == ""
        #: Bindings where this exchange is the destination: identity -> (source, key, arguments).
        self.sources: dict[tuple[str, str, Hashable], tuple[Exchange, str, dict[str, Any]]] = {}
        self.deleted = False
        #: Set by dynamic routing: told about queue bindings, and asked about each message.
        self.federation: ExchangeFederation | None = None
        #: Counters since the node started (docs/federation.md, "Counters"): messages
        #: published to this exchange (by clients, routes, federation and dead-lettering);
        #: of those, the ones routing left with no local queue (rare: the common case costs
        #: no increment), and the ones among those that dynamic routing forwarded to other
        #: nodes only, or dropped for having passed this node before. `routed` and
        #: `unroutable` follow from them.
        self.published = 0
        self.missed = 0
        self.forwarded_only = 0
        self.dropped_looping = 0

    def __repr__(self) -> str:
        return f"<Exchange {self.name!r} {self.type}>"

    @property
    def routed(self) -> int:
        """Messages published here that reached a queue or a federation destination."""
        return self.published - self.missed + self.forwarded_only

    @property
    def unroutable(self) -> int:
        """Messages published here that reached nothing: no queue, no federation destination,
        and not dropped as looping (for mandatory publishes to an exchange without dynamic
        routes, the ones returned)."""
        return self.missed - self.forwarded_only - self.dropped_looping


class ExchangeFederation(Protocol):
    """What federation attaches to an exchange: dynamic routing (federation.dynamic) or an
    attachment to a parent (federation.attachment)."""

    def bound(self, key: str, arguments: dict[str, Any]) -> None:
        """A queue was bound to the exchange: local interest to advertise."""

    def unbound(self, key: str, arguments: dict[str, Any]) -> None:
        """A queue binding went away."""

    def route(self, message: Message, found: set[Queue]) -> set[Queue]:
        """The queues the message goes to, given the local ones it reached: federation may
        forward it, keep it from them, or add a queue of its own."""
        ...

    def interest(self) -> tuple[int, int]:
        """Other nodes' bindings it forwards for, and the hops of their paths added up (what
        exchanges.list shows, and how `amq-sim validate` tells interest has settled)."""
        ...


def route(start: Exchange, message: Message, extra_keys: tuple[str, ...] = ()) -> set[Queue]:
    """The queues a message published to `start` reaches, each once, with its routing key and
    `extra_keys` (its CC and BCC keys: `sender_selected`).

    A federated exchange also hands the message to its federation, which has the last word;
    only once local routing succeeded, so a message refused with 502 (see `reach`) has gone
    nowhere.
    """
    # `walk` itself rather than `reach`: a call less per publish.
    found: set[Queue] = walk(start.vhost, start, message.routing_key, message.content, _headers, extra_keys)
    federation = start.federation
    return found if federation is None else federation.route(message, found)


def reach(
    start: Exchange, routing_key: str, content: Content, extra_keys: tuple[str, ...] = ()
) -> set[Queue]:
    """The local queues a message published to `start` reaches, each once, without side
    effects (AMQPError 502 for a headers table a headers exchange cannot read).

    Exchange-to-exchange bindings and alternate exchanges are followed; an exchange is entered
    at most once per message, so cycles in the graph terminate (gateway.routing.graph.reach,
    over the vhost's own exchanges and queues).
    """
    found: set[Queue] = walk(start.vhost, start, routing_key, content, _headers, extra_keys)
    return found


def sender_selected(content: Content) -> tuple[tuple[str, ...], Content]:
    """A publish's extra routing keys from its CC and BCC headers, and the content to enqueue,
    without BCC (RabbitMQ's sender-selected distribution). The raw table is searched for the
    two keys first, so a message without them is never decoded for this.

    Error handling: 406 for a CC or BCC header that is not an array (RabbitMQ's "invalid
    message"), 502 for a headers table that cannot be read.
    """
    table = content.headers_table
    if table is None or not any(key in table for key in ENCODED_KEYS):
        return (), content
    headers = _headers(content)
    try:
        keys = extra_routing_keys(headers)
    except ValueError as exc:
        raise precondition_failed(f"invalid message: {exc}") from None
    return keys, content.without_header(BCC_HEADER)


def _headers(content: Content) -> dict[str, Any] | None:
    """The headers a headers exchange matches on; a table that cannot be decoded is the
    publisher's syntax error (the wire layer accepts it undecoded, for speed)."""
    try:
        return content.headers
    except ValueError as exc:
        raise syntax_error(f"malformed headers table in message properties: {exc}") from None
