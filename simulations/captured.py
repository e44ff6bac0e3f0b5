"""Captured workloads: the file `amq-sim capture` writes, read back with `file:line: key`
errors (docs/simulation.md, "Capturing a workload").

A workload file holds what a live federation did over a window: per node and exchange the
rate clients published at, the keys to publish with and the mean message size, and the
bindings found live that the topology file does not declare. It is plain TOML, so it can be
read, edited and kept next to the scenario that uses it (`[workload] file = ...`):

    [capture]
    topology = "../configs/topology-three-regions.toml"   # the file it was captured from
    seconds = 60.02                                        # the window
    started = "2026-11-28T04:10:00Z"

    [[publishers]]
    node = "edge-eu-1"
    exchange = "fed.topic"
    rate = 9.97            # msg/s
    messages = 598         # in the window
    keys = ["orders.eu.new"]
    size = 23              # mean body bytes (left out where nothing was counted)

    [[bindings]]
    node = "hub-eu"
    exchange = "fed.topic"
    queue = "audit"
    key = "orders.#"
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gateway.logformat import escape_controls
from gateway.tomlfile import ConfigError, TomlFile, integer, parse_toml, read_toml, text
from simulations.grow import grow, grown_names
from simulations.schema import _routing_key, _routing_keys, number
from topology.model import Binding, Queue, Topology
from topology.schema import Section, SectionReader, _table

_node = text("a node name")
_exchange = text("an exchange name")

CAPTURE = Section(
    {
        "topology": text("the topology file captured (a path relative to this file)", 4096),
        "seconds": number(0.001, 1e9),
        "started": text("when the window began (UTC, ISO 8601)"),
    },
    required={"seconds": "the window's length in seconds"},
)
PUBLISHER = Section(
    {
        "node": _node,
        "exchange": _exchange,
        "rate": number(0.0, 1e9),
        "messages": integer(0, 2**62),
        "keys": _routing_keys,
        "size": integer(1, 128 * 1024 * 1024),
    },
    required={
        "node": "the node clients published on",
        "exchange": "the exchange they published to",
        "rate": "msg/s",
        "keys": "the routing keys to publish with",
    },
)
BINDING = Section(
    {
        "node": _node,
        "exchange": _exchange,
        "queue": text("a queue name"),
        "key": _routing_key,
        "arguments": _table,
    },
    required={"node": "the node", "exchange": "the exchange bound", "queue": "the queue bound"},
)
TOP_LEVEL = ("capture", "publishers", "bindings")


@dataclass(frozen=True)
class CapturedPublisher:
    """Clients on `node` published to `exchange` at `rate` msg/s (`messages` in the window),
    with `keys`, bodies of `size` bytes on average (None: not counted)."""

    node: str
    exchange: str
    rate: float
    keys: tuple[str, ...]
    messages: int = 0
    size: int | None = None
    where: str = field(default="", compare=False)


@dataclass(frozen=True)
class CapturedBinding:
    """A queue bound live that the topology file does not declare."""

    node: str
    exchange: str
    queue: str
    key: str = ""
    arguments: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)
    where: str = field(default="", compare=False)


@dataclass(frozen=True)
class Workload:
    """A captured workload; `notes` (how it was made) and `findings` (what the capture could
    not carry over, printed too) are written as comments and not read back."""

    seconds: float
    topology: str = ""
    started: str = ""
    publishers: tuple[CapturedPublisher, ...] = ()
    bindings: tuple[CapturedBinding, ...] = ()
    notes: tuple[str, ...] = ()
    findings: tuple[str, ...] = ()
    path: str = ""


class WorkloadError(Exception):
    """A workload file cannot be used: every problem, one `file:line: key: message` each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def load_workload(path: Path) -> Workload:
    """The workload in the file at `path`; WorkloadError lists every problem with it."""
    try:
        doc = read_toml(path)
    except ConfigError as err:
        raise WorkloadError([str(err)]) from None
    return _read(doc)


def load_workload_text(text: str, path: str) -> Workload:
    """The workload in `text`, read as if from `path` (so tests need no files)."""
    try:
        doc = parse_toml(text, Path(path))
    except ConfigError as err:
        raise WorkloadError([str(err)]) from None
    return _read(doc)


def _read(doc: TomlFile) -> Workload:
    reader = SectionReader(doc)
    reader.top_level(TOP_LEVEL)
    head = reader.section_values(("capture",), doc.data.get("capture", {}), CAPTURE) or {}
    entries: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for key, section in (("publishers", PUBLISHER), ("bindings", BINDING)):
        value = doc.data.get(key, [])
        if not isinstance(value, list):
            reader.problem((key,), f"expected [[{key}]] entries")
            value = []
        found = [
            (index, reader.section_values((key, index), table, section)) for index, table in enumerate(value)
        ]
        entries[key] = [(index, values) for index, values in found if values is not None]
    if reader.problems:
        raise WorkloadError(reader.sorted_problems())
    return Workload(
        seconds=head["seconds"],
        topology=head.get("topology", ""),
        started=head.get("started", ""),
        publishers=tuple(
            CapturedPublisher(**values, where=doc.where(("publishers", index)))
            for index, values in entries["publishers"]
        ),
        bindings=tuple(
            CapturedBinding(**values, where=doc.where(("bindings", index)))
            for index, values in entries["bindings"]
        ),
        path=str(doc.path),
    )


def workload_toml(workload: Workload) -> str:
    """The workload as a file `load_workload` reads back (its notes as comments on top)."""
    # (a note may quote a name from the nodes, any client's string: a newline would end the
    # comment and write TOML of its own)
    lines = [f"# {escape_controls(note)}" if note else "#" for note in workload.notes]
    lines += [f"# note: {escape_controls(finding)}" for finding in workload.findings]
    lines += ["", "[capture]"]
    if workload.topology:
        lines.append(f"topology = {_string(workload.topology)}")
    lines.append(f"seconds = {workload.seconds:.3f}")
    if workload.started:
        lines.append(f"started = {_string(workload.started)}")
    for publisher in workload.publishers:
        lines += [
            "",
            "[[publishers]]",
            f"node = {_string(publisher.node)}",
            f"exchange = {_string(publisher.exchange)}",
            f"rate = {publisher.rate:.3f}  # msg/s",
            f"messages = {publisher.messages}  # in the window",
            f"keys = [{', '.join(_string(key) for key in publisher.keys)}]",
        ]
        if publisher.size is not None:
            lines.append(f"size = {publisher.size}  # mean body bytes")
    for binding in workload.bindings:
        lines += [
            "",
            "[[bindings]]",
            f"node = {_string(binding.node)}",
            f"exchange = {_string(binding.exchange)}",
            f"queue = {_string(binding.queue)}",
            f"key = {_string(binding.key)}",
        ]
        if binding.arguments:
            lines.append(f"arguments = {_inline_table(binding.arguments)}")
    return "\n".join(lines) + "\n"


def _string(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)


def _inline_table(table: dict[str, Any]) -> str:
    """Binding arguments as a TOML inline table (strings, numbers and booleans)."""
    items = []
    for key, value in table.items():
        if isinstance(value, bool):
            shown = "true" if value else "false"
        elif isinstance(value, int | float):
            shown = str(value)
        else:
            shown = _string(str(value))
        items.append(f"{_string(key)} = {shown}")
    return "{" + ", ".join(items) + "}"


def problems_with(workload: Workload, topology: Topology) -> list[str]:
    """`file:line: key: message` for every node, and exchange on a node, the workload names
    that the topology lacks."""
    found = []
    entries: list[CapturedPublisher | CapturedBinding] = [*workload.publishers, *workload.bindings]
    for entry in entries:
        if entry.node not in topology.nodes:
            found.append(f"{entry.where}: node: the topology has no node {entry.node!r}")
        elif topology.exchange(entry.node, entry.exchange) is None:
            found.append(
                f"{entry.where}: exchange: the topology has no exchange {entry.exchange!r} on {entry.node}"
            )
    return found


def applied(
    workload: Workload, topology: Topology, nodes: int = 1
) -> tuple[Topology, list[CapturedPublisher]]:
    """The topology grown (`grow = {nodes = N}`, simulations.grow) with the workload's
    bindings and their queues added, and the workload's publishers: an edge node's publishers
    and bindings are its copies' too. ValueError when it cannot be grown."""
    names = grown_names(topology, nodes)
    topology = grow(topology, nodes)
    declared = {(queue.node, queue.name) for queue in topology.queues}
    queues, bindings = list(topology.queues), list(topology.bindings)
    for binding in workload.bindings:
        for node in names[binding.node]:
            if (node, binding.queue) not in declared:
                declared.add((node, binding.queue))
                queues.append(Queue(node, binding.queue, where=binding.where))
            bindings.append(
                Binding(
                    node, binding.exchange, binding.queue, binding.key, dict(binding.arguments), binding.where
                )
            )
    publishers = [replace(p, node=node) for p in workload.publishers for node in names[p.node]]
    return replace(topology, queues=tuple(queues), bindings=tuple(bindings)), publishers


class CaptureError(Exception):
    """A capture could not sample the federation (topology.capture raises its subclass)."""


#: Seconds per unit of a duration (`60s`, `2m`, `1.5h`; a bare number is seconds).
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """Seconds in a duration such as `60s`, `2m`, `1.5h`, `500ms` or `90`; ValueError says
    what is accepted."""
    number, unit = text.strip(), "s"
    for suffix in sorted(_UNITS, key=len, reverse=True):
        if number.endswith(suffix):
            number, unit = number[: -len(suffix)], suffix
            break
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise ValueError(f"{text!r} is not a duration: give a positive number with s, m, h or ms (60s, 2m)")
    return seconds


def summary(workload: Workload) -> list[str]:
    """What a capture found, for the console: one row per publisher, then the bindings."""
    rows = [
        f"captured {workload.seconds:g} s: {len(workload.publishers)} publishers, "
        f"{len(workload.bindings)} bindings the topology file does not declare"
    ]
    for p in workload.publishers:
        size = "" if p.size is None else f", {p.size} B"
        keys = ", ".join(p.keys[:3]) + (f" (+{len(p.keys) - 3})" if len(p.keys) > 3 else "")
        rows.append(
            f"  {p.node:<14} {p.exchange:<14} {p.rate:>10.2f} msg/s ({p.messages}{size})  keys {keys}"
        )
    rows += [f"  bound: {b.node} {b.exchange} -> {b.queue} {b.key!r}" for b in workload.bindings]
    rows += [f"note: {finding}" for finding in workload.findings]
    return [escape_controls(row) for row in rows]  # (names and keys are clients' strings)
