"""STAND-IN until the events branch lands (replaced at merge)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from simulations.scenario import Scenario
from simulations.workload import events, headers_of, key_draw, publishing, routing_key


@dataclass(frozen=True)
class Event:
    time: float
    step: int
    node: str
    exchange: str
    routing_key: str
    headers: dict[str, Any]
    size: int
    persistent: bool = True
    mandatory: bool = False
    ttl_ms: int | None = None


def scenario_events(scenario: Scenario) -> Iterator[Event]:
    draw = key_draw(scenario.keys)
    streams = []
    for entry, node in publishing(scenario):
        drawn = events(scenario, entry, node, draw)
        exchange = scenario.publishers[entry].exchange
        streams.append(
            (int(s), node, exchange, int(k), int(z)) for s, k, z in zip(drawn["step"], drawn["key"], drawn["size"])
        )
    for step, node, exchange, key, size in heapq.merge(*streams, key=lambda row: row[0]):
        yield Event(step * scenario.step_ms / 1000, step, node, exchange, routing_key(scenario.keys, key), headers_of(scenario.keys, key), size)
