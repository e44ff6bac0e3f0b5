"""Read a scenario file (docs/simulation.md) into a `Scenario`.

The topology loader's conventions: the whole file is checked first and one `ScenarioError`
names every problem as `file:line: key.path: message` (unknown keys included); only a file
without problems becomes a `Scenario`. A topology file it names is read by topology.loader,
so the simulation runs on exactly the model `amq-route topology` reads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from gateway.tomlfile import ConfigError, KeyPath, TomlFile, describe, parse_toml, read_toml
from simulations import schema
from simulations.captured import CapturedPublisher, WorkloadError, applied, load_workload, problems_with
from simulations.generators import GeneratorSpec, generate
from topology.loader import TopologyError, load_topology
from topology.model import Topology
from topology.schema import Section, SectionReader

#: The keys of which a `[[failures]]` entry gives exactly one.
FAILURE_KINDS = ("link", "node", "partition")


class ScenarioError(Exception):
    """A scenario cannot be used: `str()` is every problem, one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class LinkProps:
    """What a link between two nodes carries: one-way latency and capacity per second."""

    latency_ms: int = 5
    capacity_msgs: int = 10_000
    capacity_bytes: int = 100_000_000


@dataclass(frozen=True)
class LinkRule:
    """Link properties for a pair of nodes, or of regions (either direction)."""

    ends: tuple[str, str]
    values: dict[str, int]


@dataclass(frozen=True)
class KeySpace:
    """Routing keys of len(words) words, level i drawing from words[i] words (the drawn keys,
    numbered from 0), then the publishers' own keys (`own`, numbered after them): both
    engines route a key by its number, so own keys route exactly as drawn ones do."""

    words: tuple[int, ...] = (4, 4, 4)
    distribution: str = "uniform"
    zipf_s: float = 1.1
    own: tuple[str, ...] = ()

    @property
    def drawn(self) -> int:
        """How many keys the words make (the keys publishers without their own draw from)."""
        size = 1
        for count in self.words:
            size *= count
        return size

    @property
    def size(self) -> int:
        """Every key's number is below this: the drawn keys and the own ones."""
        return self.drawn + len(self.own)

    def number(self, own_key: str) -> int:
        """The number of one of the publishers' own keys."""
        return self.drawn + self.own.index(own_key)


@dataclass(frozen=True)
class Publishers:
    """Every node matching `nodes` publishes to `exchange` at `rate` msg/s (shaped by
    `pattern`), keys drawn from the key space (or from `keys`, its own, by the same
    distribution), sizes uniform in [size/2, 3*size/2], with the message properties
    `persistent`, `mandatory` and `ttl_ms` (None: no expiration)."""

    nodes: str
    exchange: str
    rate: float
    pattern: str = "constant"
    size: int = 1024
    burst_every: float = 60.0
    burst_length: float = 5.0
    burst_factor: float = 10.0
    amplitude: float = 0.5
    keys: tuple[str, ...] = ()
    persistent: bool = True
    mandatory: bool = False
    ttl_ms: int | None = None


@dataclass(frozen=True)
class Subscribers:
    """Every node matching `nodes` has queue `queue` bound `count` times to `exchange`, with
    binding keys drawn from the key space (topic: words turn into `*`, or a `#` tail, with
    probability `wildcards`)."""

    nodes: str
    exchange: str
    type: str
    queue: str = "sim"
    count: int = 1
    wildcards: float = 0.0


#: Seconds from `amq-gateway serve` starting on an existing data directory to its port
#: accepting, on the machine of docs/simulation.md ("Failures"): a failed node's default
#: restart time.
NODE_RESTART = 0.7


@dataclass(frozen=True)
class Failure:
    """From `start` to `end` s: a node killed (SIGKILL) and started again at `end`, ready
    `restart` s later (None: the scenario's); a link between two nodes cut (both ends see
    their connections end); or a partition between groups of nodes (their connections go
    silent). simulations.recovery says when each link comes back."""

    start: float
    end: float
    link: tuple[str, str] | None = None
    node: str | None = None
    #: Groups of nodes; the nodes no group names are one more group.
    partition: tuple[tuple[str, ...], ...] | None = None
    restart: float | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    topology: Topology
    duration: float
    step: float
    seed: int = 0
    link_default: LinkProps = LinkProps()
    region_rules: tuple[LinkRule, ...] = ()
    pair_rules: tuple[LinkRule, ...] = ()
    keys: KeySpace = KeySpace()
    publishers: tuple[Publishers, ...] = ()
    subscribers: tuple[Subscribers, ...] = ()
    failures: tuple[Failure, ...] = ()
    #: A failed node's restart time unless its failure gives one.
    restart: float = NODE_RESTART
    #: The generator that made `topology` (None: read from a file): the Spark engine sends
    #: executors this rather than the topology it makes (spark.shipping).
    generator: GeneratorSpec | None = None

    @property
    def step_ms(self) -> int:
        return max(1, round(self.step * 1000))

    @property
    def steps(self) -> int:
        """Time steps in the run (the last one may be partly past `duration`)."""
        return max(1, -(-round(self.duration * 1000) // self.step_ms))


def load_scenario(path: Path) -> Scenario:
    """The scenario in the file at `path`; ScenarioError lists every problem with it."""
    try:
        doc = read_toml(path)
    except ConfigError as err:
        raise ScenarioError([str(err)]) from None
    return _load(doc)


def load_scenario_text(text: str, path: str) -> Scenario:
    """The scenario in `text`, read as if from `path` (so tests need no files)."""
    try:
        doc = parse_toml(text, Path(path))
    except ConfigError as err:
        raise ScenarioError([str(err)]) from None
    return _load(doc)


def _load(doc: TomlFile) -> Scenario:
    reader = _Reader(doc)
    values = reader.read()
    topology = reader.topology(values.get("topology", {}), captured="workload" in values)
    captured: list[CapturedPublisher] = []
    if topology is not None and "file" in values.get("workload", {}):
        topology, captured = reader.workload(values["workload"], topology)
    if topology is not None:
        reader.references(values, topology)
    if reader.problems or topology is None:
        raise ScenarioError(reader.sorted_problems())
    scale = values.get("workload", {}).get("scale", 1.0)
    return _build(doc, values, topology, tuple(_captured(p, scale) for p in captured))


class _Reader(SectionReader):
    """Collects every problem; nothing stops the walk."""

    def read(self) -> dict[str, Any]:
        data = self.doc.data
        self.top_level(schema.TOP_LEVEL)
        values: dict[str, Any] = {}
        for key, section in schema.TABLES.items():
            if key in data or key == "scenario":
                values[key] = self.section_values((key,), data.get(key, {}), section) or {}
        values["links"] = self.links(data.get("links", {}))
        for key, section in schema.ARRAYS.items():
            values[key] = self.array(key, data.get(key, []), section)
        for index, publishers in enumerate(values["publishers"]):
            if "key" in publishers and "keys" in publishers:
                self.problem(("publishers", index, "key"), "give at most one of 'keys' or 'key'")
        for index, failure in enumerate(values["failures"]):
            if sum(kind in failure for kind in FAILURE_KINDS) != 1:
                self.problem(("failures", index), "give exactly one of 'link', 'node' or 'partition'")
            elif "restart" in failure and "node" not in failure:
                self.problem(("failures", index, "restart"), "only a node's failure restarts")
            if failure.get("from", 0) > failure.get("to", 0):
                self.problem(("failures", index, "to"), "must not be before 'from'")
        return values

    def array(self, name: KeyPath | str, value: object, section: Section) -> list[dict[str, Any]]:
        path: KeyPath = (name,) if isinstance(name, str) else name
        if not isinstance(value, list):
            self.problem(path, f"expected [[{'.'.join(map(str, path))}]] entries, got {describe(value)}")
            return []
        found = [self.section_values((*path, index), table, section) for index, table in enumerate(value)]
        return [values for values in found if values is not None]

    def links(self, value: object) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.problem(("links",), f"expected a table, got {describe(value)}")
            return {}
        found: dict[str, Any] = {}
        for key, table in value.items():
            if key == "default":
                found[key] = self.section_values(("links", key), table, schema.LINK) or {}
            elif key in ("regions", "pairs"):
                found[key] = self.array(("links", key), table, schema.LINK_RULE)
            else:
                self.problem(("links", key), "unknown key (known: default, regions, pairs)")
        return found

    def references(self, values: dict[str, Any], topology: Topology) -> None:
        """Names of nodes the topology does not have (globs must match one at least)."""
        nodes = topology.nodes
        for key in ("publishers", "subscribers"):
            for index, entry in enumerate(values[key]):
                pattern = entry.get("nodes", "*")
                if not any(fnmatchcase(name, pattern) for name in nodes):
                    self.problem((key, index, "nodes"), f"no node of the topology matches {pattern!r}")
        for index, failure in enumerate(values["failures"]):
            grouped = [name for group in failure.get("partition", ()) for name in group]
            named = (*failure.get("link", ()), *([failure["node"]] if "node" in failure else []), *grouped)
            for name in named:
                if name not in nodes:
                    self.problem(("failures", index), f"unknown node {name!r}")
            if "partition" in failure:
                self.partition(index, failure["partition"], grouped, len(nodes))
        for index, rule in enumerate(values["links"].get("pairs", [])):
            for end in ("from", "to"):
                if end in rule and rule[end] not in nodes:
                    self.problem(("links", "pairs", index, end), f"unknown node {rule[end]!r}")

    def partition(
        self, index: int, groups: tuple[tuple[str, ...], ...], grouped: list[str], nodes: int
    ) -> None:
        """A partition names each node once and splits the nodes in two groups at least."""
        twice = sorted({name for name in grouped if grouped.count(name) > 1})
        if twice:
            self.problem(
                ("failures", index, "partition"), f"nodes in more than one group: {', '.join(twice)}"
            )
        elif len(groups) + (len(set(grouped)) < nodes) < 2:
            self.problem(
                ("failures", index, "partition"),
                "separates nothing: name two groups, or leave some nodes out",
            )

    def workload(
        self, values: dict[str, Any], topology: Topology
    ) -> tuple[Topology | None, list[CapturedPublisher]]:
        """`[workload]`: the captured workload's file read and checked against the topology,
        which is grown (`grow`) and gets the workload's bindings; None after saying why not."""
        try:
            workload = load_workload(self.doc.path.parent / values["file"])
        except WorkloadError as err:
            problems = err.problems
        else:
            problems = problems_with(workload, topology)
        if problems:  # the workload file's own `file:line: key` (sorted at this file's [workload])
            line = self.doc.lines.get(("workload", "file"), 0)
            self.problems += [(line, problem) for problem in problems]
            return None, []
        try:
            return applied(workload, topology, values.get("grow", 1))
        except ValueError as err:
            self.problem(("workload", "grow"), str(err))
            return None, []

    def topology(self, values: dict[str, Any], captured: bool = False) -> Topology | None:
        """The topology file read, or the generator run; None after saying why not. With a
        `captured` workload the file's [[publishers]] are left out: the workload measured them."""
        if ("file" in values) == ("generator" in values):
            self.problem(("topology",), "give exactly one of 'file' or 'generator'")
            return None
        if "file" in values:
            try:
                topology = load_topology(self.doc.path.parent / values["file"])
            except TopologyError as err:
                for problem in err.problems:
                    self.problem(("topology", "file"), problem)
                return None
            if topology.publishers and "publishers_rate" not in values and not captured:
                first = topology.publishers[0].where.split(": ")[0]
                self.problem(
                    ("topology", "file"),
                    f"the topology's {len(topology.publishers)} [[publishers]] (the first at {first}) "
                    "have no rate: give publishers_rate "
                    "(msg/s per publisher, 0 to leave them out) in [topology], or publish from "
                    "this scenario's [[publishers]]",
                )
            return topology
        if "publishers_rate" in values:
            self.problem(("topology", "publishers_rate"), "only with 'file' (a generator has no publishers)")
            values = {key: value for key, value in values.items() if key != "publishers_rate"}
        try:
            return generate(_spec(values))
        except ValueError as err:
            self.problem(("topology",), str(err))
            return None


def _spec(topology: dict[str, Any]) -> GeneratorSpec:
    """The generator a `[topology]` table without `file` names, with its sizes."""
    return GeneratorSpec(**{key.replace("-", "_"): value for key, value in topology.items()})


def _build(
    doc: TomlFile, values: dict[str, Any], topology: Topology, captured: tuple[Publishers, ...] = ()
) -> Scenario:
    head = values["scenario"]
    links = values["links"]

    def rules(key: str) -> tuple[LinkRule, ...]:
        return tuple(
            LinkRule((rule["from"], rule["to"]), {k: v for k, v in rule.items() if k not in ("from", "to")})
            for rule in links.get(key, [])
        )

    publishers = tuple(_publishers(dict(entry)) for entry in values["publishers"]) + captured
    rate = values.get("topology", {}).get("publishers_rate", 0.0)
    if rate > 0:  # the topology file's publishers, each node publishing its one key
        publishers += tuple(Publishers(p.node, p.exchange, rate, keys=(p.key,)) for p in topology.publishers)
    return Scenario(
        name=head.get("name", doc.path.stem),
        path=str(doc.path),
        topology=topology,
        duration=head["duration"],
        step=head["step"],
        seed=head.get("seed", 0),
        link_default=LinkProps(**links.get("default", {})),
        region_rules=rules("regions"),
        pair_rules=rules("pairs"),
        keys=replace(
            KeySpace(**values.get("keys", {})),
            own=tuple(dict.fromkeys(k for p in publishers for k in p.keys)),
        ),
        publishers=publishers,
        subscribers=tuple(Subscribers(**entry) for entry in values["subscribers"]),
        failures=tuple(
            Failure(
                entry["from"],
                entry["to"],
                link=entry.get("link"),
                node=entry.get("node"),
                partition=entry.get("partition"),
                restart=entry.get("restart"),
            )
            for entry in values["failures"]
        ),
        restart=head.get("restart", NODE_RESTART),
        generator=None if "file" in values.get("topology", {}) else _spec(values.get("topology", {})),
    )


def _captured(publisher: CapturedPublisher, scale: float) -> Publishers:
    """A captured publisher at `scale` times its rate (its size when one was counted)."""
    publishers = Publishers(publisher.node, publisher.exchange, publisher.rate * scale, keys=publisher.keys)
    return publishers if publisher.size is None else replace(publishers, size=publisher.size)


def _publishers(entry: dict[str, Any]) -> Publishers:
    """A [[publishers]] entry; a fixed `key` is a list of one."""
    if "key" in entry:
        entry["keys"] = (entry.pop("key"),)
    return Publishers(**entry)
