"""Seeded topologies of any size, as the planner's model (topology.model), and back to files.

Each generator lays nodes out in regions and joins neighbours with dynamic routes both ways on
`sim.topic` (so interest flows everywhere, as in configs/topology-three-regions.toml); a tree
can also carry OpenAMQ fanout federations, child to parent, on one fanout exchange. What they
make passes `amq-route topology check` (tests/spark/test_generators.py) and `to_toml` writes
it out as a topology file (`amq-sim generate`).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, fields

import networkx as nx

from topology.model import Binding, Exchange, Federation, Node, Route, Topology

#: The exchange generated topologies route on with dynamic routes.
EXCHANGE = "sim.topic"
HOST = "127.0.0.1"
FIRST_PORT = 10_000
#: Nodes per loopback address (ports FIRST_PORT onwards); the next ones go on 127.0.0.2, ...
PER_HOST = 55_000
MAX_NODES = 1_000_000


@dataclass(frozen=True)
class GeneratorSpec:
    """A generator and its sizes (the `[topology]` table of a scenario)."""

    generator: str
    seed: int = 0
    hubs: int | None = None
    edges: int | None = None
    nodes: int | None = None
    radius: float | None = None
    fanout_federation: str | None = None

    @classmethod
    def parse(cls, text: str) -> GeneratorSpec:
        """`hierarchy:hubs=3,edges=4,seed=1` (what `amq-sim generate` takes)."""
        name, _, rest = text.partition(":")
        values: dict[str, object] = {}
        known = {field.name for field in fields(cls)}
        for item in filter(None, rest.split(",")):
            key, _, value = item.partition("=")
            key = key.strip().replace("-", "_")
            if key not in known or key == "generator":
                raise ValueError(f"unknown generator parameter {key!r}")
            values[key] = value if key == "fanout_federation" else json.loads(value)
        return cls(name, **values)  # type: ignore[arg-type]


#: generator -> (the parameters it needs, the ones it takes besides seed).
PARAMETERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "hierarchy": (("hubs",), ("edges", "nodes", "fanout_federation")),
    "ring-of-regions": (("hubs", "edges"), ()),
    "random-geometric": (("nodes", "radius"), ()),
    "mesh-of-hubs": (("hubs", "edges"), ()),
}


def generate(spec: GeneratorSpec) -> Topology:
    """The topology `spec` describes; ValueError, as a sentence, for a bad spec."""
    if spec.generator not in PARAMETERS:
        raise ValueError(f"unknown generator {spec.generator!r} (one of: {', '.join(PARAMETERS)})")
    needed, optional = PARAMETERS[spec.generator]
    given = {f.name for f in fields(spec) if getattr(spec, f.name) is not None} - {"generator", "seed"}
    missing = [name for name in needed if name not in given]
    extra = sorted(given - {*needed, *optional})
    if missing or extra:
        problems = [f"missing {', '.join(missing)}"] if missing else []
        problems += [f"does not take {', '.join(extra)}"] if extra else []
        raise ValueError(f"generator {spec.generator}: {'; '.join(problems)}")
    layout = _LAYOUTS[spec.generator](spec)
    if len(layout.regions) > MAX_NODES:
        raise ValueError(f"generator {spec.generator}: at most {MAX_NODES} nodes")
    return layout.topology(f"{spec.generator}-{spec.seed}", spec.fanout_federation)


@dataclass
class _Layout:
    """Nodes with their regions, the undirected edges dynamic routes run on, and the tree
    (child -> parent) fanout federations follow."""

    regions: dict[str, str]
    edges: list[tuple[str, str]]
    parents: dict[str, str]

    def topology(self, name: str, fanout: str | None) -> Topology:
        nodes = {
            node: Node(node, _host(index), FIRST_PORT + index % PER_HOST, region=region)
            for index, (node, region) in enumerate(self.regions.items())
        }
        exchanges = [Exchange(node, EXCHANGE, "topic") for node in nodes]
        routes = [
            Route("dynamic", source, destination, EXCHANGE)
            for a, b in self.edges
            for source, destination in ((a, b), (b, a))
        ]
        federations: list[Federation] = []
        if fanout:
            exchanges += [Exchange(node, fanout, "fanout") for node in nodes]
            federations = [
                Federation(child, parent, fanout, "fanout") for child, parent in self.parents.items()
            ]
        return Topology(
            name, f"<{name}>", nodes, tuple(exchanges), routes=tuple(routes), federations=tuple(federations)
        )


def _host(index: int) -> str:
    """The loopback address of node number `index` (127.0.0.1 for the first PER_HOST)."""
    number = 1 + index // PER_HOST
    return HOST if number == 1 else f"127.0.{number // 256}.{number % 256}"


def _hub(index: int) -> str:
    return f"hub-{index:03d}"


def _edges_of(layout: _Layout, hubs: int, per_hub: int, extra: int = 0) -> None:
    """`per_hub` edge nodes under each hub (one more under each of the first `extra`), in the
    hub's region."""
    for hub in range(hubs):
        for edge in range(per_hub + (hub < extra)):
            name = f"edge-{hub:03d}-{edge:03d}"
            layout.regions[name] = f"r{hub:03d}"
            layout.edges.append((_hub(hub), name))
            layout.parents[name] = _hub(hub)


def _hierarchy(spec: GeneratorSpec) -> _Layout:
    """A root, `hubs` regional hubs under it and edges under the hubs: `edges` per hub, or
    `nodes` in all (the edges spread evenly, the first hubs taking one more)."""
    hubs = spec.hubs or 0
    if (spec.edges is None) == (spec.nodes is None):
        raise ValueError("generator hierarchy: give edges (per hub) or nodes (in all), not both")
    edges = spec.edges * hubs if spec.edges is not None else (spec.nodes or 0) - 1 - hubs
    if edges < 0 or (edges and not hubs):
        raise ValueError("generator hierarchy: nodes must be at least 1 + hubs")
    layout = _Layout({"root": "core"}, [], {})
    for hub in range(hubs):
        layout.regions[_hub(hub)] = f"r{hub:03d}"
        layout.edges.append(("root", _hub(hub)))
        layout.parents[_hub(hub)] = "root"
    _edges_of(layout, hubs, edges // hubs if hubs else 0, edges % hubs if hubs else 0)
    return layout


def _hubs_joined(spec: GeneratorSpec, pairs: Iterable[tuple[int, int]]) -> _Layout:
    hubs = spec.hubs or 0
    layout = _Layout({_hub(hub): f"r{hub:03d}" for hub in range(hubs)}, [], {})
    layout.edges += [(_hub(a), _hub(b)) for a, b in pairs]
    _edges_of(layout, hubs, spec.edges or 0)
    return layout


def _ring(spec: GeneratorSpec) -> _Layout:
    hubs = spec.hubs or 0
    pairs = [(hub, (hub + 1) % hubs) for hub in range(hubs)] if hubs > 2 else [(0, 1)] if hubs == 2 else []
    return _hubs_joined(spec, pairs)


def _mesh(spec: GeneratorSpec) -> _Layout:
    hubs = spec.hubs or 0
    return _hubs_joined(spec, [(a, b) for a in range(hubs) for b in range(a + 1, hubs)])


def _random_geometric(spec: GeneratorSpec) -> _Layout:
    """Nodes in the unit square, joined within `radius`; components are then joined by their
    closest pair, so every node reaches every other. Regions are the square's quadrants."""
    count = spec.nodes or 0
    rng = random.Random(spec.seed)
    positions = {index: (rng.random(), rng.random()) for index in range(count)}
    graph = nx.random_geometric_graph(count, spec.radius or 0.0, pos=positions)
    components = sorted((sorted(c) for c in nx.connected_components(graph)), key=lambda c: c[0])
    for one, two in zip(components, components[1:], strict=False):
        a, b = min(
            ((a, b) for a in one for b in two), key=lambda p: math.dist(positions[p[0]], positions[p[1]])
        )
        graph.add_edge(a, b)

    def name(index: int) -> str:
        return f"n-{index:05d}"

    regions = {name(i): f"q{int(positions[i][0] >= 0.5)}{int(positions[i][1] >= 0.5)}" for i in range(count)}
    edges = sorted((name(a), name(b)) for a, b in graph.edges)
    return _Layout(regions, edges, {})


_LAYOUTS = {
    "hierarchy": _hierarchy,
    "ring-of-regions": _ring,
    "random-geometric": _random_geometric,
    "mesh-of-hubs": _mesh,
}


# -- back to a topology file -------------------------------------------------------------------


def to_toml(topology: Topology) -> str:
    """The topology as a file topology.loader reads back to the same model."""
    out = [f"[topology]\nname = {_q(topology.name)}\n"]
    for node in topology.nodes.values():
        out.append(f"[nodes.{_q(node.name)}]\nhost = {_q(node.host)}\nport = {node.port}")
        out.append(f"region = {_q(node.region)}\n" if node.region else "")
    for (name, kind), on in _grouped(((e.name, e.type), e.node) for e in topology.exchanges):
        out.append(f"[[exchanges]]\nname = {_q(name)}\ntype = {_q(kind)}\nnodes = {_list(on)}\n")
    for (name,), on in _grouped(((q.name,), q.node) for q in topology.queues):
        out.append(f"[[queues]]\nname = {_q(name)}\nnodes = {_list(on)}\n")
    for binding in topology.bindings:
        out.append(_binding(binding))
    for route in topology.routes:
        out.append(_route(route))
    for federation in topology.federations:
        out.append(
            f"[[federations]]\nchild = {_q(federation.child)}\nparent = {_q(federation.parent)}\n"
            f"exchange = {_q(federation.exchange)}\ntype = {_q(federation.type)}\n"
        )
    return "\n".join(line for line in out if line) + "\n"


def _grouped(pairs: Iterable[tuple[tuple[str, ...], str]]) -> list[tuple[tuple[str, ...], list[str]]]:
    """(key, node) pairs -> each key with the nodes it is on, in first-seen order."""
    grouped: dict[tuple[str, ...], list[str]] = {}
    for key, node in pairs:
        grouped.setdefault(key, []).append(node)
    return list(grouped.items())


def _binding(binding: Binding) -> str:
    text = f"[[bindings]]\nexchange = {_q(binding.exchange)}\nqueue = {_q(binding.queue)}\nkey = {_q(binding.key)}\n"
    if binding.arguments:
        pairs = ", ".join(f"{_q(k)} = {json.dumps(v)}" for k, v in binding.arguments.items())
        text += f"arguments = {{ {pairs} }}\n"
    return text + f"nodes = {_list([binding.node])}\n"


def _route(route: Route) -> str:
    text = f"[[routes]]\nkind = {_q(route.kind)}\nfrom = {_q(route.source)}\nto = {_q(route.destination)}\n"
    text += f"exchange = {_q(route.exchange)}\n"
    if route.key is not None:
        text += f"key = {_q(route.key)}\n"
    if route.queue is not None:
        text += f"queue = {_q(route.queue)}\n"
    if route.push:
        text += 'mode = "push"\n'
    if not route.durable:
        text += "durable = false\n"
    return text


def _q(value: object) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(str(value))


def _list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_q(v) for v in values) + "]"
