"""A topology as data and as a picture: `amq-route topology map FILE --format json|dot|png`.

`render_json` is the file's content after defaults and expansion, as one stable JSON document
(keys sorted, every list sorted, two-space indent), for other tools to read:

    {
      "topology": name, "file": path,
      "regions":     [{"name", "nodes": [node names]}]        ("" holds nodes without a region)
      "nodes":       [{"name", "host", "port", "endpoint", "region", "tag", "credentials", "users"}]
      "exchanges":   [{"node", "name", "type", "durable", "auto_delete", "internal"}]  (declared ones)
      "queues":      [{"node", "name", "durable", "auto_delete"}]
      "bindings":    [{"node", "exchange", "queue", "key", "arguments"}]
      "links":       [{"opener", "peer", "durable", "transport", "declared"}]
      "routes":      [{"kind", "source", "destination", "holder", "mode", "exchange", "key",
                       "queue", "durable", "ack", "credit", "tag", "excludes"}]
      "federations": [{"child", "parent", "exchange", "type"}]
      "publishers":  [{"node", "exchange", "key"}]
    }

Links are the effective ones: declared (`declared: true`) and those routes create for
themselves; `tag` is the node's federation tag (its name unless the file sets one), a route's
`tag` null means the holder's; a federation's type is resolved (`data` is fanout, none given is
service for a direct exchange). Credentials appear by name only, never a password.

`render_dot` draws the topology for Graphviz: nodes grouped into one box per region; links as
grey dashed arrows from the node that opens them to its peer (two nodes linked both ways, one
double-headed arrow); routes as arrows from source to
destination coloured by kind (dynamic blue, exchange green, queue orange) and labelled with the
exchange and key (or queue), a reciprocal pair of dynamic routes as one double-headed arrow;
federations as bold arrows from child to parent coloured by type; and a legend of what the
picture uses. `render_png` runs Graphviz's `dot` on it.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import graphviz

from topology.model import Route, Topology

#: Route arrows by kind.
ROUTE_COLOURS = {"dynamic": "#1f6fb4", "exchange": "#2e9b3a", "queue": "#e07b10"}
#: Federation arrows by type.
FEDERATION_COLOURS = {
    "fanout": "#c62828",
    "service": "#7b3fa8",
    "subscriber": "#8d5524",
    "publisher": "#d6409f",
    "locator": "#138d90",
}
LINK_COLOUR = "#9a9a9a"
REGION_FILL = "#eef3fa"
REGION_BORDER = "#9fb6d6"
FONT = "Helvetica"


class RenderError(Exception):
    """The picture could not be made; the message says why and what to do."""


# -- JSON -----------------------------------------------------------------------------------


def _sorted(records: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    return sorted(records, key=lambda record: tuple(str(record[key]) for key in keys))


def topology_document(topology: Topology) -> dict[str, Any]:
    """The JSON document's content (see the module's documentation)."""
    regions: dict[str, list[str]] = {}
    for node in topology.nodes.values():
        regions.setdefault(node.region, []).append(node.name)
    declared = {(link.opener, link.peer) for link in topology.links}
    return {
        "topology": topology.name,
        "file": topology.path,
        "regions": [{"name": name, "nodes": sorted(names)} for name, names in sorted(regions.items())],
        "nodes": _sorted(
            [
                {
                    "name": node.name,
                    "host": node.host,
                    "port": node.port,
                    "endpoint": node.endpoint,
                    "region": node.region,
                    "tag": node.federation_tag,
                    "credentials": node.credentials.name,
                    "users": node.users,
                }
                for node in topology.nodes.values()
            ],
            "name",
        ),
        "exchanges": _sorted(
            [
                {
                    "node": exchange.node,
                    "name": exchange.name,
                    "type": exchange.type,
                    "durable": exchange.durable,
                    "auto_delete": exchange.auto_delete,
                    "internal": exchange.internal,
                }
                for exchange in topology.exchanges
            ],
            "node",
            "name",
        ),
        "queues": _sorted(
            [
                {
                    "node": queue.node,
                    "name": queue.name,
                    "durable": queue.durable,
                    "auto_delete": queue.auto_delete,
                }
                for queue in topology.queues
            ],
            "node",
            "name",
        ),
        "bindings": _sorted(
            [
                {
                    "node": binding.node,
                    "exchange": binding.exchange,
                    "queue": binding.queue,
                    "key": binding.key,
                    "arguments": binding.arguments,
                }
                for binding in topology.bindings
            ],
            "node",
            "exchange",
            "queue",
            "key",
        ),
        "links": _sorted(
            [
                {
                    "opener": link.opener,
                    "peer": link.peer,
                    "durable": link.durable,
                    "transport": link.transport,
                    "declared": (link.opener, link.peer) in declared,
                }
                for link in topology.effective_links()
            ],
            "opener",
            "peer",
        ),
        "routes": _sorted(
            [_route_document(route) for route in topology.routes],
            "source",
            "destination",
            "kind",
            "exchange",
            "key",
            "queue",
        ),
        "federations": _sorted(
            [
                {
                    "child": federation.child,
                    "parent": federation.parent,
                    "exchange": federation.exchange,
                    "type": topology.federation_type(federation),
                }
                for federation in topology.federations
            ],
            "child",
            "exchange",
            "parent",
        ),
        "publishers": _sorted(
            [
                {"node": publisher.node, "exchange": publisher.exchange, "key": publisher.key}
                for publisher in topology.publishers
            ],
            "node",
            "exchange",
            "key",
        ),
    }


def _route_document(route: Route) -> dict[str, Any]:
    return {
        "kind": route.kind,
        "source": route.source,
        "destination": route.destination,
        "holder": route.holder,
        "mode": "push" if route.push else "pull",
        "exchange": route.exchange,
        "key": route.key,
        "queue": route.queue,
        "durable": route.durable,
        "ack": route.ack,
        "credit": route.credit,
        "tag": route.tag,
        "excludes": list(route.excludes),
    }


def render_json(topology: Topology) -> str:
    """The topology as a stable JSON document (keys and lists sorted), without a final newline."""
    return json.dumps(topology_document(topology), indent=2, sort_keys=True, ensure_ascii=False, default=str)


# -- Graphviz -------------------------------------------------------------------------------


def _route_label(route: Route) -> str:
    return route_label(route.kind, route.exchange, route.key, route.queue, route.push)


def route_label(kind: str, exchange: str, key: str | None, queue: str | None, push: bool) -> str:
    """A route arrow's label: its exchange, and its key or the queue it takes from."""
    if kind == "queue":
        label = f"{queue} \u2192 {exchange}"
    elif kind == "exchange":
        label = f"{exchange}\\n{key}"
    else:
        label = exchange
    return f"{label}\\n(push)" if push else label


def topology_graph(topology: Topology) -> graphviz.Digraph:
    """The picture as a graphviz.Digraph (see the module's documentation)."""
    dot = graph_frame(topology)
    draw_nodes(dot, topology)
    used = _draw_edges(dot, topology)
    draw_legend(dot, legend_rows(used))
    return dot


def graph_frame(topology: Topology) -> graphviz.Digraph:
    """An empty picture of the topology: its title and the looks of its nodes and arrows."""
    return graphviz.Digraph(
        name=topology.name,
        graph_attr={
            "label": f"{topology.name}" + (f"  ({topology.path})" if topology.path else ""),
            "labelloc": "t",
            "fontname": FONT,
            "fontsize": "18",
            "rankdir": "LR",
            "nodesep": "0.5",
            "ranksep": "1.1",
            "newrank": "true",
        },
        node_attr={
            "shape": "box",
            "style": "rounded,filled",
            "fillcolor": "white",
            "color": "#4a4a4a",
            "fontname": FONT,
            "fontsize": "12",
        },
        edge_attr={"fontname": FONT, "fontsize": "10"},
    )


NodeLooks = Callable[[str], dict[str, str]]


def draw_nodes(dot: graphviz.Digraph, topology: Topology, looks: NodeLooks | None = None) -> None:
    """The topology's nodes, one box per region; `looks(name)` gives a node's attributes
    (default: its name and endpoint)."""
    regions: dict[str, list[str]] = {}
    for node in topology.nodes.values():
        regions.setdefault(node.region, []).append(node.name)
    for index, (region, names) in enumerate(regions.items()):
        if not region:
            for name in names:
                _draw_node(dot, topology, name, looks)
            continue
        with dot.subgraph(name=f"cluster_region_{index}") as cluster:
            cluster.attr(
                label=f"region {region}",
                style="rounded,filled",
                fillcolor=REGION_FILL,
                color=REGION_BORDER,
                fontname=FONT,
                fontsize="14",
            )
            for name in names:
                _draw_node(cluster, topology, name, looks)


def _draw_node(graph: graphviz.Digraph, topology: Topology, name: str, looks: NodeLooks | None) -> None:
    attributes = {"label": f"{name}\\n{topology.nodes[name].endpoint}"}
    graph.node(name, **{**attributes, **(looks(name) if looks else {})})


def _draw_edges(dot: graphviz.Digraph, topology: Topology) -> dict[str, list[str]]:
    """Links, routes and federations; what kinds of each were drawn, for the legend."""
    used: dict[str, list[str]] = {"link": [], "route": [], "federation": []}
    known = topology.nodes
    pairs = [(link.opener, link.peer) for link in topology.effective_links()]
    for opener, peer in pairs:
        if opener not in known or peer not in known or ((peer, opener) in pairs and peer < opener):
            continue  # a pair of links both ways is drawn once, from the first name
        # Links do not pull the layout about: the routes and federations riding them do.
        dot.edge(
            opener,
            peer,
            color=LINK_COLOUR,
            style="dashed",
            arrowhead="empty",
            arrowtail="empty",
            arrowsize="0.7",
            constraint="false",
            dir="both" if (peer, opener) in pairs else "forward",
        )
        used["link"][:1] = ["link"]
    drawn: set[int] = set()
    routes = [route for route in topology.routes if route.source in known and route.destination in known]
    for index, route in enumerate(routes):
        if index in drawn:
            continue
        drawn.add(index)
        attributes = {
            "color": ROUTE_COLOURS.get(route.kind, "black"),
            "fontcolor": ROUTE_COLOURS.get(route.kind, "black"),
        }
        back = _reciprocal(routes, index, drawn)
        if back is not None:
            drawn.add(back)
            attributes["dir"] = "both"
        dot.edge(route.source, route.destination, _route_label(route), penwidth="2", **attributes)
        if route.kind not in used["route"]:
            used["route"].append(route.kind)
    for federation in topology.federations:
        if federation.child in known and federation.parent in known:
            kind = topology.federation_type(federation)
            colour = FEDERATION_COLOURS.get(kind, "black")
            dot.edge(
                federation.child,
                federation.parent,
                f"{federation.exchange}\\n({kind})",
                color=colour,
                fontcolor=colour,
                penwidth="2.5",
                style="bold",
                arrowhead="normal",
                arrowtail="odot",
                dir="both",
            )
            if kind not in used["federation"]:
                used["federation"].append(kind)
    return used


def _reciprocal(routes: list[Route], index: int, drawn: set[int]) -> int | None:
    """The dynamic route going back along routes[index] (the pair is drawn as one arrow)."""
    route = routes[index]
    if route.kind != "dynamic":
        return None
    for other_index, other in enumerate(routes):
        if other_index in drawn or other.kind != "dynamic":
            continue
        if (other.source, other.destination, other.exchange) == (
            route.destination,
            route.source,
            route.exchange,
        ):
            return other_index
    return None


LegendRow = tuple[str, str, str]


def legend_rows(used: dict[str, list[str]]) -> list[LegendRow]:
    """The legend's rows (sample, colour, meaning) for the kinds of arrows a picture uses."""
    rows: list[LegendRow] = []
    if used["link"]:
        rows.append(("\u254c\u254c\u254c\u25b7", LINK_COLOUR, "link (opener \u2192 peer)"))
    for kind in ("dynamic", "exchange", "queue"):
        if kind in used["route"]:
            rows.append(
                ("\u2501\u2501\u2501\u25b6", ROUTE_COLOURS[kind], f"{kind} route (source \u2192 destination)")
            )
    for kind in FEDERATION_COLOURS:
        if kind in used["federation"]:
            rows.append(
                (
                    "\u25cb\u2501\u2501\u25b6",
                    FEDERATION_COLOURS[kind],
                    f"{kind} federation (child \u2192 parent)",
                )
            )
    return rows


def draw_legend(dot: graphviz.Digraph, rows: list[LegendRow]) -> None:
    """A table of what the picture's arrows mean, one row per kind it uses."""
    if not rows:
        return
    cells = "".join(
        f'<tr><td align="left"><font color="{colour}">{sample}</font></td>'
        f'<td align="left">{html.escape(text)}</td></tr>'
        for sample, colour, text in rows
    )
    table = (
        '<<table border="1" cellborder="0" cellspacing="2" cellpadding="3" color="#bbbbbb" style="rounded">'
        f'<tr><td colspan="2"><b>Legend</b></td></tr>{cells}</table>>'
    )
    # An id with spaces cannot clash with a node's name (letters, digits, . _ -).
    dot.node("legend table", table, shape="plaintext", style="", fontsize="10")


def render_dot(topology: Topology) -> str:
    """The picture in Graphviz's DOT language."""
    return topology_graph(topology).source


def render_png(topology: Topology, output: Path) -> None:
    """Draw the picture into `output` (a PNG file) with Graphviz's `dot`. RenderError if `dot`
    is not installed or fails."""
    write_png(topology_graph(topology), output)


def write_png(graph: graphviz.Digraph, output: Path) -> None:
    """Draw `graph` into `output` (a PNG file) with Graphviz's `dot`. RenderError if `dot`
    is not installed or fails, or the file cannot be written."""
    try:
        image = graph.pipe(format="png", engine="dot")
    except graphviz.ExecutableNotFound:
        raise RenderError(
            "cannot draw a PNG: Graphviz's `dot` program is not installed; install graphviz "
            "(apt-get install graphviz, dnf install graphviz or brew install graphviz), or use "
            "--format dot and render it elsewhere"
        ) from None
    except graphviz.CalledProcessError as error:
        stderr = getattr(error, "stderr", b"") or b""
        detail = stderr.decode(errors="replace").strip() if isinstance(stderr, bytes) else str(stderr).strip()
        raise RenderError(f"Graphviz's `dot` failed: {detail or error}") from None
    try:
        output.write_bytes(image)
    except OSError as error:
        raise RenderError(f"cannot write {output}: {error.strerror or error}") from None
