"""The Trio layer of a node: listeners, one handler per connection, heartbeats, group commit.

Everything here is I/O and time. Protocol rules live in gateway.wire and AMQP semantics in
gateway.broker; this module moves bytes between sockets and those two, and owns every task in
nurseries so that a connection's tasks end with it and the node's end with the node.

Resource handling: each connection has a reader task and a writer task. The broker model writes
outgoing frames into the connection's wire buffer synchronously (possibly while handling another
connection's publish) and wakes the writer; the writer drains the buffer to the socket. When a
peer reads too slowly its buffer passes HIGH_WATER, the model stops dispatching to it, and the
writer resumes the model once the buffer falls under LOW_WATER.

Error handling: AMQP errors are answered on the scope the spec gives them (channel or
connection). A connection-level close waits CLOSE_TIMEOUT for Close-Ok, then drops the socket.
An unexpected exception in one connection is logged and ends that connection only.
"""

from __future__ import annotations

import errno
import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio
from pamqp import commands

from federation.manager import Federation
from federation.routes import LocalNode
from gateway import __version__
from gateway.broker import Broker, Session
from gateway.diskalarm import DEFAULT_LIMIT, DiskAlarm, free_bytes
from gateway.federation_config import FederationSettings
from gateway.management import Management
from gateway.management_amqp import handle_request
from gateway.names import CONTROL_EXCHANGE, MANAGEMENT_EXCHANGE
from gateway.security import AuthenticationFailed, Logins, UsersDB
from gateway.store import Store, WriteFailed
from gateway.wire import events
from gateway.wire.connection import ServerConnection
from gateway.wire.content import Content
from gateway.wire.errors import AMQPError, connection_forced, internal_error, not_allowed

LOGGER = logging.getLogger("gateway.server")

HIGH_WATER = 128 * 1024
LOW_WATER = 32 * 1024
RECEIVE_SIZE = 256 * 1024
HANDSHAKE_TIMEOUT = 10.0
CLOSE_TIMEOUT = 3.0
SHUTDOWN_GRACE = 5.0
ACCEPT_RETRY_SLEEP = 0.1
TICK_RETRY = 1.0
#: Seconds between retries of a failed store write (a full disk; see gateway.store.database).
STORE_RETRY = 1.0
#: How long a thread waiting for the GIL lets the running one go on (Python's default is 5 ms).
#: The committer's worker thread takes the GIL back a few times per commit; behind a busy event
#: loop each take waited the full interval, which every publisher confirm then waited too.
COMMITTER_SWITCH_INTERVAL = 0.0005

_CONNECTION_OPEN_IDS = divmod(commands.Connection.Open.index, 0x10000)

_ACCEPT_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


class ListenError(Exception):
    """The node could not open its listening sockets (port in use, address not local...)."""


@dataclass(frozen=True)
class Limits:
    """What the node proposes in Connection.Tune."""

    heartbeat: int = 60
    frame_max: int = 131072
    channel_max: int = 2047


def server_properties(node_name: str) -> dict[str, Any]:
    """The Connection.Start properties clients log and check capabilities in."""
    return {
        "product": "amq-gateway",
        "version": __version__,
        "platform": "Python/Trio",
        "cluster_name": node_name,
        "copyright": "amq-gateway contributors",
        "information": "AMQP 0-9-1 federation and routing gateway",
        "capabilities": {
            "publisher_confirms": True,
            "consumer_cancel_notify": True,
            "basic.nack": True,
            "exchange_exchange_bindings": True,
            "connection.blocked": True,
            "authentication_failure_close": True,
            "per_consumer_qos": True,
        },
    }


class Node:
    """One broker node: the model, its store, and the Trio tasks that serve it."""

    def __init__(
        self,
        *,
        name: str,
        users: UsersDB,
        store: Store | None = None,
        limits: Limits = Limits(),
        federation: FederationSettings | None = None,
        disk_free_limit: int = DEFAULT_LIMIT,
    ) -> None:
        self.name = name
        self.users = users
        self.logins = Logins(users)
        self.store = store
        self.limits = limits
        self.broker = Broker(store=store, node_name=name)
        self.disk_alarm = (
            None
            if store is None
            else DiskAlarm(
                self.broker,
                store.data_dir,
                disk_free_limit,
                free=lambda path: free_bytes(path) + store.reusable_bytes,
            )
        )
        self.management = Management(self.broker, name)
        if store is not None:
            self.broker.recover(store.load())
        self.federation = Federation(
            LocalNode(name, self.management, self.want_commit),
            data_dir=None if store is None else store.data_dir,
            settings=federation,
        )
        self.management.operations.update(self.federation.operations())
        self.broker.exchange_handlers.update(
            {
                MANAGEMENT_EXCHANGE: partial(handle_request, self.management),
                CONTROL_EXCHANGE: self._receive_adverts,
            }
        )
        self.handlers: set[ConnectionHandler] = set()
        self._commit_wanted = trio.Event()
        self._later_wanted = trio.Event()
        self.broker.on_later = lambda: self._later_wanted.set()
        self._deadline_moved = trio.Event()
        self.broker.on_deadline = self._on_deadline
        self._stopping = False
        self._handler_nursery: trio.Nursery | None = None

    async def serve(
        self,
        host: str | None,
        port: int,
        *,
        task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen and serve until cancelled or shut down; started() hands back the listeners."""
        try:
            listeners = await trio.open_tcp_listeners(port, host=host)
        except OSError as exc:
            raise ListenError(f"cannot listen on {host or '*'}:{port}: {exc.strerror or exc}") from exc
        try:
            async with trio.open_nursery() as nursery:
                self._handler_nursery = nursery
                if self.store is not None:
                    nursery.start_soon(self._commit_loop)
                if self.disk_alarm is not None:
                    nursery.start_soon(self.disk_alarm.run)
                nursery.start_soon(self._tick_loop)
                nursery.start_soon(self._later_loop)
                # Before accepting: links check peers against our own addresses, and durable
                # links restored here start reconnecting at once.
                own = [listener.socket.getsockname()[:2] for listener in listeners]
                await nursery.start(self.federation.run, own)
                for listener in listeners:
                    nursery.start_soon(self._accept_loop, listener)
                for address in listen_addresses(listeners):
                    LOGGER.info("node %r ready: AMQP 0-9-1 listening on %s", self.name, address)
                task_status.started(listeners)
        finally:
            for listener in listeners:
                await trio.aclose_forcefully(listener)

    async def shutdown(self) -> None:
        """Close every connection with 320 CONNECTION_FORCED, flush the store, stop serving."""
        self._stopping = True
        # Links first, while the local broker still takes what their routes forward.
        await self.federation.close()
        LOGGER.info("node %r shutting down: closing %d connection(s)", self.name, len(self.handlers))
        for handler in list(self.handlers):
            handler.force_close("broker forced connection closure with reason 'shutdown'")
        with trio.move_on_after(SHUTDOWN_GRACE):
            while self.handlers:
                await trio.sleep(0.01)
        if self.store is not None and self.store.pending:
            # One transaction for all that is left: the clients are gone, nobody waits behind it.
            self.broker.on_durable(await self.store.commit(settle_all=True), self.store.settled)
        if self._handler_nursery is not None:
            self._handler_nursery.cancel_scope.cancel()

    def _receive_adverts(self, session: Session, content: Content) -> None:
        """The broker's handler for CONTROL_EXCHANGE: a downstream node's adverts."""
        self.federation.receive_adverts(session.vhost, content.body)

    def want_commit(self) -> None:
        """Called after model changes: wakes the committer if the store has buffered writes."""
        if self.store is not None and self.store.pending:
            self._commit_wanted.set()

    async def _accept_loop(self, listener: trio.SocketListener) -> None:
        """Accept until cancelled. Running out of file descriptors or memory (EMFILE...) is
        retried every ACCEPT_RETRY_SLEEP, and logged once per burst of failures: the first
        one, then their number when accepting works again (not ten tracebacks a second)."""
        assert self._handler_nursery is not None
        failures = 0
        burst_start = 0.0
        failure = ""
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                    raise
                if not failures:
                    burst_start = trio.current_time()
                    LOGGER.error("accept failed (%s); retrying every %ss", exc, ACCEPT_RETRY_SLEEP)
                failures += 1
                failure = f"{errno.errorcode.get(exc.errno, exc.errno)}: {exc.strerror}"
                await trio.sleep(ACCEPT_RETRY_SLEEP)
                continue
            if failures:
                LOGGER.warning(
                    "accept failed %d times over %.1fs (%s); accepting again",
                    failures,
                    trio.current_time() - burst_start,
                    failure,
                )
                failures = 0
            if self._stopping:
                await trio.aclose_forcefully(stream)
                continue
            self._handler_nursery.start_soon(self._run_handler, stream)

    async def _run_handler(self, stream: trio.SocketStream) -> None:
        handler = ConnectionHandler(self, stream)
        self.handlers.add(handler)
        try:
            await handler.run()
        except Exception:
            LOGGER.exception("connection %s failed", handler.peer)
        finally:
            self.handlers.discard(handler)
            handler.release()
            self.want_commit()
            await trio.aclose_forcefully(stream)

    async def _commit_loop(self) -> None:
        """Group commit: one transaction holds every write buffered since the last one.

        A failed write nacks the publishes it covered and leaves the node serving; the store
        keeps the rest of the batch for the next write, STORE_RETRY later (not at once: the
        disk is likely still full). Each commit rechecks the disk alarm.
        """
        assert self.store is not None and self.disk_alarm is not None
        sys.setswitchinterval(COMMITTER_SWITCH_INTERVAL)
        while True:
            await self._commit_wanted.wait()
            self._commit_wanted = trio.Event()
            while self.store.pending:
                failed = False
                try:
                    self.broker.on_durable(await self.store.commit(), self.store.settled)
                except WriteFailed as failure:
                    LOGGER.error("%s; its publishes are nacked, next write in %ss", failure, STORE_RETRY)
                    self.broker.on_lost(failure.ticket)
                    failed = True
                self.disk_alarm.check()
                if failed:
                    await trio.sleep(STORE_RETRY)

    async def _later_loop(self) -> None:
        """The model's deferred steps (Broker.defer), one per turn, so other connections'
        reads, writes and commits run between them."""
        later = self.broker.later
        while True:
            await self._later_wanted.wait()
            self._later_wanted = trio.Event()
            while later:
                later.popleft()()
                self.want_commit()
                await trio.sleep(0)

    async def _tick_loop(self) -> None:
        """Expire message TTLs and unused queues when they fall due.

        The model reports a deadline earlier than the one we sleep towards through
        `on_deadline`, which wakes this loop early; otherwise it sleeps until the next one.
        """
        while True:
            try:
                deadline = self.broker.tick()
            except Exception:
                LOGGER.exception("expiring messages and queues failed; retrying in %ss", TICK_RETRY)
                deadline = time.time() + TICK_RETRY
            self.want_commit()
            self._deadline_moved = trio.Event()
            with trio.move_on_after(math.inf if deadline is None else max(deadline - time.time(), 0.0)):
                await self._deadline_moved.wait()

    def _on_deadline(self, deadline: float) -> None:
        self._deadline_moved.set()


def _describe(event: Any) -> str:
    """Name an event for logs and INTERNAL_ERROR texts: the AMQP method when there is one."""
    method = getattr(event, "method", None)
    if method is not None:
        return method.name
    return "Basic.Publish" if isinstance(event, events.MessageReceived) else type(event).__name__


def listen_addresses(listeners: list[trio.SocketListener]) -> list[str]:
    """host:port for each listener, as logged in the ready line and used by tests."""
    addresses = []
    for listener in listeners:
        host, port = listener.socket.getsockname()[:2]
        addresses.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return addresses


class ConnectionHandler:
    """One client connection; also the broker's Outbox for it."""

    def __init__(self, node: Node, stream: trio.SocketStream) -> None:
        self.node = node
        self.stream = stream
        host, port = stream.socket.getpeername()[:2]
        self.peer_host: str = host
        self.peer = f"{host}:{port}"
        self.wire = ServerConnection(
            server_properties(node.name),
            frame_max=node.limits.frame_max,
            channel_max=node.limits.channel_max,
            heartbeat=node.limits.heartbeat,
        )
        self.session: Session | None = None
        self.user: Any = None
        self._wakeup = trio.Event()
        self._sending = 0
        self._paused = False
        #: While blocked we do not read, so the client's heartbeats wait in the socket.
        self._blocked = False
        self._last_received = trio.current_time()
        self._last_sent = trio.current_time()
        self._closing_deadline = math.inf
        self._done = False
        self._nursery: trio.Nursery | None = None
        self._handshake_scope = trio.CancelScope()

    # -- Outbox, called synchronously by the broker model -------------------------------------

    @property
    def client_capabilities(self) -> dict[str, Any]:
        return self.wire.client_capabilities

    def writable(self) -> bool:
        if self.wire.pending_output() + self._sending < HIGH_WATER:
            return True
        self._paused = True
        return False

    def send_method(self, channel: int, method: Any) -> None:
        self.wire.send_method(channel, method)
        self._wakeup.set()

    def send_deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        content: Content,
    ) -> None:
        self.wire.send_deliver(
            channel, consumer_tag, delivery_tag, redelivered, exchange, routing_key, content
        )
        self._wakeup.set()  # not _wake(): a call less per delivery and per confirm

    def send_get_ok(self, *args: Any) -> None:
        self.wire.send_get_ok(*args)
        self._wake()

    def send_return(self, *args: Any) -> None:
        self.wire.send_return(*args)
        self._wake()

    def close_channel(self, channel: int, error: AMQPError) -> None:
        self.wire.close_channel(channel, error)
        self._wake()

    def close_connection(self, error: AMQPError) -> None:
        if self._closing_deadline == math.inf:
            self.wire.close_connection(error)
            self._closing_deadline = trio.current_time() + CLOSE_TIMEOUT
        self._wake()

    # -- lifecycle ------------------------------------------------------------------------------

    def force_close(self, reason: str) -> None:
        """Shutdown: a 320 to a client that finished its handshake; a plain drop otherwise."""
        if self.session is not None:
            self.close_connection(connection_forced(reason))
        elif self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def release(self) -> None:
        """The socket is gone: give the model back everything this connection held."""
        if self.session is not None:
            self.session.disconnect()
            self.session = None

    async def run(self) -> None:
        LOGGER.debug("accepted connection from %s", self.peer)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._write_loop)
            nursery.start_soon(self._watchdog)
            with trio.move_on_after(HANDSHAKE_TIMEOUT) as self._handshake_scope:
                await self._read_loop()
            if self._handshake_scope.cancelled_caught:
                LOGGER.warning("%s: handshake not completed in %ss; closing", self.peer, HANDSHAKE_TIMEOUT)
            self._done = True
            self._wake()
            await self._flush_and_stop(nursery)

    async def _flush_and_stop(self, nursery: trio.Nursery) -> None:
        """Let the writer send what is queued (a Close, a Close-Ok), bounded, then stop."""
        with trio.move_on_after(CLOSE_TIMEOUT):
            while self.wire.pending_output() or self._sending:
                await trio.sleep(0.005)
        nursery.cancel_scope.cancel()

    def _wake(self) -> None:
        self._wakeup.set()

    async def _read_loop(self) -> None:
        while not self._done:
            try:
                data = await self.stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            self._last_received = trio.current_time()
            self.wire.receive_data(data)
            await self._process_events()
            self.node.want_commit()
            self._wake()
            if not data:
                return
            while self.wire.pending_output() + self._sending > HIGH_WATER and not self._done:
                # The peer is not reading what we send; stop reading what it sends.
                await trio.sleep(0.001)
            if self.session is not None:
                self._handshake_scope.deadline = math.inf
                while self.session.hold is not None:
                    await self._held(self.session)
                    # What arrived with the publish that caused the hold is handled now.
                    await self._process_events()
                    self.node.want_commit()
                    self._wake()

    async def _held(self, session: Session) -> None:
        """A publish of this connection found no room (a full federation outbox): stop
        reading from it until there is, telling a client that understands Connection.Blocked."""
        hold = session.hold
        assert hold is not None
        LOGGER.info("%s: blocked: %s", self.peer, hold.reason)
        self.wire.send_blocked(hold.reason)
        self._wake()
        self._blocked = True
        try:
            await hold.released()
        finally:
            self._blocked = False
            self._last_received = trio.current_time()
        session.hold = None
        self.wire.send_unblocked()
        self._wake()
        LOGGER.info("%s: unblocked", self.peer)

    async def _process_events(self) -> None:
        """Handle the buffered events, stopping early if a publish held the session (the rest
        wait in the wire buffer until it is released)."""
        next_event = self.wire.next_event
        while not self._done and (self.session is None or self.session.hold is None):
            event = next_event()
            if event is events.NEED_DATA:
                return
            kind = type(event)
            if kind is events.LoginRequested:
                await self._login(event)
                continue
            handler = _DISPATCH.get(kind)
            if handler is None:
                continue
            try:
                handler(self, event)
            except AMQPError as error:
                self._scope_error(getattr(event, "channel", 0), error)
            except Exception:
                # A bug must cost this connection, never the node or anyone else's messages.
                LOGGER.exception("%s: failed to handle %s", self.peer, _describe(event))
                self.close_connection(
                    internal_error(f"failed to handle {_describe(event)}; see the node's log")
                )

    def _scope_error(self, channel: int, error: AMQPError) -> None:
        LOGGER.info("%s: channel %d: %s", self.peer, channel, error.reply_text)
        if error.connection_level or channel == 0:
            self.close_connection(error)
        else:
            self.close_channel(channel, error)
            if self.session is not None:
                self.session.close_channel(channel)

    # -- events ---------------------------------------------------------------------------------

    async def _login(self, event: events.LoginRequested) -> None:
        """Check credentials through the node's Logins: throttled, cached, and with a bound
        on the password checks (tens of milliseconds each, in worker threads) run at once."""
        try:
            self.user = await self.node.logins.authenticate(event.mechanism, event.response, self.peer_host)
        except AuthenticationFailed as failure:
            if not failure.logged:
                LOGGER.warning("%s: login refused: %s", self.peer, failure.reason)
            if failure.reply_code == 403:
                self.wire.refuse_login(failure.reply_text)
                self._closing_deadline = trio.current_time() + CLOSE_TIMEOUT
            else:
                self.close_connection(AMQPError(failure.reply_code, failure.reply_text))
        else:
            self.wire.accept_login(self.user.name)
        self._wake()

    def _on_open(self, event: events.VhostRequested) -> None:
        if not self.user.may_access(event.vhost):
            raise not_allowed(
                f"access to vhost '{event.vhost}' refused for user '{self.user.name}'",
                commands.Connection.Open,
            )
        try:
            self.session = self.node.broker.connect(self, self.user, event.vhost, self.wire.client_properties)
        except AMQPError as error:
            raise AMQPError(error.reply_code, error.reply_text, *_CONNECTION_OPEN_IDS) from None
        self.wire.accept_open()
        LOGGER.info("%s: user %r opened vhost %r", self.peer, self.user.name, event.vhost)

    def _on_channel_opened(self, event: events.ChannelOpened) -> None:
        assert self.session is not None
        self.session.open_channel(event.channel)

    def _on_channel_close(self, event: events.ChannelCloseRequested) -> None:
        assert self.session is not None
        self.session.close_channel(event.channel)

    def _on_method(self, event: events.MethodReceived) -> None:
        assert self.session is not None
        self.session.handle_method(event.channel, event.method)

    def _on_message(self, event: events.MessageReceived) -> None:
        assert self.session is not None
        self.session.handle_publish(
            event.channel, event.exchange, event.routing_key, event.mandatory, event.immediate, event.content
        )

    def _on_protocol_error(self, event: events.ProtocolErrorOccurred) -> None:
        error = event.error
        LOGGER.warning("%s: protocol error: %s", self.peer, error.reply_text)
        if error.connection_level:
            self._closing_deadline = min(self._closing_deadline, trio.current_time() + CLOSE_TIMEOUT)
        elif self.session is not None and event.channel:
            self.session.close_channel(event.channel)

    def _on_peer_close(self, event: events.ConnectionCloseRequested) -> None:
        LOGGER.debug("%s: closed by peer (%d %s)", self.peer, event.reply_code, event.reply_text)
        # Like RabbitMQ, drop exclusive queues before the Close-Ok reaches the client, so a
        # client that reconnects at once never finds its old queue still locked.
        self.release()
        self._done = True

    def _on_closed(self, event: events.ConnectionClosed) -> None:
        self._done = True

    # -- tasks ----------------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            data = self.wire.data_to_send()
            if data:
                self._sending = len(data)
                try:
                    await self.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self._done = True
                    return
                finally:
                    self._sending = 0
                self._last_sent = trio.current_time()
            if self._paused and self.wire.pending_output() < LOW_WATER and self.session is not None:
                self._paused = False
                self.session.resume()
                self.node.want_commit()

    async def _watchdog(self) -> None:
        """Heartbeats both ways, and the bound on waiting for a Close-Ok."""
        while True:
            await trio.sleep(0.5 if self._closing_deadline != math.inf else 1.0)
            now = trio.current_time()
            if now >= self._closing_deadline:
                LOGGER.info("%s: no Close-Ok in time; dropping the connection", self.peer)
                await trio.aclose_forcefully(self.stream)
                return
            interval = self.wire.negotiated.heartbeat if self.session is not None else 0
            if not interval:
                continue
            if now - self._last_received > 2 * interval and not self._blocked:
                LOGGER.warning(
                    "%s: missed heartbeats from client, timeout: %ds; closing", self.peer, interval
                )
                await trio.aclose_forcefully(self.stream)
                return
            if now - self._last_sent >= interval / 2:
                self.wire.send_heartbeat()
                self._last_sent = now
                self._wake()


_DISPATCH: dict[type, Callable[[ConnectionHandler, Any], None]] = {
    events.VhostRequested: ConnectionHandler._on_open,
    events.ChannelOpened: ConnectionHandler._on_channel_opened,
    events.ChannelCloseRequested: ConnectionHandler._on_channel_close,
    events.MethodReceived: ConnectionHandler._on_method,
    events.MessageReceived: ConnectionHandler._on_message,
    events.ProtocolErrorOccurred: ConnectionHandler._on_protocol_error,
    events.ConnectionCloseRequested: ConnectionHandler._on_peer_close,
    events.ConnectionClosed: ConnectionHandler._on_closed,
}
