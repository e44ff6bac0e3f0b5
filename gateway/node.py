"""The composition root of a node: the broker model, its store, the disk and memory alarms,
management, federation and the listeners, put together; and the node's own tasks (group commit, timers,
deferred model steps).

This is the only module of gateway/ (with the console scripts in gateway.cli) that knows all
of them: the model talks outward through ports (outbox, store writer, exchange handlers,
exchange federation hooks), gateway.server moves a connection's bytes, and federation reaches
the model through management and the broker's entry points.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import trio
from pamqp import commands

from federation.dynamic import AdvertRefused
from federation.manager import Federation
from federation.routes import LocalNode
from gateway import collector
from gateway.accounts import Accounts
from gateway.broker import Broker, Session
from gateway.broker.names import describe
from gateway.broker.paging import QUEUE_MEMORY_BUDGET
from gateway.connlimits import ConnectionLimits
from gateway.diskalarm import DEFAULT_LIMIT, DiskAlarm, free_bytes
from gateway.federation_config import FederationSettings
from gateway.management import Management, ManagementError
from gateway.management_amqp import handle_request
from gateway.memoryalarm import DEFAULT_WATERMARK, MemoryAlarm, Watermark, available_memory
from gateway.names import CONTROL_EXCHANGE, MANAGEMENT_EXCHANGE
from gateway.ready import READY, TLS_READY
from gateway.security import Authority, Logins, UsersDB
from gateway.security.access import AclCheck
from gateway.security.acl import AclFileError, AclRules
from gateway.server import (
    HANDSHAKE_TIMEOUT,
    ConnectionHandler,
    Limits,
    accept_loop,
    listen_addresses,
    open_listeners,
    send_alert,
    socket_peer,
)
from gateway.store import Store, WriteFailed
from gateway.store.spill import SpillFile
from gateway.tls import ClientTls, ServerTls, handshake_failure, peer_login
from gateway.wire.content import Content
from gateway.wire.errors import access_refused

LOGGER = logging.getLogger("gateway.node")
#: Stands in for the Basic.Publish of a refused advert in its error (class and method ids).
ADVERT_PUBLISH = commands.Basic.Publish(exchange=CONTROL_EXCHANGE)

#: What a node proposes in Connection.Tune unless its config says otherwise.
DEFAULT_LIMITS = Limits()
SHUTDOWN_GRACE = 5.0
TICK_RETRY = 1.0
#: Seconds between retries of a failed store write (a full disk; see gateway.store.database).
STORE_RETRY = 1.0
#: How long a thread waiting for the GIL lets the running one go on (Python's default is 5 ms).
#: The committer's worker thread takes the GIL back a few times per commit; behind a busy event
#: loop each take waited the full interval, which every publisher confirm then waited too.
COMMITTER_SWITCH_INTERVAL = 0.0005


class Node:
    """One broker node: the model, its store, management and federation, and the node's Trio
    tasks; each connection is served by a gateway.server.ConnectionHandler."""

    def __init__(
        self,
        *,
        name: str,
        users: UsersDB,
        acl_file: Path | None = None,
        store: Store | None = None,
        limits: Limits = DEFAULT_LIMITS,
        federation: FederationSettings | None = None,
        disk_free_limit: int = DEFAULT_LIMIT,
        memory_high_watermark: Watermark = DEFAULT_WATERMARK,
        queue_memory_budget: int = QUEUE_MEMORY_BUDGET,
        queue_defaults: dict[str, dict[str, Any]] | None = None,
        max_connections: int | None = None,
        vhost_limits: dict[str, dict[str, int]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        tls: ServerTls | None = None,
    ) -> None:
        """`clock` is the node's one monotonic clock, read by the model (TTLs, queue expiry)
        and turned into Trio deadlines by the node's timer. Pass trio.current_time (in a
        Trio run) to put the model on Trio's clock, virtual under trio.testing.MockClock.
        Wall time stays only where the store records it (a message's routed_at), so that
        deadlines survive a restart.

        `acl_file`: the Qpid ACL file, read here (AclFileError: the node must not start) and
        again by `reload_acl`, which swaps `self.acl`; every check reads the attribute.

        `tls` adds a TLS listener (gateway.tls; TlsError if its files cannot be loaded); its
        certificate is also what the node's TLS links present.
        """
        self.acl_file = acl_file
        self.name = name
        self.tls = tls
        self._tls_context = None if tls is None else tls.context()
        self.clock = clock
        self.users = users
        self.logins = Logins(users)
        #: The permissions (and ACL) every session's operations are checked against.
        self.authority = Authority.from_users(
            users.users(), None if acl_file is None else AclRules.load(acl_file)
        )
        self.store = store
        self.limits = limits
        self.connections = ConnectionLimits(max_connections, vhost_limits)
        self.broker = Broker(store=store, node_name=name, clock=clock, wall_clock=time.time)
        self.broker.queue_defaults.update(queue_defaults or {})
        self.broker.max_queues.update(
            {
                name: limits["max-queues"]
                for name, limits in (vhost_limits or {}).items()
                if "max-queues" in limits
            }
        )
        self.broker.queue_memory_budget = queue_memory_budget
        self.spill = self.broker.spill = SpillFile.open(None if store is None else store.data_dir)
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
        available = available_memory()
        self.memory_alarm = MemoryAlarm(self.broker, memory_high_watermark.bytes(available))
        LOGGER.info(
            "memory high watermark: %d bytes (memory_high_watermark: %s; %d bytes available)",
            self.memory_alarm.watermark,
            memory_high_watermark,
            available,
        )
        self.management = Management(self.broker, name, self._resources, acl=lambda: self.acl)
        if store is not None:
            self.broker.recover(store.load())
        self.accounts = Accounts(users, self.authority, self.broker, store)
        self.accounts.restore()
        self.management.operations.update(self.accounts.operations())
        self.federation = Federation(
            LocalNode(name, self.management, self.want_commit),
            data_dir=None if store is None else store.data_dir,
            settings=federation,
            tls=None if tls is None else ClientTls(tls.ca, tls.cert, tls.key),
        )
        self.management.operations.update(self.federation.operations())
        self.management.operations["acl.reload"] = self._reload_acl_request
        self.broker.exchange_handlers.update(
            {
                MANAGEMENT_EXCHANGE: partial(handle_request, self.management, self.authority.visible),
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
        #: Set when the last connection has ended, while shutdown() waits for that.
        self._handlers_gone: trio.Event | None = None
        self._handler_nursery: trio.Nursery | None = None

    @property
    def acl(self) -> AclCheck | None:
        """The ACL file's rules (None: no ACL file); assigning new rules (a reload) applies
        them to every open connection's next operation."""
        return self.authority.acl

    @acl.setter
    def acl(self, rules: AclCheck | None) -> None:
        self.authority.acl = rules

    def reload_acl(self) -> AclRules:
        """Read the ACL file again and use it from the next decision on; a file with errors
        raises AclFileError and the rules in force stay."""
        if self.acl_file is None:
            raise ManagementError("usage", f"node '{self.name}' has no ACL file (see --acl-file)")
        rules = self.acl = AclRules.load(self.acl_file)
        LOGGER.info("ACL file %s reloaded: %d rule(s)", self.acl_file, len(rules.rules))
        return rules

    def reload_acl_logged(self) -> None:
        """reload_acl for SIGHUP, where nobody waits for an answer: the outcome goes to the log."""
        try:
            self.reload_acl()
        except AclFileError as error:
            for line in error.errors:
                LOGGER.error("%s", line)
            LOGGER.error("ACL file %s not reloaded: the rules in force stay", self.acl_file)

    def _reload_acl_request(self) -> dict[str, Any]:
        """The management request acl.reload (amq-config reload-acl)."""
        try:
            rules = self.reload_acl()
        except AclFileError as error:
            raise ManagementError("invalid", f"{error}\nthe rules in force stay") from None
        return {"file": str(rules.path), "rules": len(rules.rules), "warnings": list(rules.warnings)}

    def _resources(self) -> dict[str, Any]:
        """The memory and disk readings and alarms, and the spill file's bodies, for
        management's node.info."""
        memory = self.memory_alarm
        resources: dict[str, Any] = {
            "memory": {"used": memory.used, "high_watermark": memory.watermark, "alarm": memory.on},
            "spill": {"bodies": self.spill.count, "bytes": self.spill.bytes},
        }
        if self.disk_alarm is not None:
            disk = self.disk_alarm
            resources["disk"] = {"free": disk.free, "free_limit": disk.limit, "alarm": disk.on}
        return resources

    async def serve(
        self,
        host: str | None,
        port: int,
        *,
        task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen and serve until cancelled or shut down; started() hands back the listeners
        (the plain ones, unless TLS only, then the TLS ones)."""
        tls = self.tls
        listeners: list[trio.SocketListener] = []
        tls_listeners: list[trio.SocketListener] = []
        try:
            if tls is None or not tls.only:
                listeners = await open_listeners(host, port)
            if tls is not None:
                tls_listeners = await open_listeners(host, tls.port)
            async with trio.open_nursery() as nursery:
                self._handler_nursery = nursery
                if self.store is not None:
                    nursery.start_soon(self._commit_loop)
                    nursery.start_soon(self.store.run_checkpoints)
                if self.disk_alarm is not None:
                    nursery.start_soon(self.disk_alarm.run)
                nursery.start_soon(self.memory_alarm.run)
                nursery.start_soon(collector.run)
                nursery.start_soon(self._tick_loop)
                nursery.start_soon(self._later_loop)
                # Before accepting: links check peers against our own addresses, and durable
                # links restored here start reconnecting at once.
                own = [listener.socket.getsockname()[:2] for listener in listeners + tls_listeners]
                await nursery.start(self.federation.run, own)
                for listener in listeners:
                    nursery.start_soon(accept_loop, listener, partial(self._accepted, self._serve_socket))
                for listener in tls_listeners:
                    nursery.start_soon(accept_loop, listener, partial(self._accepted, self._serve_tls))
                # TLS first: whoever sees the plain ready line finds the TLS one logged already.
                for address in listen_addresses(tls_listeners):
                    LOGGER.info(TLS_READY, self.name, address)
                for address in listen_addresses(listeners):
                    LOGGER.info(READY, self.name, address)
                task_status.started(listeners or tls_listeners)
        finally:
            for listener in listeners + tls_listeners:
                await trio.aclose_forcefully(listener)

    async def shutdown(self) -> None:
        """Close every connection with 320 CONNECTION_FORCED, flush the store, stop serving."""
        self._stopping = True
        # Links first, while the local broker still takes what their routes forward.
        await self.federation.close()
        LOGGER.info("node %r shutting down: closing %d connection(s)", self.name, len(self.handlers))
        for handler in list(self.handlers):
            handler.force_close("broker forced connection closure with reason 'shutdown'")
        if self.handlers:
            self._handlers_gone = trio.Event()
            with trio.move_on_after(SHUTDOWN_GRACE):
                await self._handlers_gone.wait()
        if self.store is not None and self.store.pending:
            # One transaction for all that is left: the clients are gone, nobody waits behind it.
            self.broker.on_durable(await self.store.commit(settle_all=True), self.store.settled)
        if self._handler_nursery is not None:
            self._handler_nursery.cancel_scope.cancel()

    def _receive_adverts(self, session: Session, content: Content) -> None:
        """The broker's handler for CONTROL_EXCHANGE: a downstream node's adverts. Adverts
        steer where this node sends traffic, so only a federation login may send them, and
        only in the name of the node it is: anything else is a 403 on the publishing channel
        and changes nothing."""
        user = session.user
        try:
            self.federation.receive_adverts(session.vhost, content.body, self._speaker(session))
        except AdvertRefused as refused:
            raise access_refused(f"{refused} refused for user '{user.name}'", ADVERT_PUBLISH) from None

    def _speaker(self, session: Session) -> str | None:
        """The node a session's login may advertise as (None: any node), or 403. A federation
        login by its tags (User.speaks_for), or one the ACL file lets `create link`, which
        speaks for the node of its own name."""
        user = session.user
        if user.may_federate():
            return user.speaks_for()
        acl = self.acl
        if acl is not None and acl.allows(user.name, "create", "link"):
            return str(user.name)
        raise access_refused(
            f"access to {describe('exchange', CONTROL_EXCHANGE, session.vhost.name)} refused for user"
            f" '{user.name}': only federation logins may send adverts",
            ADVERT_PUBLISH,
        )

    def want_commit(self) -> None:
        """Called after model changes: wakes the committer if the store has buffered writes."""
        if self.store is not None and self.store.pending:
            self._commit_wanted.set()

    def _accepted(
        self, serve: Callable[[trio.SocketStream], Awaitable[None]], stream: trio.SocketStream
    ) -> None:
        """A TCP client connected: `serve` it, unless the node is shutting down."""
        assert self._handler_nursery is not None
        if self._stopping:
            self._handler_nursery.start_soon(trio.aclose_forcefully, stream)
        else:
            self._handler_nursery.start_soon(serve, stream)

    async def _serve_socket(self, stream: trio.SocketStream) -> None:
        await self.serve_connection(stream, *socket_peer(stream))

    async def _serve_tls(self, stream: trio.SocketStream) -> None:
        """The TLS handshake, bounded as the AMQP one is, then the same AMQP connection over
        the TLS stream. A failed handshake (a plaintext client, a certificate refused either
        way, a silent client) is logged once with OpenSSL's reason and ends this stream only."""
        assert self.tls is not None and self._tls_context is not None
        peer, peer_host = socket_peer(stream)
        tls_stream = trio.SSLStream(stream, self._tls_context, server_side=True)
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT):
                await tls_stream.do_handshake()
        except trio.TooSlowError:
            reason = f"not completed in {HANDSHAKE_TIMEOUT:g} s"
        except trio.BrokenResourceError as exc:
            reason = handshake_failure(exc)
        else:
            login = peer_login(tls_stream.getpeercert(), self.tls.login_field)
            await self.serve_connection(tls_stream, peer, peer_host, login)
            return
        LOGGER.warning("%s: TLS handshake refused: %r", peer, reason)
        await send_alert(tls_stream)
        await trio.aclose_forcefully(stream)

    async def serve_connection(
        self, stream: trio.abc.Stream, peer: str, peer_host: str, tls_login: str | None = None
    ) -> None:
        """Serve one AMQP connection over `stream` until it ends, then close the stream.

        Any byte stream does (TCP, TLS, a WebSocket adapter, memory streams in tests): `peer`
        names the client in logs; `peer_host` is its address, which loopback-only users and
        the throttling of failed logins go by; `tls_login` is the user a verified client
        certificate names, who may log in with SASL EXTERNAL (None: EXTERNAL is not offered).
        """
        handler = ConnectionHandler(self, stream, peer, peer_host, tls_login)
        self.handlers.add(handler)
        try:
            await handler.run()
        except Exception:
            LOGGER.exception("connection %s failed", handler.peer)
        finally:
            self.handlers.discard(handler)
            if not self.handlers and self._handlers_gone is not None:
                self._handlers_gone.set()
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
        Deadlines are times of the node's clock, converted to Trio's (the same clock unless
        the node was given another one).
        """
        while True:
            try:
                deadline = self.broker.tick()
            except Exception:
                LOGGER.exception("expiring messages and queues failed; retrying in %ss", TICK_RETRY)
                deadline = self.clock() + TICK_RETRY
            self.want_commit()
            self._deadline_moved = trio.Event()
            with trio.move_on_at(self._trio_time(deadline)):
                await self._deadline_moved.wait()

    def _trio_time(self, deadline: float | None) -> float:
        """A deadline of the node's clock as a deadline of Trio's (math.inf for None)."""
        if deadline is None:
            return math.inf
        if self.clock is trio.current_time:
            return deadline
        return trio.current_time() + max(deadline - self.clock(), 0.0)

    def _on_deadline(self, deadline: float) -> None:
        self._deadline_moved.set()
