"""The check point's decisions: RabbitMQ's permission mapping operation by operation, topic
permissions and their variables, the ACL as a second condition, runtime changes applying at
once, and the per-session cache of publish decisions."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from gateway.broker.access import (
    ACCESS,
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
from gateway.security.access import Authority, needs
from gateway.security.permissions import FULL, Pattern, Permission, PermissionTable, TopicPermission
from gateway.security.users import User


def authority(*grants: tuple[str, str | None, Permission]) -> Authority:
    table = PermissionTable()
    for user, vhost, permission in grants:
        table.set(user, vhost, permission)
    return Authority(table)


def alice(configure: str = ".*", write: str = ".*", read: str = ".*", vhost: str = "/") -> Authority:
    return authority(("alice", vhost, Permission.of(configure, write, read)))


# --- the mapping, operation by operation (rabbit_channel's check_*_permitted) --------------


@pytest.mark.parametrize(
    ("action", "obj", "name", "properties", "expected"),
    [
        (CREATE, EXCHANGE, "x", {}, [("configure", EXCHANGE, "x")]),
        (
            CREATE,
            EXCHANGE,
            "x",
            {"alternate": "ae"},
            [("configure", EXCHANGE, "x"), ("read", EXCHANGE, "x"), ("write", EXCHANGE, "ae")],
        ),
        (CREATE, QUEUE, "q", {}, [("configure", QUEUE, "q")]),
        (
            CREATE,
            QUEUE,
            "q",
            {"alternate": "dlx"},
            [("configure", QUEUE, "q"), ("read", QUEUE, "q"), ("write", EXCHANGE, "dlx")],
        ),
        (ACCESS, QUEUE, "q", {"passive": "true"}, []),
        (ACCESS, EXCHANGE, "x", {"passive": "true"}, []),
        (DELETE, QUEUE, "q", {}, [("configure", QUEUE, "q")]),
        (DELETE, EXCHANGE, "x", {}, [("configure", EXCHANGE, "x")]),
        (CONSUME, QUEUE, "q", {}, [("read", QUEUE, "q")]),
        (PURGE, QUEUE, "q", {}, [("read", QUEUE, "q")]),
        (PUBLISH, EXCHANGE, "x", {"routingkey": "k"}, [("write", EXCHANGE, "x")]),
        (BIND, EXCHANGE, "x", {"queuename": "q"}, [("write", QUEUE, "q"), ("read", EXCHANGE, "x")]),
        (UNBIND, EXCHANGE, "x", {"queuename": "q"}, [("write", QUEUE, "q"), ("read", EXCHANGE, "x")]),
        (
            BIND,
            EXCHANGE,
            "src",
            {"exchangename": "dst"},
            [("write", EXCHANGE, "dst"), ("read", EXCHANGE, "src")],
        ),
    ],
)
def test_what_each_operation_needs(
    action: str, obj: str, name: str, properties: Mapping[str, str], expected: list[tuple[str, str, str]]
) -> None:
    assert needs(action, obj, name, properties) == expected


def test_refusals_read_as_rabbitmqs() -> None:
    session = alice(configure="^alice\\.", write="^alice\\.", read="^alice\\.").session("alice", "/", {})
    assert session.check(CONSUME, QUEUE, "bob.q", {}) == (
        "read access to queue 'bob.q' in vhost '/' refused for user 'alice'"
    )
    assert session.check(DELETE, QUEUE, "bob.q", {}) == (
        "configure access to queue 'bob.q' in vhost '/' refused for user 'alice'"
    )
    assert session.check(BIND, EXCHANGE, "alice.x", {"queuename": "bob.q"}) == (
        "write access to queue 'bob.q' in vhost '/' refused for user 'alice'"
    )
    assert session.check(BIND, EXCHANGE, "bob.x", {"queuename": "alice.q"}) == (
        "read access to exchange 'bob.x' in vhost '/' refused for user 'alice'"
    )
    assert session.check(CONSUME, QUEUE, "alice.q", {}) is None
    assert session.check(ACCESS, QUEUE, "bob.q", {"passive": "true"}) is None


def test_the_default_exchange_is_matched_as_amq_default() -> None:
    may = alice(write="^amq\\.default$").session("alice", "/", {})
    assert may.publish("", "direct", "q") is None
    # "" is RabbitMQ's "^$": it grants nothing, and does not match the default exchange.
    may_not = alice(write="").session("alice", "/", {})
    assert may_not.publish("", "direct", "q") == (
        "write access to exchange 'amq.default' in vhost '/' refused for user 'alice'"
    )


def test_patterns_are_searched_not_matched_whole() -> None:
    """re:run semantics: a pattern matches anywhere in the name unless anchored."""
    session = alice(read="orders").session("alice", "/", {})
    assert session.check(CONSUME, QUEUE, "eu.orders.v2", {}) is None
    assert session.check(CONSUME, QUEUE, "payments", {}) is not None


def test_no_permission_in_the_vhost_refuses_everything() -> None:
    granted = alice(vhost="prod")
    assert not granted.may_open("alice", "/")
    assert granted.may_open("alice", "prod")
    assert granted.session("alice", "/", {}).check(CONSUME, QUEUE, "q", {}) == (
        "read access to queue 'q' in vhost '/' refused for user 'alice'"
    )


def test_an_entry_of_empty_patterns_still_opens_the_vhost() -> None:
    """RabbitMQ's check_vhost_access: any permission record for the vhost."""
    granted = alice(configure="", write="", read="")
    assert granted.may_open("alice", "/")
    assert granted.session("alice", "/", {}).check(CREATE, QUEUE, "q", {}) is not None


# --- the users file's grants ----------------------------------------------------------------


def test_a_vhosts_list_means_full_permissions_there_and_no_list_every_vhost() -> None:
    granted = Authority.from_users([User("listed", frozenset({"/", "prod"})), User("everywhere")])
    assert granted.permissions.lookup("listed", "prod") == FULL
    assert granted.permissions.lookup("listed", "staging") is None
    assert granted.permissions.lookup("everywhere", "any-vhost-at-all") == FULL
    assert granted.permissions.lookup("nobody", "/") is None


# --- topic permissions ---------------------------------------------------------------------


def topic_authority(write: str, read: str, exchange: str = "amq.topic") -> Authority:
    granted = alice()
    granted.set_topic_permission("alice", "/", TopicPermission.of(exchange, write, read))
    return granted


def test_topic_permissions_check_routing_keys_on_publish_and_bind() -> None:
    session = topic_authority("^{username}\\.", "^{vhost}-feed\\.").session("alice", "/", {})
    assert session.publish("amq.topic", "topic", "alice.orders") is None
    assert session.publish("amq.topic", "topic", "bob.orders") == (
        "write access to topic 'bob.orders' in exchange 'amq.topic' in vhost '/' refused for user 'alice'"
    )
    bind = {"queuename": "q", "routingkey": "/-feed.x", "type": "topic"}
    assert session.check(BIND, EXCHANGE, "amq.topic", bind) is None
    assert session.check(BIND, EXCHANGE, "amq.topic", {**bind, "routingkey": "#"}) == (
        "read access to topic '#' in exchange 'amq.topic' in vhost '/' refused for user 'alice'"
    )
    assert session.check(UNBIND, EXCHANGE, "amq.topic", {**bind, "routingkey": "#"}) is not None


def test_topic_permissions_apply_to_topic_exchanges_only_and_only_to_their_exchange() -> None:
    session = topic_authority("^nothing$", "^nothing$").session("alice", "/", {})
    assert session.publish("amq.topic", "direct", "any") is None  # not a topic exchange: ignored
    assert session.publish("other.topic", "topic", "any") is None  # no topic permission there
    assert session.check(BIND, EXCHANGE, "amq.topic", {"queuename": "q", "routingkey": "k"}) is None


def test_client_id_is_the_connection_name_and_variables_are_escaped() -> None:
    granted = topic_authority("^{client_id}\\.", ".*")
    named = granted.session("alice", "/", {"connection_name": "sensor-7"})
    assert named.publish("amq.topic", "topic", "sensor-7.temp") is None
    assert named.publish("amq.topic", "topic", "sensor-8.temp") is not None
    # A client naming itself ".*" gets the literal text ".*", not every key.
    wildcard = granted.session("alice", "/", {"connection_name": ".*"})
    assert wildcard.publish("amq.topic", "topic", "sensor-7.temp") is not None
    assert wildcard.publish("amq.topic", "topic", ".*.temp") is None
    # Without a connection name the variable stays as written, and matches nothing real.
    assert granted.session("alice", "/", {}).publish("amq.topic", "topic", "sensor-7.temp") is not None


def test_a_bad_topic_pattern_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="invalid regular expression"):
        TopicPermission.of("amq.topic", "({username}", ".*")


# --- changes apply at once, decisions are cached -------------------------------------------


def test_a_change_applies_to_the_next_operation_of_an_open_session() -> None:
    granted = alice()
    session = granted.session("alice", "/", {})
    assert session.publish("x", "direct", "k") is None
    granted.set_permission("alice", "/", Permission.of(".*", "^y$", ".*"))
    assert session.publish("x", "direct", "k") is not None
    granted.clear_permission("alice", "/")
    assert session.check(CONSUME, QUEUE, "q", {}) is not None
    granted.set_permission("alice", "/", FULL)
    assert session.publish("x", "direct", "k") is None


class CountingPattern(Pattern):
    searches = 0

    def matches(self, name: str) -> bool:
        CountingPattern.searches += 1
        return super().matches(name)


def test_a_stream_of_publishes_searches_once_per_exchange() -> None:
    write = CountingPattern("^x")
    granted = authority(("alice", "/", Permission(Pattern("^x"), write, Pattern("^x"))))
    session = granted.session("alice", "/", {})
    CountingPattern.searches = 0
    for key in range(1000):
        assert session.publish("x1", "direct", str(key)) is None
        assert session.publish("y1", "direct", str(key)) is not None
    assert CountingPattern.searches == 2


def test_full_permissions_search_nothing() -> None:
    everything = CountingPattern(".*")
    granted = authority(("alice", "/", Permission(everything, everything, everything)))
    session = granted.session("alice", "/", {})
    CountingPattern.searches = 0
    assert session.publish("x", "direct", "k") is None
    assert session.check(CREATE, QUEUE, "q", {}) is None
    assert CountingPattern.searches == 0


# --- the ACL file: a second condition ---------------------------------------------------------


class Rules:
    """An ACL that allows what `allowed` holds, and records what it was asked."""

    def __init__(self, *allowed: tuple[str, str, str]) -> None:
        self.allowed = set(allowed)
        self.asked: list[tuple[str, str, str, str, dict[str, str]]] = []

    def allows(
        self, user: str, action: str, obj: str, name: str = "", properties: Mapping[str, str] | None = None
    ) -> bool:
        self.asked.append((user, action, obj, name, dict(properties or {})))
        return (action, obj, name) in self.allowed


def test_both_permissions_and_the_acl_must_allow() -> None:
    granted = alice(read="^q$")
    granted.acl = Rules((CONSUME, QUEUE, "q"), (CONSUME, QUEUE, "other"))
    session = granted.session("alice", "/", {})
    assert session.check(CONSUME, QUEUE, "q", {}) is None
    assert session.check(CONSUME, QUEUE, "other", {}) is not None  # the ACL allows, permissions not
    assert session.check(PURGE, QUEUE, "q", {}) == (
        "purge access to queue 'q' in vhost '/' refused for user 'alice' by the ACL file"
    )


def test_passive_declares_need_no_permission_but_the_acls_access_rule() -> None:
    granted = alice(configure="", write="", read="")
    assert granted.session("alice", "/", {}).check(ACCESS, QUEUE, "q", {"passive": "true"}) is None
    granted.acl = Rules()
    assert granted.session("alice", "/", {}).check(ACCESS, QUEUE, "q", {"passive": "true"}) is not None


def test_a_reloaded_acl_applies_at_once_and_publish_decisions_go_by_routing_key() -> None:
    granted = alice()
    session = granted.session("alice", "/", {})
    assert session.publish("x", "direct", "k") is None
    rules = Rules()
    granted.acl = rules
    assert session.publish("x", "direct", "k") is not None
    assert rules.asked == [("alice", PUBLISH, EXCHANGE, "x", {"routingkey": "k"})]
    assert session.publish("x", "direct", "k") is not None
    assert session.publish("x", "direct", "other") is not None
    assert len(rules.asked) == 2  # cached per (exchange, routing key)
    granted.acl = None
    assert session.publish("x", "direct", "k") is None


# --- listings ------------------------------------------------------------------------------------


def test_listings_show_what_the_user_may_read_or_configure() -> None:
    granted = alice(configure="^alice\\.", write=".*", read="^shared$")
    visible = granted.visible("alice", "/")
    assert visible(QUEUE, "alice.q")
    assert visible(QUEUE, "shared")
    assert not visible(QUEUE, "bob.q")  # writable is not enough
    assert not granted.visible("alice", "prod")(QUEUE, "alice.q")
