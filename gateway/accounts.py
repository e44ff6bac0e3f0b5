"""Users, vhosts and permissions changed while the node runs: the management operations behind
`amq-config users`, `user add|passwd|tags|del`, `vhosts`, `vhost add|del`, `permissions` and
`topic-permissions`, kept in the node's store.

Which wins when the users file and the node both name a user: a user's whole record (password
hash, tags, loopback rule, vhosts, permissions, limits) comes from one place. It is the users file's until the user
is first changed at runtime; from then on it is the store's, which keeps it (or that it was
deleted) across restarts, and the file's entry for that name is ignored, with a warning at start
naming it. So a runtime change is never undone by a restart, and the file stays what seeds a
new node. A node without a store (`--memory`) forgets runtime changes when it stops.

Changes apply at once: a new login finds the new password and tags, and open connections check
their next operation against the new permissions (gateway.security.access.Authority); a
deleted user's open connections are closed with 320 CONNECTION_FORCED, as are a deleted
vhost's, as RabbitMQ does.

Permissions set at runtime are explicit, as RabbitMQ's: a user of the users file that may use
every vhost (no `vhosts`, no `permissions`) or the vhosts of its list keeps full permissions
on each of those vhosts that exists when its permissions are first changed, and from then on
has exactly what is set.
Passwords arrive already hashed (`password_hash`, made by the CLI or planner), so a password
never crosses the network and the node spends no scrypt time on its event loop.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gateway.broker import Broker, Session
from gateway.management import ManagementError, Operation
from gateway.names import DEFAULT_VHOST, TAGS
from gateway.security.access import Authority
from gateway.security.passwords import PasswordHash
from gateway.security.permissions import FULL, Grants, Permission, TopicPermission
from gateway.security.users import User, UsersDB, check_username
from gateway.wire.errors import connection_forced

LOGGER = logging.getLogger("gateway.accounts")


class AccountStore(Protocol):
    """Where runtime changes are kept (gateway.store.Store)."""

    def put_account(self, name: str, record: str) -> None: ...

    def load_accounts(self) -> dict[str, str]: ...

    def delete_vhost(self, name: str) -> None: ...


class Accounts:
    """The node's users (a UsersDB it changes in place) and vhosts, managed at runtime."""

    def __init__(
        self, users: UsersDB, authority: Authority, broker: Broker, store: AccountStore | None = None
    ) -> None:
        self.users = users
        self.authority = authority
        self.broker = broker
        self.store = store
        #: Users whose record is the store's (changed at runtime, deleted ones too).
        self._managed: set[str] = set()

    def operations(self) -> dict[str, Operation]:
        return {
            "users.list": self.list_users,
            "users.add": self.add_user,
            "users.delete": self.delete_user,
            "users.passwd": self.change_password,
            "users.tags": self.set_tags,
            "vhosts.list": self.list_vhosts,
            "vhosts.add": self.add_vhost,
            "vhosts.delete": self.delete_vhost,
            "permissions.list": self.list_permissions,
            "permissions.set": self.set_permissions,
            "permissions.clear": self.clear_permissions,
            "topic_permissions.list": self.list_topic_permissions,
            "topic_permissions.set": self.set_topic_permissions,
            "topic_permissions.clear": self.clear_topic_permissions,
        }

    def restore(self) -> None:
        """Take back the users changed at runtime before the last stop (once, at start)."""
        if self.store is None:
            return
        for name, text in sorted(self.store.load_accounts().items()):
            record = json.loads(text)
            if name in self.users:
                LOGGER.warning(
                    "user %r: the users file's entry is ignored; the node's own record, changed at"
                    " runtime, wins (amq-config user ...)",
                    name,
                )
            self._managed.add(name)
            if record.get("deleted"):
                self.users.remove(name)
                self.authority.forget(name)
            else:
                user = _user(name, record)
                self.users.put(user, PasswordHash.parse(record["password"]))
                self.authority.regrant(user)

    # -- users ----------------------------------------------------------------------------------

    def list_users(self) -> list[dict[str, Any]]:
        return [
            {
                "name": user.name,
                "tags": list(user.tags),
                "source": "node" if user.name in self._managed else "file",
            }
            for user in sorted(self.users.users(), key=lambda user: user.name)
        ]

    def add_user(self, name: str, password_hash: str, tags: Iterable[str] = ()) -> None:
        """A new user with no vhosts: it may open none until given permissions (RabbitMQ's
        add_user)."""
        _checked_name(name)
        if name in self.users:
            raise ManagementError("PRECONDITION_FAILED", f"user '{name}' already exists")
        user = User(name, frozenset(), _checked_tags(tags))
        self._keep(user, _parsed(password_hash))

    def delete_user(self, name: str) -> None:
        """Delete a user; its open connections are closed with 320 CONNECTION_FORCED."""
        self._existing(name)
        self.users.remove(name)
        self.authority.forget(name)
        self._managed.add(name)
        self._write(name, {"deleted": True})
        self._close_sessions(lambda session: _user_name(session) == name, f"user '{name}' was deleted")
        LOGGER.info("user %r deleted", name)

    def change_password(self, name: str, password_hash: str) -> None:
        self._keep(self._existing(name), _parsed(password_hash))

    def set_tags(self, name: str, tags: Iterable[str]) -> None:
        self._keep(dataclasses.replace(self._existing(name), tags=_checked_tags(tags)))

    def _existing(self, name: str) -> User:
        user = self.users.get(name)
        if user is None:
            raise ManagementError("NOT_FOUND", f"no user '{name}'")
        return user

    def _keep(self, user: User, password: PasswordHash | None = None) -> None:
        """Put the user in the node's table and store, with a new password or (None) the one it
        has: from now on the store's record wins."""
        if password is None:
            password = self.users.password(user.name)
            assert password is not None
        self.users.put(user, password)
        self.authority.regrant(user)
        self._managed.add(user.name)
        self._write(user.name, _record(user, password))
        LOGGER.info("user %r changed (tags: %s)", user.name, ", ".join(user.tags) or "none")

    def _regranted(
        self,
        name: str,
        vhosts: Iterable[tuple[str, Permission]],
        topics: Iterable[tuple[str, TopicPermission]],
    ) -> None:
        """Give an existing user exactly these grants (explicit: no `vhosts` list any more)."""
        grants = Grants(tuple(sorted(vhosts, key=lambda item: item[0])), tuple(topics))
        self._keep(dataclasses.replace(self._existing(name), vhosts=frozenset(), permissions=grants))

    def _explicit(self, user: User) -> dict[str, Permission]:
        """A user's permissions by vhost, with `vhosts` (or "every vhost") as full ones on the
        vhosts that exist."""
        found = dict(user.permissions.vhosts)
        every = user.vhosts is None and not found
        for vhost in sorted(self.broker.vhosts) if every else sorted(user.vhosts or ()):
            found.setdefault(vhost, FULL)
        return found

    # -- permissions ----------------------------------------------------------------------------

    def list_permissions(self, vhost: str | None = None) -> list[dict[str, str]]:
        """Every user's patterns per vhost (an every-vhost grant shown in each vhost)."""
        rows = []
        for user, where, permission in self.authority.permissions.entries():
            for name in [where] if where is not None else sorted(self.broker.vhosts):
                if vhost is None or name == vhost:
                    rows.append({"user": user, "vhost": name, **_patterns(permission)})
        return sorted(rows, key=lambda row: (row["vhost"], row["user"]))

    def set_permissions(self, user: str, vhost: str, configure: str, write: str, read: str) -> None:
        """`rabbitmqctl set_permissions`: the user's three patterns in one vhost."""
        try:
            permission = Permission.of(configure, write, read)
        except ValueError as err:
            raise ManagementError("SYNTAX_ERROR", str(err)) from None
        self._vhost_named(vhost)
        current = self._existing(user)
        granted = self._explicit(current)
        granted[vhost] = permission
        self._regranted(user, granted.items(), current.permissions.topics)

    def clear_permissions(self, user: str, vhost: str) -> None:
        """`rabbitmqctl clear_permissions`: the user may not open the vhost any more."""
        current = self._existing(user)
        granted = self._explicit(current)
        if granted.pop(vhost, None) is None:
            raise ManagementError("NOT_FOUND", f"user '{user}' has no permissions in vhost '{vhost}'")
        self._regranted(user, granted.items(), current.permissions.topics)

    def list_topic_permissions(self, vhost: str | None = None) -> list[dict[str, str]]:
        rows = [
            {
                "user": user,
                "vhost": where,
                "exchange": topic.exchange,
                "write": topic.write,
                "read": topic.read,
            }
            for user, where, topic in self.authority.permissions.topic_entries()
            if vhost is None or where == vhost
        ]
        return sorted(rows, key=lambda row: (row["vhost"], row["user"], row["exchange"]))

    def set_topic_permissions(self, user: str, vhost: str, exchange: str, write: str, read: str) -> None:
        """`rabbitmqctl set_topic_permissions`: routing keys on one topic exchange."""
        try:
            topic = TopicPermission.of(exchange, write, read)
        except ValueError as err:
            raise ManagementError("SYNTAX_ERROR", str(err)) from None
        self._vhost_named(vhost)
        current = self._existing(user)
        topics = [
            item for item in current.permissions.topics if item[0] != vhost or item[1].exchange != exchange
        ]
        self._regranted(user, self._explicit(current).items(), [*topics, (vhost, topic)])

    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> None:
        """One exchange's topic permission of the user in the vhost, or all of them there."""
        current = self._existing(user)
        topics = [
            item
            for item in current.permissions.topics
            if item[0] != vhost or (exchange is not None and item[1].exchange != exchange)
        ]
        if len(topics) == len(current.permissions.topics):
            on = f" on exchange '{exchange}'" if exchange is not None else ""
            raise ManagementError(
                "NOT_FOUND", f"user '{user}' has no topic permissions in vhost '{vhost}'{on}"
            )
        self._regranted(user, self._explicit(current).items(), topics)

    def _vhost_named(self, name: str) -> None:
        if name not in self.broker.vhosts:
            raise ManagementError("NOT_FOUND", f"no vhost '{name}'")

    def _write(self, name: str, record: dict[str, Any]) -> None:
        if self.store is not None:
            self.store.put_account(name, json.dumps(record, sort_keys=True))

    # -- vhosts ---------------------------------------------------------------------------------

    def list_vhosts(self) -> list[dict[str, Any]]:
        return [{"name": name} for name in sorted(self.broker.vhosts)]

    def add_vhost(self, name: str) -> None:
        if not 0 < len(name.encode()) <= 255:
            raise ManagementError("SYNTAX_ERROR", "a vhost name is 1-255 bytes")
        if name in self.broker.vhosts:
            raise ManagementError("PRECONDITION_FAILED", f"vhost '{name}' already exists")
        self.broker.add_vhost(name)
        LOGGER.info("vhost %r added", name)

    def delete_vhost(self, name: str) -> None:
        """Delete a vhost with its exchanges, queues and their messages, closing the
        connections that opened it (320). The default vhost stays: links and routes live
        there."""
        if name == DEFAULT_VHOST:
            raise ManagementError(
                "PRECONDITION_FAILED", f"the default vhost '{DEFAULT_VHOST}' cannot be deleted"
            )
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise ManagementError("NOT_FOUND", f"no vhost '{name}'")
        for session in self._close_sessions(
            lambda session: session.vhost is vhost, f"vhost '{name}' is deleted"
        ):
            session.disconnect()
        for queue in list(vhost.queues.values()):
            vhost.delete_queue(queue)
        for exchange in [exchange for exchange in vhost.exchanges.values() if exchange.durable]:
            vhost.delete_exchange(exchange)
        del self.broker.vhosts[name]
        if self.store is not None:
            self.store.delete_vhost(name)
        for user in [user for user in self.users.users() if user.name in self._managed]:
            if any(vhost == name for vhost, _ in (*user.permissions.vhosts, *user.permissions.topics)):
                kept = [item for item in user.permissions.vhosts if item[0] != name]
                self._regranted(
                    user.name, kept, [item for item in user.permissions.topics if item[0] != name]
                )
        LOGGER.info("vhost %r deleted", name)

    def _close_sessions(self, which: Callable[[Session], bool], reason: str) -> list[Session]:
        """Close the connections of the sessions `which` picks with 320; those sessions."""
        sessions = [session for session in self.broker.sessions.values() if which(session)]
        for session in sessions:
            session.outbox.close_connection(connection_forced(reason))
        return sessions


def _user_name(session: Session) -> str | None:
    """The user a session logged in as (the node's internal sessions have a plain string)."""
    return getattr(session.user, "name", None)


def _checked_name(name: str) -> str:
    try:
        return check_username(name)
    except ValueError as err:
        raise ManagementError("SYNTAX_ERROR", str(err)) from None


def _checked_tags(tags: Iterable[str]) -> tuple[str, ...]:
    checked = tuple(tags)
    for tag in checked:
        if tag not in TAGS:
            raise ManagementError("SYNTAX_ERROR", f"unknown tag '{tag}' (known: {', '.join(TAGS)})")
    return checked


def _parsed(password_hash: str) -> PasswordHash:
    try:
        return PasswordHash.parse(password_hash)
    except ValueError as err:
        raise ManagementError("SYNTAX_ERROR", f"malformed password hash: {err}") from None


def _patterns(permission: Permission) -> dict[str, str]:
    return {
        "configure": permission.configure.source,
        "write": permission.write.source,
        "read": permission.read.source,
    }


def _record(user: User, password: PasswordHash) -> dict[str, Any]:
    """What the store keeps of a user (JSON)."""
    return {
        "password": password.encode(),
        "tags": list(user.tags),
        "loopback_only": user.loopback_only,
        "vhosts": None if user.vhosts is None else sorted(user.vhosts),
        "permissions": [
            [vhost, *_patterns(permission).values()] for vhost, permission in user.permissions.vhosts
        ],
        "topic_permissions": [
            [vhost, topic.exchange, topic.write, topic.read] for vhost, topic in user.permissions.topics
        ],
        "max_connections": user.max_connections,
        "max_channels": user.max_channels,
    }


def _user(name: str, record: dict[str, Any]) -> User:
    vhosts = record["vhosts"]
    grants = Grants(
        tuple((vhost, Permission.of(*patterns)) for vhost, *patterns in record["permissions"]),
        tuple((vhost, TopicPermission.of(*topic)) for vhost, *topic in record["topic_permissions"]),
    )
    return User(
        name,
        None if vhosts is None else frozenset(vhosts),
        tuple(record["tags"]),
        record["loopback_only"],
        grants,
        record.get("max_connections"),
        record.get("max_channels"),
    )
