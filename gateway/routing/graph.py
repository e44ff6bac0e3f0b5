"""The exchange-graph walk: where a message published to one exchange ends up, across the
default exchange, exchange-to-exchange bindings and alternate exchanges.

One walk, two ways in. The broker hands `reach` its own objects (a vhost and its exchanges
satisfy `Graph` and `ExchangeNode`), so routing a publish costs no copying; the planner, the
simulator and the tests describe exchanges and bindings as plain data in an `ExchangeGraph`,
which runs the same `reach`.

The rules, as RabbitMQ has them:

- the default exchange ("") takes no bindings: it routes to the queue named by the routing key;
- an exchange that matched nothing hands the message to its alternate exchange, if that exists;
- a destination that is an exchange is entered in turn (an exchange-to-exchange binding);
- each exchange is entered at most once per message, so cycles terminate, and each final
  destination is reported once however many paths lead to it;
- a message's CC and BCC headers add routing keys, matched at every exchange it enters.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from gateway.routing.bindings import Arguments
from gateway.routing.matchers import Matcher, matcher_for
from gateway.routing.sender_selected import extra_routing_keys

#: The name of the default exchange, which routes by queue name.
DEFAULT_EXCHANGE = ""

Headers = Mapping[str, Any] | None


class ExchangeNode(Protocol):
    """What the walk reads of an exchange."""

    @property
    def is_default(self) -> bool:
        """The default exchange: it routes by queue name, without bindings."""
        ...

    @property
    def uses_headers(self) -> bool:
        """Its matcher reads the message's headers (only then are they decoded)."""
        ...

    @property
    def alternate(self) -> str | None:
        """The name of its alternate exchange."""
        ...

    @property
    def matcher(self) -> Matcher:
        """Its bindings; a destination of the same class as the exchange is an exchange."""
        ...


E_co = TypeVar("E_co", bound=ExchangeNode, covariant=True)
E = TypeVar("E", bound=ExchangeNode)
M = TypeVar("M")


class Graph(Protocol[E_co]):
    """What the walk reads of the place exchanges live in (a vhost): lookups by name."""

    @property
    def queues(self) -> Mapping[str, Hashable]:
        """Queue name -> the destination the default exchange routes to."""
        ...

    @property
    def exchanges(self) -> Mapping[str, E_co]:
        """Exchange name -> exchange, for alternate exchanges."""
        ...


def reach(
    graph: Graph[E],
    start: E,
    routing_key: str,
    message: M,
    headers_of: Callable[[M], Headers],
    extra_keys: tuple[str, ...] = (),
) -> set[Any]:
    """The final destinations (not exchanges) a message published to `start` reaches, each once,
    as they were bound (the caller knows what it bound; typed Any so it needs no cast).

    `extra_keys` are routing keys the message is routed with besides its own (CC and BCC, see
    `sender_selected`): every exchange entered matches all of them, and hands the message to its
    alternate exchange only if none matched.

    `headers_of(message)` is called only when a headers exchange is entered, so the broker
    decodes a message's headers table only for those (and its error, if it cannot, propagates);
    a function and its argument rather than a closure, because building a closure per publish
    costs more than the rest of routing to the default exchange. A destination is an exchange to
    enter when its class is `start`'s: the broker's matchers hold queues and exchanges side by
    side, and a class check is the cheapest test there is.
    """
    found: set[Any] = set()
    visited: set[E] | None = None
    pending = [start]
    exchange_class = start.__class__
    while pending:
        exchange = pending.pop()
        destinations: Iterable[Any]
        if exchange.is_default:
            queue = graph.queues.get(routing_key)
            destinations = (queue,) if queue is not None else ()
        else:
            destinations = exchange.matcher.match(
                routing_key, headers_of(message) if exchange.uses_headers else None
            )
        if extra_keys:
            destinations = [
                *destinations,
                *_extra_destinations(graph, exchange, extra_keys, message, headers_of),
            ]
        if not destinations and exchange.alternate is not None:
            alternate = graph.exchanges.get(exchange.alternate)
            destinations = (alternate,) if alternate is not None else ()
        for destination in destinations:
            if destination.__class__ is exchange_class:
                if visited is None:
                    visited = {start}
                if destination not in visited:
                    visited.add(destination)
                    pending.append(destination)
            else:
                found.add(destination)
    return found


def _extra_destinations(
    graph: Graph[E], exchange: E, keys: tuple[str, ...], message: M, headers_of: Callable[[M], Headers]
) -> list[Any]:
    """What one exchange matches for the extra routing keys (kept out of `reach`'s loop, which
    runs per publish)."""
    if exchange.is_default:
        return [queue for key in keys if (queue := graph.queues.get(key)) is not None]
    headers = headers_of(message) if exchange.uses_headers else None
    return [destination for key in keys for destination in exchange.matcher.match(key, headers)]


# -- the same walk over plain data -------------------------------------------------------------


class _Exchange:
    """One exchange of an `ExchangeGraph` (an `ExchangeNode`)."""

    __slots__ = ("name", "kind", "is_default", "uses_headers", "alternate", "matcher")

    def __init__(self, name: str, kind: str, alternate: str | None) -> None:
        self.name = name
        self.kind = kind
        self.is_default = name == DEFAULT_EXCHANGE
        self.uses_headers = kind == "headers"
        self.alternate = alternate
        self.matcher: Matcher = matcher_for(kind)

    def __repr__(self) -> str:
        return f"<exchange {self.name!r}>"


class ExchangeGraph:
    """Exchanges, queues and bindings of one vhost as plain data, routed by `reach`.

    Queues are names; what the default exchange reports for one is `queues[name]` (the name
    itself unless given), and what a binding reports is its destination as given, so callers
    can route to values of their own (a planner binds routes and federations too).
    """

    def __init__(self, queues: Mapping[str, Hashable] | Iterable[str] = ()) -> None:
        self.queues: dict[str, Hashable] = (
            dict(queues) if isinstance(queues, Mapping) else {name: name for name in queues}
        )
        self.exchanges: dict[str, _Exchange] = {}
        self.declare(DEFAULT_EXCHANGE, "direct")

    def declare(self, name: str, kind: str, alternate: str | None = None) -> None:
        """Add an exchange; declaring it again the same way changes nothing. ValueError for a
        type we do not implement, or for another type or alternate than it has."""
        exchange = _Exchange(name, kind, alternate)
        current = self.exchanges.setdefault(name, exchange)
        if current is not exchange and (current.kind, current.alternate) != (kind, alternate):
            raise ValueError(f"exchange {name!r} is declared already, as {current.kind}")

    def add_queue(self, name: str, destination: Hashable | None = None) -> None:
        """A queue the default exchange can route to, reported as `destination` (or its name)."""
        self.queues[name] = name if destination is None else destination

    def bind(self, source: str, key: str, arguments: Arguments, destination: Hashable) -> bool:
        """Bind a destination (a queue name, or any value) to exchange `source`; False if this
        exact binding exists. KeyError for an unknown source, ValueError for arguments the
        exchange type refuses."""
        return self.exchanges[source].matcher.bind(key, arguments, destination)

    def bind_exchange(self, source: str, key: str, arguments: Arguments, destination: str) -> bool:
        """An exchange-to-exchange binding (both must be declared first, else KeyError)."""
        return self.exchanges[source].matcher.bind(key, arguments, self.exchanges[destination])

    def route(self, exchange: str, routing_key: str, headers: Headers = None) -> set[Any]:
        """The destinations a message published to `exchange` reaches, as they were bound (none
        if it does not exist), its CC and BCC headers' keys included. ValueError for a CC or
        BCC header that is not an array."""
        start = self.exchanges.get(exchange)
        if start is None:
            return set()
        return reach(self, start, routing_key, headers, _as_given, extra_routing_keys(headers))


def _as_given(headers: Headers) -> Headers:
    return headers
