"""A scenario's publish events, one per message, in time order: what both engines simulate
(simulations.workload draws them), for replaying them anywhere (`amq-sim events`, and
`amq-sim validate` publishing them to live nodes).

Events are made a window of steps at a time, every publishing node's events of those steps
merged by step (within a step: by publisher entry and node, as `workload.publishing` lists
them, then in each node's order), so a scenario of any size is iterated in bounded memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from simulations.scenario import Scenario
from simulations.workload import events, headers_of, publisher_draws, publishing, routing_key, step_counts

#: About how many events a window of steps holds (at least one step each).
WINDOW_EVENTS = 500_000
#: What `write_events` writes, by the file's suffix.
FORMATS = (".parquet", ".csv")


@dataclass(frozen=True)
class Event:
    """One message published: at `time` seconds (its step's start), on `node`, to
    `exchange` with `routing_key` and `headers`, a body of `size` bytes, and its properties
    (`ttl_ms` None: no expiration)."""

    time: float
    step: int
    node: str
    exchange: str
    routing_key: str
    headers: dict[str, Any]
    size: int
    persistent: bool
    mandatory: bool
    ttl_ms: int | None


@dataclass(frozen=True)
class Window:
    """The events of a run of steps, in time order, as columns: `source` numbers the
    publishing (entry, node) of `workload.publishing`, `key` is the key's number."""

    step: np.ndarray
    source: np.ndarray
    key: np.ndarray
    size: np.ndarray


def windows(scenario: Scenario, events_per_window: int | None = None) -> Iterator[Window]:
    """The scenario's events, a run of steps holding about `events_per_window` (default
    WINDOW_EVENTS) at a time."""
    events_per_window = events_per_window or WINDOW_EVENTS
    sources = publishing(scenario)
    draws = publisher_draws(scenario)
    per_step = np.zeros(scenario.steps, dtype=np.int64)
    for entry, _ in sources:
        per_step += step_counts(scenario, scenario.publishers[entry])
    start = 0
    while start < scenario.steps:
        ends = np.cumsum(per_step[start:])
        end = start + max(1, int(np.searchsorted(ends, events_per_window, side="right")))
        if ends[end - start - 1] > 0:
            steps = range(start, end)
            drawn = [events(scenario, entry, node, draws[entry], steps) for entry, node in sources]
            step = np.concatenate([d["step"] for d in drawn])
            order = np.argsort(step, kind="stable")  # by step; within one, by source then number
            yield Window(
                step[order],
                np.repeat(np.arange(len(sources)), [len(d["step"]) for d in drawn])[order],
                np.concatenate([d["key"] for d in drawn])[order],
                np.concatenate([d["size"] for d in drawn])[order],
            )
        start = end


def scenario_events(scenario: Scenario) -> Iterator[Event]:
    """Every publish event of the scenario, in time order across all nodes."""
    columns = _Columns(scenario)
    for window in windows(scenario):
        keys = columns.keys(window.key)
        for step, source, key, size in zip(
            window.step.tolist(),
            window.source.tolist(),
            window.key.tolist(),
            window.size.tolist(),
            strict=True,
        ):
            node, exchange, persistent, mandatory, ttl_ms = columns.sources[source]
            routing, headers = keys[key]
            yield Event(
                step * scenario.step_ms / 1000,
                step,
                node,
                exchange,
                routing,
                dict(headers),
                size,
                persistent,
                mandatory,
                ttl_ms,
            )


class _Columns:
    """What the numbers of a window stand for: each source's node, exchange and properties;
    each key's routing key and headers (worked out once per key)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.sources = [
            (node, p.exchange, p.persistent, p.mandatory, p.ttl_ms)
            for p, node in ((scenario.publishers[entry], node) for entry, node in publishing(scenario))
        ]
        self._keys: dict[int, tuple[str, dict[str, Any]]] = {}

    def keys(self, numbers: np.ndarray) -> dict[int, tuple[str, dict[str, Any]]]:
        """Routing key and headers of every key number in `numbers`."""
        for number in np.unique(numbers).tolist():
            if number not in self._keys:
                space = self.scenario.keys
                self._keys[number] = (routing_key(space, number), headers_of(space, number))
        return self._keys


SCHEMA = pa.schema(
    [
        ("time", pa.float64()),
        ("step", pa.int64()),
        ("node", pa.string()),
        ("exchange", pa.string()),
        ("routing_key", pa.string()),
        ("headers", pa.string()),
        ("size", pa.int64()),
        ("persistent", pa.bool_()),
        ("mandatory", pa.bool_()),
        ("ttl_ms", pa.int64()),
    ]
)


def write_events(scenario: Scenario, path: Path) -> int:
    """Write the scenario's events to `path` (Parquet or CSV by its suffix, SCHEMA's columns,
    headers as JSON text) a window at a time; return how many were written."""
    if path.suffix not in FORMATS:
        raise ValueError(f"{path}: the events file must end in {' or '.join(FORMATS)}")
    columns = _Columns(scenario)
    nodes, exchanges, persistent, mandatory, ttl_ms = (
        np.asarray([source[column] for source in columns.sources], dtype=object) for column in range(5)
    )
    written = 0
    writer: pq.ParquetWriter | pa_csv.CSVWriter
    writer = pq.ParquetWriter(path, SCHEMA) if path.suffix == ".parquet" else pa_csv.CSVWriter(path, SCHEMA)
    with writer:
        for window in windows(scenario):
            keys = columns.keys(window.key)
            unique, inverse = np.unique(window.key, return_inverse=True)
            routing = np.asarray([keys[k][0] for k in unique.tolist()], dtype=object)
            headers = np.asarray([json.dumps(keys[k][1]) for k in unique.tolist()], dtype=object)
            source = window.source
            batch = pa.record_batch(
                [
                    pa.array(
                        window.step.astype(np.float64) * scenario.step_ms / 1000, pa.float64()
                    ),  # as Event's
                    pa.array(window.step, pa.int64()),
                    pa.array(nodes[source], pa.string()),
                    pa.array(exchanges[source], pa.string()),
                    pa.array(routing[inverse], pa.string()),
                    pa.array(headers[inverse], pa.string()),
                    pa.array(window.size, pa.int64()),
                    pa.array(persistent[source], pa.bool_()),
                    pa.array(mandatory[source], pa.bool_()),
                    pa.array(ttl_ms[source], pa.int64()),
                ],
                schema=SCHEMA,
            )
            writer.write(batch)
            written += len(source)
    return written
