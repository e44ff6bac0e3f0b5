"""The client side of the management request/reply protocol (docs/federation-design.md).

A request is a JSON message `{"method": ..., "arguments": {...}}` published to the node's
`amq.gateway.management` exchange with `reply_to` set to our exclusive queue and a fresh
`correlation_id`; the node answers `{"ok": true, "result": ...}` or
`{"ok": false, "error": {"kind": ..., "message": ...}}` on the default exchange.

Every failure a CLI can meet here — a refused reply, an unreachable node, refused credentials,
a lost connection, a node that does not answer in time — surfaces as one exception type,
ManagementFailed(kind, message), because the CLIs print them all the same way:
`Failed: <kind> - <message>`.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

import trio
from pamqp import commands

from federation.errors import AuthenticationRefused, ClientError, ConnectFailed
from federation.ports import Delivery, PeerChannel, PeerConnection
from gateway.names import DEFAULT_VHOST, MANAGEMENT_EXCHANGE
from gateway.wire.content import Content

if TYPE_CHECKING:
    from federation.address import BrokerAddress


#: The kind of a failure to reach a node at all (the CLIs add how to name another one).
CONNECT_FAILED = "ConnectFailed"
#: qpid-route and qpid-config exit with 1 on every failure they report themselves; so do ours.
EXIT_FAILED = 1


class ManagementFailed(Exception):
    """A management request that did not succeed; `kind` is the short word printed first."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(kind, message)
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return f"{self.kind} - {self.message}"


class Client(Protocol):
    """What the CLIs need from a connection to one node: one request at a time."""

    async def call(self, method: str, arguments: dict[str, Any] | None = None) -> Any: ...


#: Opens a Client on a node within a timeout (seconds); ManagementClient.connect in real use,
#: a fake in unit tests.
ClientFactory = Callable[["BrokerAddress", float], AbstractAsyncContextManager[Client]]


class ManagementClient:
    """Management requests over one AMQP channel, answered on our own exclusive reply queue."""

    def __init__(
        self,
        channel: PeerChannel,
        reply_queue: str,
        deliveries: AsyncIterator[Delivery],
        timeout: float,
        node: str,
    ) -> None:
        self._channel = channel
        self._reply_queue = reply_queue
        self._deliveries = deliveries
        self._timeout = timeout
        self._node = node
        self._ids = itertools.count(1)

    @classmethod
    @asynccontextmanager
    async def connect(cls, address: BrokerAddress, timeout: float) -> AsyncIterator[ManagementClient]:
        """Connect to a node and set up the reply queue; `timeout` bounds the connection and
        each request (0 or less means no limit, as qpid-route's --timeout 0)."""
        limit = timeout if timeout > 0 else math.inf
        try:
            async with _client_connect(address, limit) as connection:
                channel = await connection.channel()
                declared = await channel.call(commands.Queue.Declare(queue="", exclusive=True))
                await channel.consume(declared.queue, no_ack=True)
                deliveries = aiter(channel.deliveries())
                yield cls(channel, declared.queue, deliveries, limit, str(address))
        except BaseExceptionGroup as group:
            # The connection's nursery wraps whatever crossed it; one leaf is one failure.
            leaf = _single_leaf(group)
            if leaf is None:
                raise
            raise _as_failure(leaf, address) from None
        except ClientError as error:
            raise _as_failure(error, address) from None

    async def call(self, method: str, arguments: dict[str, Any] | None = None) -> Any:
        """Run one operation on the node and return its result; a refusal raises
        ManagementFailed with the node's own kind and message."""
        correlation_id = str(next(self._ids))
        request = json.dumps({"method": method, "arguments": arguments or {}}).encode()
        properties = commands.Basic.Properties(
            content_type="application/json", reply_to=self._reply_queue, correlation_id=correlation_id
        )
        self._channel.publish(MANAGEMENT_EXCHANGE, "", Content.from_properties(properties, request))
        with trio.move_on_after(self._timeout) as scope:
            reply = await self._reply(correlation_id)
        if scope.cancelled_caught:
            raise ManagementFailed(
                "Timeout", f"no reply from {self._node} to {method} within {self._timeout:g} s"
            )
        return _result(reply)

    async def _reply(self, correlation_id: str) -> Any:
        """The decoded reply with our correlation id; stale replies (of a timed-out request)
        are skipped rather than mistaken for this one."""
        while True:
            delivery = await anext(self._deliveries)
            if delivery.content.properties.correlation_id == correlation_id:
                try:
                    return json.loads(delivery.content.body)
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    raise ManagementFailed("protocol", f"the reply is not JSON: {exc}") from None


def _client_connect(address: BrokerAddress, timeout: float) -> AbstractAsyncContextManager[PeerConnection]:
    """federation.client.connect, imported on first use: only real runs need the AMQP client,
    and the unit tests of the CLIs (with fake nodes) must not depend on it. Management runs in
    the default vhost whatever vhost an address URL names (requests name theirs)."""
    from federation.client import connect

    return connect(address, vhost=DEFAULT_VHOST, timeout=timeout)


def _result(reply: Any) -> Any:
    """The result of a decoded reply, or the node's refusal as ManagementFailed."""
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise ManagementFailed("protocol", f"unexpected reply: {reply!r}")
    if reply["ok"]:
        return reply.get("result")
    error = reply.get("error") or {}
    raise ManagementFailed(str(error.get("kind", "error")), str(error.get("message", "")))


def _single_leaf(group: BaseExceptionGroup) -> Exception | None:
    """The only exception in a (nested) group, if it is an ordinary Exception."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        error = pending.pop()
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        else:
            leaves.append(error)
    if len(leaves) == 1 and isinstance(leaves[0], Exception):
        return leaves[0]
    return None


def _as_failure(error: Exception, address: BrokerAddress) -> Exception:
    """Client errors as ManagementFailed named by their class ("ConnectFailed"); anything else
    (the CLI's own exceptions passing back through the connection) unchanged. A connection
    that was never made names the address tried: "Connection refused" alone does not say
    which node, when the default address or a typo was used."""
    if isinstance(error, ConnectFailed):
        return ManagementFailed(
            CONNECT_FAILED, f"cannot connect to {address}: {error}; is a node running there?"
        )
    if isinstance(error, AuthenticationRefused):
        return ManagementFailed(
            type(error).__name__, f"{address} refused the login of user '{address.username}': {error}"
        )
    if isinstance(error, ClientError):
        return ManagementFailed(type(error).__name__, str(error))
    return error
