"""What the queues get, accumulated for the `queues` and `delays` tables and the nodes'
`delivered` column: the reference engine adds deliveries class by class (simulations.reference)
and tree by tree (simulations.hops) into one `Outcomes`, so both ways count alike."""

from __future__ import annotations

from collections import defaultdict
from typing import Any


class Outcomes:
    """Per queue (node, queue): delivered, duplicates, lost, delayed, max_hops and
    total_delay_ms; per (node, queue, hops, delay) the messages delivered; per node the
    messages delivered to its queues."""

    def __init__(self) -> None:
        self.queues: dict[tuple[str, str], dict[str, int]] = {}
        self.delays: dict[tuple[str, str, int, int], int] = defaultdict(int)
        self.delivered: dict[str, int] = defaultdict(int)

    def reach(self, node: str, queue: str, hops: int) -> None:
        """Some class reaches the queue over `hops` links (lost on the way or not)."""
        row = self.queues.setdefault(
            (node, queue),
            {"delivered": 0, "duplicates": 0, "lost": 0, "delayed": 0, "max_hops": 0, "total_delay_ms": 0},
        )
        row["max_hops"] = max(row["max_hops"], hops)

    def lose(self, node: str, queue: str, messages: int) -> None:
        self.queues[(node, queue)]["lost"] += messages

    def duplicate(self, node: str, queue: str, messages: int) -> None:
        self.queues[(node, queue)]["duplicates"] += messages

    def deliver(
        self, node: str, queue: str, hops: int, delay_ms: int, through_down: bool, messages: int
    ) -> None:
        """`messages` arrive over `hops` links in `delay_ms`, through a link that was down (a
        durable one, which held them) or not."""
        row = self.queues[(node, queue)]
        row["delivered"] += messages
        row["delayed"] += messages if through_down else 0
        row["total_delay_ms"] += delay_ms * messages
        self.delivered[node] += messages
        self.delays[(node, queue, hops, delay_ms)] += messages

    def rows(self, regions: dict[str, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The `queues` and `delays` tables' rows."""
        return (
            [{"node": n, "queue": q, **row} for (n, q), row in self.queues.items()],
            [
                {"node": n, "queue": q, "hops": h, "delay_ms": d, "region": regions[n], "messages": m}
                for (n, q, h, d), m in self.delays.items()
            ],
        )
