"""Dynamic routes: bindings on the destination's exchange pull matching messages from the source.

Two halves, both on every node:

- `FederatedExchanges` keeps one `FederatedExchange` (federation.dynamic) per exchange that has
  dynamic routes on this node or receives adverts from a downstream node, attached to the
  broker's Exchange (`exchange.federation`) while either lasts. It also takes the control
  messages downstream nodes publish to CONTROL_EXCHANGE (the node's handler for that exchange
  hands them over).
- `DynamicRoute` is the pull route of one exchange on one link. On each connection it checks
  that the source has the exchange with the same type, declares its bridge queue there,
  publishes this node's complete advert set for that source, and then forwards what arrives in
  the bridge queue into the local exchange (Forwarder, LocalSink: at least once), resending the
  complete set whenever the local interest changes. A reconnect runs all of it again, so the
  source replaces whatever it held: a full resync, never a stale or missing binding.

A transient route's bridge queue is exclusive and auto-delete: the source forgets our interest
when the connection dies. A durable route's is durable and bounded (BRIDGE_ARGUMENTS), like a
durable static route's queue and RabbitMQ's federation upstream queue: the source keeps our last
adverts (in federation.db too, restored at its start) and buffers what matches them while we
are away or either node restarts; deleting the route deletes the queue.

Several routes (one per upstream) share a FederatedExchange, whose single on_change hook is a
`_Fanout` waking each of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio
from pamqp import commands

from federation.address import BrokerAddress
from federation.dynamic import AdvertRefused, FederatedExchange, bridge_queue, decode_adverts, encode_adverts
from federation.limits import BRIDGE_MAX_LENGTH
from federation.link import peer_name
from federation.local import LocalChannelClosed
from federation.persistence import FederationStore
from federation.ports import PeerChannel, PeerConnection
from federation.routes import (
    Forwarder,
    LocalNode,
    Route,
    RouteConfig,
    check_peer_exchange,
    declare_source_queue,
    run_beside,
)
from gateway.broker.exchange import Exchange
from gateway.broker.queue import Queue
from gateway.broker.vhost import VHost
from gateway.management import ManagementError
from gateway.names import CONTROL_EXCHANGE, DEFAULT_VHOST
from gateway.wire.content import Content

LOGGER = logging.getLogger("federation.dynamic_route")

#: The vhost dynamic routes work in (LocalSink's, the links' default).
VHOST = DEFAULT_VHOST
#: A durable bridge queue (bounded by BRIDGE_MAX_LENGTH, drop-head) is deleted once unconsumed
#: for this long (ms): a destination gone for good.
BRIDGE_EXPIRES = 24 * 3600 * 1000
#: The durable bridge queue's arguments (docs/federation.md, "Dynamic routes").
BRIDGE_ARGUMENTS: dict[str, Any] = {
    "x-max-length": BRIDGE_MAX_LENGTH,
    "x-overflow": "drop-head",
    "x-expires": BRIDGE_EXPIRES,
}
_ADVERT_PROPERTIES = commands.Basic.Properties(content_type="application/json")


class _Fanout:
    """A FederatedExchange's on_change for several listeners: every dynamic route on the
    exchange must resend its adverts when what this node would advertise changes."""

    def __init__(self) -> None:
        self.listeners: list[Callable[[], None]] = []

    def __call__(self) -> None:
        for listener in list(self.listeners):
            listener()


@dataclass
class _Entry:
    """One exchange's dynamic routing: its listeners, and its FederatedExchange while attached
    (to `exchange`, the broker object it was attached to)."""

    changes: _Fanout = field(default_factory=_Fanout)
    exchange: Exchange | None = None
    federated: FederatedExchange | None = None


class FederatedExchanges:
    """The node's FederatedExchanges, created on demand, detached when no longer needed."""

    def __init__(self, node_name: str) -> None:
        self._node_name = node_name
        self._entries: dict[tuple[str, str], _Entry] = {}
        #: Where adverts for durable bridge queues are kept (set by `restore`; None: nowhere).
        self.store: FederationStore | None = None

    def attach(self, vhost: VHost, name: str, tag: str | None = None) -> FederatedExchange | None:
        """The exchange's FederatedExchange, created (tagged `tag`, else the node's name) and
        seeded with the exchange's queue bindings if it has none, or if the exchange was
        deleted and declared again since; None if there is no such exchange."""
        exchange = vhost.exchanges.get(name)
        if exchange is None:
            return None
        entry = self._entries.setdefault((vhost.name, name), _Entry())
        if entry.federated is not None and entry.exchange is exchange:
            return entry.federated
        replaced = entry.federated
        federated = FederatedExchange(
            vhost, name, exchange.type, replaced.tag if replaced else tag or self._node_name
        )
        for key, arguments, destination in exchange.matcher.bindings():
            if isinstance(destination, Queue):
                federated.bound(key, arguments)
        federated.on_change = entry.changes
        exchange.federation = federated
        entry.exchange, entry.federated = exchange, federated
        if replaced is not None:
            entry.changes()  # a new exchange of that name: the routes resend its interest
        return federated

    def listen(self, vhost: str, name: str, listener: Callable[[], None]) -> None:
        """Call `listener` whenever the exchange's advertised interest changes."""
        self._entries.setdefault((vhost, name), _Entry()).changes.listeners.append(listener)

    def unlisten(self, vhost: str, name: str, listener: Callable[[], None]) -> None:
        """A route is gone; the exchange is detached if nothing else needs its federation."""
        entry = self._entries.get((vhost, name))
        if entry is not None:
            entry.changes.listeners.remove(listener)
            self._release_if_idle(vhost, name)

    def receive(self, vhost: VHost, body: bytes, speaker: str | None) -> None:
        """A control message a downstream node published to CONTROL_EXCHANGE on `vhost`: its
        complete adverts for one exchange, and the bridge queue it declared here just before.
        Adverts that came with a durable bridge queue are kept in `store`, so that after a
        crash this node routes into that queue again before the downstream node is back.

        `speaker` is the one node (tag) the publishing login may advertise as (None: a shared
        federation login, which may advertise as any). AdvertRefused, applying nothing, for
        adverts in another node's name, or naming a queue other than that node's bridge queue:
        either would let one login take or stop another node's traffic."""
        applied = self._apply(vhost, body, speaker)
        if applied is None or self.store is None:
            return
        name, sender, keep = applied
        if keep:
            self.store.put_adverts(vhost.name, name, sender, body)
        else:
            self.store.delete_adverts(vhost.name, name, sender)

    def restore(self, vhosts: Mapping[str, VHost], store: FederationStore) -> None:
        """Take back the stored adverts of durable bridge queues that outlived a restart (the
        downstream node's full resync replaces them when it reconnects), and keep adverts in
        `store` from now on. Those whose queue is gone (expired or deleted) are dropped."""
        self.store = store
        for vhost_name, name, sender, body in store.load_adverts():
            vhost = vhosts.get(vhost_name)
            try:
                applied = None if vhost is None else self._apply(vhost, body, None)
            except AdvertRefused as refused:
                LOGGER.warning("stored %s; dropped", refused)
                applied = None
            if applied is None or not applied[2]:
                store.delete_adverts(vhost_name, name, sender)

    def _apply(self, vhost: VHost, body: bytes, speaker: str | None) -> tuple[str, str, bool] | None:
        """Install a control message's adverts: (exchange, sender, whether they are worth
        keeping: some interest, with a durable bridge queue), or None if it was ignored.
        Malformed adverts are logged and ignored (a peer must not be able to crash the node);
        adverts the speaker may not send raise AdvertRefused."""
        try:
            name, sender, queue, adverts = decode_adverts(body)
        except ValueError as error:
            LOGGER.warning("%s; ignored", error)
            return None
        if speaker is not None and sender != speaker:
            raise AdvertRefused(f"adverts in the name of node '{sender}' from the login of node '{speaker}'")
        if queue != bridge_queue(sender, name):
            raise AdvertRefused(
                f"adverts from node '{sender}' naming queue '{queue}', not its bridge queue "
                f"'{bridge_queue(sender, name)}'"
            )
        bridge = vhost.queues.get(queue)
        federated = self.attach(vhost, name) if bridge is not None else None
        if bridge is None or federated is None:
            missing = f"bridge queue '{queue}'" if bridge is None else f"exchange '{name}'"
            LOGGER.warning("adverts from %s ignored: no %s in vhost '%s'", sender, missing, vhost.name)
            return None
        try:
            federated.receive_adverts(sender, bridge, adverts)
        except ValueError as error:  # bindings the exchange's matcher refuses
            LOGGER.warning("adverts from %s for exchange '%s' ignored: %s", sender, name, error)
            federated.receive_adverts(sender, bridge, set())
            adverts = set()
        self._release_if_idle(vhost.name, name)
        return name, sender, bridge.durable and bool(adverts)

    def _release_if_idle(self, vhost: str, name: str) -> None:
        """Detach when no dynamic route uses the exchange and no downstream interest remains."""
        entry = self._entries[(vhost, name)]
        if entry.changes.listeners or (entry.federated is not None and entry.federated.serves_downstream()):
            return
        del self._entries[(vhost, name)]
        if entry.exchange is not None and entry.exchange.federation is entry.federated:
            entry.exchange.federation = None


class DynamicRoute(Route):
    """A dynamic route: a pull route whose source queue is the bridge queue the source fills
    according to the adverts this route sends it."""

    def __init__(
        self, config: RouteConfig, peer: BrokerAddress, node: LocalNode, exchanges: FederatedExchanges
    ) -> None:
        super().__init__(config, peer, node)
        self._exchanges = exchanges
        self._changed = trio.Event()
        self._upstream = ""
        self._bridge = ""

    @property
    def durable_queue(self) -> str | None:
        """A durable route's bridge queue on the source, once declared: deleted with the route."""
        return self._bridge if self.config.durable and self._bridge else None

    def prepare(self) -> None:
        """Attach the exchange's federation now, so local bindings count from the start, and
        follow its changes. ManagementError if the exchange does not exist here."""
        self._exchanges.listen(VHOST, self.config.exchange, self._wake)
        self._federated_or(ManagementError("NOT_FOUND", self._no_exchange()))

    def retire(self) -> None:
        self._exchanges.unlisten(VHOST, self.config.exchange, self._wake)
        super().retire()

    def _wake(self) -> None:
        self._changed.set()

    def _no_exchange(self) -> str:
        return f"no exchange '{self.config.exchange}' on node '{self.node.name}'"

    def _federated_or(self, error: Exception) -> FederatedExchange:
        federated = self._exchanges.attach(
            self.node.broker.vhosts[VHOST], self.config.exchange, self.config.tag
        )
        if federated is None:
            raise error
        return federated

    def _federated(self) -> FederatedExchange:
        return self._federated_or(LocalChannelClosed(404, self._no_exchange()))

    async def _pull(self, connection: PeerConnection) -> None:
        # Adverts name their upstream by its node name, which is its default federation tag.
        self._upstream = peer_name(connection) or str(self.peer)
        await super()._pull(connection)

    async def _source_queue(self, channel: PeerChannel) -> str:
        """Check the source's exchange, declare the bridge queue there and advertise."""
        federated = self._federated()
        await check_peer_exchange(channel, federated.vhost.exchanges[self.config.exchange], self.peer)
        self._bridge = bridge_queue(federated.tag, self.config.exchange)
        durable = self.config.durable
        arguments = BRIDGE_ARGUMENTS if durable else None
        await declare_source_queue(channel, self._bridge, durable=durable, arguments=arguments)
        self._changed = trio.Event()
        self._advertise(channel)
        return self._bridge

    async def _forward(self, forwarder: Forwarder, channel: PeerChannel) -> None:
        await run_beside(forwarder.run, partial(self._readvertise, channel))

    async def _readvertise(self, channel: PeerChannel) -> None:
        """Resend the complete advert set after each change; bursts coalesce into one."""
        while True:
            await self._changed.wait()
            self._changed = trio.Event()
            self._advertise(channel)

    def _advertise(self, channel: PeerChannel) -> None:
        federated = self._federated()
        adverts = federated.adverts_for(self._upstream, list(self.config.excludes))
        body = encode_adverts(self.config.exchange, federated.tag, self._bridge, adverts)
        channel.publish(CONTROL_EXCHANGE, "", Content.from_properties(_ADVERT_PROPERTIES, body))
