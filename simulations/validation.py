"""What `amq-sim validate` compares: the simulation's counts against what live nodes counted,
object by object, side by side. Pure (no I/O): the live side (topology.validate) hands in its
counts, the engine its tables.

Counts compared, each over the whole run:
- per queue of the scenario: messages the simulation delivers there against the node's
  `enqueued` counter (copies arriving twice count twice on both sides);
- per directed link `a>b`: messages that crossed it (offered, less what a transient link lost
  and what its source dropped while holding them)
  against the count at the end holding the link (`messages_in`/`messages_out`);
- per publishing node: publishes the node accepted, and publishes refused because it was down;
- per exchange of the scenario on each node: messages published into it (`published` of
  management's exchanges.list: a client's publishes and every copy arriving over a link, route
  or peering) and copies it dropped as looping (`dropped_looping`). Its `routed` and
  `unroutable` are not compared (docs/simulation.md says why).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from simulations.world import LinkId


class LiveRunFailed(Exception):
    """The live run could not follow the scenario; the message says where."""


@dataclass
class LiveCounts:
    """What the live run counted (summed over every run of each node, restarts included)."""

    queues: dict[tuple[str, str], int] = field(default_factory=dict)
    links: dict[LinkId, int] = field(default_factory=dict)
    published: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    #: Per (node, exchange), messages published into it, and copies it dropped as looping.
    exchanges: dict[tuple[str, str], int] = field(default_factory=dict)
    looped: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Per node, its bindings, and per exchange the interest it routes by (bindings of other
    #: nodes and their paths' hops): read to tell when the federation has settled, not compared.
    bindings: dict[str, int] = field(default_factory=dict)
    interest: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    #: Per node, the states of its routes (waited for, not compared).
    routes: dict[str, list[str]] = field(default_factory=dict)
    #: Per queue, each consumed message's delay in seconds (live only; the simulation's are
    #: in its `delays` table).
    delays: dict[tuple[str, str], list[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    """One count compared: what kind of object, which, the simulation's and the live figure."""

    kind: str
    name: str
    simulated: int
    live: int

    @property
    def agrees(self) -> bool:
        return self.simulated == self.live


def simulated_counts(tables: dict[str, pd.DataFrame]) -> LiveCounts:
    """The simulation's tables summed into the same shape as the live counts."""
    queues = tables["queues"]
    links = tables["links"]
    nodes = tables["nodes"]
    exchanges = tables["exchanges"]
    carried = links.assign(carried=links["messages"] - links["lost"] - links["dropped"])
    carried = carried.groupby("link")["carried"].sum()
    return LiveCounts(
        queues={
            (str(n), str(q)): int(d)
            for n, q, d in zip(queues["node"], queues["queue"], queues["delivered"], strict=True)
        },
        links={str(link): int(count) for link, count in carried.items()},
        published={str(n): int(p) for n, p in zip(nodes["node"], nodes["published"], strict=True) if p},
        refused={str(n): int(r) for n, r in zip(nodes["node"], nodes["refused"], strict=True) if r},
        exchanges={
            (str(n), str(x)): int(p)
            for n, x, p in zip(exchanges["node"], exchanges["exchange"], exchanges["published"], strict=True)
        },
        looped={
            (str(n), str(x)): int(d)
            for n, x, d in zip(
                exchanges["node"], exchanges["exchange"], exchanges["dropped_looping"], strict=True
            )
            if d
        },
    )


def compare(simulated: LiveCounts, live: LiveCounts) -> list[Row]:
    """Every count either side has, simulation first; zeros where one side has none."""
    rows: list[Row] = []

    def side_by_side(kind: str, model: dict[Any, int], seen: dict[Any, int]) -> None:
        for key in sorted(model.keys() | seen.keys()):
            rows.append(Row(kind, _name(key), model.get(key, 0), seen.get(key, 0)))

    side_by_side("queue", simulated.queues, live.queues)
    side_by_side("link", simulated.links, live.links)
    side_by_side("published", simulated.published, live.published)
    side_by_side("refused", simulated.refused, live.refused)
    side_by_side("exchange", simulated.exchanges, live.exchanges)
    side_by_side("looping", simulated.looped, live.looped)
    return rows


def _name(key: object) -> str:
    return "/".join(key) if isinstance(key, tuple) else str(key)


def report_lines(rows: Iterable[Row]) -> list[str]:
    """The side-by-side table, differing rows marked, then the verdict."""
    rows = list(rows)
    width = max((len(row.name) for row in rows), default=10)
    lines = [f"{'':2}{'kind':<10} {'object':<{width}} {'simulated':>10} {'live':>10}"]
    for row in rows:
        mark = "  " if row.agrees else "!="
        lines.append(f"{mark}{row.kind:<10} {row.name:<{width}} {row.simulated:>10,} {row.live:>10,}")
    differing = sum(not row.agrees for row in rows)
    lines.append(
        f"validate: all {len(rows)} counts agree"
        if not differing
        else f"validate: {differing} of {len(rows)} counts differ (marked !=)"
    )
    return lines


def delay_lines(simulated: pd.DataFrame, live: dict[tuple[str, str], list[float]]) -> list[str]:
    """Per queue, the delay distributions side by side (median, 90th percentile, most, in
    ms): reported, not compared, since the model's latencies are the scenario's while the live
    nodes share one machine's loopback."""
    lines = [f"{'delays (ms)':<24} {'simulated p50/p90/max':>24} {'live p50/p90/max':>24}"]
    for (node, queue), rows in simulated.groupby(["node", "queue"]):
        model = np.repeat(rows["delay_ms"].to_numpy(), rows["messages"].to_numpy())
        seen = np.asarray(live.get((str(node), str(queue)), []), dtype=float) * 1000
        lines.append(f"{node}/{queue:<22} {_spread(model):>24} {_spread(seen):>24}")
    return lines


def _spread(values: np.ndarray) -> str:
    if not len(values):
        return "-"
    p50, p90, top = np.percentile(values, [50, 90, 100])
    return f"{p50:.0f}/{p90:.0f}/{top:.0f}"
