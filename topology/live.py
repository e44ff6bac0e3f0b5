"""What the live nodes of a topology hold, read through management: the planner's other input.

`read_live` reads every node of the file at once (one Trio task each), with the node's own
credentials, through the same management requests amq-config and amq-route send to list
things (`exchanges.list`, `queues.list`, `bindings.list`, `links.list`, `routes.list`,
`federations.list`), its name (`node.info`), and, where the file manages who may do what on
the node, `users.list`, `vhosts.list`, `permissions.list` and `topic_permissions.list`. A node that cannot be read (down, refusing the login, not answering in
time) is recorded with the reason, `ConnectFailed - Connection refused`, and never raises:
a plan must say which nodes it could not see, and `amq-gateway up` polls until all answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from federation.formatting import Record
from federation.management_client import ClientFactory, ManagementClient, ManagementFailed
from federation.routemap import NodeView
from topology.model import Node, Topology

#: The state a link or a peering is in when it carries messages.
OPERATIONAL = "Operational"


@dataclass(frozen=True)
class LiveAccess:
    """A node's users, vhosts and permissions, as its management lists them: read only for
    nodes whose users the file manages (topology.model.Access.manages)."""

    users: list[Record] = field(default_factory=list)
    vhosts: list[Record] = field(default_factory=list)
    permissions: list[Record] = field(default_factory=list)
    topic_permissions: list[Record] = field(default_factory=list)


@dataclass(frozen=True)
class LiveNode:
    """One node's records, exactly as its `*.list` management operations return them."""

    exchanges: list[Record] = field(default_factory=list)
    queues: list[Record] = field(default_factory=list)
    bindings: list[Record] = field(default_factory=list)
    links: list[Record] = field(default_factory=list)
    routes: list[Record] = field(default_factory=list)
    federations: list[Record] = field(default_factory=list)
    #: The name the node reports (node.info).
    name: str | None = None
    access: LiveAccess | None = None

    @property
    def view(self) -> NodeView:
        """What `amq-route route map` reads of the node."""
        return NodeView(self.links, self.routes, self.federations, self.name)

    def operational(self) -> bool:
        """Whether every link and every federation's peering is Operational."""
        return all(record.get("state") == OPERATIONAL for record in [*self.links, *self.federations])


@dataclass(frozen=True)
class LiveState:
    """Every node of a topology, by name: what it holds, or (a str) why it could not be read."""

    nodes: dict[str, LiveNode | str]

    def unreachable(self) -> dict[str, str]:
        """The nodes that could not be read, with the reason."""
        return {name: state for name, state in self.nodes.items() if isinstance(state, str)}

    def views(self) -> dict[str, NodeView | str]:
        """What `route map` reads of each node, or why the node could not be read."""
        return {name: state if isinstance(state, str) else state.view for name, state in self.nodes.items()}

    def all_operational(self) -> bool:
        """Every node read, and on each every link and federation peering Operational."""
        return all(isinstance(state, LiveNode) and state.operational() for state in self.nodes.values())


async def read_node(
    node: Node, timeout: float, connect: ClientFactory = ManagementClient.connect, access: bool = False
) -> LiveNode:
    """Every record the planner compares, from one node (with its users, vhosts and
    permissions when `access`); ManagementFailed if it cannot be read."""
    async with connect(node.address, timeout) as client:
        accounts = None
        if access:
            accounts = LiveAccess(
                users=await client.call("users.list"),
                vhosts=await client.call("vhosts.list"),
                permissions=await client.call("permissions.list"),
                topic_permissions=await client.call("topic_permissions.list"),
            )
        return LiveNode(
            exchanges=await client.call("exchanges.list"),
            queues=await client.call("queues.list"),
            bindings=await client.call("bindings.list"),
            links=await client.call("links.list"),
            routes=await client.call("routes.list"),
            federations=await client.call("federations.list"),
            name=(await client.call("node.info")).get("name"),
            access=accounts,
        )


async def read_live(
    topology: Topology, timeout: float, connect: ClientFactory = ManagementClient.connect
) -> LiveState:
    """Read every node of the topology concurrently; `timeout` bounds each connection and each
    request (0: no limit, as amq-route's --timeout). Nodes keep the file's order."""
    found: dict[str, LiveNode | str] = {}

    async def read(node: Node) -> None:
        try:
            found[node.name] = await read_node(node, timeout, connect, topology.access.manages(node.name))
        except ManagementFailed as failure:
            found[node.name] = str(failure)
        except OSError as error:
            found[node.name] = f"{type(error).__name__} - {error}"

    async with trio.open_nursery() as nursery:
        for node in topology.nodes.values():
            nursery.start_soon(read, node)
    return LiveState({name: found[name] for name in topology.nodes})
