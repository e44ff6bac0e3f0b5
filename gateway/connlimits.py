"""Connection and channel limits no single user can exceed: per node, per vhost and per user.

RabbitMQ's limits and texts: the node's `max_connections` (RabbitMQ's `connection_max`), a
vhost's `max-connections`, a user's `max-connections` and `max-channels`. Connections are
counted once their Connection.Open is accepted, and each limit is checked there, so every
refusal is a clean 530 NOT_ALLOWED Connection.Close the client can read (a node that is full
refuses after the handshake, not by dropping the socket: clients report a reason rather than a
reset). A user's channels are counted over all its connections when it opens one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Protocol

from pamqp import commands

from gateway.security import User
from gateway.wire.errors import not_allowed


class Counted(Protocol):
    """An open connection, as the limits see it."""

    @property
    def open_channels(self) -> int:
        """Channels it has open (closing ones included)."""
        ...


class ConnectionLimits:
    """Counts the node's open connections and refuses those over a limit.

    Args:
        max_connections: the node's limit (None: none).
        vhost_limits: vhost name -> {"max-connections": N, ...}, the node config's [vhost] tables.
    """

    def __init__(
        self, max_connections: int | None = None, vhost_limits: Mapping[str, Mapping[str, int]] | None = None
    ) -> None:
        self.max_connections = max_connections
        self._vhost_max = {
            name: limits["max-connections"]
            for name, limits in (vhost_limits or {}).items()
            if "max-connections" in limits
        }
        self._total = 0
        self._by_vhost: Counter[str] = Counter()
        self._by_user: dict[str, set[Counted]] = {}

    def admit(self, connection: Counted, user: User, vhost: str) -> None:
        """Count `connection`, opening `vhost` as `user`; AMQPError 530 with RabbitMQ's text if
        the node, the vhost or the user is at its limit (nothing counted then)."""
        method = commands.Connection.Open
        if self.max_connections is not None and self._total >= self.max_connections:
            raise not_allowed(
                f"connection refused: node connection limit ({self.max_connections}) is reached", method
            )
        vhost_max = self._vhost_max.get(vhost)
        if vhost_max is not None and self._by_vhost[vhost] >= vhost_max:
            raise not_allowed(
                f"access to vhost '{vhost}' refused for user '{user.name}': connection limit ({vhost_max}) is reached",
                method,
            )
        mine = self._by_user.setdefault(user.name, set())
        if user.max_connections is not None and len(mine) >= user.max_connections:
            raise not_allowed(
                f"Connection refused for user '{user.name}': user connection limit ({user.max_connections}) is reached",
                method,
            )
        self._total += 1
        self._by_vhost[vhost] += 1
        mine.add(connection)

    def leave(self, connection: Counted, user: User, vhost: str) -> None:
        """`connection`, admitted with these arguments, is gone."""
        self._total -= 1
        self._by_vhost[vhost] -= 1
        if not self._by_vhost[vhost]:
            del self._by_vhost[vhost]
        mine = self._by_user[user.name]
        mine.discard(connection)
        if not mine:
            del self._by_user[user.name]

    def channel_refusal(self, user: User) -> str | None:
        """Why `user` may not open one more channel (RabbitMQ's text), or None if it may."""
        limit = user.max_channels
        if limit is None:
            return None
        if sum(each.open_channels for each in self._by_user.get(user.name, ())) >= limit:
            return f"number of channels opened for user '{user.name}' has reached the maximum allowed user limit of ({limit})"
        return None
