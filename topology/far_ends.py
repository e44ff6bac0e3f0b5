"""Which node of a topology file a live link, route or federation reaches.

Nodes are known by the name they report, not by the address a node reached them at (issue
15): `localhost:5702` and `127.0.0.1:5702` are one node, which a node links to once. A record
names its far end by address and, once that was reached, by the name it gave there: a link's
`node`, a federation's `parent_node`, a route the `node` of the link it rides on (what `amq-route
link list`, `federate list` and `route map` show). Each node of the file has the name it
reports too (`node.info`, read by topology.live; the file's own names in the views
topology.routemap expects). `FarEnds` matches the two by name, so the planner and the live map
compare what the nodes hold whatever address made it.

A name is not always known: a link that never reached its peer has none, and a node of the file
that could not be read reports none. Only then is a far end matched by address, the file's
`host:port` against the record's. A far end that does not match that way either is taken as
outside the file, and when a missing name is why, the far end carries a note saying so, for the
plan and the live map to print.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from federation import formatting
from federation.address import BrokerAddress
from federation.routemap import NodeView, link_peer
from topology.model import Node, Topology


@dataclass(frozen=True)
class FarEnd:
    """A record's far end: the address its node reaches it at (no credentials), the node of
    the file it is (None: not the topology's), and why that may be wrong, when a name it would
    take to tell is not known."""

    address: BrokerAddress
    node: Node | None
    note: str = ""

    @property
    def key(self) -> str:
        """What tells far ends apart: the node's name in the file, else the address (which,
        with its `:`, is never a node name)."""
        return self.node.name if self.node is not None else str(self.address)

    def label(self) -> str:
        """`b 127.0.0.1:5702`: the node as the file names it, at the address it is reached at."""
        return f"{self.node.name} {self.address}" if self.node is not None else str(self.address)


class FarEnds:
    """Far ends of one set of views (the live nodes', or those the file makes) resolved to the
    file's nodes. `views` maps each node of the file to its view, or to why it was not read."""

    def __init__(self, topology: Topology, views: Mapping[str, NodeView | str]) -> None:
        #: The name each node of the file reports, where it was read.
        self.names = {
            name: view.name for name, view in views.items() if isinstance(view, NodeView) and view.name
        }
        self._by_name: dict[str, Node] = {}
        for name, reported in self.names.items():
            self._by_name.setdefault(reported, topology.nodes[name])
        self._by_endpoint: dict[str, Node] = {}
        for node in topology.nodes.values():
            self._by_endpoint.setdefault(node.endpoint, node)
            if node.tls_endpoint is not None:
                self._by_endpoint.setdefault(node.tls_endpoint, node)
        self._all_named = set(self.names) == set(topology.nodes)

    def reach(self, address: BrokerAddress, name: str | None) -> FarEnd:
        """The far end at `address` that gave `name` (None: not known): the node of the file
        reporting that name, else, where one of the two names is not known, the node of the
        file at that address."""
        if name is not None and name in self._by_name:
            return FarEnd(address, self._by_name[name])
        node = self._by_endpoint.get(str(address))
        if node is not None and (name is None or node.name not in self.names):
            return FarEnd(address, node)
        if name is None:
            why = "gave no name (not reached yet, or not an amq-gateway node)"
        elif not self._all_named:
            why = f"is node '{name}', which no node of the file that could be read reports"
        else:
            return FarEnd(address, None)
        return FarEnd(address, None, f"{address} {why}: matched by address, it is no node of the file")

    def link(self, record: formatting.Record) -> FarEnd:
        """A links.list record's far end."""
        return self.reach(link_peer(record), record.get("node"))

    def route(self, view: NodeView, record: formatting.Record) -> FarEnd:
        """The far end of a routes.list record of the node `view` shows: its link's."""
        return self.reach(BrokerAddress.parse(formatting.route_peer(record)), view.route_node(record))

    def federation(self, record: formatting.Record) -> FarEnd:
        """A federations.list record's parent."""
        return self.reach(formatting.federation_parent(record), record.get("parent_node"))
