"""The check point: what each session may do, from RabbitMQ's permissions and the ACL file.

The broker model describes each operation in the Qpid ACL's vocabulary and asks its session's
`SessionAccess` (gateway.broker.access is the port). The answer needs both:

1. RabbitMQ's permission mapping (rabbit_channel's check_*_permitted), operation by operation:

   ==========================================  ==========================================
   operation (action object)                   needs
   ==========================================  ==========================================
   exchange.declare, queue.declare (create)    configure on it; with an alternate exchange
                                               or x-dead-letter-exchange, also read on it
                                               and write on that exchange
   passive declares (access)                   nothing
   exchange.delete, queue.delete (delete)      configure on it
   queue.bind/unbind (bind exchange)           write on the queue, read on the exchange
   exchange.bind/unbind (bind exchange)        write on the destination, read on the source
   basic.publish (publish exchange)            write on the exchange
   basic.get, basic.consume (consume queue)    read on the queue
   queue.purge (purge queue)                   read on the queue
   ==========================================  ==========================================

   The default exchange is matched as `amq.default` (rabbit_access_control does so). Topic
   permissions add a check of the routing key on a topic exchange: write on publish, read on
   queue.bind and exchange.bind (and their unbinds).
2. The ACL file's rules, when the node has one (`acl.allows`, first match wins); the default
   exchange is named `amq.default` there too, since a rule cannot say `name=` with nothing.

Decisions change at once when the permissions or the ACL do: `Authority` counts its changes
(`generation`), and each session drops what it worked out and cached when the count moved.

Cost: a session whose user may do everything (".*" three times, no topic permission) and a
node without an ACL answer from one comparison; otherwise a publish's decision is cached per
session and exchange (and routing key, when a topic permission or the ACL looks at it), as
rabbit_channel caches its own, so a stream of publishes runs no regular expression. RabbitMQ
keeps one cache per channel; a decision depends only on the user, the vhost and the
connection's name, so here a connection's channels share one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from gateway.broker.access import (
    BIND,
    CONSUME,
    CREATE,
    DELETE,
    EXCHANGE,
    PUBLISH,
    PURGE,
    QUEUE,
    UNBIND,
)
from gateway.broker.names import describe
from gateway.security.permissions import FULL, Pattern, Permission, PermissionTable, TopicPermission
from gateway.security.users import User

CONFIGURE = "configure"
WRITE = "write"
READ = "read"
#: What the default exchange ("") is called when a permission is matched or refused.
DEFAULT_EXCHANGE = "amq.default"
#: Decisions a session keeps (RabbitMQ keeps 12 per channel); all are dropped when full.
CACHE_SIZE = 256
#: The client property a topic permission's {client_id} stands for: the name a client gives
#: its connection (pika's, the Java client's and aio-pika's `connection_name`).
CLIENT_ID_PROPERTY = "connection_name"

Need = tuple[str, str, str]
#: Markers in a session's publish decisions by exchange (compared by identity; a decision is
#: None or a refusal text): not decided yet, and decided per routing key (a topic permission
#: on that exchange name).
_UNDECIDED = "\0undecided"
_BY_KEY = "\0by routing key"


class AclCheck(Protocol):
    """The ACL file's rules (gateway.security.acl.AclRules)."""

    def allows(
        self,
        user: str,
        action: str,
        obj: str,
        name: str = "",
        properties: Mapping[str, str] | None = None,
    ) -> bool: ...


def needs(action: str, obj: str, name: str, properties: Mapping[str, str]) -> list[Need]:
    """The (permission, kind, name) checks RabbitMQ makes for one operation, in its order."""
    if action == CREATE:
        found = [(CONFIGURE, obj, name)]
        alternate = properties.get("alternate")
        if alternate is not None:  # messages would go there on this user's behalf
            found += [(READ, obj, name), (WRITE, EXCHANGE, alternate)]
        return found
    if action == DELETE:
        return [(CONFIGURE, obj, name)]
    if action in (CONSUME, PURGE):
        return [(READ, obj, name)]
    if action in (BIND, UNBIND):
        queue = properties.get("queuename")
        destination = (QUEUE, queue) if queue is not None else (EXCHANGE, properties.get("exchangename", ""))
        return [(WRITE, *destination), (READ, EXCHANGE, name)]
    if action == PUBLISH:
        return [(WRITE, EXCHANGE, name)]
    return []  # access (passive declares), update: RabbitMQ asks for no permission


def _resource(kind: str, name: str) -> str:
    return DEFAULT_EXCHANGE if kind == EXCHANGE and name == "" else name


def refused(permission: str, kind: str, name: str, vhost: str, user: str) -> str:
    """RabbitMQ's text: "read access to queue 'q' in vhost '/' refused for user 'u'"."""
    return f"{permission} access to {describe(kind, _resource(kind, name), vhost)} refused for user '{user}'"


def topic_refused(permission: str, routing_key: str, exchange: str, vhost: str, user: str) -> str:
    """RabbitMQ's text for a topic permission's refusal."""
    return (
        f"{permission} access to topic '{routing_key}' in exchange '{exchange}' in vhost '{vhost}'"
        f" refused for user '{user}'"
    )


def acl_refused(action: str, obj: str, name: str, vhost: str, user: str) -> str:
    return f"{action} access to {describe(obj, name, vhost)} refused for user '{user}' by the ACL file"


class Authority:
    """The node's permissions and ACL: what sessions are checked against.

    Change them only through these methods (or by assigning `acl`): each moves `generation`,
    and every open session works its decisions out again at its next operation, as RabbitMQ's
    channels do when permissions change.
    """

    def __init__(self, permissions: PermissionTable, acl: AclCheck | None = None) -> None:
        self._permissions = permissions
        self._acl = acl
        self.generation = 0

    @classmethod
    def from_users(cls, users: Iterable[User], acl: AclCheck | None = None) -> Authority:
        """The users' grants (`_grant`)."""
        table = PermissionTable()
        for user in users:
            _grant(table, user)
        return cls(table, acl)

    def regrant(self, user: User) -> None:
        """`user`'s record changed at runtime (gateway.accounts): its grants replace its old ones."""
        self._permissions.forget(user.name)
        _grant(self._permissions, user)
        self.generation += 1

    def forget(self, user: str) -> None:
        """`user` was deleted: it may do nothing anywhere."""
        self._permissions.forget(user)
        self.generation += 1

    @property
    def permissions(self) -> PermissionTable:
        return self._permissions

    @property
    def acl(self) -> AclCheck | None:
        return self._acl

    @acl.setter
    def acl(self, rules: AclCheck | None) -> None:
        """A reloaded ACL file (or None): applies to every session's next operation."""
        self._acl = rules
        self.generation += 1

    def replace(self, permissions: PermissionTable) -> None:
        self._permissions = permissions
        self.generation += 1

    def set_permission(self, user: str, vhost: str | None, permission: Permission) -> None:
        """`vhost` None: every vhost (a users file entry without vhosts or permissions)."""
        self._permissions.set(user, vhost, permission)
        self.generation += 1

    def clear_permission(self, user: str, vhost: str | None) -> None:
        self._permissions.clear(user, vhost)
        self.generation += 1

    def set_topic_permission(self, user: str, vhost: str, topic: TopicPermission) -> None:
        self._permissions.set_topic(user, vhost, topic)
        self.generation += 1

    def clear_topic_permission(self, user: str, vhost: str, exchange: str | None = None) -> None:
        self._permissions.clear_topic(user, vhost, exchange)
        self.generation += 1

    def may_open(self, user: str, vhost: str) -> bool:
        """Connection.Open: a user with any permission entry for the vhost may open it."""
        return self._permissions.lookup(user, vhost) is not None

    def session(self, user: str, vhost: str, client_properties: Mapping[str, object]) -> SessionAccess:
        """The checks of one connection of `user` to `vhost`."""
        client_id = client_properties.get(CLIENT_ID_PROPERTY)
        if isinstance(client_id, bytes):
            client_id = client_id.decode("utf-8", "replace")
        return SessionAccess(self, user, vhost, client_id if isinstance(client_id, str) else None)

    def visible(self, user: str, vhost: str) -> Callable[[str, str], bool]:
        """What listings show a non-administrator: (kind, name) -> whether the user may read
        or configure it in `vhost` (nothing in a vhost it has no permission in)."""
        permission = self._permissions.lookup(user, vhost)
        if permission is None:
            return lambda kind, name: False
        read, configure = permission.read, permission.configure
        return lambda kind, name: (
            read.matches(_resource(kind, name)) or configure.matches(_resource(kind, name))
        )


def _grant(table: PermissionTable, user: User) -> None:
    """A user's grants into `table`: full permissions on each of its `vhosts`, its
    `permissions` patterns, and full permissions in every vhost for a user with neither."""
    granted = user.permissions
    if user.vhosts is None and not granted.vhosts:
        table.set(user.name, None, FULL)
    for vhost in user.vhosts or ():
        table.set(user.name, vhost, FULL)
    for vhost, permission in granted.vhosts:
        table.set(user.name, vhost, permission)
    for vhost, topic in granted.topics:
        table.set_topic(user.name, vhost, topic)


class SessionAccess:
    """One session's checks (implements gateway.broker.access.Access), with its cache."""

    __slots__ = (
        "_authority",
        "user",
        "vhost",
        "_variables",
        "_generation",
        "_permission",
        "_topics",
        "_acl",
        "_open",
        "_by_exchange",
        "_by_key",
    )

    def __init__(self, authority: Authority, user: str, vhost: str, client_id: str | None) -> None:
        self._authority = authority
        self.user = user
        self.vhost = vhost
        self._variables = {"username": user, "vhost": vhost}
        if client_id is not None:
            self._variables["client_id"] = client_id
        self._generation = -1
        self._permission: Permission | None = None
        #: The user's topic permissions in this vhost, expanded for this connection.
        self._topics: dict[str, tuple[Pattern, Pattern]] = {}
        self._acl: AclCheck | None = None
        #: True when everything is allowed: no check at all.
        self._open = False
        #: Publish decisions: by exchange name, or _BY_KEY for those whose decision depends on
        #: the routing key (a topic permission, or the ACL), kept in _by_key.
        self._by_exchange: dict[str, str | None] = {}
        self._by_key: dict[tuple[str, str, str], str | None] = {}

    def _refresh(self) -> None:
        """The permissions or the ACL changed (or this is the first check): start over."""
        authority = self._authority
        self._generation = authority.generation
        table = authority.permissions
        permission = self._permission = table.lookup(self.user, self.vhost)
        self._topics = {
            exchange: topic.expanded(self._variables)
            for exchange, topic in table.topics(self.user, self.vhost).items()
        }
        self._acl = authority.acl
        self._open = (
            permission is not None and permission.everything and not self._topics and self._acl is None
        )
        self._by_exchange = dict.fromkeys(self._topics, _BY_KEY)
        self._by_key = {}

    def check(self, action: str, obj: str, name: str, properties: Mapping[str, str]) -> str | None:
        if self._generation != self._authority.generation:
            self._refresh()
        if self._open:
            return None
        permission = self._permission
        for needed, kind, resource in needs(action, obj, name, properties):
            if permission is None or not permission.allows(needed, _resource(kind, resource)):
                return refused(needed, kind, resource, self.vhost, self.user)
        if action in (BIND, UNBIND) and properties.get("type") == "topic":
            refusal = self._topic(READ, name, properties.get("routingkey", ""))
            if refusal is not None:
                return refusal
        acl = self._acl
        if acl is not None and not acl.allows(self.user, action, obj, _resource(obj, name), properties):
            return acl_refused(action, obj, name, self.vhost, self.user)
        return None

    def publish(self, exchange: str, exchange_type: str, routing_key: str) -> str | None:
        if self._generation != self._authority.generation:
            self._refresh()
        if self._open:
            return None
        decision = self._by_exchange.get(exchange, _UNDECIDED)
        if decision is None:
            return None
        if decision is _BY_KEY:
            decision = self._by_key.get((exchange, exchange_type, routing_key), _UNDECIDED)
        if decision is _UNDECIDED:
            return self._decide(exchange, exchange_type, routing_key)
        return decision

    def _decide(self, exchange: str, exchange_type: str, routing_key: str) -> str | None:
        """A publish not decided yet: decide and remember it, by exchange name unless the ACL
        or a topic permission on that name makes the routing key (and the type) matter."""
        refusal = self._publish(exchange, exchange_type, routing_key)
        by_exchange = self._by_exchange
        if len(by_exchange) > CACHE_SIZE + len(self._topics):
            by_exchange = self._by_exchange = dict.fromkeys(self._topics, _BY_KEY)
        if self._acl is None and exchange not in self._topics:
            by_exchange[exchange] = refusal
            return refusal
        by_exchange[exchange] = _BY_KEY
        if len(self._by_key) >= CACHE_SIZE:
            self._by_key = {}
        self._by_key[exchange, exchange_type, routing_key] = refusal
        return refusal

    def _publish(self, exchange: str, exchange_type: str, routing_key: str) -> str | None:
        permission = self._permission
        if permission is None or not permission.allows(WRITE, _resource(EXCHANGE, exchange)):
            return refused(WRITE, EXCHANGE, exchange, self.vhost, self.user)
        if exchange_type == "topic":
            refusal = self._topic(WRITE, exchange, routing_key)
            if refusal is not None:
                return refusal
        acl = self._acl
        if acl is not None and not acl.allows(
            self.user, PUBLISH, EXCHANGE, _resource(EXCHANGE, exchange), {"routingkey": routing_key}
        ):
            return acl_refused(PUBLISH, EXCHANGE, exchange, self.vhost, self.user)
        return None

    def _topic(self, permission: str, exchange: str, routing_key: str) -> str | None:
        """A topic permission on `exchange` (a topic exchange) and `routing_key`; none: allowed."""
        patterns = self._topics.get(exchange)
        if patterns is None:
            return None
        write, read = patterns
        if (write if permission == WRITE else read).matches(routing_key):
            return None
        return topic_refused(permission, routing_key, exchange, self.vhost, self.user)
