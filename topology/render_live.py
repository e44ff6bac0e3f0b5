"""The file's map against the live nodes as data and as a picture: `amq-route topology map FILE
--live --format json|dot|png`.

Both come from topology.routemap.mark_live, the comparison the text map prints, so the three
formats cannot disagree. `live_document` (JSON) is

    {
      "topology": name, "file": path, "drift": count, "summary": the text map's last line,
      "notes": [far ends matched by address, as a name was not known: the text map's lines],
      "nodes": [{"name", "endpoint", "read", "error"}]                (error: why it was not read)
      "links": [{"node", "far_end", "far_node", "marker", "state", "last_error"}]
      "routes": [{"node", "far_end", "far_node", "marker", "kind", "direction", "exchange",
                  "key", "queue", "state", "last_error"}]
      "federations": [{"node", "far_end", "far_node", "marker", "exchange", "type", "state",
                       "last_error"}]
    }

in the file's node order; `marker` is "" (matches), "missing", "extra", "not read" or
"down (<state>: <last error>)"; `far_end` is the address the node reaches the far end at,
`far_node` the file's name for that node (known by the name it reports, so `127.0.0.1:5702` is
the file's node at `localhost:5702`), null when it is no node of the file; `state` and
`last_error` are the node's, null for what is missing or not read.

The picture is the offline one's frame, boxes and colours (topology.render), with one arrow per
link, route and federation the comparison found (a reciprocal pair of dynamic routes is two
arrows here). An arrow that matches is drawn as offline; a `missing` one is dotted and
labelled MISSING, an `extra` one dashed and labelled EXTRA, a `down` one red and labelled with
its state; a node that could not be read is a red box saying why; a far end that is no node of
the file is a grey box of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import graphviz

from topology.model import Topology
from topology.render import (
    FEDERATION_COLOURS,
    LINK_COLOUR,
    ROUTE_COLOURS,
    LegendRow,
    draw_legend,
    draw_nodes,
    graph_frame,
    legend_rows,
    route_label,
    write_png,
)
from topology.routemap import EXTRA, MISSING, NOT_READ, Marked, Marks

#: What marks a drifting arrow or box.
DOWN_COLOUR = "#d50000"
UNREAD_FILL = "#ffcdd2"
STRANGER_FILL = "#eeeeee"
MARKER_STYLES = {MISSING: "dotted", EXTRA: "dashed"}


def _far_node(item: Marked) -> str | None:
    """The file's name for the node at the other end (by the name it reports), if any."""
    return item.far.node.name if item.far.node is not None else None


def _item_document(item: Marked) -> dict[str, Any]:
    record = item.record
    document: dict[str, Any] = {
        "node": item.node,
        "far_end": str(item.far.address),
        "far_node": _far_node(item),
        "marker": item.marker,
    }
    if item.section == "routes":
        document |= {
            "kind": record["kind"],
            "direction": "push" if record.get("src_local") else "pull",
            "exchange": record["exchange"],
            "key": record.get("key"),
            "queue": record.get("queue"),
        }
    elif item.section == "federations":
        document |= {"exchange": record["exchange"], "type": record.get("type")}
    live = item.marker not in (MISSING, NOT_READ)  # else the record is the file's, not a state
    document |= {
        "state": record.get("state") if live else None,
        "last_error": record.get("last_error") or "" if live else None,
    }
    return document


def live_document(topology: Topology, marks: Marks) -> dict[str, Any]:
    """The JSON document's content (see the module's documentation)."""
    document: dict[str, Any] = {
        "topology": topology.name,
        "file": topology.path,
        "drift": marks.drift,
        "summary": marks.summary,
        "notes": marks.notes,
        "nodes": [
            {
                "name": name,
                "endpoint": node.endpoint,
                "read": name not in marks.unread,
                "error": marks.unread.get(name),
            }
            for name, node in topology.nodes.items()
        ],
    }
    for section in ("links", "routes", "federations"):
        document[section] = [_item_document(item) for item in marks.items if item.section == section]
    return document


def render_live_json(topology: Topology, marks: Marks) -> str:
    """The comparison as a JSON document, without a final newline."""
    return json.dumps(live_document(topology, marks), indent=2, ensure_ascii=False, default=str)


def live_graph(topology: Topology, marks: Marks) -> graphviz.Digraph:
    """The comparison as a graphviz.Digraph (see the module's documentation)."""
    dot = graph_frame(topology)

    def looks(name: str) -> dict[str, str]:
        if name not in marks.unread:
            return {}
        label = f"{name}\\n{topology.nodes[name].endpoint}\\nNOT READ: {marks.unread[name]}"
        return {"label": label, "fillcolor": UNREAD_FILL, "color": DOWN_COLOUR}

    draw_nodes(dot, topology, looks)
    used: dict[str, list[str]] = {"link": [], "route": [], "federation": []}
    strangers: set[str] = set()
    for item in marks.items:
        address = str(item.far.address)
        far = _far_node(item)
        # A space keeps the id from clashing with a node's name; graphviz reads a colon in an
        # edge's end as a node port.
        stranger = "peer " + address.replace(":", "/")
        if far is None and address not in strangers:
            strangers.add(address)
            dot.node(
                stranger,
                f"{address}\\n(not in the file)",
                fillcolor=STRANGER_FILL,
                style="rounded,dashed,filled",
            )
        _draw_item(dot, item, far or stranger, used)
    draw_legend(dot, legend_rows(used) + _marker_rows(marks))
    return dot


def _draw_item(dot: graphviz.Digraph, item: Marked, far: str, used: dict[str, list[str]]) -> None:
    record = item.record
    if item.section == "links":
        tail, head, colour, label = item.node, far, LINK_COLOUR, ""
        attributes = {"style": "dashed", "arrowhead": "empty", "constraint": "false"}
        used["link"][:1] = ["link"]
    elif item.section == "routes":
        colour = ROUTE_COLOURS.get(record["kind"], "black")
        tail, head = (item.node, far) if record.get("src_local") else (far, item.node)
        label = route_label(
            record["kind"],
            record["exchange"],
            record.get("key"),
            record.get("queue"),
            bool(record.get("src_local")),
        )
        attributes = {"penwidth": "2"}
        if record["kind"] not in used["route"]:
            used["route"].append(record["kind"])
    else:
        kind = str(record.get("type"))
        colour = FEDERATION_COLOURS.get(kind, "black")
        tail, head, label = item.node, far, f"{record['exchange']}\\n({kind})"
        attributes = {"penwidth": "2.5", "arrowtail": "odot", "dir": "both"}
        if kind not in used["federation"]:
            used["federation"].append(kind)
    marker = item.marker
    if marker in MARKER_STYLES:
        attributes["style"] = MARKER_STYLES[marker]
        label = _below(label, marker.upper())
    elif marker == NOT_READ:
        attributes["style"] = "dotted"
        label = _below(label, "(not read)")
    elif marker:
        colour = DOWN_COLOUR
        label = _below(label, "DOWN" + marker.removeprefix("down"))
    dot.edge(tail, head, label, color=colour, fontcolor=colour, **attributes)


def _below(label: str, line: str) -> str:
    return f"{label}\\n{line}" if label else line


def _marker_rows(marks: Marks) -> list[LegendRow]:
    """Legend rows for the markers the picture uses."""
    used = {item.marker for item in marks.items}
    rows: list[LegendRow] = []
    if MISSING in used:
        rows.append(("\u2508\u2508\u2508\u25b6", "black", "MISSING: in the file, not on the node"))
    if EXTRA in used:
        rows.append(("\u254c\u254c\u254c\u25b6", "black", "EXTRA: on the node, not in the file"))
    if any(marker.startswith("down") for marker in used):
        rows.append(("\u2501\u2501\u2501\u25b6", DOWN_COLOUR, "DOWN: not Operational (state: last error)"))
    if marks.unread:
        rows.append(("\u25a0", DOWN_COLOUR, "NOT READ: a node that could not be read"))
    return rows


def render_live_dot(topology: Topology, marks: Marks) -> str:
    """The comparison in Graphviz's DOT language."""
    return live_graph(topology, marks).source


def render_live_png(topology: Topology, marks: Marks, output: Path) -> None:
    """Draw the comparison into `output` with Graphviz's `dot`; RenderError as render_png."""
    write_png(live_graph(topology, marks), output)
