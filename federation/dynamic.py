"""Dynamic routing on one node: the interest behind a federated exchange, and the forwarding.

`FederatedExchange` is what the node attaches to an exchange that has dynamic routes (the
broker calls it through `Exchange.federation`): local queue bindings become interest, adverts
arriving from downstream nodes fill its InterestTable, and every message published to the
exchange is forwarded, with its destination set, into the bridge queue of each downstream node
on a best path (see gateway.routing.interest for why this delivers exactly once).

Messages that crossed a route carry two headers (federation.stamps): the origins they must
still reach, and the nodes they passed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from federation.stamps import Stamp, read_stamp, stamped
from gateway.broker.message import Message
from gateway.broker.queue import Queue
from gateway.broker.vhost import VHost
from gateway.jsonbody import load_json
from gateway.management import jsonable
from gateway.routing.interest import Advert, InterestTable
from gateway.wire.content import Content

LOGGER = logging.getLogger("federation.dynamic")


class FederatedExchange:
    """Dynamic routing for one exchange of one vhost on this node."""

    def __init__(self, vhost: VHost, exchange: str, exchange_type: str, tag: str) -> None:
        self.vhost = vhost
        self.exchange = exchange
        self.tag = tag
        self.table = InterestTable(tag, exchange_type)
        #: downstream node tag -> the queue on this node it consumes forwarded messages from
        self.bridges: dict[str, Queue] = {}
        #: Called whenever what we would advertise upstream may have changed.
        self.on_change: Callable[[], None] = lambda: None
        #: The broker's exchange (which must exist), whose counters this adds to: copies
        #: dropped as looping, and messages that went to other nodes only (the broker counts
        #: both as having reached no local queue).
        self.counters = vhost.exchanges[exchange]
        self.forwarded = 0

    # -- the broker's hook (gateway.broker.exchange.ExchangeFederation) ----------------------

    def bound(self, key: str, arguments: dict[str, Any]) -> None:
        if self.table.bind_local(key, arguments):
            self.on_change()

    def unbound(self, key: str, arguments: dict[str, Any]) -> None:
        if self.table.unbind_local(key, arguments):
            self.on_change()

    def interest(self) -> tuple[int, int]:
        return self.table.held()

    def route(self, message: Message, found: set[Queue]) -> set[Queue]:
        """Forward toward interested nodes; the local queues the message may go to."""
        self._drop_gone_bridges()
        content = message.content
        stamp = read_stamp(content)
        if self.tag in stamp.trace:
            self.counters.dropped_looping += 1
            LOGGER.warning("exchange %r: dropped a message that came back to %s", self.exchange, self.tag)
            return set()
        plan = self.table.forward(message.routing_key, stamp.headers, stamp.destinations)
        forwarded = self._forward(plan, message.routing_key, content, stamp) if plan else False
        kept = found if self.table.delivers_locally(stamp.destinations) else set()
        if forwarded and not kept:
            self.counters.forwarded_only += 1
        return kept

    # -- adverts from downstream nodes ---------------------------------------------------------

    def receive_adverts(self, neighbour: str, bridge: Queue, adverts: set[Advert]) -> None:
        """A downstream node's complete interest, and the queue it takes our messages from."""
        before = self.table.advertised()
        self.bridges[neighbour] = bridge
        self.table.replace_from(neighbour, adverts)
        if self.table.advertised() != before:
            self.on_change()

    def serves_downstream(self) -> bool:
        """Whether some downstream node's interest stands (one whose bridge is gone does not)."""
        self._drop_gone_bridges()
        return bool(self.table.next_hops())

    def adverts_for(self, upstream: str, excludes: list[str]) -> set[Advert]:
        return self.table.adverts_for(upstream, excludes)

    def _drop_gone_bridges(self) -> None:
        """A bridge queue dies with its link's connection: that neighbour's interest goes too."""
        gone = [neighbour for neighbour, queue in self.bridges.items() if queue.deleted]
        for neighbour in gone:
            del self.bridges[neighbour]
            self.table.forget(neighbour)
        if gone:
            self.on_change()

    def _forward(
        self,
        plan: dict[str, frozenset[str]],
        routing_key: str,
        content: Content,
        stamp: Stamp,
    ) -> bool:
        """Put a stamped copy into each planned neighbour's bridge queue; whether any went."""
        trace = (*stamp.trace, self.tag)
        went = False
        for neighbour, origins in plan.items():
            bridge = self.bridges.get(neighbour)
            if bridge is None:
                continue
            self.vhost.enqueue(bridge, self.exchange, routing_key, stamped(content, stamp, origins, trace))
            self.forwarded += 1
            went = True
        return went


# -- the control message: a downstream node's adverts, as JSON --------------------------------


#: What publishing adverts needs: see AdvertRefused.
BRIDGE_PREFIX = "federation.bridge."


def bridge_queue(tag: str, exchange: str) -> str:
    """The bridge queue on the upstream node that a downstream node (by its tag) consumes an
    exchange's forwarded messages from: the one queue its adverts may name."""
    return f"{BRIDGE_PREFIX}{tag}.{exchange}"


class AdvertRefused(Exception):
    """Adverts that the login which published them may not send: refused, never applied."""


def encode_adverts(exchange: str, sender: str, bridge_queue: str, adverts: set[Advert]) -> bytes:
    """The body a downstream node publishes to CONTROL_EXCHANGE on its upstream."""
    return json.dumps(
        {
            "exchange": exchange,
            "from": sender,
            "queue": bridge_queue,
            "adverts": [
                {"origin": a.origin, "key": a.key, "arguments": jsonable(a.arguments), "path": list(a.path)}
                for a in sorted(adverts, key=lambda a: (a.origin, a.key, a.path))
            ],
        }
    ).encode()


def decode_adverts(body: bytes) -> tuple[str, str, str, set[Advert]]:
    """(exchange, sender, bridge queue, adverts) from a control message; ValueError if malformed."""
    try:
        message = load_json(body)
        adverts = {
            Advert.of(str(a["origin"]), str(a["key"]), dict(a["arguments"]), tuple(str(p) for p in a["path"]))
            for a in message["adverts"]
        }
        if any(not advert.path for advert in adverts):
            raise ValueError("an advert without a path")
        return str(message["exchange"]), str(message["from"]), str(message["queue"]), adverts
    except (ValueError, KeyError, TypeError) as exc:  # JSON and Unicode errors are ValueErrors
        raise ValueError(f"malformed federation adverts: {exc}") from None
