"""Pictures and data of a topology (topology.render): the JSON document, the DOT text (regions
as clusters, arrows coloured by kind) and a PNG drawn by Graphviz's `dot`."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import struct
from pathlib import Path

import pytest

from topology.model import (
    Binding,
    Credentials,
    Exchange,
    Federation,
    Link,
    Node,
    Publisher,
    Queue,
    Route,
    Topology,
)
from topology.render import (
    FEDERATION_COLOURS,
    LINK_COLOUR,
    ROUTE_COLOURS,
    RenderError,
    render_dot,
    render_json,
    render_png,
)

ADMIN = Credentials("admin", "admin", "s3cret")


def node(name: str, port: int, region: str) -> Node:
    return Node(name, "127.0.0.1", port, region=region, credentials=ADMIN)


#: Three regions, hub and spoke: hubs share fed.topic dynamic routes, edges federate to their hub.
REGIONS = Topology(
    "three-regions",
    "three-regions.toml",
    nodes={
        n.name: n
        for n in (
            node("hub-eu", 5701, "eu"),
            node("edge-eu-1", 5711, "eu"),
            node("edge-eu-2", 5712, "eu"),
            node("hub-us", 5702, "us"),
            node("edge-us-1", 5721, "us"),
            node("hub-ap", 5703, "ap"),
            node("edge-ap-1", 5731, "ap"),
            Node("monitor", "127.0.0.1", 5799),
        )
    },
    exchanges=tuple(Exchange(hub, "fed.topic", "topic") for hub in ("hub-eu", "hub-us", "hub-ap")),
    queues=(Queue("edge-eu-1", "public"), Queue("hub-us", "orders")),
    bindings=(Binding("hub-us", "fed.topic", "orders", "orders.#"),),
    links=(Link("edge-eu-1", "hub-eu"), Link("edge-eu-2", "hub-eu", durable=False)),
    routes=(
        Route("dynamic", "hub-eu", "hub-us", "fed.topic"),
        Route("dynamic", "hub-us", "hub-eu", "fed.topic"),
        Route("dynamic", "hub-us", "hub-ap", "fed.topic"),
        Route("dynamic", "hub-ap", "hub-us", "fed.topic"),
        Route("exchange", "hub-eu", "edge-us-1", "amq.topic", key="global.#", push=True, ack=10),
        Route("queue", "edge-eu-1", "hub-eu", "amq.fanout", queue="public"),
    ),
    federations=(
        Federation("edge-eu-1", "hub-eu", "amq.data", "data"),
        Federation("edge-eu-2", "hub-eu", "amq.service", "service"),
        Federation("edge-us-1", "hub-us", "amq.data", "fanout"),
        Federation("edge-ap-1", "hub-ap", "amq.data", "subscriber"),
    ),
    publishers=(Publisher("edge-eu-1", "fed.topic", "orders.eu.new"),),
)


# -- JSON -----------------------------------------------------------------------------------


def test_json_document_content() -> None:
    document = json.loads(render_json(REGIONS))
    assert list(document) == sorted(document)
    assert (document["topology"], document["file"]) == ("three-regions", "three-regions.toml")
    assert document["regions"] == [
        {"name": "", "nodes": ["monitor"]},
        {"name": "ap", "nodes": ["edge-ap-1", "hub-ap"]},
        {"name": "eu", "nodes": ["edge-eu-1", "edge-eu-2", "hub-eu"]},
        {"name": "us", "nodes": ["edge-us-1", "hub-us"]},
    ]
    assert [n["name"] for n in document["nodes"]] == sorted(REGIONS.nodes)
    assert document["nodes"][0] == {
        "credentials": "admin",
        "endpoint": "127.0.0.1:5731",
        "host": "127.0.0.1",
        "name": "edge-ap-1",
        "port": 5731,
        "region": "ap",
        "tag": "edge-ap-1",
        "users": None,
    }
    assert [(e["node"], e["name"], e["type"]) for e in document["exchanges"]] == [
        ("hub-ap", "fed.topic", "topic"),
        ("hub-eu", "fed.topic", "topic"),
        ("hub-us", "fed.topic", "topic"),
    ]
    assert document["bindings"] == [
        {"arguments": {}, "exchange": "fed.topic", "key": "orders.#", "node": "hub-us", "queue": "orders"}
    ]
    # Declared links and the links routes open for themselves, each once.
    links = {
        (link["opener"], link["peer"]): (link["declared"], link["durable"]) for link in document["links"]
    }
    assert links == {
        ("edge-eu-1", "hub-eu"): (True, True),
        ("edge-eu-2", "hub-eu"): (True, False),
        ("hub-us", "hub-eu"): (False, True),
        ("hub-eu", "hub-us"): (False, True),
        ("hub-ap", "hub-us"): (False, True),
        ("hub-us", "hub-ap"): (False, True),
        ("hub-eu", "edge-us-1"): (False, True),
        ("hub-eu", "edge-eu-1"): (False, True),
    }
    push = next(route for route in document["routes"] if route["kind"] == "exchange")
    assert push == {
        "ack": 10,
        "credit": None,
        "destination": "edge-us-1",
        "durable": True,
        "exchange": "amq.topic",
        "excludes": [],
        "holder": "hub-eu",
        "key": "global.#",
        "kind": "exchange",
        "mode": "push",
        "queue": None,
        "source": "hub-eu",
        "tag": None,
    }
    assert [(f["child"], f["type"]) for f in document["federations"]] == [
        ("edge-ap-1", "subscriber"),
        ("edge-eu-1", "fanout"),  # data is fanout
        ("edge-eu-2", "service"),
        ("edge-us-1", "fanout"),
    ]
    assert document["publishers"] == [{"exchange": "fed.topic", "key": "orders.eu.new", "node": "edge-eu-1"}]


def test_json_is_stable_and_keeps_passwords_out() -> None:
    text = render_json(REGIONS)
    shuffled = dataclasses.replace(
        REGIONS,
        nodes=dict(reversed(REGIONS.nodes.items())),
        links=REGIONS.links[::-1],
        routes=REGIONS.routes[::-1],
        federations=REGIONS.federations[::-1],
        exchanges=REGIONS.exchanges[::-1],
    )
    assert render_json(shuffled) == text == render_json(REGIONS)
    assert "s3cret" not in text


# -- DOT ------------------------------------------------------------------------------------


def clusters(dot: str) -> dict[str, str]:
    """Each cluster's label and body."""
    found = {}
    for body in re.findall(r"subgraph cluster_\w+ \{(.*?)\n\t\}", dot, re.S):
        label = re.search(r'label="([^"]*)"', body)
        found[label.group(1) if label else ""] = body
    return found


def edge(dot: str, tail: str, head: str, colour: str) -> str:
    """The one edge line from tail to head in that colour."""
    lines = [
        line
        for line in dot.splitlines()
        if line.strip().startswith(f'"{tail}" -> "{head}"') and f'color="{colour}"' in line
    ]
    assert len(lines) == 1, (tail, head, colour, lines)
    return lines[0]


def test_dot_groups_nodes_into_one_cluster_per_region() -> None:
    dot = render_dot(REGIONS)
    assert dot.startswith('digraph "three-regions" {')
    found = clusters(dot)
    assert set(found) == {"region eu", "region us", "region ap"}
    for region, names in (("eu", ["hub-eu", "edge-eu-1", "edge-eu-2"]), ("us", ["hub-us", "edge-us-1"])):
        assert re.findall(r'^\t\t"([^"]+)" \[label=', found[f"region {region}"], re.M) == names
    assert '\t"hub-eu" [label="hub-eu\\n127.0.0.1:5701"]' in found["region eu"].replace("\t\t", "\t")
    # A node without a region stands outside every cluster.
    assert '\n\tmonitor [label="monitor\\n127.0.0.1:5799"]' in dot


def test_dot_edges_are_coloured_by_kind_and_labelled() -> None:
    dot = render_dot(REGIONS)
    link = edge(dot, "edge-eu-2", "hub-eu", LINK_COLOUR)
    assert "style=dashed" in link and "dir=forward" in link
    # Links both ways between two nodes are one double-headed arrow.
    assert "dir=both" in edge(dot, "hub-eu", "hub-us", LINK_COLOUR)
    assert '"hub-us" -> "hub-eu" [arrowhead=empty' not in dot
    # A reciprocal pair of dynamic routes is one double-headed arrow.
    dynamic = edge(dot, "hub-eu", "hub-us", ROUTE_COLOURS["dynamic"])
    assert 'label="fed.topic"' in dynamic and "dir=both" in dynamic
    assert not [
        line
        for line in dot.splitlines()
        if '"hub-us" -> "hub-eu"' in line and ROUTE_COLOURS["dynamic"] in line
    ]
    exchange = edge(dot, "hub-eu", "edge-us-1", ROUTE_COLOURS["exchange"])
    assert 'label="amq.topic\\nglobal.#\\n(push)"' in exchange
    queue = edge(dot, "edge-eu-1", "hub-eu", ROUTE_COLOURS["queue"])
    assert 'label="public → amq.fanout"' in queue
    fanout = edge(dot, "edge-eu-1", "hub-eu", FEDERATION_COLOURS["fanout"])
    assert 'label="amq.data\\n(fanout)"' in fanout
    edge(dot, "edge-eu-2", "hub-eu", FEDERATION_COLOURS["service"])
    edge(dot, "edge-ap-1", "hub-ap", FEDERATION_COLOURS["subscriber"])


def test_dot_legend_lists_the_kinds_drawn() -> None:
    legend = next(line for line in render_dot(REGIONS).splitlines() if "legend table" in line)
    for text in (
        "link (opener → peer)",
        "dynamic route",
        "exchange route",
        "queue route",
        "fanout federation",
        "service federation",
        "subscriber federation",
    ):
        assert text in legend
    assert "publisher federation" not in legend and "locator federation" not in legend
    alone = Topology("alone", "", nodes={"a": Node("a", "h", 1)})
    assert "legend" not in render_dot(alone)


# -- PNG ------------------------------------------------------------------------------------

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")


@needs_dot
def test_png_is_drawn(tmp_path: Path) -> None:
    output = tmp_path / "regions.png"
    render_png(REGIONS, output)
    data = output.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert width >= 800 and height >= 300, (width, height)
    assert len(data) > 20_000


def test_png_without_dot_says_to_install_graphviz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RenderError, match="`dot` program is not installed; install graphviz"):
        render_png(REGIONS, tmp_path / "regions.png")
    assert not (tmp_path / "regions.png").exists()


@needs_dot
def test_png_into_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RenderError, match=r"cannot write .*nowhere/regions.png: No such file or directory"):
        render_png(REGIONS, tmp_path / "nowhere" / "regions.png")
