"""simulations.recovery: when a link comes back after a failure, worked out by hand from the
links' retry schedule (federation.timing.Backoff: 2 s, then 4, 8, 16, 32, 64 s between
attempts, 64 s after that), the holder of each connection, the restart time and the
heartbeat (a silent peer is noticed after 2 x 10 s; an attempt into a partition hangs 10 s)."""

from __future__ import annotations

from simulations.recovery import Downtime, Recovery, carriers
from simulations.scenario import Failure
from topology.model import Federation, Node, Route, Topology

NODES = ("a", "b", "c", "d")


def topology(*routes: Route, federations: tuple[Federation, ...] = ()) -> Topology:
    nodes = {name: Node(name, "127.0.0.1", 5672 + number) for number, name in enumerate(NODES)}
    return Topology("t", "t.toml", nodes, routes=routes, federations=federations)


def pull(source: str, destination: str) -> Route:
    return Route("exchange", source, destination, "x", key="k")


def test_each_direction_is_carried_by_the_connection_its_holder_opens() -> None:
    found = carriers(
        topology(
            pull("a", "b"),
            Route("exchange", "b", "c", "x", key="k", push=True),
            federations=(Federation("d", "a", "f", "fanout"),),
        )
    )
    assert found == {
        ("a", "b"): {("b", "a")},  # a pull route: the destination opens
        ("b", "c"): {("b", "c")},  # a push route: the source opens
        ("d", "a"): {("d", "a")},  # a federation: the child's peering, both ways
        ("a", "d"): {("d", "a")},
    }


def test_a_killed_node_and_the_links_held_towards_it() -> None:
    """The issue's case: c down 20-35, ready 1.5 s later. d's link to c dropped at 20 and
    retries at 22, 26, 34 (refused), then 50: up 15 s after c is ready. c's own link to b
    comes back when c is ready."""
    recovery = Recovery(
        topology(pull("b", "c"), pull("c", "d")), [Failure(20, 35, node="c", restart=1.5)], restart=0.7
    )
    assert recovery.dead("c") == [(20, 36.5)]
    assert recovery.link("c", "d") == [Downtime(20, 2 + 4 + 8 + 16 + 20)]
    assert recovery.link("b", "c") == [Downtime(20, 36.5)]
    assert recovery.link("a", "b") == []


def test_the_scenario_restart_time_applies_when_the_failure_gives_none() -> None:
    recovery = Recovery(topology(pull("b", "c")), [Failure(20, 35, node="c")], restart=0.7)
    assert recovery.link("b", "c") == [Downtime(20, 35.7)]


def test_a_retry_at_the_moment_the_node_is_ready_succeeds() -> None:
    recovery = Recovery(topology(pull("c", "d")), [Failure(10, 39, node="c", restart=1)], restart=0)
    assert recovery.link("c", "d") == [Downtime(10, 10 + 2 + 4 + 8 + 16)]


def test_after_the_ceiling_the_holder_retries_every_64_seconds() -> None:
    recovery = Recovery(topology(pull("c", "d")), [Failure(0, 200, node="c")], restart=0)
    # Attempts at 2, 6, 14, 30, 62, 126, 190, then 254.
    assert recovery.link("c", "d") == [Downtime(0, 254)]


def test_a_cut_link_comes_back_at_its_holders_first_retry_after_the_cut() -> None:
    recovery = Recovery(topology(pull("a", "b")), [Failure(10, 13, link=("b", "a"))], restart=0)
    assert recovery.link("a", "b") == [Downtime(10, 16)]  # 12 refused, 16


def test_a_holder_killed_while_retrying_starts_a_fresh_schedule() -> None:
    """d's retries towards c (dead 10-45) are at 12, 16, 24, 40, 72; killed at 41 and ready at
    42, d tries at 42, 44 and 48, where c accepts."""
    alone = Recovery(topology(pull("c", "d")), [Failure(10, 45, node="c")], restart=0)
    assert alone.link("c", "d") == [Downtime(10, 72)]
    both = Recovery(
        topology(pull("c", "d")), [Failure(10, 45, node="c"), Failure(41, 42, node="d")], restart=0
    )
    assert both.link("c", "d") == [Downtime(10, 48)]


def test_a_partition_is_noticed_after_two_heartbeats_and_attempts_hang() -> None:
    """Silent from 10, noticed at 30; attempts at 32 (hangs to 42), 46 (to 56) and 64, which
    hangs until the partition heals at 70 and completes then."""
    groups = (("a", "b"), ("c", "d"))
    recovery = Recovery(topology(pull("a", "c")), [Failure(10, 70, partition=groups)], restart=0)
    assert recovery.link("a", "c") == [Downtime(10, 70)]
    later = Recovery(topology(pull("a", "c")), [Failure(10, 80, partition=groups)], restart=0)
    # 32 -> 42, 46 -> 56, 64 -> 74, next 74 + 16 = 90.
    assert later.link("a", "c") == [Downtime(10, 90)]


def test_a_partition_healed_before_it_is_noticed_drops_nothing() -> None:
    recovery = Recovery(topology(pull("a", "c")), [Failure(10, 25, partition=(("a",),))], restart=0)
    assert recovery.link("a", "c") == [Downtime(10, 25, kept=True)]
    assert recovery.link("c", "d") == []  # both in "the rest"
