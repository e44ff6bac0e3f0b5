"""The reference engine: the scenario run in one process, event by event, with the plainest
code that computes each table (the backlog by its recursion, W_t = max(0, W_{t-1} + a_t - c_t),
not the parallel form Spark uses). It is the oracle the Spark engine must equal exactly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulations.holding import Message
from simulations.hops import Done, TreeTraffic
from simulations.outcomes import Outcomes
from simulations.scenario import Scenario
from simulations.tables import COLUMNS, write_frame
from simulations.workload import events, publisher_draws, publishing
from simulations.world import ClassRoute, LinkId, Outages, World, link_ends

Progress = Callable[[str, float], None]
Class = tuple[int, str, int]
#: (entry, node, key, step) -> [messages, bytes].
Counts = dict[tuple[int, str, int, int], list[int]]


def run(scenario: Scenario, out: Path, progress: Progress = lambda stage, done: None) -> None:
    """Compute every table and write it under `out`."""
    for table, frame in tables(scenario, progress).items():
        write_frame(table, frame, out)


def tables(
    scenario: Scenario, progress: Progress = lambda stage, done: None, forests: bool = True
) -> dict[str, pd.DataFrame]:
    """Every table; `forests=False` routes every class by its paths, plain forests included
    (the tests compare the two)."""
    world = World(scenario, forests)
    counts, published = _count_events(scenario, progress)
    counts = _accepted(world, counts, published)
    #: Per (node, exchange): the publishes its clients made into it.
    published_in: dict[tuple[str, str], int] = defaultdict(int)
    for (entry, node, _, _), (messages, _) in counts.items():
        published_in[(node, scenario.publishers[entry].exchange)] += messages
    progress("routing", 0.0)
    trees, counts = _on_trees(world, counts)
    routes: dict[Class, ClassRoute] = {}
    classes = {(e, n, k) for e, n, k, _ in counts}
    for number, cls in enumerate(classes):
        routes[cls] = world.route(cls[1], *world.message(cls[0], cls[2]))
        progress("routing", (number + 1) / max(1, len(classes)))
    for (entry, node, key, _), (messages, _) in counts.items():
        if not routes[(entry, node, key)].deliveries:
            published[node][1] += messages
    for tree in trees:
        for node, messages in tree.unrouted().items():
            published[node][1] += messages
    crossed = {link for route in routes.values() for link, _, _ in route.crossings}
    links = sorted(crossed.union(*(tree.crossed() for tree in trees)))
    down = Outages(world, world.windows(links))
    offered, landed = _traffic(world, down, counts, routes, links, trees, published_in, progress)
    cuts = world.cuts(down.windows, lambda link, step: offered[link][step][0] - offered[link][step][2])
    if cuts:  # (only classes reach a queue that may overflow: World.by_classes)
        down = Outages(world, down.windows, cuts)
        offered, landed = _traffic(world, down, counts, routes, links, trees, published_in, progress)
    link_rows: list[dict[str, Any]] = _links(scenario, world, down, offered, links)
    progress("outcomes", 0.0)
    delay = {
        (row["link"], row["step"]): world.props(row["link"]).latency_ms + row["delay_ms"] for row in link_rows
    }
    outcomes = Outcomes()
    latency: dict[LinkId, int] = {}

    def link_ms(link: LinkId, step: int) -> int:
        """The link's latency plus queueing delay at `step` (its latency alone past the run)."""
        if (link, step) in delay:
            return delay[(link, step)]
        if link not in latency:  # not setdefault: that would work out the props every time
            latency[link] = world.props(link).latency_ms
        return latency[link]

    _deliveries(down, counts, routes, link_ms, outcomes)
    for number, tree in enumerate(trees):
        tree.deliver(down, link_ms, outcomes, _share(progress, "trees: outcomes", number, len(trees)))
    queues, delays = outcomes.rows({name: node.region for name, node in world.topology.nodes.items()})
    sent: dict[str, int] = defaultdict(int)
    received: dict[str, int] = defaultdict(int)
    for row in link_rows:
        sent[row["source"]] += row["messages"]
        received[row["destination"]] += row["messages"] - row["lost"] - row["dropped"]
    nodes = [
        {
            "node": name,
            "region": node.region,
            "published": published[name][0],
            "refused": published[name][2],
            "unrouted": published[name][1],
            "sent": sent[name],
            "received": received[name],
            "delivered": outcomes.delivered[name],
        }
        for name, node in world.topology.nodes.items()
    ]
    progress("outcomes", 1.0)
    return {
        "links": pd.DataFrame(link_rows, columns=_columns("links")),
        "nodes": pd.DataFrame(nodes),
        "queues": pd.DataFrame(queues, columns=_columns("queues")),
        "delays": pd.DataFrame(delays, columns=_columns("delays")),
        "exchanges": pd.DataFrame(
            [
                (node, exchange, *counted)
                for (node, exchange), counted in sorted(landed.items())
                if counted[0]
            ],
            columns=_columns("exchanges"),
        ),
    }


def _share(progress: Progress, stage: str, number: int, count: int) -> Done:
    """Progress of `stage` from the share done of its `number`th part of `count`."""
    return lambda share: progress(stage, (number + share) / count)


def _on_trees(world: World, counts: Counts) -> tuple[dict[TreeTraffic, str], Counts]:
    """The counts of publishes into plain forests, per (exchange, tree) (each tree with its
    exchange), and the rest."""
    trees: dict[tuple[str, int], TreeTraffic] = {}
    places: dict[tuple[int, str], TreeTraffic | None] = {}
    rest: Counts = {}
    for (entry, node, key, step), (messages, size) in counts.items():
        if (entry, node) not in places:
            found = world.forest(entry, node)
            exchange = world.scenario.publishers[entry].exchange
            if found is not None and (exchange, found[1]) not in trees:
                trees[(exchange, found[1])] = TreeTraffic(*found, world.scenario.keys)
            places[(entry, node)] = None if found is None else trees[(exchange, found[1])]
        tree = places[(entry, node)]
        if tree is None:
            rest[(entry, node, key, step)] = [messages, size]
        else:
            tree.add(node, key, step, messages, size)
    return {tree: exchange for (exchange, _), tree in trees.items()}, rest


def _columns(table: str) -> list[str]:
    return [name for name, _ in COLUMNS[table]]


def _count_events(scenario: Scenario, progress: Progress) -> tuple[Counts, dict[str, list[int]]]:
    """(entry, node, key, step) -> [messages, bytes], counted one event at a time."""
    draws = publisher_draws(scenario)
    counts: Counts = defaultdict(lambda: [0, 0])
    published: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    sources = publishing(scenario)
    for number, (entry, node) in enumerate(sources):
        drawn = events(scenario, entry, node, draws[entry])
        for step, key, size in zip(
            drawn["step"].tolist(), drawn["key"].tolist(), drawn["size"].tolist(), strict=True
        ):
            cell = counts[(entry, node, key, step)]
            cell[0] += 1
            cell[1] += size
            published[node][0] += 1
        progress("events", (number + 1) / len(sources))
    return counts, published


def _accepted(world: World, counts: Counts, published: dict[str, list[int]]) -> Counts:
    """The counts a live node accepts: what its publishers send while it is dead is refused,
    moved from `published` (published, unrouted, refused per node) to refused."""
    dead = {node: world.dead_steps(node) for node in {node for _, node, _, _ in counts}}
    kept: Counts = {}
    for (entry, node, key, step), cell in counts.items():
        if any(first <= step < end for first, end in dead[node]):
            published[node][0] -= cell[0]
            published[node][2] += cell[0]
        else:
            kept[(entry, node, key, step)] = cell
    return kept


def _offered(
    world: World,
    down: Outages,
    counts: Counts,
    routes: dict[Class, ClassRoute],
    links: list[LinkId],
    landed: dict[tuple[str, str], list[int]],
) -> dict[LinkId, list[list[int]]]:
    """Per link and step, [messages, bytes, dropped, dropped bytes] the classes' crossings
    offer it, and of those what its source drops while holding them (simulations.holding);
    what crosses (offered, neither dropped nor lost there) is added to `landed` on the
    exchange its copies arrive on."""
    steps = world.scenario.steps
    offered: dict[LinkId, list[list[int]]] = {link: [[0, 0, 0, 0] for _ in range(steps)] for link in links}
    for (entry, node, key, step), (messages, size) in counts.items():
        message = Message.of(world.scenario.publishers[entry])
        route = routes[(entry, node, key)]
        for number, (link, before, copies) in enumerate(route.crossings):
            walk = down.walk(before, step, message)
            if walk.lost or walk.after >= steps:  # (held past the run's end)
                continue
            if route.gates and down.withdrawn((*before, link), route.gates[number], step):
                continue
            cell = offered[link][walk.after]
            dropped = down.dropped(link, walk.after, message)
            cell[0] += messages * copies
            cell[1] += size * copies
            if dropped:
                cell[2] += messages * copies
                cell[3] += size * copies
            exchange, looped = route.landings[number]
            if exchange and not dropped and not down.losing(link, walk.after):
                arrived = landed[(link_ends(link)[1], exchange)]
                arrived[0] += messages * copies
                arrived[1] += messages * copies if looped else 0
    return offered


def _traffic(
    world: World,
    down: Outages,
    counts: Counts,
    routes: dict[Class, ClassRoute],
    links: list[LinkId],
    trees: dict[TreeTraffic, str],
    published_in: dict[tuple[str, str], int],
    progress: Progress,
) -> tuple[dict[LinkId, list[list[int]]], dict[tuple[str, str], list[int]]]:
    """What the classes and the trees offer each link per step (see _offered), and per (node,
    exchange) the copies published into it (by clients and over links) and of those dropped
    as looping."""
    landed: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for at, messages in published_in.items():
        landed[at][0] += messages
    offered = _offered(world, down, counts, routes, links, landed)
    for number, (tree, exchange) in enumerate(trees.items()):
        _offer_tree(
            world.scenario,
            down,
            tree,
            exchange,
            offered,
            landed,
            _share(progress, "trees: traffic", number, len(trees)),
        )
    return offered, landed


def _offer_tree(
    scenario: Scenario,
    down: Outages,
    tree: TreeTraffic,
    exchange: str,
    offered: dict[LinkId, list[list[int]]],
    landed: dict[tuple[str, str], list[int]],
    done: Done,
) -> None:
    """Add what a tree's links carry to `offered`, and what crosses them to `landed` (on the
    tree's exchange: a plain forest's copies stay on it, and none loops)."""
    # (per link an array of steps x [messages, bytes]: a tree of 10,000 nodes has 20,000 links)
    own: dict[LinkId, np.ndarray] = defaultdict(lambda: np.zeros((scenario.steps, 2), dtype=np.int64))
    tree.offer(down, own, done)  # type: ignore[arg-type]  # (indexed as the lists are)
    for link, steps in own.items():
        for step in np.flatnonzero(steps.any(axis=1)).tolist():
            messages, size = (int(value) for value in steps[step])
            offered[link][step][0] += messages
            offered[link][step][1] += size
            if not down.losing(link, step):
                landed[(link_ends(link)[1], exchange)][0] += messages


def _links(
    scenario: Scenario,
    world: World,
    down: Outages,
    offered: dict[LinkId, list[list[int]]],
    links: list[LinkId],
) -> list[dict[str, Any]]:
    rows = []
    for link in links:
        props = world.props(link)
        capacity = props.capacity_msgs * scenario.step_ms // 1000
        capacity_bytes = props.capacity_bytes * scenario.step_ms // 1000
        backlog = backlog_bytes = 0
        was_losing = False
        for step in range(scenario.steps):
            messages, size, dropped, dropped_bytes = offered[link][step]
            is_down, losing = down.down(link, step), down.losing(link, step)
            in_flight = backlog if losing and not was_losing else 0
            if losing:
                backlog = backlog_bytes = 0
            else:  # (what the source drops never joins the backlog)
                backlog = max(0, backlog + messages - dropped - (0 if is_down else capacity))
                backlog_bytes = max(
                    0, backlog_bytes + size - dropped_bytes - (0 if is_down else capacity_bytes)
                )
            was_losing = losing
            queueing = max(
                -(-backlog * 1000 // props.capacity_msgs), -(-backlog_bytes * 1000 // props.capacity_bytes)
            )
            source, destination = link_ends(link)
            rows.append(
                {
                    "link": link,
                    "step": step,
                    "source": source,
                    "destination": destination,
                    "messages": messages,
                    "bytes": size,
                    "lost": messages if losing else 0,
                    "lost_in_flight": in_flight,
                    "dropped": dropped,
                    "down": is_down,
                    "capacity": capacity,
                    "backlog": backlog,
                    "backlog_bytes": backlog_bytes,
                    "delay_ms": queueing + down.wait_ms(link, step),
                }
            )
    return rows


def _deliveries(
    down: Outages,
    counts: Counts,
    routes: dict[Class, ClassRoute],
    link_ms: Callable[[LinkId, int], int],
    outcomes: Outcomes,
) -> None:
    """Add every class's deliveries, path by path, to `outcomes`: each link's delay is the
    one at the step the copy reaches it (simulations.world.Outages.walk)."""
    for (entry, node, key, step), (messages, _) in counts.items():
        copies_at: dict[tuple[str, str], int] = defaultdict(int)
        message = Message.of(down.world.scenario.publishers[entry])
        for where_node, queue, path, copies in routes[(entry, node, key)].deliveries:
            outcomes.reach(where_node, queue, len(path))
            walk = down.walk(path, step, message)
            if walk.lost:
                outcomes.lose(where_node, queue, messages * copies)
                continue
            copies_at[(where_node, queue)] += copies
            total = sum(link_ms(link, at) for link, at in zip(path, walk.at, strict=True))
            outcomes.deliver(where_node, queue, len(path), total, walk.through_down, messages * copies)
        for (where_node, queue), copies in copies_at.items():
            outcomes.duplicate(where_node, queue, messages * (copies - 1))
