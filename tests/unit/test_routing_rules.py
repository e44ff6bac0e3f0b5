"""gateway.routing's rules beyond single-exchange matching: the federation-type table and its
decision, origin stamps over plain headers, the plain-data exchange graph and the predicate."""

from __future__ import annotations

import pytest

from gateway.routing import (
    BEHAVIOURS,
    DEST_HEADER,
    TRACE_HEADER,
    UNSTAMPED,
    ExchangeGraph,
    binding_identity,
    binding_matches,
    default_type,
    resolve_type,
    stamp_headers,
    stamp_of,
)
from gateway.routing.federation_types import TYPES

# type -> (forwarded when no local queue took it, when one did, routed locally once forwarded)
OPENAMQ = {
    "subscriber": (False, False, True),
    "publisher": (True, True, True),
    "locator": (True, False, True),
    "fanout": (True, True, False),
    "service": (True, False, True),
}


@pytest.mark.parametrize("kind", TYPES)
def test_each_type_forwards_and_routes_as_openamq_does(kind: str) -> None:
    unrouted, routed, locally = OPENAMQ[kind]
    behaviour = BEHAVIOURS[kind]
    assert behaviour.decide(from_parent=False, routed_here=False).forward is unrouted
    assert behaviour.decide(from_parent=False, routed_here=True).forward is routed
    for routed_here in (False, True):
        decision = behaviour.decide(from_parent=False, routed_here=routed_here)
        assert decision.route_locally is (locally if decision.forward else True)


@pytest.mark.parametrize("kind", TYPES)
def test_what_came_from_the_parent_is_never_forwarded_back(kind: str) -> None:
    for routed_here in (False, True):
        decision = BEHAVIOURS[kind].decide(from_parent=True, routed_here=routed_here)
        assert not decision.forward and decision.route_locally


def test_subscribing_types_are_those_that_pull_from_the_parent() -> None:
    assert {kind for kind, b in BEHAVIOURS.items() if b.subscribes} == {"subscriber", "fanout", "service"}


def test_the_type_defaults_by_exchange_type_and_data_means_fanout() -> None:
    assert default_type("direct") == "service" and default_type("topic") == "fanout"
    assert resolve_type(None, "headers") == "fanout"
    assert resolve_type("data", "direct") == "fanout"
    with pytest.raises(ValueError, match="unknown federation type 'bogus'"):
        resolve_type("bogus", "topic")


def test_a_stamp_round_trips_through_plain_headers() -> None:
    headers = stamp_headers({"app": "x"}, frozenset({"c", "b"}), ("a",))
    assert headers == {"app": "x", DEST_HEADER: ["b", "c"], TRACE_HEADER: ["a"]}
    stamp = stamp_of(headers)
    assert stamp.destinations == {"b", "c"} and stamp.trace == ("a",) and stamp.headers == headers


def test_tags_may_arrive_as_bytes_and_a_message_without_a_stamp_was_published_here() -> None:
    stamp = stamp_of({DEST_HEADER: [b"b"], TRACE_HEADER: [b"a", "z"]})
    assert stamp.destinations == {"b"} and stamp.trace == ("a", "z")
    assert stamp_of(None) == UNSTAMPED
    assert stamp_of({"app": 1}).destinations is None


def test_binding_identity_ignores_argument_order() -> None:
    assert binding_identity("k", {"a": 1, "b": 2}) == binding_identity("k", {"b": 2, "a": 1})
    assert binding_identity("k", None) == binding_identity("k", {})
    assert binding_identity("k", {"a": 1}) != binding_identity("j", {"a": 1})


def test_an_exchange_graph_refuses_to_redeclare_an_exchange_differently() -> None:
    graph = ExchangeGraph(["q"])
    graph.declare("x", "topic")
    graph.bind("x", "#", None, "q")
    graph.declare("x", "topic")  # the same again: bindings kept
    assert graph.route("x", "a.b") == {"q"}
    with pytest.raises(ValueError, match="declared already"):
        graph.declare("x", "direct")
    with pytest.raises(ValueError, match="unknown exchange type"):
        graph.declare("y", "x-random")


def test_an_exchange_graph_reports_destinations_of_its_callers_choosing() -> None:
    graph = ExchangeGraph({"q": ("queue", "q")})
    graph.declare("x", "direct")
    graph.bind("x", "k", None, ("route", 7))
    assert graph.route("", "q") == {("queue", "q")}
    assert graph.route("x", "k") == {("route", 7)}
    assert graph.route("missing", "k") == set()


def test_the_predicate_refuses_unknown_exchange_types() -> None:
    with pytest.raises(ValueError, match="unknown exchange type"):
        binding_matches("x-consistent-hash", "k", None, "k")
