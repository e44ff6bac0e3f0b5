"""The keys a scenario file may hold, what each accepts, and which are required.

One table per section, in the shape topology.schema uses (its `Section`), so the loader
(simulations.scenario) walks them the same way and reports every mismatch at once.
"""

from __future__ import annotations

from gateway.names import EXCHANGE_TYPES
from gateway.tomlfile import Check, Invalid, boolean, integer, one_of, text
from topology.schema import Section

GENERATORS = ("hierarchy", "ring-of-regions", "random-geometric", "mesh-of-hubs")
PATTERNS = ("constant", "bursts", "diurnal")
DISTRIBUTIONS = ("uniform", "zipf")


def number(low: float, high: float) -> Check:
    """An integer or float in [low, high]."""

    def check(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise Invalid(f"a number {low:g}-{high:g}", value)
        return float(value)

    return check


def _words(value: object) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not 1 <= len(value) <= 8
        or not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 10_000 for n in value)
    ):
        raise Invalid("an array of 1-8 word counts, each 1-10000", value)
    return tuple(value)


def _routing_key(value: object) -> str:
    if not isinstance(value, str) or len(value.encode()) > 255:
        raise Invalid("a routing key (a string of at most 255 bytes)", value)
    return value


def _routing_keys(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= 100_000:
        raise Invalid("an array of 1-100000 routing keys", value)
    return tuple(_routing_key(key) for key in value)


def _pair(value: object) -> tuple[str, str]:
    if not isinstance(value, list) or len(value) != 2 or not all(isinstance(n, str) and n for n in value):
        raise Invalid("two node names, [from, to]", value)
    return value[0], value[1]


_count = integer(0, 100_000_000)
_positive = integer(1, 2**40)
_name = text("a name (a non-empty string)")
_nodes = text('a node name or a glob over node names ("edge-*", "*")')
#: Seconds from a node's start to its port accepting (failures' `restart`).
_restart = number(0.0, 3600.0)

SCENARIO = Section(
    {
        "name": _name,
        "seed": integer(0, 2**32 - 1),
        "duration": number(0.001, 10_000_000),
        "step": number(0.001, 1_000_000),
        "restart": _restart,
    },
    required={"duration": "simulated seconds", "step": "seconds per time step"},
)

TOPOLOGY = Section(
    {
        "file": text("a topology file path (relative to this file)"),
        "generator": one_of(*GENERATORS),
        "seed": integer(0, 2**32 - 1),
        "hubs": integer(1, 100_000),
        "edges": integer(0, 1_000_000),
        "nodes": integer(1, 1_000_000),
        "radius": number(0.0, 2.0),
        "fanout_federation": text("a fanout exchange name to federate along the tree"),
        "publishers_rate": number(0.0, 1e9),
    }
)

LINK = Section(
    {
        "latency_ms": integer(0, 3_600_000),
        "capacity_msgs": _positive,
        "capacity_bytes": _positive,
    }
)
LINK_RULE = Section(
    {**LINK.keys, "from": _name, "to": _name},
    required={"from": "a node (links) or region (regions)", "to": "a node or region"},
)

KEYS = Section(
    {
        "words": _words,
        "distribution": one_of(*DISTRIBUTIONS),
        "zipf_s": number(0.0, 10.0),
    },
    required={"words": "word counts per level: [4, 4, 8] makes keys a0.b0.c0 ... a3.b3.c7"},
)

PUBLISHER = Section(
    {
        "nodes": _nodes,
        "exchange": text("an exchange name"),
        "rate": number(0.0, 1e9),
        "pattern": one_of(*PATTERNS),
        "size": integer(1, 128 * 1024 * 1024),
        "burst_every": number(0.001, 1e9),
        "burst_length": number(0.0, 1e9),
        "burst_factor": number(0.0, 1e6),
        "amplitude": number(0.0, 1.0),
        "keys": _routing_keys,
        "key": _routing_key,
        "persistent": boolean,
        "mandatory": boolean,
        "ttl_ms": integer(0, 2**32 - 1),
    },
    required={
        "nodes": "the nodes that publish",
        "exchange": "the exchange they publish to",
        "rate": "msg/s per node",
    },
)

SUBSCRIBER = Section(
    {
        "nodes": _nodes,
        "exchange": text("an exchange name"),
        "type": one_of(*EXCHANGE_TYPES),
        "queue": text("a queue name"),
        "count": _count,
        "wildcards": number(0.0, 1.0),
    },
    required={
        "nodes": "the nodes with subscribers",
        "exchange": "the exchange they bind to",
        "type": "the exchange's type (how bindings are drawn): " + ", ".join(EXCHANGE_TYPES),
    },
)


def _groups(value: object) -> tuple[tuple[str, ...], ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(
            isinstance(group, list) and group and all(isinstance(n, str) and n for n in group)
            for group in value
        )
    ):
        raise Invalid('groups of node names, [["a", "b"], ["c"]]', value)
    return tuple(tuple(group) for group in value)


FAILURE = Section(
    {
        "link": _pair,
        "node": _name,
        "partition": _groups,
        "from": number(0.0, 1e12),
        "to": number(0.0, 1e12),
        "restart": _restart,
    },
    required={"from": "when it goes down (s)", "to": "when it comes back (s)"},
)

#: The most nodes `grow` may make of one edge node.
MAX_GROW = 10_000


def _grow(value: object) -> int:
    nodes = value.get("nodes") if isinstance(value, dict) and set(value) == {"nodes"} else None
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_GROW:
        raise Invalid(f"a table {{nodes = N}}: every edge node becomes N nodes, N 1-{MAX_GROW}", value)
    return nodes


WORKLOAD = Section(
    {
        "file": text("a workload file path (relative to this file), as amq-sim capture writes it", 4096),
        "scale": number(1e-6, 1e6),
        "grow": _grow,
    },
    required={"file": "the workload file"},
)

#: Top-level tables, and arrays of tables with their sections.
TABLES = {"scenario": SCENARIO, "topology": TOPOLOGY, "keys": KEYS, "workload": WORKLOAD}
ARRAYS = {
    "publishers": PUBLISHER,
    "subscribers": SUBSCRIBER,
    "failures": FAILURE,
}
#: `[links]`: `default` a table, `regions` and `pairs` arrays of rules.
TOP_LEVEL = (*TABLES, "links", *ARRAYS)
