"""The plan's part for who may do what: a node's vhosts, users and permissions against the
file's [[vhosts]], [[users]], [[permissions]] and [[topic_permissions]].

Only for nodes the file declares some of these for (topology.model.Access.manages), so a file
without them never touches a node's users. What is compared, and how it is named:

| kind | identity | compared | a difference is |
| --- | --- | --- | --- |
| vhost | name | (identity only) | |
| user | name | tags | changed in place (`users.tags`) |
| permission | user, vhost | configure, write, read | changed in place (`permissions.set`) |
| topic permission | user, vhost, exchange | write, read | changed in place |

A user's password is read (from `password_env` or `password_file`) only to create the user,
and sent as a hash; an existing user's password is never compared (the node keeps a hash) nor
changed: `amq-config user passwd` does that. With `prune`, what the file does not declare goes,
except what is not the topology's: "/", users from the node's users file (source `file`) and
the login the planner itself uses, and permissions of users the file does not declare.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from federation.account_requests import (
    PermissionSpec,
    TopicPermissionSpec,
    permission_clear,
    permission_set,
    topic_permission_clear,
    topic_permission_set,
    user_add,
    user_delete,
    user_tags,
    vhost_add,
    vhost_delete,
)
from federation.requests import Request
from gateway.names import DEFAULT_VHOST
from topology.changes import Action
from topology.live import LiveAccess
from topology.model import Access, Node, User
from topology.plan_requests import show

PERMISSION_PATTERNS = ("configure", "write", "read")
TOPIC_PATTERNS = ("write", "read")


class Planner(Protocol):
    """What the access diff adds to (topology.plan's per-node diff)."""

    def change(self, action: Action, kind: str, name: str, detail: list[str], *requests: Request) -> None: ...

    def drift(self, severity: Any, kind: str, name: str, message: str, detail: list[str]) -> None: ...

    def extra(self, kind: str, name: str, key: Any, detail: list[str], delete: Request) -> None: ...


def password(user: User) -> str:
    """The user's password from where the file says it is; ValueError saying why not."""
    if user.password_env is not None:
        value = os.environ.get(user.password_env)
        if not value:
            raise ValueError(f"environment variable {user.password_env} is not set (password_env)")
        return value
    assert user.password_file is not None
    try:
        with open(user.password_file, encoding="utf-8") as file:
            value = file.readline().rstrip("\n")
    except OSError as err:
        raise ValueError(f"cannot read {user.password_file} (password_file): {err.strerror}") from None
    if not value:
        raise ValueError(f"{user.password_file} (password_file) holds no password on its first line")
    return value


def diff_access(access: Access, node: Node, live: LiveAccess, prune: bool, planner: Planner) -> None:
    """Add to `planner` what makes `node`'s vhosts, users and permissions match the file."""
    _vhosts(access, node, live, planner)
    declared_users = _users(access, node, live, planner)
    _permissions(access, node, live, declared_users, planner)
    _topic_permissions(access, node, live, declared_users, planner)


def _vhosts(access: Access, node: Node, live: LiveAccess, planner: Planner) -> None:
    existing = {str(record["name"]) for record in live.vhosts}
    declared = {vhost.name for vhost in access.vhosts if vhost.node == node.name}
    for name in sorted(declared - existing):
        planner.change("create", "vhost", name, [], vhost_add(name))
    for name in sorted(existing - declared - {DEFAULT_VHOST}):
        planner.extra("vhost", name, name, [], vhost_delete(name))


def _users(access: Access, node: Node, live: LiveAccess, planner: Planner) -> set[str]:
    existing = {str(record["name"]): record for record in live.users}
    declared = [user for user in access.users if user.node == node.name]
    for user in declared:
        record = existing.get(user.name)
        tags = list(user.tags)
        if record is None:
            try:
                secret = password(user)
            except ValueError as err:
                planner.drift("error", "user", user.name, f"cannot be created: {err}", [])
                continue
            planner.change("create", "user", user.name, _tags_detail(tags), user_add(user.name, secret, tags))
        elif sorted(record.get("tags", [])) != sorted(tags):
            detail = [f"tags: {show(record.get('tags', []))} -> {show(tags)}"]
            planner.change("update", "user", user.name, detail, user_tags(user.name, tags))
    names = {user.name for user in declared}
    for name, record in sorted(existing.items()):
        if name not in names and record.get("source") == "node" and name != node.credentials.username:
            planner.extra("user", name, name, _tags_detail(record.get("tags", [])), user_delete(name))
    return names


def _tags_detail(tags: Sequence[str]) -> list[str]:
    return [f"tags: {', '.join(tags)}"] if tags else []


def _permissions(access: Access, node: Node, live: LiveAccess, users: set[str], planner: Planner) -> None:
    existing = {(str(r["user"]), str(r["vhost"])): r for r in live.permissions}
    declared = {
        (p.user, p.vhost): PermissionSpec(p.user, p.vhost, p.configure, p.write, p.read)
        for p in access.permissions
        if p.node == node.name
    }
    for key, spec in declared.items():
        name = _name(*key)
        wanted = dict(zip(PERMISSION_PATTERNS, spec.patterns(), strict=True))
        _set(planner, "permission", name, existing.get(key), wanted, permission_set(spec))
    for key, record in sorted(existing.items()):
        if key not in declared and key[0] in users:
            planner.extra(
                "permission", _name(*key), key, _patterns(record, PERMISSION_PATTERNS), permission_clear(*key)
            )


def _topic_permissions(
    access: Access, node: Node, live: LiveAccess, users: set[str], planner: Planner
) -> None:
    existing = {(str(r["user"]), str(r["vhost"]), str(r["exchange"])): r for r in live.topic_permissions}
    declared = {
        (p.user, p.vhost, p.exchange): TopicPermissionSpec(p.user, p.vhost, p.exchange, p.write, p.read)
        for p in access.topic_permissions
        if p.node == node.name
    }
    for key, spec in declared.items():
        name = f"{_name(key[0], key[1])} on {key[2]}"
        wanted = dict(zip(TOPIC_PATTERNS, spec.patterns(), strict=True))
        _set(planner, "topic permission", name, existing.get(key), wanted, topic_permission_set(spec))
    for key, record in sorted(existing.items()):
        if key not in declared and key[0] in users:
            name = f"{_name(key[0], key[1])} on {key[2]}"
            delete = topic_permission_clear(*key)
            planner.extra("topic permission", name, key, _patterns(record, TOPIC_PATTERNS), delete)


def _set(
    planner: Planner,
    kind: str,
    name: str,
    record: Mapping[str, Any] | None,
    wanted: dict[str, str],
    request: Request,
) -> None:
    """A permission to set: created where the node has none, updated where it differs."""
    if record is None:
        planner.change("create", kind, name, _patterns(wanted, tuple(wanted)), request)
        return
    detail = [
        f"{key}: {show(record.get(key))} -> {show(value)}"
        for key, value in wanted.items()
        if record.get(key) != value
    ]
    if detail:
        planner.change("update", kind, name, detail, request)


def _name(user: str, vhost: str) -> str:
    return f"{user} in vhost {show(vhost)}"


def _patterns(record: Mapping[str, Any], keys: Sequence[str]) -> list[str]:
    return [f"{key} {show(record.get(key))}" for key in keys]
