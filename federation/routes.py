"""Static routes: exchange and queue routes, pulled by the destination or pushed by the source.

A route is what a Link runs on each connection (`async def run(connection)`): it moves messages
from a source queue into a destination exchange through a Forwarder, which publishes each
message with confirms and acknowledges it to the source only once the destination confirmed it.

- Pull (the default; the route lives on the destination): the source queue is on the peer.
  An exchange route declares it there, bound to `exchange` with `key`: for a durable route a
  durable shared queue with a fixed name (`federation.<this node>.<exchange>.<key>`), so what is
  published while the link is down waits in it; otherwise an exclusive auto-delete queue that
  lives as long as the connection. A queue route consumes the peer's existing queue. Messages
  go into the local exchange through LocalSink.
- Push (`src_local`; the route lives on the source): the source queue is local (LocalSource),
  messages go to the peer's exchange over the link's channel with publisher confirms. A durable
  push exchange route's local queue is created with the route, so it fills while the link is
  down.
- Dynamic routes (federation.dynamic_route.DynamicRoute) are pull routes of this kind whose
  source queue is a bridge queue the source fills as this node's adverts ask.

Reliability: at least once. Nothing is acknowledged to the source before the destination
confirmed it; anything unacknowledged when a channel or the link breaks is redelivered by the
source. A message the destination refuses (nack: a full queue with reject-publish) is never
acknowledged: the route acknowledges what was confirmed before it and stops; the source
requeues the refused message and what followed it, and the link restarts the route after its
backoff delay (2 s, doubling). Messages are passed through unchanged (properties bytes, body,
routing key).
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import trio
from pamqp import commands

from federation.address import BrokerAddress
from federation.errors import ChannelClosedByPeer, ClientError, PublishNacked
from federation.formatting import route_label, route_selector
from federation.health import Health
from federation.link import Carried, LinkCounters
from federation.local import LocalSink, LocalSource
from federation.ports import PeerChannel, PeerConnection
from gateway.broker import Broker
from gateway.broker.exchange import Exchange
from gateway.management import Management, ManagementError
from gateway.names import DEFAULT_VHOST
from gateway.wire import make_method
from gateway.wire.content import Content

#: Messages in flight on a route (the source's prefetch) unless --credit says otherwise.
DEFAULT_CREDIT = 1000
#: Acknowledgements to the source are batched by this many messages unless --ack says otherwise.
DEFAULT_ACK = 100
#: How long the forwarder, having confirmed everything it was given, waits for the next message
#: before acknowledging what it holds: long enough for the next delivery of a busy stream to
#: arrive (so acks stay batched), short enough not to matter to an idle one.
IDLE_ACK_DELAY = 0.005
#: How long a retired route may take to delete its durable source queue on the peer.
CLEANUP_TIMEOUT = 5.0


class Delivery(Protocol):
    """What a route reads of a delivery: the client's and LocalSource's both have these."""

    @property
    def delivery_tag(self) -> int: ...

    @property
    def routing_key(self) -> str: ...

    @property
    def content(self) -> Content: ...


class Source(Protocol):
    """Where a route takes messages from: a client channel, or LocalSource."""

    def deliveries(self) -> AsyncIterable[Delivery]: ...

    def ack(self, delivery_tag: int, multiple: bool = False) -> None: ...


class Sink(Protocol):
    """Where a route puts messages: LocalSink, or RemoteSink (a client channel)."""

    #: Set while the sink's node holds publishers (its memory or disk alarm), None otherwise:
    #: the forwarder takes nothing more from its source until it is set.
    resumed: trio.Event | None

    def publish(self, exchange: str, routing_key: str, content: Content) -> int: ...

    def confirmed(self, seq: int) -> bool:
        """Whether publish `seq` is settled already (PublishNacked if it was refused): lets
        the forwarder settle a run of confirmed publishes without awaiting each."""
        ...

    async def wait_for_confirm(self, seq: int) -> None: ...


class DestinationRefused(ChannelClosedByPeer):
    """The destination nacked a message. Raised by the forwarder after acknowledging what was
    confirmed before it; a ChannelClosedByPeer because the link treats it the same way: an
    operational event (no traceback) ending this run of the route, which restarts later."""

    def __init__(self, count: int) -> None:
        super().__init__(
            0, f"the destination refused {count} message(s) (a full queue?); requeued at the source"
        )

    def __str__(self) -> str:
        return self.reply_text


@dataclass(frozen=True)
class RouteConfig:
    """A route as management creates it and persistence stores it."""

    kind: str
    exchange: str
    key: str | None = None
    queue: str | None = None
    tag: str | None = None
    excludes: tuple[str, ...] = ()
    durable: bool = False
    src_local: bool = False
    ack: int = DEFAULT_ACK
    credit: int = DEFAULT_CREDIT
    #: This node's vhost: the destination exchange's (pull) or the source's (push).
    vhost: str = DEFAULT_VHOST

    def identity(self) -> tuple[str, ...]:
        """What tells routes on one link apart (qpid-route's rule): kind, exchange, key or
        queue, and the vhost when it is not the default one (so identities stored before
        vhosts existed still match)."""
        return route_identity(
            self.kind, self.exchange, route_selector(self.kind, self.key, self.queue), self.vhost
        )

    def describe(self) -> str:
        """`exchange(key)` or `exchange(queue)`, as the CLIs name routes."""
        return route_label(self.exchange, route_selector(self.kind, self.key, self.queue))

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "excludes": list(self.excludes)}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> RouteConfig:
        return cls(**{**record, "excludes": tuple(record.get("excludes") or ())})


def route_identity(kind: str, exchange: str, selector: str | None, vhost: str) -> tuple[Any, ...]:
    """RouteConfig.identity of a route named by its parts."""
    base = (kind, exchange, selector)
    return base if vhost == DEFAULT_VHOST else (*base, vhost)


@dataclass
class RouteStats:
    """Counters for routes.list: confirmed messages and body bytes, and what is in flight."""

    messages: int = 0
    bytes: int = 0
    in_flight: int = 0
    last_transfer: float | None = None


class Forwarder:
    """Moves a source's deliveries into one exchange of a sink, with their routing keys and
    contents unchanged, acknowledging the source only after the sink
    confirmed, in batches.

    Two tasks share a queue of (seq, delivery tag, size), in delivery order. The pump publishes
    each delivery and appends it. The settler waits for each confirm in turn (confirms come in
    publish order) and acknowledges the source with one multiple ack per `ack` confirmed
    messages, and whenever it would otherwise wait: for a confirm that is not there yet, or
    for the next message of a stream gone idle (IDLE_ACK_DELAY). So a window (the source's
    prefetch) smaller than the batch never waits for the batch to fill.
    """

    def __init__(
        self, source: Source, sink: Sink, exchange: str, *, ack: int, stats: RouteStats, carried: Carried
    ) -> None:
        """`stats`: the route's or federation direction's; `carried`: the link's, for the
        direction this forwarder carries messages over it."""
        self._source = source
        self._sink = sink
        self._exchange = exchange
        self._ack = max(ack, 1)
        self._stats = stats
        self._carried = carried
        self._pending: deque[tuple[int, int, int]] = deque()
        self._arrived: trio.Event | None = None

    async def run(self) -> None:
        """Forward until cancelled or until either end fails."""
        await run_beside(self._pump, self._settle)

    async def _pump(self) -> None:
        pending, stats, publish, sink = self._pending, self._stats, self._publish, self._sink
        async for delivery in self._source.deliveries():
            seq = publish(delivery)
            pending.append((seq, delivery.delivery_tag, len(delivery.content.body)))
            stats.in_flight += 1
            if self._arrived is not None:
                self._arrived.set()
                self._arrived = None
            if sink.resumed is not None:
                # The node holds publishers: the source keeps the rest (its window fills).
                await sink.resumed.wait()

    def _publish(self, delivery: Any) -> int:
        """Hand one delivery to the sink; its confirm sequence number."""
        return self._sink.publish(self._exchange, delivery.routing_key, delivery.content)

    async def _settle(self) -> None:
        pending, stats, carried, sink = self._pending, self._stats, self._carried, self._sink
        unacked = 0
        last_tag = 0
        while True:
            if not pending:
                self._arrived = trio.Event()
                if not unacked:
                    await self._arrived.wait()
                    continue
                # Caught up with the pump: a stream that has gone idle gets its acks now, a
                # busy one goes on batching.
                with trio.move_on_after(IDLE_ACK_DELAY):
                    await self._arrived.wait()
                if not pending:
                    self._acknowledge(last_tag, unacked)
                    unacked = 0
                continue
            seq, tag, size = pending[0]
            try:
                if not sink.confirmed(seq):
                    # About to wait: the source gets what is confirmed first, so a full window
                    # (prefetch) never waits on a batch that cannot fill.
                    if unacked:
                        self._acknowledge(last_tag, unacked)
                        unacked = 0
                    await sink.wait_for_confirm(seq)
            except PublishNacked:
                if unacked:
                    self._acknowledge(last_tag, unacked)
                raise DestinationRefused(len(pending)) from None
            pending.popleft()
            self._confirmed(seq)
            stats.messages += 1
            stats.bytes += size
            carried.messages += 1
            carried.bytes += size
            stats.last_transfer = time.time()
            unacked += 1
            last_tag = tag
            if unacked >= self._ack:
                self._acknowledge(last_tag, unacked)
                unacked = 0

    def _acknowledge(self, tag: int, count: int) -> None:
        self._source.ack(tag, multiple=True)
        self._stats.in_flight -= count

    def _confirmed(self, seq: int) -> None:
        """The sink confirmed publish `seq` (a forwarder that holds its publishers' confirms
        for the parent's verdict releases them here)."""


async def run_beside(main: Callable[[], Awaitable[None]], *helpers: Callable[[], Awaitable[None]]) -> None:
    """Run `main` with `helpers` in tasks beside it until `main` returns (the helpers are then
    cancelled) or one of them fails. A lone error propagates bare, not in a group, because the
    link tells a refused channel from a bug by the error's type."""
    try:
        async with trio.open_nursery() as nursery:
            for helper in helpers:
                nursery.start_soon(helper)
            await main()
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


class SourceExchangeMismatch(ChannelClosedByPeer):
    """The source has no such exchange, or one of another type. A ChannelClosedByPeer because
    the link treats it the same way: the route fails (last error: this text) and is retried on
    the backoff schedule, so it starts once the operator fixed the source."""

    def __str__(self) -> str:
        return self.reply_text


async def check_peer_exchange(channel: PeerChannel, local: Exchange, peer: BrokerAddress) -> None:
    """The peer's exchange of the same name must exist (passive declare: 404) with the local
    exchange's type and flags (a declare with them: 406 otherwise). Built-in `amq.*` exchanges
    only need to exist: brokers refuse declaring that prefix, and they are standard anyway."""
    name, source = local.name, f"{peer.host}:{peer.port}"
    try:
        await channel.call(make_method(commands.Exchange.Declare, exchange=name, passive=True))
    except ChannelClosedByPeer as error:
        if error.reply_code == 404:
            raise SourceExchangeMismatch(404, f"exchange '{name}' does not exist on {source}") from None
        raise
    if name.startswith("amq."):
        return
    declare = make_method(
        commands.Exchange.Declare,
        exchange=name,
        exchange_type=local.type,
        durable=local.durable,
        auto_delete=local.auto_delete,
        internal=local.internal,
        arguments=local.arguments,
    )
    try:
        await channel.call(declare)
    except ChannelClosedByPeer as error:
        if error.reply_code == 406:
            text = f"exchange '{name}' is declared differently on {source}: {error.reply_text}"
            raise SourceExchangeMismatch(406, text) from None
        raise


class RemoteSink:
    """A client channel in confirm mode, publishing into one exchange of the peer."""

    #: A peer that holds publishers stops reading this channel's connection: TCP pushes back.
    resumed: trio.Event | None = None

    def __init__(self, channel: PeerChannel) -> None:
        self._channel = channel

    def publish(self, exchange: str, routing_key: str, content: Content) -> int:
        seq = self._channel.publish(exchange, routing_key, content)
        assert seq is not None, "the channel is in confirm mode"
        return int(seq)

    def confirmed(self, seq: int) -> bool:
        return bool(self._channel.confirmed(seq))

    async def wait_for_confirm(self, seq: int) -> None:
        await self._channel.wait_for_confirm(seq)


@dataclass(frozen=True)
class LocalNode:
    """This node as routes reach it: its name, its management operations (which create and
    delete the local queues routes own, with the model's own validation) and the trigger of
    its group committer."""

    name: str
    management: Management
    want_commit: Callable[[], None]

    @property
    def broker(self) -> Broker:
        return self.management.broker


class Route:
    """One exchange or queue route on a link: `run(connection)` per connection (the Link
    contract), `record()` for routes.list, `retire()` before it is deleted for good."""

    def __init__(self, config: RouteConfig, peer: BrokerAddress, node: LocalNode) -> None:
        self.config = config
        self.peer = peer
        self.node = node
        self.stats = RouteStats()
        #: The counters of the link carrying the route (set when it is attached to one).
        self.link_counters = LinkCounters()
        self.health = Health()
        self._retired = False

    @property
    def name(self) -> str:
        return f"{self.config.kind} {self.config.describe()}"

    @property
    def durable_queue(self) -> str | None:
        """The fixed name of a durable exchange route's source queue (None: not such a route).
        Pull: on the peer, named after this node; push: here, named after the peer."""
        config = self.config
        if config.kind != "exchange" or not config.durable:
            return None
        owner = str(self.peer) if config.src_local else self.node.name
        return f"federation.{owner}.{config.exchange}.{config.key}"

    def record(self) -> dict[str, Any]:
        """The routes.list record (docs/federation-design.md, "Management")."""
        config = self.config
        here, there = self.node.name, str(self.peer)
        return {
            "kind": config.kind,
            "dest": there if config.src_local else here,
            "src": here if config.src_local else there,
            "exchange": config.exchange,
            "vhost": config.vhost,
            "key": config.key,
            "queue": config.queue,
            "tag": config.tag,
            "excludes": list(config.excludes),
            "durable": config.durable,
            "src_local": config.src_local,
            "ack": config.ack,
            "credit": config.credit,
            "messages": self.stats.messages,
            "bytes": self.stats.bytes,
            "in_flight": self.stats.in_flight,
            "last_transfer": self.stats.last_transfer,
            **self.health.record(),
        }

    def prepare(self) -> None:
        """Create what the route owns on this node before it first runs: a durable push
        exchange route's queue, so that it collects messages while the link is down.
        Raises ManagementError (a missing exchange, say)."""
        queue = self.durable_queue
        if queue is not None and self.config.src_local:
            management, vhost = self.node.management, self.config.vhost
            management.add_queue(queue, durable=True, vhost=vhost)
            management.add_binding(self.config.exchange, queue, self.config.key or "", vhost=vhost)
            self.node.want_commit()

    def retire(self) -> None:
        """The route is being deleted for good: its durable source queue goes too, here at
        once for a push route, on the peer when the run ends for a pull route (if the link is
        up then; otherwise the queue stays on the peer, and docs/federation.md says so)."""
        self._retired = True
        queue = self.durable_queue
        if queue is not None and self.config.src_local:
            with contextlib.suppress(ManagementError):
                self.node.management.delete_queue(queue, vhost=self.config.vhost)
            self.node.want_commit()

    async def run(self, connection: PeerConnection) -> None:
        self.stats.in_flight = 0
        try:
            if self.config.src_local:
                await self._push(connection)
            else:
                await self._pull(connection)
        except Exception as error:
            self.health.ended(error, f"{self.peer}: {error}")
            raise

    async def _pull(self, connection: PeerConnection) -> None:
        """Consume the peer's queue into the local exchange."""
        config = self.config
        channel = await connection.channel(buffer=max(config.credit, 1))
        sink = LocalSink(self.node.broker, self.node.want_commit, config.vhost)
        try:
            queue = await self._source_queue(channel)
            await channel.qos(prefetch_count=config.credit)
            await channel.consume(queue)
            self.health.operational()
            forwarder = Forwarder(
                channel,
                sink,
                config.exchange,
                ack=config.ack,
                stats=self.stats,
                carried=self.link_counters.inbound,
            )
            await self._forward(forwarder, channel)
        finally:
            sink.close()
            await close_route_channel(channel, delete=self.durable_queue if self._retired else None)

    async def _forward(self, forwarder: Forwarder, channel: PeerChannel) -> None:
        """Run the pull's forwarder; a dynamic route runs its advertising on `channel` beside it."""
        await forwarder.run()

    async def _source_queue(self, channel: PeerChannel) -> str:
        """The peer's queue this pull route consumes, declared and bound if the route owns it."""
        config = self.config
        if config.kind == "queue":
            assert config.queue is not None
            return config.queue
        durable = self.durable_queue
        queue = await declare_source_queue(channel, durable or "", durable=durable is not None)
        bind = make_method(commands.Queue.Bind, queue=queue, exchange=config.exchange, routing_key=config.key)
        await channel.call(bind)
        return queue

    async def _push(self, connection: PeerConnection) -> None:
        """Consume the local queue into the peer's exchange, over a confirmed channel."""
        config = self.config
        channel = await connection.channel()
        source = LocalSource(
            self.node.broker, self.node.want_commit, credit=config.credit, vhost=config.vhost
        )
        try:
            await channel.call(make_method(commands.Exchange.Declare, exchange=config.exchange, passive=True))
            await channel.confirm_select()
            if config.kind == "queue":
                assert config.queue is not None
                queue = config.queue
            else:
                assert config.key is not None
                queue = self.durable_queue or source.declare_private_queue(config.exchange, config.key)
            source.consume(queue)
            self.health.operational()
            await Forwarder(
                source,
                RemoteSink(channel),
                config.exchange,
                ack=config.ack,
                stats=self.stats,
                carried=self.link_counters.outbound,
            ).run()
        finally:
            source.close()
            await close_route_channel(channel)


async def declare_source_queue(
    channel: Any, name: str, *, durable: bool, arguments: dict[str, Any] | None = None
) -> str:
    """Declare a pull route's queue on the source; its name (the server's choice for "").
    Durable: shared, so it outlives the connection and buffers while this end is away (until
    the route is deleted). Otherwise exclusive and auto-delete: it dies with the connection."""
    declare = make_method(
        commands.Queue.Declare,
        queue=name,
        durable=durable,
        exclusive=not durable,
        auto_delete=not durable,
        arguments=arguments or {},
    )
    queue: str = (await channel.call(declare)).queue
    return queue


async def close_route_channel(channel: PeerChannel, delete: str | None = None) -> None:
    """Close the route's channel (the peer requeues what was not acknowledged), deleting
    the queue `delete` first; bounded and shielded, as it runs when the route is cancelled.
    A channel or connection already gone needs nothing more."""
    with trio.CancelScope(shield=True), trio.move_on_after(CLEANUP_TIMEOUT):
        with contextlib.suppress(ClientError):
            if delete is not None:
                await channel.call(make_method(commands.Queue.Delete, queue=delete))
            await channel.close()
