"""Exchange federation as OpenAMQ has it: a local exchange attached to the identically named
exchange on a parent node, with a type (docs/federation.md, "Federation types").

The parent sees an ordinary client. The child's side has two halves, used by type:

- subscribing (subscriber, fanout, service): a queue on the parent, named after this node and
  the exchange, bound with each distinct binding of a local queue on the exchange (binds and
  unbinds are mirrored; identical local bindings make one remote binding). What arrives in it is
  published on the local exchange, where it reaches the local queues. The queue is durable like
  the exchange, so what the parent routes to us while the peering is down waits there.
- forwarding (publisher: every publish; locator and service: publishes that reached no local
  queue; fanout: every publish, which is then not routed locally, because it comes back from
  the parent like everyone else's): the message goes into a local outbox queue, durable like
  the exchange and bounded (outbox_limit / outbox_policy), which the peering empties into the
  parent's exchange with publisher confirms; a message leaves the outbox only once the parent
  confirmed it, so nothing accepted is lost while the parent is away. A publish made with
  mandatory goes up with mandatory, and the parent's Return goes back to the original
  publisher if its channel is still open.

The bindings made on the parent's queue are stored (federation.persistence), so those withdrawn
while the peering was down are unbound on the next connection, even after this node restarted.

Messages republished from the parent are never forwarded again (they are told apart by the
internal session that publishes them), so nothing loops between a child and its parent.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import trio
from pamqp import commands

from federation.address import BrokerAddress, link_tls
from federation.health import Health
from federation.link import Carried, LinkCounters
from federation.local import LocalChannelClosed, LocalSink, LocalSource
from federation.persistence import Binding, BindingTarget, FederationStore
from federation.ports import PeerChannel, PeerConnection
from federation.returns import PendingReturns, describe_return, take_return_id, with_return_id
from federation.routes import (
    DEFAULT_ACK,
    DEFAULT_CREDIT,
    Forwarder,
    LocalNode,
    RemoteSink,
    RouteStats,
    check_peer_exchange,
    close_route_channel,
)
from gateway.broker.exchange import Exchange
from gateway.broker.hold import Hold
from gateway.broker.message import Message
from gateway.broker.outbox import Delivery, ReturnTo
from gateway.broker.queue import Queue
from gateway.broker.vhost import VHost
from gateway.federation_config import cannot_federate
from gateway.management import ManagementError
from gateway.names import DEFAULT_TRANSPORT, DEFAULT_VHOST
from gateway.routing.bindings import Identity, binding_identity
from gateway.routing.federation_types import BEHAVIOURS, resolve_type
from gateway.tls import ClientTls
from gateway.wire import make_method
from gateway.wire.events import MessageReturned

LOGGER = logging.getLogger("federation.attachment")

#: A blocked outbox lets publishers go on once it is below this share of its limit.
RELEASE_AT = 0.9


def normalize_type(name: str | None, exchange_type: str) -> str:
    """The federation type to use (gateway.routing.federation_types.resolve_type), refused as
    a usage error."""
    try:
        return resolve_type(name, exchange_type)
    except ValueError as error:
        raise ManagementError("usage", str(error)) from None


@dataclass(frozen=True)
class AttachmentConfig:
    """One federated exchange: as federations.add creates it and persistence stores it."""

    exchange: str
    vhost: str
    type: str
    host: str
    port: int
    parent_vhost: str = DEFAULT_VHOST
    username: str = "peering"
    password: str = "peering"
    durable: bool = False
    source: str = "runtime"
    outbox_limit: int = 100_000
    outbox_policy: str = "block"
    #: ssl: the peering runs over TLS, with these paths or the node's own (LinkConfig's rule);
    #: an empty username then logs in with EXTERNAL as the certificate's user.
    transport: str = DEFAULT_TRANSPORT
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    @property
    def parent(self) -> BrokerAddress:
        return BrokerAddress(self.host, self.port, self.username, self.password)

    def client_tls(self, default: ClientTls | None) -> ClientTls | None:
        return link_tls(self.transport, self.tls_ca, self.tls_cert, self.tls_key, default)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Attachment:
    """The broker's hook on one federated exchange (Exchange.federation) and what the peering
    needs of it: the bindings to mirror, the outbox, the sessions that republish from the
    parent, and the counters federations.list shows."""

    def __init__(self, config: AttachmentConfig, node: LocalNode, vhost: VHost) -> None:
        self.config = config
        self.node = node
        self.vhost = vhost
        self.behaviour = BEHAVIOURS[config.type]
        self.outbox_name = f"federation.outbox.{config.exchange}"
        #: Each distinct local binding: identity -> (key, arguments), with how many queues have it.
        self.bindings: dict[Identity, Binding] = {}
        self._binding_counts: Counter[Identity] = Counter()
        self.bindings_changed = trio.Event()
        #: Ids of the internal sessions publishing what came from the parent.
        self.inbound_sessions: set[int] = set()
        self.forwarded = RouteStats()
        self.received = RouteStats()
        self.returned = 0
        self._gate: Hold | None = None
        self.exchange: Exchange | None = None

    # -- life cycle -------------------------------------------------------------------------

    def attach(self, exchange: Exchange) -> None:
        """Hook into `exchange` (count its queue bindings) and make sure the outbox exists."""
        self.exchange = exchange
        self.bindings.clear()
        self._binding_counts.clear()
        for key, arguments, destination in exchange.matcher.bindings():
            if isinstance(destination, Queue):
                self.bound(key, arguments)
        exchange.federation = self
        if self.behaviour.forwards is not None:
            self.outbox()

    def detach(self) -> None:
        """Unhook; the outbox goes too unless it still holds messages (they are not lost:
        federating the exchange again sends them)."""
        if self.exchange is not None and self.exchange.federation is self:
            self.exchange.federation = None
        queue = self.vhost.queues.get(self.outbox_name)
        if queue is not None and not queue.ready:
            with contextlib.suppress(ManagementError):
                self.node.management.delete_queue(self.outbox_name, vhost=self.vhost.name)
        self._release()

    def outbox(self) -> Queue:
        """The outbox queue, created (again) if missing."""
        queue = self.vhost.queues.get(self.outbox_name)
        if queue is None:
            config = self.config
            arguments: dict[str, Any] = {}
            if config.outbox_policy == "drop-oldest":
                arguments = {"x-max-length": config.outbox_limit, "x-overflow": "drop-head"}
            durable = self.exchange.durable if self.exchange is not None else True
            self.node.management.add_queue(
                self.outbox_name, durable=durable, arguments=arguments, vhost=self.vhost.name
            )
            self.node.want_commit()
            queue = self.vhost.queues[self.outbox_name]
        return queue

    # -- the broker's hook (gateway.broker.exchange.ExchangeFederation) ----------------------

    def bound(self, key: str, arguments: dict[str, Any]) -> None:
        identity = binding_identity(key, arguments)
        self._binding_counts[identity] += 1
        if identity not in self.bindings:
            self.bindings[identity] = (key, arguments)
            self.bindings_changed.set()

    def unbound(self, key: str, arguments: dict[str, Any]) -> None:
        identity = binding_identity(key, arguments)
        self._binding_counts[identity] -= 1
        if self._binding_counts[identity] <= 0:
            del self._binding_counts[identity]
            self.bindings.pop(identity, None)
            self.bindings_changed.set()

    def route(self, message: Message, found: set[Queue]) -> set[Queue]:
        decision = self.behaviour.decide(message.origin in self.inbound_sessions, bool(found))
        if not decision.forward:
            return found
        if found:
            # Routed here, so a mandatory publish is satisfied: the parent must not return it.
            message.return_to = None
        elif message.return_to is not None:
            # Only the parent can tell whether it is routable: its Return must precede our ack.
            self.vhost.broker.await_verdict(message.return_to)
        outbox = self.outbox()
        self._hold_if_full(outbox, message.origin)
        return found | {outbox} if decision.route_locally else {outbox}

    # -- the outbox's limit -----------------------------------------------------------------

    def _hold_if_full(self, outbox: Queue, publisher: int) -> None:
        """With the block policy, the publish that fills the outbox holds its publisher (the
        server reads nothing more from its connection; Connection.Blocked tells it why), so
        the outbox stops at its limit. The message is about to join the outbox: it counts."""
        config = self.config
        if config.outbox_policy != "block" or len(outbox.ready) + 1 < config.outbox_limit:
            return
        if self._gate is None:
            self._gate = Hold(
                f"federation outbox of exchange '{config.exchange}' is full "
                f"({config.outbox_limit} messages; parent {config.host}:{config.port})"
            )
            LOGGER.warning("%s: holding its publishers", self._gate.reason)
        self.vhost.broker.hold_publisher(publisher, self._gate)

    def drained(self) -> None:
        """The outbox shrank: publishers go on once it is below RELEASE_AT of its limit."""
        queue = self.vhost.queues.get(self.outbox_name)
        if self._gate is not None and (
            queue is None or len(queue.ready) < RELEASE_AT * self.config.outbox_limit
        ):
            LOGGER.info("federation outbox of exchange '%s' has room again", self.config.exchange)
            self._release()

    def _release(self) -> None:
        if self._gate is not None:
            self._gate.release()
            self._gate = None

    # -- management -------------------------------------------------------------------------

    def record(self, status: dict[str, Any]) -> dict[str, Any]:
        """The federations.list record (docs/federation-design.md, "Management"); `status` is
        the peering's state, last error and since when (federation.health.combined)."""
        config = self.config
        outbox = self.vhost.queues.get(self.outbox_name)
        return {
            "exchange": config.exchange,
            "vhost": config.vhost,
            "type": config.type,
            "parent": f"{config.host}:{config.port}",
            "login": config.username,
            "transport": config.transport,
            "durable": config.durable,
            "source": config.source,
            **status,
            "outbox": {
                "messages": len(outbox.ready) if outbox is not None else 0,
                "limit": config.outbox_limit,
                "policy": config.outbox_policy,
                "dropped": outbox.dropped if outbox is not None else 0,
            },
            "forwarded": self.forwarded.messages,
            "forwarded_bytes": self.forwarded.bytes,
            "received": self.received.messages,
            "received_bytes": self.received.bytes,
            "returned": self.returned,
            # Taken from one side, not yet confirmed by the other (both directions).
            "in_flight": self.forwarded.in_flight + self.received.in_flight,
        }


class _OutboxSource(LocalSource):
    """The outbox's consumer: each acknowledgement may make room for held publishers."""

    def __init__(self, attachment: Attachment) -> None:
        super().__init__(
            attachment.node.broker,
            attachment.node.want_commit,
            credit=DEFAULT_CREDIT,
            vhost=attachment.vhost.name,
        )
        self._attachment = attachment

    def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        super().ack(delivery_tag, multiple)
        self._attachment.drained()


class _ReturningForwarder(Forwarder):
    """Forwards the outbox to the parent, mandatory where the original publish was, and sends
    the parent's Returns back to the original publishers (federation.returns says how a Return
    finds its publish)."""

    def __init__(
        self, source: _OutboxSource, channel: PeerChannel, attachment: Attachment, carried: Carried
    ) -> None:
        super().__init__(
            source,
            RemoteSink(channel),
            attachment.config.exchange,
            ack=DEFAULT_ACK,
            stats=attachment.forwarded,
            carried=carried,
        )
        self._channel = channel
        self._attachment = attachment
        self._node = attachment.node.name
        self._returns = PendingReturns(trio.current_time)
        #: Our publish seq -> the mandatory publish whose confirm waits for the parent's verdict.
        self._verdicts: dict[int, ReturnTo] = {}
        channel.on_return = self._returned

    def _publish(self, delivery: Delivery) -> int:
        content = delivery.content
        if delivery.return_to is not None:
            return_id = self._returns.add(delivery.return_to)
            content = with_return_id(content, self._node, return_id)
        mandatory = delivery.return_to is not None
        seq = self._channel.publish(self._exchange, delivery.routing_key, content, mandatory=mandatory)
        assert seq is not None, "the channel is in confirm mode"
        if delivery.return_to is not None:
            self._verdicts[seq] = delivery.return_to
        return seq

    def _confirmed(self, seq: int) -> None:
        """The parent confirmed it, after any Return (the order a broker sends them in): a
        mandatory publish waiting for its verdict is confirmed to its publisher now."""
        return_to = self._verdicts.pop(seq, None)
        if return_to is not None:
            self._attachment.vhost.broker.release_verdict(return_to)

    def _returned(self, event: MessageReturned) -> None:
        return_id, content = take_return_id(event.content, self._node)
        return_to = self._returns.take(return_id)
        if return_to is None:
            LOGGER.warning(
                "exchange '%s': a Return from the parent matches no publish in flight: %s",
                self._exchange,
                describe_return(event),
            )
            return
        self._attachment.returned += 1
        self._attachment.vhost.broker.return_to_publisher(
            return_to, event.reply_code, event.reply_text, event.exchange, event.routing_key, content
        )


class Peering:
    """What runs on the attachment's link, once per connection (the Link's route contract)."""

    def __init__(self, attachment: Attachment, store: FederationStore | None = None) -> None:
        self.attachment = attachment
        self.health = Health()
        #: The counters of the peering's link (set when it is attached to one).
        self.link_counters = LinkCounters()
        self._retired = False
        self._store = store
        #: Bindings made on the parent's queue, as far as we know: kept across reconnects and
        #: stored across restarts, so those withdrawn meanwhile are unbound on the next connection.
        self._remote: dict[Identity, Binding] = {
            binding_identity(key, arguments): (key, arguments)
            for key, arguments in (store.load_bindings(self._target) if store is not None else [])
        }

    @property
    def name(self) -> str:
        return f"federation {self.attachment.config.exchange} ({self.attachment.config.type})"

    @property
    def remote_queue(self) -> str:
        """The subscribing half's queue on the parent."""
        return f"federation.{self.attachment.node.name}.{self.attachment.config.exchange}"

    @property
    def _target(self) -> BindingTarget:
        """Where our stored bindings were made: this parent's queue."""
        config = self.attachment.config
        return BindingTarget(
            config.vhost, config.exchange, config.host, config.port, config.parent_vhost, self.remote_queue
        )

    def retire(self) -> None:
        """The federation is being deleted: our queue on the parent goes when the run ends
        (if the peering is up then; otherwise it stays there, as a retired route's does). Its
        stored bindings go now, and nothing is stored for it after this."""
        self._retired = True
        if self._store is not None:
            self._store.delete_bindings(self.attachment.config.vhost, self.attachment.config.exchange)
            self._store = None

    async def run(self, connection: PeerConnection) -> None:
        attachment = self.attachment
        try:
            channel = await connection.channel()
            exchange = attachment.exchange
            if exchange is None or exchange.deleted:
                raise LocalChannelClosed(404, f"no exchange '{attachment.config.exchange}' on this node")
            await check_peer_exchange(channel, exchange, attachment.config.parent)
            self.health.operational()
            try:
                async with trio.open_nursery() as nursery:
                    if attachment.behaviour.subscribes:
                        nursery.start_soon(self._subscribe, connection, channel)
                    if attachment.behaviour.forwards is not None:
                        nursery.start_soon(self._forward, connection)
            finally:
                retired = self._retired and attachment.behaviour.subscribes
                await close_route_channel(channel, delete=self.remote_queue if retired else None)
        except Exception as error:
            self.health.ended(error, str(error))
            raise

    async def _subscribe(self, connection: PeerConnection, channel: PeerChannel) -> None:
        """Declare and bind our queue on the parent; republish what arrives, locally."""
        attachment = self.attachment
        attachment.received.in_flight = 0  # the last connection's went back to the parent's queue
        durable = bool(attachment.exchange is not None and attachment.exchange.durable)
        await channel.call(make_method(commands.Queue.Declare, queue=self.remote_queue, durable=durable))
        await self._sync_bindings(channel)
        inbound = await connection.channel(buffer=DEFAULT_CREDIT)
        sink = LocalSink(attachment.node.broker, attachment.node.want_commit, attachment.vhost.name)
        attachment.inbound_sessions.add(sink.session_id)
        try:
            await inbound.qos(prefetch_count=DEFAULT_CREDIT)
            await inbound.consume(self.remote_queue)
            forwarder = Forwarder(
                inbound,
                sink,
                attachment.config.exchange,
                ack=DEFAULT_ACK,
                stats=attachment.received,
                carried=self.link_counters.inbound,
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._mirror_bindings, channel)
                await forwarder.run()
                nursery.cancel_scope.cancel()
        finally:
            attachment.inbound_sessions.discard(sink.session_id)
            sink.close()

    async def _mirror_bindings(self, channel: PeerChannel) -> None:
        while True:
            await self.attachment.bindings_changed.wait()
            self.attachment.bindings_changed = trio.Event()
            await self._sync_bindings(channel)

    async def _sync_bindings(self, channel: PeerChannel) -> None:
        """Make the parent queue's bindings the distinct local ones: bind what is new, unbind
        what is gone (binding again is harmless, so a parent that lost them gets them back).

        A new binding is remembered before its Bind is sent and a gone one forgotten after its
        Unbind-Ok, so one the parent may have is never forgotten (Unbind of a binding the
        parent does not have is answered with Unbind-Ok)."""
        wanted = dict(self.attachment.bindings)
        self._remember({identity: wanted[identity] for identity in wanted.keys() - self._remote.keys()})
        for key, arguments in wanted.values():
            await channel.call(self._binding_method(commands.Queue.Bind, key, arguments))
        for identity in [identity for identity in self._remote if identity not in wanted]:
            key, arguments = self._remote[identity]
            await channel.call(self._binding_method(commands.Queue.Unbind, key, arguments))
            self._forget(identity)

    def _binding_method(
        self, method: type[commands.Queue.Bind | commands.Queue.Unbind], key: str, arguments: dict[str, Any]
    ) -> commands.Queue.Bind | commands.Queue.Unbind:
        """Queue.Bind or Queue.Unbind of our parent queue to the exchange."""
        return make_method(
            method,
            queue=self.remote_queue,
            exchange=self.attachment.config.exchange,
            routing_key=key,
            arguments=arguments,
        )

    def _remember(self, bindings: dict[Identity, Binding]) -> None:
        """Bindings about to be made: stored (in one transaction) and kept."""
        if bindings and self._store is not None:
            self._store.add_bindings(self._target, bindings.values())
        self._remote.update(bindings)

    def _forget(self, identity: Identity) -> None:
        """A binding the parent no longer has."""
        key, arguments = self._remote.pop(identity)
        if self._store is not None:
            self._store.remove_binding(self._target, key, arguments)

    async def _forward(self, connection: PeerConnection) -> None:
        """Empty the outbox into the parent's exchange, with confirms and returns."""
        self.attachment.forwarded.in_flight = 0  # the last connection's went back to the outbox
        channel = await connection.channel()
        await channel.confirm_select()
        source = _OutboxSource(self.attachment)
        try:
            source.consume(self.attachment.outbox().name)
            await _ReturningForwarder(source, channel, self.attachment, self.link_counters.outbound).run()
        finally:
            source.close()


def federatable(exchange: Exchange) -> str | None:
    """Why `exchange` cannot be federated, or None if it can."""
    return cannot_federate(exchange.name, exchange.internal)
