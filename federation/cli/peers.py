"""What amq-route asks of the far end of a link before it adds one: whether the node is
already linked under another address (nodes are known by the name they report), and whether
a route's source or destination is there."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from federation import formatting
from federation.address import BrokerAddress
from federation.cli.route_options import Context
from federation.management_client import Client, ManagementFailed
from federation.requests import RouteSpec, endpoint, link_add
from federation.routemap import link_endpoint
from gateway.names import DEFAULT_VHOST


async def find_link(client: Client, peer: BrokerAddress) -> formatting.Record | None:
    """The node's link to `peer`, if it has one."""
    for link in await client.call("links.list"):
        if is_link_to(link, peer):
            return link
    return None


def is_link_to(link: formatting.Record, peer: BrokerAddress) -> bool:
    return bool(link["host"] == peer.host and link["port"] == peer.port)


def refuse_itself(node: BrokerAddress, peer: BrokerAddress, doing: str) -> None:
    """A node named as its own peer (the same host:port) is a usage error, before any request:
    the node cannot tell its own address from another's."""
    if endpoint(node) == endpoint(peer):
        raise ManagementFailed("usage", f"{doing} a node to itself is not permitted")


async def ensure_link(context: Context, client: Client, node: BrokerAddress, peer: BrokerAddress) -> None:
    """Create the link unless it exists (a route's command creates its link, as qpid-route's
    does); an existing link is left as it is, durability included."""
    refuse_itself(node, peer, "linking")
    if await find_link(client, peer) is None:
        context.say(f"Adding link {endpoint(node)} -> {endpoint(peer)}")
        await client.call(*link_add(peer, context.options.route))


def same_node(
    context: Context, links: Sequence[formatting.Record], peer: BrokerAddress, name: str | None
) -> BrokerAddress:
    """`peer`, or the address of the node's link (one of `links`) to the node `peer` names
    under another address (localhost:5672 and 127.0.0.1:5672 are one node, known by the name
    it reports): a node has one link to a peer node, whatever the spelling."""
    if name is None or any(is_link_to(link, peer) for link in links):
        return peer
    for link in links:
        if link.get("node") == name:
            context.say(
                f"{endpoint(peer)} is node '{name}', linked as {link_endpoint(link)}: using that link"
            )
            return replace(peer, host=link["host"], port=link["port"])
    return peer


async def node_name(context: Context, peer: BrokerAddress) -> str | None:
    """The name the node at `peer` reports, or None if it cannot be read."""
    try:
        async with context.client(peer) as client:
            return (await client.call("node.info")).get("name")
    except ManagementFailed:
        return None


async def check_far_end(context: Context, spec: RouteSpec, peer: BrokerAddress) -> str | None:
    """What the route needs on the peer must be there, as the node checks what it needs on
    itself: the source exchange or queue of a pulled route, the destination exchange of a
    pushed one (NOT_FOUND otherwise, and nothing is added). A peer that cannot be read (down,
    not a gateway node, no management rights for this login) is not checked: the route is
    added and its state says what it meets once the link is up. The name the peer reports,
    None if it could not be read."""
    push = context.options.route.src_local
    kind, name = ("queue", spec.queue) if spec.kind == "queue" and not push else ("exchange", spec.exchange)
    try:
        async with context.client(peer) as client:
            records = await client.call(f"{kind}s.list", {"vhost": peer.vhost or DEFAULT_VHOST})
            peer_node: str | None = (await client.call("node.info")).get("name")
    except ManagementFailed as failure:
        context.say(f"Not checking {endpoint(peer)} ({failure}): the route waits for it")
        return None
    if not any(record["name"] == name for record in records):
        role = "destination exchange" if push else f"source {kind}"
        raise ManagementFailed(
            "NOT_FOUND", f"no {kind} '{name}' on {endpoint(peer)}: the route's {role} must exist there"
        )
    return peer_node
