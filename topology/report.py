"""What `amq-gateway up` shows once the topology is applied: the live route map, walked from
the file's first node as `amq-route route map` walks, then every node's links and federated
exchanges with their states and last errors, as `link list` and `federate list` print them."""

from __future__ import annotations

from federation import formatting
from topology.live import LiveNode, LiveState
from topology.model import Topology
from topology.routemap import walk_map


def live_report(topology: Topology, state: LiveState) -> list[str]:
    """The map, then per node its link and federation tables (nodes without either are left
    out; a node that could not be read says why)."""
    lines = walk_map(topology, state.views())
    for name, node in state.nodes.items():
        endpoint = topology.nodes[name].endpoint
        if isinstance(node, str):
            lines += ["", f"{name} ({endpoint}): Failed: {node}"]
        elif node.links or node.federations:
            lines += ["", f"{name} ({endpoint}):", *node_tables(node)]
    return lines


def node_tables(node: LiveNode) -> list[str]:
    """A node's `link list` table, then its `federate list` table, each only if not empty."""
    tables = formatting.link_table(node.links) if node.links else []
    if node.federations:
        if tables:
            tables.append("")
        tables += formatting.federation_table(node.federations)
    return tables
