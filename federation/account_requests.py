"""The management requests for users, vhosts and permissions, built from typed values.

`amq-config` (users, vhosts, permissions, topic-permissions) and the topology planner (a
file's [[users]], [[vhosts]], [[permissions]]) send the same requests; both build them here,
so a plan's request is by construction the one the CLI would send. The names are
rabbitmqctl's where it has one (add_user, set_permissions, set_topic_permissions...), as
`<things>.<verb>` like every other management method (docs/security.md lists them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from federation.requests import Request
from gateway.security.passwords import hash_password


@dataclass(frozen=True)
class PermissionSpec:
    """`rabbitmqctl set_permissions -p VHOST USER CONFIGURE WRITE READ`."""

    user: str
    vhost: str
    configure: str
    write: str
    read: str

    def identity(self) -> dict[str, str]:
        return {"user": self.user, "vhost": self.vhost}

    def patterns(self) -> tuple[str, str, str]:
        return (self.configure, self.write, self.read)


@dataclass(frozen=True)
class TopicPermissionSpec:
    """`rabbitmqctl set_topic_permissions -p VHOST USER EXCHANGE WRITE READ`."""

    user: str
    vhost: str
    exchange: str
    write: str
    read: str

    def identity(self) -> dict[str, str]:
        return {"user": self.user, "vhost": self.vhost, "exchange": self.exchange}

    def patterns(self) -> tuple[str, str]:
        return (self.write, self.read)


def user_add(name: str, password: str, tags: Sequence[str]) -> Request:
    """users.add with the password's hash, made here: the password itself never crosses the
    network, and the node spends no scrypt time on its event loop."""
    return ("users.add", {"name": name, "password_hash": hash_password(password), "tags": list(tags)})


def user_delete(name: str) -> Request:
    return ("users.delete", {"name": name})


def user_password(name: str, password: str) -> Request:
    return ("users.passwd", {"name": name, "password_hash": hash_password(password)})


def user_tags(name: str, tags: Sequence[str]) -> Request:
    return ("users.tags", {"name": name, "tags": list(tags)})


def vhost_add(name: str) -> Request:
    return ("vhosts.add", {"name": name})


def vhost_delete(name: str) -> Request:
    return ("vhosts.delete", {"name": name})


def permission_set(spec: PermissionSpec) -> Request:
    return (
        "permissions.set",
        {**spec.identity(), "configure": spec.configure, "write": spec.write, "read": spec.read},
    )


def permission_clear(user: str, vhost: str) -> Request:
    return ("permissions.clear", {"user": user, "vhost": vhost})


def topic_permission_set(spec: TopicPermissionSpec) -> Request:
    return ("topic_permissions.set", {**spec.identity(), "write": spec.write, "read": spec.read})


def topic_permission_clear(user: str, vhost: str, exchange: str | None = None) -> Request:
    """One exchange's topic permission for the user in the vhost, or (None) all of them."""
    arguments = {"user": user, "vhost": vhost}
    if exchange is not None:
        arguments["exchange"] = exchange
    return ("topic_permissions.clear", arguments)
