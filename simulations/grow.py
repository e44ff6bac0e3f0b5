"""`grow = {nodes = N}`: a topology with every edge node made N nodes, to simulate a captured
workload on a federation with more of them (docs/simulation.md, "Capturing a workload").

An **edge node** is a node joined (by links, routes or federations) to exactly one other
node, which is joined to more than one: the demo's edge-eu-1 (to hub-eu), not either node of
a pair, nor any node of a ring. Growing keeps the original and adds N-1 copies of each edge
node, named `<name>.2` ... `<name>.N`, in the original's region, at its address (copies exist
only in the simulation; `amq-sim validate` gives every node a free port anyway). A copy has
everything the file declares on or about the original: its exchanges, queues and bindings,
its links, routes and federations to its one neighbour (so the neighbour, a hub, carries N
times the edge's traffic), its publishers, and its federation tag with `.k` added when the
file gives one (a tag names one node). Link rules naming the original by name
(`[[links.pairs]]`) do not apply to copies; region rules do.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from topology.model import Topology

#: The fields naming a node, per kind of declaration.
_NODE_FIELDS = {
    "exchanges": ("node",),
    "queues": ("node",),
    "bindings": ("node",),
    "links": ("opener", "peer"),
    "routes": ("source", "destination"),
    "federations": ("child", "parent"),
    "publishers": ("node",),
}


def neighbours(topology: Topology) -> dict[str, set[str]]:
    """Every node's neighbours: the nodes its links, routes and federations join it to."""
    found: dict[str, set[str]] = {name: set() for name in topology.nodes}
    pairs = [
        *((link.opener, link.peer) for link in topology.links),
        *((route.source, route.destination) for route in topology.routes),
        *((federation.child, federation.parent) for federation in topology.federations),
    ]
    for one, other in pairs:
        if one != other:
            found[one].add(other)
            found[other].add(one)
    return found


def edge_nodes(topology: Topology) -> list[str]:
    """The edge nodes (see the module), in the topology's order."""
    joined = neighbours(topology)
    return [name for name, near in joined.items() if len(near) == 1 and len(joined[next(iter(near))]) > 1]


def copy_names(name: str, nodes: int) -> list[str]:
    """The names of an edge node's copies when it becomes `nodes` nodes."""
    return [f"{name}.{k}" for k in range(2, nodes + 1)]


def grow(topology: Topology, nodes: int) -> Topology:
    """The topology with every edge node made `nodes` nodes; ValueError when there is no edge
    node, or a copy's name is taken."""
    if nodes == 1:
        return topology
    edges = edge_nodes(topology)
    if not edges:
        raise ValueError(
            "the topology has no edge node to grow (a node joined to exactly one other, "
            "which is joined to more)"
        )
    copies = {name: copy_names(name, nodes) for name in edges}
    taken = sorted(copy for names in copies.values() for copy in names if copy in topology.nodes)
    if taken:
        raise ValueError(f"a copy's name is a node of the topology already: {', '.join(taken[:5])}")
    grown_nodes = dict(topology.nodes)
    for name, names in copies.items():
        node = topology.nodes[name]
        for k, copy in enumerate(names, start=2):
            grown_nodes[copy] = replace(node, name=copy, tag=f"{node.tag}.{k}" if node.tag else "")
    changes: dict[str, Any] = {"nodes": grown_nodes}
    for kind, names_fields in _NODE_FIELDS.items():
        items = getattr(topology, kind)
        added = []
        for item in items:
            edge = next((getattr(item, f) for f in names_fields if getattr(item, f) in copies), None)
            if edge is not None:
                added += [_renamed(item, names_fields, edge, copy) for copy in copies[edge]]
        changes[kind] = (*items, *added)
    return replace(topology, **changes)


def _renamed(item: Any, names_fields: tuple[str, ...], old: str, new: str) -> Any:
    """`item` with `old` replaced by `new` wherever it names a node."""
    return replace(item, **{f: new for f in names_fields if getattr(item, f) == old})


def grown_names(topology: Topology, nodes: int) -> dict[str, list[str]]:
    """Per node of `topology`, the nodes it is after growing: itself, and its copies if it is
    an edge node."""
    edges = set(edge_nodes(topology)) if nodes > 1 else set()
    return {name: [name, *(copy_names(name, nodes) if name in edges else [])] for name in topology.nodes}
