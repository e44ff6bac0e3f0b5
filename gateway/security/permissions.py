"""RabbitMQ's permissions as data: three patterns per user and vhost, topic permissions per
user, vhost and topic exchange, and the table of them a node holds.

The semantics are rabbit_auth_backend_internal's:

- a pattern is a regular expression searched for anywhere in the name (`re.search`, as
  Erlang's `re:run`), so `^` and `$` anchor it; the empty pattern is `^$`, which matches no
  queue or exchange a client can name (the default exchange is matched as `amq.default`);
- a user with no entry for a vhost may not open it; an entry, even one of three empty
  patterns, lets the user open it;
- a topic permission constrains routing keys on one topic exchange; without one for that
  exchange every key is allowed. Its patterns may hold `{username}`, `{vhost}` and
  `{client_id}`, which `TopicPermission.expanded` replaces per connection. Unlike RabbitMQ,
  the values are escaped (`re.escape`) before they are put in: a client chooses its own
  client id (and an operator a user name such as `a.b`), and neither should widen a pattern.

Patterns are compiled once, when a permission is made; the checks (gateway.security.access)
only search.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

#: The pattern RabbitMQ gives a user that may do everything (`rabbitmqctl set_permissions u
#: ".*" ".*" ".*"`); recognised, so that such a user's checks cost no search.
EVERYTHING = ".*"
#: What topic permission patterns may refer to (RabbitMQ's variables, as `{name}`).
TOPIC_VARIABLES = ("username", "vhost", "client_id")


@dataclass(frozen=True, eq=False)
class Pattern:
    """One regular expression of a permission, compiled once; equal by its source text."""

    source: str
    regex: re.Pattern[str] = field(init=False, repr=False)
    everything: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # RabbitMQ turns "" into "^$" ("<<"">> -> <<$^, $$>>" in rabbit_auth_backend_internal).
        object.__setattr__(self, "regex", re.compile(self.source or "^$"))
        object.__setattr__(self, "everything", self.source == EVERYTHING)

    def matches(self, name: str) -> bool:
        return self.everything or self.regex.search(name) is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pattern) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)


def pattern(source: str) -> Pattern:
    """A Pattern, or ValueError saying why `source` is not a regular expression."""
    try:
        return Pattern(source)
    except re.error as err:
        raise ValueError(f"invalid regular expression {source!r}: {err}") from None


@dataclass(frozen=True)
class Permission:
    """What a user may do in one vhost (`rabbitmqctl set_permissions -p VHOST USER C W R`)."""

    configure: Pattern
    write: Pattern
    read: Pattern

    @classmethod
    def of(cls, configure: str, write: str, read: str) -> Permission:
        """From pattern texts; ValueError naming the first that does not compile."""
        return cls(pattern(configure), pattern(write), pattern(read))

    @property
    def everything(self) -> bool:
        return self.configure.everything and self.write.everything and self.read.everything

    def allows(self, permission: str, name: str) -> bool:
        """`permission` (configure, write or read) on a queue or exchange named `name`."""
        granted: Pattern = getattr(self, permission)
        return granted.matches(name)


#: `vhosts = [...]` in the users file, or no list at all: everything (RabbitMQ's ".*" x3).
FULL = Permission.of(EVERYTHING, EVERYTHING, EVERYTHING)


@dataclass(frozen=True)
class TopicPermission:
    """Routing keys a user may publish (write) and bind (read) on one topic exchange of a
    vhost (`rabbitmqctl set_topic_permissions -p VHOST USER EXCHANGE WRITE READ`).

    The patterns are kept as written: only a connection knows its variables' values, so each
    connection compiles its own expansion once (`expanded`).
    """

    exchange: str
    write: str
    read: str

    @classmethod
    def of(cls, exchange: str, write: str, read: str) -> TopicPermission:
        """ValueError naming a pattern that does not compile once its variables are filled."""
        topic_pattern(write)
        topic_pattern(read)
        return cls(exchange, write, read)

    def expanded(self, variables: Mapping[str, str]) -> tuple[Pattern, Pattern]:
        """(write, read) with `{username}`, `{vhost}` and `{client_id}` replaced by one
        connection's values, escaped (a variable without a value stays as written)."""
        return _expanded(self.write, variables), _expanded(self.read, variables)


def topic_pattern(source: str) -> Pattern:
    """A topic permission's pattern with sample values for its variables: ValueError if it
    would not compile."""
    try:
        return Pattern(expand(source, dict.fromkeys(TOPIC_VARIABLES, "x")))
    except re.error as err:
        raise ValueError(f"invalid regular expression {source!r}: {err}") from None


#: Matches nothing: what a pattern becomes if a connection's values break it.
_NOTHING = Pattern("(?!)")


def _expanded(source: str, variables: Mapping[str, str]) -> Pattern:
    try:
        return Pattern(expand(source, variables))
    except re.error:
        return _NOTHING


def expand(source: str, variables: Mapping[str, str]) -> str:
    """`source` with each `{name}` of `variables` replaced by its value, escaped."""
    for name, value in variables.items():
        source = source.replace("{" + name + "}", re.escape(value))
    return source


@dataclass(frozen=True)
class Grants:
    """The permissions a users file gives one user beyond its `vhosts` list (the
    `permissions` and `topic_permissions` tables): (vhost, permission) and (vhost, topic
    permission) pairs."""

    vhosts: tuple[tuple[str, Permission], ...] = ()
    topics: tuple[tuple[str, TopicPermission], ...] = ()


class PermissionTable:
    """Every user's permissions on this node, by user and vhost.

    Mutable, so that management can change it while the node runs (issue 26 section 4); it
    does not notice changes itself: gateway.security.access.Authority changes it and moves
    its generation, which tells every connection to drop its cached decisions.
    """

    def __init__(self) -> None:
        self._vhosts: dict[str, dict[str | None, Permission]] = {}
        self._topics: dict[tuple[str, str], dict[str, TopicPermission]] = {}

    def lookup(self, user: str, vhost: str) -> Permission | None:
        """The user's permission in `vhost`: its own entry, else an every-vhost one, else None."""
        entries = self._vhosts.get(user)
        if entries is None:
            return None
        found = entries.get(vhost)
        return entries.get(None) if found is None else found

    def topics(self, user: str, vhost: str) -> Mapping[str, TopicPermission]:
        """The user's topic permissions in `vhost`, by exchange name."""
        return self._topics.get((user, vhost), {})

    def set(self, user: str, vhost: str | None, permission: Permission) -> None:
        self._vhosts.setdefault(user, {})[vhost] = permission

    def clear(self, user: str, vhost: str | None) -> None:
        entries = self._vhosts.get(user, {})
        entries.pop(vhost, None)
        if not entries:
            self._vhosts.pop(user, None)

    def set_topic(self, user: str, vhost: str, topic: TopicPermission) -> None:
        self._topics.setdefault((user, vhost), {})[topic.exchange] = topic

    def clear_topic(self, user: str, vhost: str, exchange: str | None = None) -> None:
        """One exchange's topic permission, or (None) all of the user's in the vhost."""
        key = (user, vhost)
        if exchange is None:
            self._topics.pop(key, None)
            return
        entries = self._topics.get(key, {})
        entries.pop(exchange, None)
        if not entries:
            self._topics.pop(key, None)

    def users(self) -> Iterator[str]:
        return iter(self._vhosts)

    def forget(self, user: str) -> None:
        """Every permission and topic permission of `user` (deleted, or granted anew)."""
        self._vhosts.pop(user, None)
        for key in [key for key in self._topics if key[0] == user]:
            del self._topics[key]

    def entries(self) -> Iterator[tuple[str, str | None, Permission]]:
        """(user, vhost or None for every vhost, permission) for every entry."""
        for user, entries in self._vhosts.items():
            for vhost, permission in entries.items():
                yield user, vhost, permission

    def topic_entries(self) -> Iterator[tuple[str, str, TopicPermission]]:
        """(user, vhost, topic permission) for every topic permission."""
        for (user, vhost), topics in self._topics.items():
            for topic in topics.values():
                yield user, vhost, topic
