"""What a link's source queue does with the copies it holds while the link is down (issue 27,
point 2), as the node applies it. A durable link that is down holds what reaches it in a
queue on its source (a dynamic route's bridge queue, an exchange route's queue, a
federation's outbox or queue on the parent) until it is back (simulations.world.Outages);
there a held copy is dropped, never delivered late, when:

- **the queue is full**: a durable dynamic route's bridge queue is declared with
  `x-max-length` BRIDGE_MAX_LENGTH and `x-overflow` drop-head (federation.dynamic_route), so of
  what one outage makes it hold, all but the newest BRIDGE_MAX_LENGTH are dropped. The model
  drops whole steps: the oldest steps held, up to and including the one in which the newest
  arrivals pass the limit (`cuts`), so it drops less than a step's arrivals more than the node
  does unless the limit falls on a step's end;
- **its TTL runs out** in a queue that applies it: a message's expiration (a publisher's
  `ttl_ms`) counts from when the node holding it routed it into the queue
  (gateway.broker.message.expiration_deadline), so a copy held longer than its TTL (the wait
  `Outages.wait_ms` books as delay) expires there. An exchange route's or a queue route's
  source queue and a federation's queues are routed into as any queue is; a dynamic route's
  bridge queue is not (gateway.broker.vhost.VHost.enqueue: the node a message is forwarded to
  applies its expiration, from when it arrives there), so nothing expires in it
  (`expiring_links`);
- **the node holding it is killed**: a node restarts with the persistent messages of its
  durable queues only (gateway.store), and every queue that holds for a durable link is
  durable, so a copy of a non-persistent message held while its source is killed is lost.

Nothing else holds a message in the model: subscribers' queues are consumed as fast as they
fill (amq-sim validate consumes every one), so their own limits and TTLs never bite.

Which copy a drop hits depends on the message (TTL, persistence), which a plain forest's
aggregate routing (simulations.hops) does not keep, and on the volume a link holds, known only
once traffic is routed. So `World.forest` routes class by class every publisher entry a drop
could hit (`Holding.by_classes`), decided from the scenario alone, and the engines cut what the
classes offer the limited links.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from federation.limits import BRIDGE_MAX_LENGTH
from simulations.scenario import Publishers, Scenario
from simulations.workload import matching, step_counts
from topology.model import Topology

#: Per link, the steps [first, cut) of an outage whose arrivals its full queue drops.
Cuts = dict[str, tuple[tuple[int, int], ...]]


@dataclass(frozen=True)
class Message:
    """The properties that decide a held copy's fate."""

    persistent: bool = True
    ttl_ms: int | None = None

    @classmethod
    def of(cls, publishers: Publishers) -> Message:
        return cls(publishers.persistent, publishers.ttl_ms)


def limited_links(topology: Topology) -> dict[str, int]:
    """Per direction "from>to" held by one bounded queue, its length limit: a direction that
    one route carries, a durable dynamic one (its bridge queue). Exchange routes' queues,
    queue routes' source queues and federations' queues have no length limit (a federation's
    outbox, under the default `block` policy, holds its publishers instead: not modelled);
    a direction several routes carry spreads what it holds over several queues (not modelled)."""
    carriers: dict[tuple[str, str], list[bool]] = {}
    for route in topology.routes:
        pair = (route.source, route.destination)
        carriers.setdefault(pair, []).append(route.kind == "dynamic" and route.durable)
    for federation in topology.federations:
        for pair in ((federation.child, federation.parent), (federation.parent, federation.child)):
            carriers.setdefault(pair, []).append(False)
    return {f"{s}>{d}": BRIDGE_MAX_LENGTH for (s, d), kinds in carriers.items() if kinds == [True]}


def expiring_links(topology: Topology) -> set[str]:
    """The directions "from>to" whose held copies may expire: those no dynamic route carries
    (a dynamic route's bridge queue sets no deadline; a direction it shares with another
    route is taken as the bridge's, as it cannot tell which a copy takes)."""
    found: dict[tuple[str, str], bool] = {}
    for route in topology.routes:
        pair = (route.source, route.destination)
        found[pair] = found.get(pair, True) and route.kind != "dynamic"
    for federation in topology.federations:
        for pair in ((federation.child, federation.parent), (federation.parent, federation.child)):
            found.setdefault(pair, True)
    return {f"{s}>{d}" for (s, d), expires in found.items() if expires}


def cuts(
    windows: Iterable[tuple[int, int, Iterable[str]]],
    limits: dict[str, int],
    arrivals: Callable[[str, int], int],
) -> Cuts:
    """Per limited link, the steps whose arrivals its full queue drops: in each outage
    (first, end, links: every window holds on a limited link, which is durable), counting
    back from its last step, the step whose arrivals take the total past the limit and every
    step before it. `arrivals(link, step)`: messages that join the queue at that step."""
    found: dict[str, list[tuple[int, int]]] = {}
    for first, end, links in windows:
        for link in sorted(set(links) & limits.keys()):
            total = 0
            for step in range(end - 1, first - 1, -1):
                total += arrivals(link, step)
                if total > limits[link]:
                    found.setdefault(link, []).append((first, step + 1))
                    break
    return {link: tuple(spans) for link, spans in found.items()}


def publishes_before(scenario: Scenario) -> np.ndarray:
    """Per step, every publish of the scenario at steps before it (how many a queue could
    hold by then at most: a dynamic route carries one copy of a message)."""
    per_step = np.zeros(scenario.steps, dtype=np.int64)
    for publishers in scenario.publishers:
        nodes = len(matching(scenario.topology, publishers.nodes))
        per_step += step_counts(scenario, publishers).astype(np.int64) * nodes
    return np.concatenate([[0], np.cumsum(per_step)])
