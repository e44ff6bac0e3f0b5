"""`topology map --live --format json|dot|png`: the comparison the text map prints, as a JSON
document and as the offline picture with missing, extra, down and unread things marked."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from federation.routemap import NodeView
from tests.unit.test_topology_map import SEED, n2_reached_as_127
from topology.render import ROUTE_COLOURS
from topology.render_live import DOWN_COLOUR, UNREAD_FILL, render_live_dot, render_live_json, render_live_png
from topology.routemap import Marks, expected_views, mark_live


def drifted() -> Marks:
    """The seed walkthrough with n1's link down, its queue route gone, an exchange route and a
    link to a stranger added by hand, and n4 not answering."""
    expected = expected_views(SEED)
    live: dict[str, NodeView | str] = copy.deepcopy(dict(expected))
    n1, n3 = live["n1"], live["n3"]
    assert isinstance(n1, NodeView) and isinstance(n3, NodeView)
    n1.links[0].update(state="Waiting", last_error="Connection refused")
    del n1.routes[1]
    n1.routes.append({**n1.routes[0], "key": "local.#"})
    n3.links.append({**n3.links[0], "port": 10009})
    live["n4"] = "ConnectFailed - Connection refused"
    return mark_live(SEED, expected, live)


def edges(dot: str, tail: str, head: str) -> list[str]:
    return [line.strip() for line in dot.splitlines() if line.strip().startswith(f"{tail} -> {head} ")]


def test_the_json_document_marks_every_item_and_node() -> None:
    document = json.loads(render_live_json(SEED, drifted()))
    assert document["drift"] == 5
    assert document["summary"] == "Drift: 1 missing, 2 extra, 1 down, 1 node not read."
    assert [node["read"] for node in document["nodes"]] == [True, True, True, False]
    assert document["nodes"][3]["error"] == "ConnectFailed - Connection refused"
    markers = {(item["node"], item["far_end"]): item for item in document["links"]}
    down = markers[("n1", "localhost:10002")]
    assert (down["far_node"], down["marker"], down["state"]) == (
        "n2",
        "down (Waiting: Connection refused)",
        "Waiting",
    )
    stranger = markers[("n3", "localhost:10009")]
    assert (stranger["far_node"], stranger["marker"]) == (None, "extra")
    unread = markers[("n4", "localhost:10003")]
    assert (unread["marker"], unread["state"]) == ("not read", None)
    routes = {(item["kind"], item["key"], item["queue"]): item["marker"] for item in document["routes"]}
    assert routes[("queue", None, "public")] == "missing"
    assert routes[("exchange", "local.#", None)] == "extra"
    assert routes[("exchange", "global.#", None)] == ""


def test_the_picture_marks_missing_extra_down_and_unread() -> None:
    dot = render_live_dot(SEED, drifted())
    n2_to_n1 = edges(dot, "n2", "n1")
    assert any("MISSING" in edge and "style=dotted" in edge for edge in n2_to_n1)
    assert any("local.#\\nEXTRA" in edge and "style=dashed" in edge for edge in n2_to_n1)
    assert any('global.#"' in edge and f'color="{ROUTE_COLOURS["exchange"]}"' in edge for edge in n2_to_n1)
    [link] = edges(dot, "n1", "n2")
    assert 'label="DOWN (Waiting: Connection refused)"' in link and f'color="{DOWN_COLOUR}"' in link
    assert "NOT READ: ConnectFailed - Connection refused" in dot and f'fillcolor="{UNREAD_FILL}"' in dot
    assert '"peer localhost/10009" [label="localhost:10009\\n(not in the file)"' in dot
    assert edges(dot, "n3", '"peer localhost/10009"')
    for legend in ("MISSING: in the file", "EXTRA: on the node", "DOWN: not Operational", "NOT READ"):
        assert legend in dot


def test_a_matching_picture_has_no_markers() -> None:
    expected = expected_views(SEED)
    marks = mark_live(SEED, expected, dict(expected))
    dot = render_live_dot(SEED, marks)
    assert marks.drift == 0
    assert not any(word in dot for word in ("MISSING", "EXTRA", "DOWN", "NOT READ", "not read"))


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_the_live_png_is_drawn(tmp_path: Path) -> None:
    output = tmp_path / "live.png"
    render_live_png(SEED, drifted(), output)
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_route_that_is_not_forwarding_is_drawn_down_with_its_state() -> None:
    expected = expected_views(SEED)
    live: dict[str, NodeView | str] = copy.deepcopy(dict(expected))
    n1 = live["n1"]
    assert isinstance(n1, NodeView)
    n1.routes[1].update(state="Failed", last_error="NOT_FOUND - no queue 'public'")
    marks = mark_live(SEED, expected, live)
    [route] = [
        item for item in json.loads(render_live_json(SEED, marks))["routes"] if item["kind"] == "queue"
    ]
    assert (route["state"], route["last_error"]) == ("Failed", "NOT_FOUND - no queue 'public'")
    assert route["marker"] == "down (Failed: NOT_FOUND - no queue 'public')"
    [edge] = [edge for edge in edges(render_live_dot(SEED, marks), "n2", "n1") if "public" in edge]
    assert "DOWN (Failed: NOT_FOUND - no queue 'public')" in edge and f'color="{DOWN_COLOUR}"' in edge


def test_a_far_end_at_another_address_is_the_node_that_reports_its_name() -> None:
    document = json.loads(render_live_json(SEED, mark_live(SEED, expected_views(SEED), n2_reached_as_127())))
    assert document["drift"] == 0 and document["notes"] == []
    (link, *_) = document["links"]
    assert (link["node"], link["far_end"], link["far_node"], link["marker"]) == (
        "n1",
        "127.0.0.1:10002",
        "n2",
        "",
    )
