"""Links: the client connection a node keeps open to a peer, retried until the link is deleted.

Theory of operation: `Link.run` is one task that loops Connecting -> Operational -> Waiting ->
Connecting... A connection lives inside `async with connect(...)`, so when it ends, for any
reason, everything that used it has ended too. While it is open, each attached route runs in its
own supervisor task in a nursery bound to that connection: when the connection goes, the nursery
goes with it, and after a reconnect every route starts again on the new connection.

Error handling:
- Connection failures (ConnectFailed, ConnectionLost, ConnectionClosedByPeer, OSError) put the
  link in Waiting with the error's text and retry on the `Backoff` schedule, forever.
- AuthenticationRefused puts it in Failed and `run` returns: the same credentials will be
  refused again, and retrying them every minute looks like password guessing to the peer. A
  certificate refused in the TLS handshake (TlsRefused, either way) is one of them.
- A route's own failure (any other exception from its `run`) stays in its supervisor: it is
  logged and the route is restarted after a delay on the same schedule, while the connection and
  the other routes carry on. A route that raises a connection error ends the connection, since
  that error means the connection is unusable for every route.
- Anything else (a bug) propagates out of `run` rather than being retried blindly.

Resource handling: `close()` cancels the routes and leaves the `async with` normally, so the
client closes the connection cleanly (Connection.Close); if that takes longer than
CLOSE_TIMEOUT, the whole task is cancelled.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import trio

from federation.errors import (
    AuthenticationRefused,
    ChannelClosedByPeer,
    ConnectFailed,
    ConnectionClosedByPeer,
    ConnectionLost,
)
from federation.ports import Connect, PeerConnection
from federation.timing import BACKOFF, HEARTBEAT, Backoff
from gateway.names import DEFAULT_TRANSPORT, GATEWAY_PRODUCT, TRANSPORTS

if TYPE_CHECKING:
    from federation.address import BrokerAddress

LOGGER = logging.getLogger("federation.link")

#: How long close() waits for the connection to close cleanly before cancelling it outright;
#: longer than the client's own bounded wait for Close-Ok, so normally the client decides.
CLOSE_TIMEOUT = 15.0

#: Failures that end a connection but say nothing permanent about the peer: retry them.
RETRYABLE = (ConnectFailed, ConnectionLost, ConnectionClosedByPeer, OSError)

#: Errors a route may raise that mean the connection, not the route, is broken.
CONNECTION_ENDED = (ConnectionLost, ConnectionClosedByPeer)


class LinkState(enum.StrEnum):
    """A link's state, spelled as `amq-route link list` prints it (qpid-route's words)."""

    WAITING = "Waiting"
    CONNECTING = "Connecting"
    OPERATIONAL = "Operational"
    FAILED = "Failed"
    CLOSED = "Closed"


class Route(Protocol):
    """What a link needs from a route: a name for logs and a session to run on a connection."""

    @property
    def name(self) -> str: ...

    async def run(self, connection: PeerConnection) -> None:
        """Work on `connection` until cancelled; raise to be restarted after a delay."""


@dataclass
class Carried:
    """Messages and body bytes routes carried one way over a link, each counted once the far
    end confirmed it (what a route's own `messages` and `bytes` count too)."""

    messages: int = 0
    bytes: int = 0


@dataclass
class LinkCounters:
    """A link's counters since it was added or the node started (not stored): what its routes
    and peerings carried each way, and the seconds it spent not Operational before its
    current state began. Shared by a link and the one replacing it (new credentials), so a
    relogin does not reset them."""

    inbound: Carried = field(default_factory=Carried)
    outbound: Carried = field(default_factory=Carried)
    down: float = 0.0


def _client_connect(address: BrokerAddress, **options: Any) -> AbstractAsyncContextManager[PeerConnection]:
    """federation.client.connect, imported on first use so this module never needs the client
    to import (tests inject fakes, and the client imports nothing from here either)."""
    from federation.client import connect

    return connect(address, **options)


def peer_name(connection: PeerConnection) -> str | None:
    """The peer's node name (server property cluster_name), if it sent one."""
    name = connection.server_properties.get("cluster_name")
    if isinstance(name, bytes):
        return name.decode("utf-8", "replace")
    return name if isinstance(name, str) else None


def node_name(connection: PeerConnection) -> str | None:
    """The peer's node name if it is an amq-gateway node, whose cluster_name is its own name
    (a RabbitMQ cluster's nodes all send the cluster's: that names no one node)."""
    product = connection.server_properties.get("product")
    if isinstance(product, bytes):
        product = product.decode("utf-8", "replace")
    return peer_name(connection) if product == GATEWAY_PRODUCT else None


def _describe(error: BaseException) -> str:
    """The text for Last Error: "Connection refused" rather than "[Errno 111] Connection refused"."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def _first_leaf(error: BaseException) -> BaseException:
    """The first exception inside (possibly nested) groups: the one the link reports."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def ends_connection(error: Exception) -> bool:
    """Whether a route's error, bare or grouped by the route's own nurseries, means the
    connection is gone (so the link must reconnect) rather than that the route failed."""
    if isinstance(error, ExceptionGroup):
        return error.subgroup(CONNECTION_ENDED) is not None
    return isinstance(error, CONNECTION_ENDED)


class Link:
    """One peer this node connects to, kept connected, carrying the routes attached to it.

    Start it with `await nursery.start(link.run)`; stop it with `await link.close()`. The
    management attributes (`state`, `last_error`, `connected_since`, `reconnects`, `routes`)
    are read-only views; `snapshot()` is the record `links.list` returns.
    """

    def __init__(
        self,
        address: BrokerAddress,
        *,
        durable: bool = False,
        transport: str = DEFAULT_TRANSPORT,
        connect: Connect = _client_connect,
        heartbeat: int = HEARTBEAT,
        backoff: Backoff = BACKOFF,
        name: str | None = None,
        counters: LinkCounters | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`counters`: those of the link this one replaces, to go on counting from; `clock`
        measures how long states last (tests pass Trio's virtual one)."""
        if transport not in TRANSPORTS:
            raise ValueError(
                f"transport {transport!r} is not supported (use one of: {', '.join(TRANSPORTS)})"
            )
        self.address = address
        #: How log lines name it: several links may go to one address (peerings do).
        self.name = name or f"link to {address}"
        self.durable = durable
        self.transport = transport
        self.heartbeat = heartbeat
        self.backoff = backoff
        self._connect = connect
        # A new link is Waiting, as in qpid, until run() makes its first attempt.
        self._state = LinkState.WAITING
        self._last_error = ""
        self._since = time.time()
        self._clock = clock
        #: When the current state began, on `clock`: how long it has lasted.
        self._state_began = clock()
        self.counters = counters if counters is not None else LinkCounters()
        self._connected_since: float | None = None
        #: The name the peer gave on its last connection: which node this address reaches.
        self._peer_name: str | None = None
        self._reconnects = 0
        self._delay: float | None = None
        self._routes: list[Route] = []
        # Per connection: the nursery routes run in, and each running route's cancel scope,
        # keyed by id() because routes need not be hashable (dataclasses are not).
        self._connection: PeerConnection | None = None
        self._route_nursery: trio.Nursery | None = None
        self._route_scopes: dict[int, trio.CancelScope] = {}
        self._session_scope: trio.CancelScope | None = None
        self._run_scope: trio.CancelScope | None = None
        self._finished = trio.Event()

    @property
    def state(self) -> LinkState:
        """Where the link is in its life cycle."""
        return self._state

    @property
    def last_error(self) -> str:
        """Why the last connection attempt or connection failed; "" once Operational."""
        return self._last_error

    @property
    def connected_since(self) -> float | None:
        """Wall-clock time (time.time()) the current connection opened; None when not Operational."""
        return self._connected_since

    @property
    def reconnects(self) -> int:
        """How many times the link has retried after a failure."""
        return self._reconnects

    @property
    def routes(self) -> list[Route]:
        """The attached routes, as a copy: attach() and detach() are the way to change them."""
        return list(self._routes)

    def snapshot(self) -> dict[str, Any]:
        """The link's management record (`links.list`), JSON-able."""
        return {
            "host": self.address.host,
            "port": self.address.port,
            "transport": self.transport,
            "durable": self.durable,
            "state": self._state.value,
            "last_error": self._last_error,
            "node": self._peer_name,
            "since": self._since,
            "connected_since": self._connected_since,
            "reconnects": self._reconnects,
            **self._counted(),
        }

    def _counted(self) -> dict[str, Any]:
        """The counters' part of the record (docs/federation.md, "Counters")."""
        counters = self.counters
        lasted = self._clock() - self._state_began
        down = counters.down + (lasted if self._state is not LinkState.OPERATIONAL else 0.0)
        return {
            "messages_in": counters.inbound.messages,
            "messages_out": counters.outbound.messages,
            "bytes_in": counters.inbound.bytes,
            "bytes_out": counters.outbound.bytes,
            "down_seconds": down,
            "state_seconds": lasted,
        }

    def attach(self, route: Route) -> None:
        """Carry `route` from now on: at once if Operational, else from the next connection."""
        if any(attached is route for attached in self._routes):
            raise ValueError(f"route {route.name} is already attached to the link to {self.address}")
        self._routes.append(route)
        if self._route_nursery is not None:
            self._start_route(route)

    def detach(self, route: Route) -> None:
        """Stop carrying `route`: its task is cancelled; the connection and other routes go on."""
        for index, attached in enumerate(self._routes):
            if attached is route:
                del self._routes[index]
                break
        else:
            raise ValueError(f"route {route.name} is not attached to the link to {self.address}")
        scope = self._route_scopes.pop(id(route), None)
        if scope is not None:
            scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, keep connected and run the routes until close(), or until Failed.

        Reports started at once, in state Connecting: a peer that is down is the link's normal
        business (it retries), not an error for whoever starts it. A link runs once.
        """
        if self._run_scope is not None:
            raise RuntimeError(f"the link to {self.address} has already been run")
        self._run_scope = trio.CancelScope()
        try:
            with self._run_scope:
                if self._state is LinkState.CLOSED:
                    task_status.started()
                    return
                self._set_state(LinkState.CONNECTING)
                task_status.started()
                await self._keep_connected()
        finally:
            self._finished.set()

    async def close(self) -> None:
        """Stop the link for good: state Closed, routes cancelled, connection closed (bounded)."""
        if self._state is not LinkState.CLOSED:
            self._connected_since = None
            self._set_state(LinkState.CLOSED)
        if self._run_scope is None:
            return
        if self._session_scope is not None:
            # Operational: leave the `async with` normally so the client closes cleanly.
            self._session_scope.cancel()
        else:
            self._run_scope.cancel()
        with trio.move_on_after(CLOSE_TIMEOUT):
            await self._finished.wait()
            return
        LOGGER.warning("%s: connection did not close within %g s; abandoning it", self.name, CLOSE_TIMEOUT)
        self._run_scope.cancel()
        await self._finished.wait()

    async def _keep_connected(self) -> None:
        """The retry loop: one connection at a time, a backoff delay after each failure."""
        while True:
            failure = await self._connect_once()
            if failure is None or self._state is LinkState.CLOSED:
                return
            if isinstance(failure, AuthenticationRefused):
                self._set_state(LinkState.FAILED, error=_describe(failure), level=logging.WARNING)
                return
            self._delay = self.backoff.next_delay(self._delay)
            self._set_state(
                LinkState.WAITING, error=_describe(failure), then=f"; retrying in {self._delay:g} s"
            )
            await trio.sleep(self._delay)
            self._reconnects += 1
            self._set_state(LinkState.CONNECTING)

    async def _connect_once(self) -> BaseException | None:
        """Make one connection and use it until it ends; return why it ended (None: close()).

        `except*` because the client's nurseries (and ours) deliver errors in groups; a group
        that also holds something unexpected re-raises that part.
        """
        failure: BaseException | None = None
        try:
            async with self._connect(self.address, heartbeat=self.heartbeat) as connection:
                self._peer_name = node_name(connection)
                with trio.CancelScope() as self._session_scope:
                    await self._operate(connection)
        except* AuthenticationRefused as group:
            failure = _first_leaf(group)
        except* RETRYABLE as group:
            if failure is None:
                failure = _first_leaf(group)
        finally:
            self._session_scope = None
        return failure

    async def _operate(self, connection: PeerConnection) -> None:
        """Operational: run every attached route on `connection` until the connection ends."""
        # A connection that worked resets the schedule: a link that broke after working should
        # come back fast, while a peer that keeps refusing still backs off to the ceiling.
        self._delay = None
        self._connected_since = time.time()
        self._set_state(LinkState.OPERATIONAL, error="")
        try:
            async with trio.open_nursery() as nursery:
                self._connection, self._route_nursery = connection, nursery
                for route in self._routes:
                    self._start_route(route)
                await trio.sleep_forever()
        finally:
            self._connection, self._route_nursery = None, None
            self._connected_since = None

    def _start_route(self, route: Route) -> None:
        """Start a supervisor for `route` on the current connection, cancellable by detach().

        The scope is made here, not in the task, so a detach() before the task starts still
        reaches it (a scope cancelled before it is entered cancels at the first checkpoint).
        """
        assert self._route_nursery is not None and self._connection is not None
        scope = trio.CancelScope()
        self._route_scopes[id(route)] = scope
        self._route_nursery.start_soon(
            self._supervise, route, self._connection, scope, name=f"route {route.name}"
        )

    async def _supervise(self, route: Route, connection: PeerConnection, scope: trio.CancelScope) -> None:
        """Run `route` on `connection`, restarting it after each failure on the backoff schedule.

        The failure stays in this task, so the connection and the other routes are untouched.
        A run that lasted at least the ceiling counts as having worked and resets the schedule,
        as a successful connection does for the link. A route that returns is done with this
        connection and runs again on the next one.
        """
        delay: float | None = None
        try:
            with scope:
                while True:
                    started = trio.current_time()
                    try:
                        await route.run(connection)
                    except Exception as error:
                        if ends_connection(error):
                            raise
                        if trio.current_time() - started >= self.backoff.ceiling:
                            delay = None
                        delay = self.backoff.next_delay(delay)
                        self._log_route_failure(route, error, delay)
                    else:
                        LOGGER.info("%s: route %s finished", self.name, route.name)
                        return
                    await trio.sleep(delay)
        finally:
            if self._route_scopes.get(id(route)) is scope:
                del self._route_scopes[id(route)]

    def _log_route_failure(self, route: Route, error: Exception, delay: float) -> None:
        """A peer closing a route's channel is an operational event (no traceback); anything
        else is a fault in the route, logged with its traceback."""
        expected = isinstance(error, ChannelClosedByPeer)
        LOGGER.log(
            logging.WARNING if expected else logging.ERROR,
            "%s: route %s failed (%s); restarting in %g s",
            self.name,
            route.name,
            _describe(error),
            delay,
            exc_info=not expected,
        )

    def _set_state(
        self, state: LinkState, *, error: str | None = None, then: str = "", level: int = logging.INFO
    ) -> None:
        """Change state and log it: "link to host:port: Waiting (Connection refused); retrying in 4 s".

        `error` None keeps last_error, so a link Connecting again still shows why it retries.
        """
        if state is not self._state:
            self._since = time.time()
            began, self._state_began = self._state_began, self._clock()
            if self._state is not LinkState.OPERATIONAL:
                self.counters.down += self._state_began - began
        self._state = state
        if error is not None:
            self._last_error = error
        reason = f" ({error})" if error else ""
        LOGGER.log(level, "%s: %s%s%s", self.name, state.value, reason, then)
