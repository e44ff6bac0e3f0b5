"""What a link's source queue drops while it holds copies for a link that is down
(simulations.holding), counted by hand on the chain a - b - c of durable routes
(tests/spark/scenarios/holding-*.toml): a publishes 5 messages a step (0.5 s) to c's queue
through b's queue for c (a dynamic route's bridge queue, or an exchange route's queue).
Without the drops every held copy would be delivered late."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from simulations import reference
from simulations.holding import cuts, expiring_links, limited_links
from simulations.scenario import load_scenario
from simulations.world import World

SCENARIOS = Path(__file__).resolve().parents[1] / "spark" / "scenarios"
PER_STEP = 5


def counts(tables: dict[str, pd.DataFrame]) -> tuple[int, int, int, int]:
    """c's queue's delivered, lost and delayed, and what b>c dropped."""
    q = tables["queues"].set_index(["node", "queue"]).loc[("c", "q")]
    links = tables["links"]
    return (
        int(q["delivered"]),
        int(q["lost"]),
        int(q["delayed"]),
        int(links[links["link"] == "b>c"]["dropped"].sum()),
    )


def test_a_held_copy_expires_when_its_ttl_is_shorter_than_its_wait() -> None:
    """b>c (an exchange route) is down steps 20-47; a copy published at step s waits
    (48 - s) x 500 ms, over 5,250 ms for steps 20-37: 18 steps expire in the route's queue on
    b, 10 are delivered late. In a dynamic route's bridge queue nothing expires."""
    scenario = load_scenario(SCENARIOS / "holding-ttl.toml")
    assert World(scenario).recovery()["b>c"] == [(10, 24)]
    total = 60 * PER_STEP
    assert counts(reference.tables(scenario)) == (total - 18 * PER_STEP, 18 * PER_STEP, 10 * PER_STEP, 90)
    # A TTL longer than the longest wait (14 s) expires nothing.
    kept = replace(scenario, publishers=(replace(scenario.publishers[0], ttl_ms=14_001),))
    assert counts(reference.tables(kept)) == (total, 0, 28 * PER_STEP, 0)
    bridged = replace(scenario, topology=load_scenario(SCENARIOS / "holding-kill.toml").topology)
    assert "b>c" not in World(bridged).expiring
    assert counts(reference.tables(bridged)) == (total, 0, 28 * PER_STEP, 0)


def test_non_persistent_copies_held_by_a_killed_node_are_lost_with_it() -> None:
    """b>c is down steps 20-79; b is killed at step 40 holding what a published at steps
    20-39 (lost: not persistent); a holds what it publishes while b is dead (steps 40-51) and
    b holds it again from step 52. Persistent messages survive the kill."""
    scenario = load_scenario(SCENARIOS / "holding-kill.toml")
    recovery = World(scenario).recovery()
    assert (recovery["b>c"], recovery["a>b"]) == ([(10, 40)], [(20, 26)])
    total, held = 100 * PER_STEP, 60 * PER_STEP
    lost = 20 * PER_STEP
    assert counts(reference.tables(scenario)) == (total - lost, lost, held - lost, lost)
    persistent = replace(scenario, publishers=(replace(scenario.publishers[0], persistent=True),))
    assert counts(reference.tables(persistent)) == (total, 0, held, 0)


def test_a_full_bridge_queue_drops_the_oldest_it_holds() -> None:
    """10,000 msg/s: b>c holds steps 20-47, 5,000 a step, 140,000 in all; the bridge queue
    keeps the newest 100,000 (steps 28-47) and drops steps 20-27."""
    scenario = load_scenario(SCENARIOS / "holding-limit.toml")
    world = World(scenario)
    assert world.limits == {"a>b": 100_000, "b>a": 100_000, "b>c": 100_000, "c>b": 100_000}
    assert world.overflows and world.forest(0, "a") is None  # routed class by class
    step = 5_000
    assert counts(reference.tables(scenario)) == (60 * step - 8 * step, 8 * step, 20 * step, 8 * step)


def test_cuts_drop_whole_steps_from_the_oldest() -> None:
    """Counting back from the window's last step, the step that passes the limit and every
    step before it are dropped; a window within the limit drops nothing."""
    arrivals = {5: 3, 6: 4, 7: 4, 8: 2}.get
    # Back from step 8: 2, 6, then 10 at step 6 passes 6 (steps 5-6 dropped) ...
    assert cuts([(5, 9, ["x"])], {"x": 6}, lambda link, s: arrivals(s, 0)) == {"x": ((5, 7),)}
    # ... 13 at step 5 passes 10 (step 5 dropped); 13 does not pass 13; y has no limit.
    assert cuts([(5, 9, ["x"])], {"x": 10}, lambda link, s: arrivals(s, 0)) == {"x": ((5, 6),)}
    assert cuts([(5, 9, ["x", "y"])], {"x": 13}, lambda link, s: arrivals(s, 0)) == {}


def test_only_a_direction_one_durable_dynamic_route_carries_is_bounded() -> None:
    """Its bridge queue is the only queue holding for it; a transient one holds nothing, and
    a direction shared with an exchange route or a federation spreads over several queues."""
    scenario = load_scenario(SCENARIOS / "recovery-dynamic.toml")
    assert limited_links(World(scenario).topology) == {
        "b>c2": 100_000,
        "c2>b": 100_000,
        "c2>e": 100_000,
        "e>c2": 100_000,
    }
    assert limited_links(load_scenario(SCENARIOS / "recovery.toml").topology) == {}


def test_copies_expire_in_every_holding_queue_but_a_bridge_queue() -> None:
    """A dynamic route's bridge queue sets no deadline (the node it forwards to applies the
    TTL); an exchange route's queue does."""
    topology = load_scenario(SCENARIOS / "holding-ttl.toml").topology
    assert expiring_links(topology) == {"b>c"}
