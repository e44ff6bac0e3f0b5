"""The offline route map (topology.routemap): the records each node would list after apply, the
map's exact text (the same as the live `amq-route route map` after the same commands, checked
against test_route_cli's fake nodes), and the file's map marked against live views."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from federation.address import BrokerAddress
from federation.routemap import MapWalk, NodeView
from gateway.tls import ClientTls
from tests.unit.test_route_cli import SEED_ROUTE_MAP, FakeNetwork
from topology.loader import load_topology_text
from topology.model import Credentials, Exchange, Federation, Link, Node, Queue, Route, Topology
from topology.routemap import compare_views, expected_views, offline_map, walk_map


def local_nodes(*names_and_ports: tuple[str, int], **regions: str) -> dict[str, Node]:
    return {
        name: Node(name, "localhost", port, region=regions.get(name, "")) for name, port in names_and_ports
    }


#: The seed's walkthrough (seed 001, 1.8): a link 10001 -> 10002, dynamic fed.topic routes both
#: ways between 10003 and 10004, an exchange route and a queue route pulled by 10001 from 10002.
SEED = Topology(
    "seed",
    "seed.toml",
    nodes=local_nodes(("n1", 10001), ("n2", 10002), ("n3", 10003), ("n4", 10004)),
    exchanges=(Exchange("n3", "fed.topic", "topic"), Exchange("n4", "fed.topic", "topic")),
    queues=(Queue("n2", "public"),),
    links=(Link("n1", "n2", durable=False),),
    routes=(
        Route("dynamic", "n4", "n3", "fed.topic", durable=False),
        Route("dynamic", "n3", "n4", "fed.topic", durable=False),
        Route("exchange", "n2", "n1", "amq.topic", key="global.#", durable=False),
        Route("queue", "n2", "n1", "amq.fanout", queue="public", durable=False),
    ),
)

SEED_MAP_FROM_10001 = """
Finding Linked Brokers:
localhost:10001 (n1)... Ok
localhost:10002 (n2)... Ok

Dynamic Routes:
none found

Static Routes:

localhost:10001(ex=amq.topic) <= localhost:10002(ex=amq.topic) key=global.#
localhost:10001(ex=amq.fanout) <= localhost:10002(queue=public)
"""

#: A federation tree: root; hubs eu and us federated to it; edges federated to their hub; the
#: eu edge also pushes an exchange route to the us hub, and the hubs share a dynamic route.
TREE = Topology(
    "tree",
    "tree.toml",
    nodes=local_nodes(
        ("root", 5700),
        ("hub-eu", 5701),
        ("hub-us", 5702),
        ("edge-eu", 5711),
        ("edge-us", 5712),
        **{"root": "core", "hub-eu": "eu", "edge-eu": "eu", "hub-us": "us", "edge-us": "us"},
    ),
    exchanges=(
        Exchange("hub-eu", "fed.topic", "topic"),
        Exchange("hub-us", "fed.topic", "topic"),
        Exchange("edge-eu", "orders", "direct"),
    ),
    routes=(
        Route("dynamic", "hub-us", "hub-eu", "fed.topic"),
        Route("exchange", "edge-eu", "hub-us", "amq.topic", key="orders.#", push=True, ack=10),
    ),
    federations=(
        Federation("edge-eu", "hub-eu", "amq.data", "data"),
        Federation("edge-us", "hub-us", "amq.data", "fanout"),
        Federation("edge-eu", "hub-eu", "orders", ""),
        Federation("hub-eu", "root", "amq.service", "service"),
        Federation("hub-us", "root", "amq.service", "service"),
    ),
)

TREE_MAP_FROM_EDGE_EU = """
Finding Linked Brokers:
localhost:5711 (edge-eu)... Ok
localhost:5702 (hub-us)... Ok
localhost:5701 (hub-eu)... Ok
localhost:5700 (root)... Ok

Dynamic Routes:

Exchange fed.topic:
localhost:5702  => localhost:5701

Static Routes:

localhost:5711(ex=amq.topic) => localhost:5702(ex=amq.topic) key=orders.#

Federations:

localhost:5711 => localhost:5701 amq.data (fanout)
localhost:5711 => localhost:5701 orders (service)
localhost:5702 => localhost:5700 amq.service (service)
localhost:5701 => localhost:5700 amq.service (service)
"""


def text(lines: list[str]) -> str:
    """What the CLI prints for `lines`."""
    return "\n".join(lines) + "\n"


# -- offline_map ----------------------------------------------------------------------------


def test_seed_walkthrough_map_from_10003_is_the_seeds_text() -> None:
    assert text(offline_map(SEED, "n3")) == SEED_ROUTE_MAP


def test_seed_map_starts_at_the_first_node_and_leaves_out_what_it_never_reaches() -> None:
    # 10001 links to 10002 only, so 10003 and 10004 are not walked, as the live map does.
    assert text(offline_map(SEED)) == SEED_MAP_FROM_10001


def test_federation_tree_map_walks_link_peers_before_federation_parents() -> None:
    # edge-eu: its push link to hub-us first, then its parent hub-eu; then hub-us's parent,
    # root; hub-eu's link and parent are known by then. Federations are listed in walk order.
    assert text(offline_map(TREE, "edge-eu")) == TREE_MAP_FROM_EDGE_EU


def test_a_lone_node_maps_to_itself() -> None:
    lone = Topology("lone", "lone.toml", nodes=local_nodes(("only", 5672)))
    assert offline_map(lone) == [
        "",
        "Finding Linked Brokers:",
        "localhost:5672 (only)... Ok",
        "",
        "Dynamic Routes:",
        "none found",
        "",
        "Static Routes:",
        "none found",
    ]


def test_an_unknown_start_or_an_empty_file_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="seed.toml: no node named 'n9'"):
        offline_map(SEED, "n9")
    with pytest.raises(ValueError, match="no nodes to map"):
        offline_map(Topology("empty", "empty.toml", nodes={}))


def amq_route_commands(topology: Topology) -> list[list[str]]:
    """What an operator would type to build the topology, as `apply` does it."""
    at = {name: node.endpoint for name, node in topology.nodes.items()}
    commands = [
        [*(["-d"] if link.durable else []), "link", "add", at[link.opener], at[link.peer]]
        for link in topology.links
    ]
    for route in topology.routes:
        options = [*(["-d"] if route.durable else []), *(["-s"] if route.push else [])]
        options += [*(["--ack", str(route.ack)] if route.ack else [])]
        ends = [at[route.destination], at[route.source]]
        if route.kind == "dynamic":
            commands.append([*options, "dynamic", "add", *ends, route.exchange])
        elif route.kind == "exchange":
            commands.append([*options, "route", "add", *ends, route.exchange, str(route.key)])
        else:
            commands.append([*options, "queue", "add", *ends, route.exchange, str(route.queue)])
    for federation in topology.federations:
        kind = ["--type", topology.federation_type(federation)]  # the fake's default is fanout
        commands.append(
            ["federate", "add", at[federation.child], at[federation.parent], federation.exchange, *kind]
        )
    return commands


@pytest.mark.parametrize(
    ("topology", "start"), [(SEED, name) for name in SEED.nodes] + [(TREE, "edge-eu"), (TREE, "root")]
)
def test_offline_map_equals_the_live_map_after_the_same_commands(
    topology: Topology, start: str, capsys: pytest.CaptureFixture[str]
) -> None:
    net = FakeNetwork(
        *(node.endpoint for node in topology.nodes.values()),
        node_names={node.endpoint: node.name for node in topology.nodes.values()},
    )
    for command in amq_route_commands(topology):
        assert net.run(*command) == 0, command
    capsys.readouterr()
    assert net.run("route", "map", topology.nodes[start].endpoint) == 0
    live = capsys.readouterr().out
    assert text(offline_map(topology, start)) == live


# -- expected_views -------------------------------------------------------------------------


def test_seed_expected_records_are_what_the_nodes_list() -> None:
    views = expected_views(SEED)
    assert list(views) == ["n1", "n2", "n3", "n4"]
    assert views["n2"] == NodeView([], [], [], "n2")
    link = {
        "host": "localhost",
        "port": 10002,
        "transport": "tcp",
        "durable": False,
        "state": "Operational",
        "last_error": "",
        "node": "n2",
        "connected_since": None,
        "reconnects": 0,
    }
    assert views["n1"].links == [link]  # the declared link; the routes ride on it
    idle = {"messages": 0, "bytes": 0, "in_flight": 0, "last_transfer": None, "last_error": ""}
    common = {
        "dest": "n1",
        "src": "localhost:10002",
        "durable": False,
        "src_local": False,
        "ack": 100,
        "credit": 1000,
    }
    assert views["n1"].routes == [
        {
            "kind": "exchange",
            **common,
            "exchange": "amq.topic",
            "key": "global.#",
            "queue": None,
            "tag": None,
            "excludes": [],
            **idle,
        },
        {
            "kind": "queue",
            **common,
            "exchange": "amq.fanout",
            "key": None,
            "queue": "public",
            "tag": None,
            "excludes": [],
            **idle,
        },
    ]
    assert views["n3"].links == [{**link, "port": 10004, "node": "n4"}]
    assert views["n3"].routes == [
        {
            "kind": "dynamic",
            **common,
            "dest": "n3",
            "src": "localhost:10004",
            "exchange": "fed.topic",
            "key": None,
            "queue": None,
            "tag": None,
            "excludes": [],
            **idle,
        }
    ]
    assert views["n4"].routes[0]["src"] == "localhost:10003"


def test_tree_expected_records_push_routes_tags_and_federations() -> None:
    tagged = Topology(
        TREE.name,
        TREE.path,
        nodes={**TREE.nodes, "hub-eu": Node("hub-eu", "localhost", 5701, region="eu", tag="eu")},
        exchanges=TREE.exchanges,
        routes=(
            *TREE.routes,
            Route("exchange", "hub-us", "hub-eu", "amq.direct", key="k", tag="x", excludes=("us",)),
        ),
        federations=TREE.federations,
    )
    views = expected_views(tagged)
    # A push route lives on its source, which opens the link to the destination.
    assert [(link["host"], link["port"], link["durable"]) for link in views["edge-eu"].links] == [
        ("localhost", 5702, True)
    ]
    push = views["edge-eu"].routes[0]
    assert (push["dest"], push["src"], push["src_local"], push["ack"], push["key"]) == (
        "localhost:5702",
        "edge-eu",
        True,
        10,
        "orders.#",
    )
    # hub-eu pulls both routes from hub-us over one link; a route without a tag gets the
    # node's tag from the file.
    assert [(r["kind"], r["tag"], r["excludes"]) for r in views["hub-eu"].routes] == [
        ("dynamic", "eu", []),
        ("exchange", "x", ["us"]),
    ]
    assert len(views["hub-eu"].links) == 1 and views["hub-us"].routes == []
    # data is fanout; no type on a direct exchange is service.
    assert [(f["exchange"], f["type"], f["parent"]) for f in views["edge-eu"].federations] == [
        ("amq.data", "fanout", "localhost:5701"),
        ("orders", "service", "localhost:5701"),
    ]
    federation = views["hub-eu"].federations[0]
    assert federation["login"] == "peering" and federation["durable"] and federation["state"] == "Operational"
    assert federation["outbox"] == {"messages": 0, "limit": 100000, "policy": "block", "dropped": 0}


def test_expected_views_leave_out_what_a_node_would_refuse() -> None:
    topology = Topology(
        "bad",
        "bad.toml",
        nodes=local_nodes(("a", 1), ("b", 2)),
        links=(Link("a", "a"), Link("a", "ghost")),
        routes=(
            Route("exchange", "b", "a", "amq.topic", key="k"),
            Route("exchange", "b", "a", "amq.topic", key="k"),  # a duplicate
        ),
        federations=(
            Federation("a", "b", "amq.data", "fanout"),
            Federation("a", "b", "amq.data", "service"),  # federated twice
            Federation("b", "b", "amq.data", "fanout"),  # to itself
        ),
    )
    views = expected_views(topology)
    assert [(link["port"]) for link in views["a"].links] == [2]
    assert len(views["a"].routes) == 1 and len(views["a"].federations) == 1
    assert views["b"] == NodeView([], [], [], "b")


def test_a_federation_logs_in_with_the_credentials_the_file_names_for_its_parent() -> None:
    admin = Credentials("admin", "admin", "secret")
    nodes = {**local_nodes(("a", 1)), "b": Node("b", "localhost", 2, credentials=admin)}
    topology = Topology("t", "t.toml", nodes=nodes, federations=(Federation("a", "b", "amq.data", "fanout"),))
    assert expected_views(topology)["a"].federations[0]["login"] == "admin"


# -- compare_views --------------------------------------------------------------------------


def test_live_views_equal_to_the_expected_ones_show_no_drift() -> None:
    expected = expected_views(SEED)
    lines, drift = compare_views(SEED, expected, dict(expected))
    assert drift == 0
    assert text(lines) == (
        "\n"
        "Reading Brokers:\n"
        "localhost:10001 (n1)... Ok\n"
        "localhost:10002 (n2)... Ok\n"
        "localhost:10003 (n3)... Ok\n"
        "localhost:10004 (n4)... Ok\n"
        "\n"
        "Links:\n"
        "\n"
        "localhost:10001 -> localhost:10002\n"
        "localhost:10003 -> localhost:10004\n"
        "localhost:10004 -> localhost:10003\n"
        "\n"
        "Dynamic Routes:\n"
        "\n"
        "Exchange fed.topic:\n"
        "localhost:10004 <=> localhost:10003\n"
        "\n"
        "Static Routes:\n"
        "\n"
        "localhost:10001(ex=amq.topic) <= localhost:10002(ex=amq.topic) key=global.#\n"
        "localhost:10001(ex=amq.fanout) <= localhost:10002(queue=public)\n"
        "\n"
        "No drift: the live nodes match seed.toml.\n"
    )


def test_missing_extra_and_down_are_marked_and_counted() -> None:
    expected = expected_views(SEED)
    live: dict[str, NodeView | str] = copy.deepcopy(dict(expected))
    n1, n3 = live["n1"], live["n3"]
    assert isinstance(n1, NodeView) and isinstance(n3, NodeView)
    n1.links[0].update(state="Waiting", last_error="Connection refused")
    del n1.routes[1]  # the queue route is missing
    extra = {**n1.routes[0], "key": "local.#"}
    n1.routes.append(extra)  # an exchange route the file does not declare
    n3.routes.clear()  # one direction of the dynamic pair is missing
    live["n4"] = "ConnectFailed - Connection refused"
    lines, drift = compare_views(SEED, expected, live)
    assert text(lines) == (
        "\n"
        "Reading Brokers:\n"
        "localhost:10001 (n1)... Ok\n"
        "localhost:10002 (n2)... Ok\n"
        "localhost:10003 (n3)... Ok\n"
        "localhost:10004... Failed: ConnectFailed - Connection refused\n"
        "\n"
        "Links:\n"
        "\n"
        "localhost:10001 -> localhost:10002  down (Waiting: Connection refused)\n"
        "localhost:10003 -> localhost:10004\n"
        "localhost:10004 -> localhost:10003  not read\n"
        "\n"
        "Dynamic Routes:\n"
        "\n"
        "Exchange fed.topic:\n"
        "localhost:10004  => localhost:10003  missing\n"
        "localhost:10003  => localhost:10004  not read\n"
        "\n"
        "Static Routes:\n"
        "\n"
        "localhost:10001(ex=amq.topic) <= localhost:10002(ex=amq.topic) key=global.#\n"
        "localhost:10001(ex=amq.fanout) <= localhost:10002(queue=public)  missing\n"
        "localhost:10001(ex=amq.topic) <= localhost:10002(ex=amq.topic) key=local.#  extra\n"
        "\n"
        "Drift: 2 missing, 1 extra, 1 down, 1 node not read.\n"
    )
    assert drift == 5


def test_federations_missing_extra_down_and_of_another_type() -> None:
    expected = expected_views(TREE)
    live: dict[str, NodeView | str] = copy.deepcopy(dict(expected))
    edge_eu, hub_eu, hub_us, root = live["edge-eu"], live["hub-eu"], live["hub-us"], live["root"]
    assert isinstance(edge_eu, NodeView) and isinstance(hub_eu, NodeView) and isinstance(hub_us, NodeView)
    assert isinstance(root, NodeView)
    edge_eu.federations[1].update(type="fanout")  # orders: fanout live, service in the file
    hub_eu.federations[0].update(state="Waiting", last_error="")
    hub_us.federations.clear()
    root.links.append({**expected["hub-eu"].links[0], "host": "localhost", "port": 5799, "durable": False})
    lines, drift = compare_views(TREE, expected, live)
    out = text(lines)
    assert "localhost:5700 -> localhost:5799  extra\n" in out
    assert out.endswith(
        "Federations:\n"
        "\n"
        "localhost:5701 => localhost:5700 amq.service (service)  down (Waiting)\n"
        "localhost:5702 => localhost:5700 amq.service (service)  missing\n"
        "localhost:5711 => localhost:5701 amq.data (fanout)\n"
        "localhost:5711 => localhost:5701 orders (service)  missing\n"
        "localhost:5711 => localhost:5701 orders (fanout)  extra\n"
        "localhost:5712 => localhost:5702 amq.data (fanout)\n"
        "\n"
        "Drift: 2 missing, 2 extra, 1 down.\n"
    )
    assert drift == 5


def test_a_node_missing_from_the_live_views_counts_as_not_read() -> None:
    expected = expected_views(SEED)
    live = {name: view for name, view in expected.items() if name != "n2"}
    lines, drift = compare_views(SEED, expected, live)
    assert "localhost:10002... Failed: not read" in lines
    assert lines[-1] == "Drift: 1 node not read." and drift == 1


def n2_reached_as_127() -> dict[str, NodeView | str]:
    """The seed's views, with n1's link to n2 (and the routes on it) made as 127.0.0.1:10002,
    another address of the node the file names localhost:10002; n2 gave its name there."""
    live: dict[str, NodeView | str] = copy.deepcopy(dict(expected_views(SEED)))
    n1 = live["n1"]
    assert isinstance(n1, NodeView)
    n1.links[0].update(host="127.0.0.1")
    for route in n1.routes:
        route["src"] = "127.0.0.1:10002"
    return live


def test_what_another_address_of_a_node_made_matches_the_file() -> None:
    lines, drift = compare_views(SEED, expected_views(SEED), n2_reached_as_127())
    assert drift == 0 and lines[-1] == "No drift: the live nodes match seed.toml."
    assert "localhost:10001 -> 127.0.0.1:10002" in lines


def test_a_far_end_that_gave_no_name_is_matched_by_address_and_the_map_says_so() -> None:
    live = n2_reached_as_127()
    n1 = live["n1"]
    assert isinstance(n1, NodeView)
    n1.links[0]["node"] = None
    lines, drift = compare_views(SEED, expected_views(SEED), live)
    assert "localhost:10001 -> 127.0.0.1:10002  extra" in lines
    assert "localhost:10001 -> localhost:10002  missing" in lines
    assert lines[-2:] == [
        "localhost:10001: 127.0.0.1:10002 gave no name (not reached yet, or not an amq-gateway node): "
        "matched by address, it is no node of the file",
        "Drift: 3 missing, 3 extra.",
    ]
    assert drift == 6


def test_a_second_link_to_a_node_under_another_address_is_extra() -> None:
    live: dict[str, NodeView | str] = copy.deepcopy(dict(expected_views(SEED)))
    n1 = live["n1"]
    assert isinstance(n1, NodeView)
    n1.links.append({**n1.links[0], "host": "127.0.0.1"})
    lines, drift = compare_views(SEED, expected_views(SEED), live)
    assert [line for line in lines if " -> " in line] == [
        "localhost:10001 -> localhost:10002",
        "localhost:10001 -> 127.0.0.1:10002  extra",
        "localhost:10003 -> localhost:10004",
        "localhost:10004 -> localhost:10003",
    ]
    assert drift == 1


def test_the_live_walk_reads_a_node_reached_at_another_address() -> None:
    """`amq-gateway up`'s map: n2, reached as 127.0.0.1:10002, is the file's n2."""
    assert walk_map(SEED, n2_reached_as_127())[:4] == [
        "",
        "Finding Linked Brokers:",
        "localhost:10001 (n1)... Ok",
        "127.0.0.1:10002 (n2)... Ok",
    ]


# -- from a file ----------------------------------------------------------------------------

WALKTHROUGH_TOML = """
[defaults.node]
host = "localhost"
[defaults.route]
durable = false
[nodes.n1]
port = 10001
[nodes.n2]
port = 10002
[nodes.n3]
port = 10003
[nodes.n4]
port = 10004
[[exchanges]]
name = "fed.topic"
type = "topic"
nodes = ["n3", "n4"]
[[queues]]
name = "public"
nodes = ["n2"]
[[routes]]
kind = "dynamic"
to = "n3"
from = "n4"
exchange = "fed.topic"
[[routes]]
kind = "dynamic"
to = "n4"
from = "n3"
exchange = "fed.topic"
[[routes]]
kind = "exchange"
to = "n1"
from = "n2"
exchange = "amq.topic"
key = "global.#"
[[routes]]
kind = "queue"
to = "n1"
from = "n2"
exchange = "amq.fanout"
queue = "public"
"""


def test_the_walkthrough_as_a_file_maps_as_the_seed_shows() -> None:
    topology = load_topology_text(WALKTHROUGH_TOML, "walkthrough.toml")
    assert text(offline_map(topology, "n3")) == SEED_ROUTE_MAP
    assert text(offline_map(topology)) == SEED_MAP_FROM_10001
    assert expected_views(topology)["n1"].links[0]["durable"] is False  # made by a transient route


def test_a_live_route_that_does_not_forward_is_drift_and_shows_its_traffic() -> None:
    expected = expected_views(SEED)
    live: dict[str, NodeView | str] = copy.deepcopy(dict(expected))
    n1 = live["n1"]
    assert isinstance(n1, NodeView)
    n1.routes[0].update(state="Operational", since=1795701731.0, messages=3, bytes=120)
    n1.routes[1].update(
        state="Failed",
        last_error="localhost:10002: no queue 'public'",
        since=1795701731.0,
        messages=0,
        bytes=0,
    )
    lines, drift = compare_views(SEED, expected, live)
    assert [line for line in lines if line.startswith("localhost:10001(")] == [
        "localhost:10001(ex=amq.topic) <= localhost:10002(ex=amq.topic) key=global.#"
        "  [Operational; 3 messages, 120 bytes]",
        "localhost:10001(ex=amq.fanout) <= localhost:10002(queue=public)  [Failed since 2026-11-26 14:02:11 UTC:"
        " localhost:10002: no queue 'public'; 0 messages, 0 bytes]"
        "  down (Failed: localhost:10002: no queue 'public')",
    ]
    assert (lines[-1], drift) == ("Drift: 1 down.", 1)


def test_the_walk_reaches_ssl_peers_over_tls_as_the_start_was_reached() -> None:
    """A live map started at an amqps address follows ssl links with the start's TLS settings
    (its CA), and plain links without TLS."""
    tls = ClientTls(Path("/certs/ca.pem"))
    start = BrokerAddress("127.0.0.1", 5811, "guest", "guest", tls=tls)
    links = [
        {"host": "127.0.0.1", "port": 5814, "transport": "ssl", "node": "hub-us"},
        {"host": "127.0.0.1", "port": 5716, "transport": "tcp", "node": "hub-ap"},
    ]
    federations = [{"parent": "127.0.0.1:5801", "transport": "ssl", "parent_node": "hub-x"}]
    walk = MapWalk(start, NodeView(links, [], federations, "hub-eu"))
    found = [(str(peer), peer.tls, peer.username) for peer in walk.pending()]
    assert found == [
        ("127.0.0.1:5814", tls, "guest"),
        ("127.0.0.1:5716", None, "guest"),
        ("127.0.0.1:5801", tls, "guest"),
    ]
    plain = MapWalk(BrokerAddress("127.0.0.1", 5711), NodeView(links[:1], [], [], "hub-eu"))
    assert [peer.tls for peer in plain.pending()] == [ClientTls()]  # the system's CAs
