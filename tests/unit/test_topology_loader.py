"""Topology files: the schema of docs/topology.md read into topology.model, and every problem
reported at once with the file, the line and the key path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from federation.requests import RouteOptions, link_add
from topology import schema
from topology.loader import TopologyError, load_topology, load_topology_text
from topology.model import GUEST, Binding, Credentials, Exchange, Federation, Link, Queue, Route

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("topology-*.toml"))

TWO_NODES = """\
[nodes.a]
host = "127.0.0.1"
port = 5701
[nodes.b]
host = "127.0.0.1"
port = 5702
"""


def errors(text: str) -> list[str]:
    with pytest.raises(TopologyError) as caught:
        load_topology_text(text, "t.toml")
    assert caught.value.problems == str(caught.value).splitlines()
    return caught.value.problems


# --------------------------------------------------------------------------------------------
# Reading


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.name)
def test_every_example_config_loads(path: Path) -> None:
    topology = load_topology(path)
    assert topology.nodes
    assert all(str(path) in node.where for node in topology.nodes.values())


def test_the_example_configs_are_all_there() -> None:
    assert {path.stem for path in CONFIGS} >= {
        "topology-pair",
        "topology-three-regions",
        "topology-ring",
        "topology-walkthrough",
    }


def test_an_empty_file_is_an_empty_topology_named_after_the_file() -> None:
    topology = load_topology_text("", "configs/empty.toml")
    assert (topology.name, topology.path, topology.nodes, topology.routes) == (
        "empty",
        "configs/empty.toml",
        {},
        (),
    )


def test_nodes_inherit_defaults_and_resolve_credentials_and_users() -> None:
    topology = load_topology_text(
        """\
[topology]
name = "demo"
[credentials.admin]
username = "root"
password = "s3cret"
[defaults.node]
host = "10.0.0.1"
credentials = "admin"
region = "eu"
[nodes.a]
port = 5701
users = "users/a.toml"
[nodes.b]
host = "10.0.0.2"
port = 5702
region = "us"
tag = "bee"
credentials = "guest"
""",
        "conf/demo.toml",
    )
    a, b = topology.nodes["a"], topology.nodes["b"]
    assert topology.name == "demo"
    assert (a.host, a.port, a.region, a.tag, a.federation_tag) == ("10.0.0.1", 5701, "eu", "", "a")
    assert a.credentials == Credentials("admin", "root", "s3cret")
    assert a.users == str(Path("conf") / "users" / "a.toml")
    assert a.where == "conf/demo.toml:10: nodes.a"
    assert (b.host, b.region, b.federation_tag, b.users, b.credentials) == (
        "10.0.0.2",
        "us",
        "bee",
        None,
        GUEST,
    )


def test_entries_naming_several_nodes_are_expanded_one_per_node() -> None:
    topology = load_topology_text(
        TWO_NODES
        + """\
[nodes.c]
host = "127.0.0.1"
port = 5703
[defaults.exchange]
type = "topic"
durable = false
[[exchanges]]
name = "everywhere"
[[exchanges]]
name = "star"
type = "direct"
nodes = "*"
[[exchanges]]
name = "some"
nodes = ["c", "a"]
durable = true
internal = true
[[queues]]
name = "q"
nodes = "b"
auto_delete = true
""",
        "t.toml",
    )
    assert [(e.node, e.name, e.type, e.durable) for e in topology.exchanges] == [
        ("a", "everywhere", "topic", False),
        ("b", "everywhere", "topic", False),
        ("c", "everywhere", "topic", False),
        ("a", "star", "direct", False),
        ("b", "star", "direct", False),
        ("c", "star", "direct", False),
        ("c", "some", "topic", True),
        ("a", "some", "topic", True),
    ]
    assert topology.exchanges[-1] == Exchange(
        "a", "some", "topic", True, False, True, "t.toml:19: exchanges[2]"
    )
    assert topology.queues == (Queue("b", "q", durable=True, auto_delete=True, where="t.toml:24: queues[0]"),)


def test_bindings_default_to_the_nodes_declaring_their_queue() -> None:
    topology = load_topology_text(
        TWO_NODES
        + """\
[[queues]]
name = "q"
nodes = ["b"]
[[bindings]]
exchange = "amq.topic"
queue = "q"
[[bindings]]
exchange = "amq.headers"
queue = "q"
key = "k"
arguments = { x-match = "all", region = "eu" }
nodes = ["a", "b"]
[[bindings]]
exchange = "amq.topic"
queue = "nowhere"
""",
        "t.toml",
    )
    assert topology.bindings == (
        Binding("b", "amq.topic", "q", "", {}, "t.toml:10: bindings[0]"),
        Binding("a", "amq.headers", "q", "k", {"x-match": "all", "region": "eu"}, "t.toml:13: bindings[1]"),
        Binding("b", "amq.headers", "q", "k", {"x-match": "all", "region": "eu"}, "t.toml:13: bindings[1]"),
        # a queue declared nowhere: on every node, for the checks to report
        Binding("a", "amq.topic", "nowhere", "", {}, "t.toml:19: bindings[2]"),
        Binding("b", "amq.topic", "nowhere", "", {}, "t.toml:19: bindings[2]"),
    )


def test_links_and_routes_keep_qpid_route_directions_and_defaults() -> None:
    topology = load_topology_text(
        TWO_NODES
        + """\
[defaults.link]
durable = false
[defaults.route]
mode = "push"
ack = 10
[[links]]
from = "a"
to = "b"
[[routes]]
kind = "dynamic"
from = "a"
to = "b"
exchange = "fed.topic"
tag = "bee"
excludes = ["c"]
[[routes]]
kind = "exchange"
from = "b"
to = "a"
exchange = "amq.topic"
key = "global.#"
durable = false
credit = 5
[[routes]]
kind = "queue"
from = "b"
to = "a"
exchange = "amq.fanout"
queue = "public"
mode = "pull"
""",
        "t.toml",
    )
    assert topology.links == (Link("b", "a", durable=False, transport="tcp", where="t.toml:12: links[0]"),)
    dynamic, static, queue = topology.routes
    # [defaults.route] mode = "push" does not apply to dynamic routes: they are always pulled
    assert dynamic == Route(
        "dynamic", "a", "b", "fed.topic", ack=10, tag="bee", excludes=("c",), where="t.toml:15: routes[0]"
    )
    assert (dynamic.holder, dynamic.far_end) == ("b", "a")
    assert static == Route(
        "exchange", "b", "a", "amq.topic", key="global.#", push=True, durable=False, ack=10, credit=5,
        where="t.toml:22: routes[1]",
    )  # fmt: skip
    assert (static.holder, static.far_end) == ("b", "a")
    assert queue == Route(
        "queue", "b", "a", "amq.fanout", queue="public", ack=10, where="t.toml:30: routes[2]"
    )


def test_federation_types_default_by_exchange_type_and_data_means_fanout() -> None:
    topology = load_topology_text(
        TWO_NODES
        + """\
[[exchanges]]
name = "orders"
type = "direct"
[[exchanges]]
name = "only-on-b"
type = "direct"
nodes = ["b"]
[[federations]]
child = "a"
parent = "b"
exchange = "orders"
[[federations]]
child = "a"
parent = "b"
exchange = "amq.data"
[[federations]]
child = "a"
parent = "b"
exchange = "amq.service"
[[federations]]
child = "a"
parent = "b"
exchange = "only-on-b"
[[federations]]
child = "a"
parent = "b"
exchange = "undeclared"
[[federations]]
child = "a"
parent = "b"
exchange = "orders"
type = "data"
[[federations]]
child = "a"
parent = "b"
exchange = "amq.topic"
type = "locator"
""",
        "t.toml",
    )
    assert [(f.exchange, f.type) for f in topology.federations] == [
        ("orders", "service"),
        ("amq.data", "fanout"),
        ("amq.service", "service"),
        ("only-on-b", "service"),
        ("undeclared", "fanout"),
        ("orders", "fanout"),
        ("amq.topic", "locator"),
    ]
    assert topology.federations[0] == Federation("a", "b", "orders", "service", "t.toml:14: federations[0]")


def test_publishers_and_references_to_undeclared_things_are_kept_for_the_checks() -> None:
    topology = load_topology_text(
        TWO_NODES
        + """\
[[publishers]]
node = "ghost"
exchange = "nowhere"
[[publishers]]
node = "a"
exchange = ""
key = "q"
[[routes]]
kind = "dynamic"
from = "a"
to = "a"
exchange = "missing"
[[exchanges]]
name = "twice"
type = "topic"
nodes = ["a", "a", "zz"]
""",
        "t.toml",
    )
    assert [(p.node, p.exchange, p.key) for p in topology.publishers] == [
        ("ghost", "nowhere", ""),
        ("a", "", "q"),
    ]
    assert [(r.source, r.destination, r.exchange) for r in topology.routes] == [("a", "a", "missing")]
    assert [e.node for e in topology.exchanges] == ["a", "a", "zz"]


def test_load_topology_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "site.toml"
    path.write_text(TWO_NODES)
    topology = load_topology(path)
    assert (topology.name, topology.path, list(topology.nodes)) == ("site", str(path), ["a", "b"])


# --------------------------------------------------------------------------------------------
# Errors: the exact lines


def test_syntax_error() -> None:
    assert errors('[nodes.a]\nhost = "x"\nport = 57 01\n') == [
        "t.toml:3:11: invalid TOML: Expected newline or end of document after a statement"
    ]


def test_syntax_error_at_the_end_of_the_file() -> None:
    assert errors("[nodes.a]\nport = [1,\n") == ["t.toml:3:1: invalid TOML: Invalid value"]


def test_unreadable_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=r"^.*missing\.toml: cannot read: No such file or directory$"):
        load_topology(tmp_path / "missing.toml")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"name = '\xff'")
    with pytest.raises(TopologyError) as caught:
        load_topology(binary)
    assert str(caught.value) == f"{binary}: not UTF-8 text (byte 8)"


def test_unknown_keys_list_the_known_ones() -> None:
    assert errors(
        TWO_NODES + 'prot = 1\n[[queues]]\nname = "q"\nnode = ["a"]\n[nodes.c]\nhost = "h"\nport = 1\n'
    ) == [
        "t.toml:7: nodes.b.prot: unknown key (known: host, port, region, tag, users, credentials, tls_port, tls_cert, tls_key, tls_ca)",
        "t.toml:10: queues[0].node: unknown key (known: name, nodes, durable, auto_delete)",
    ]
    assert errors("[topolgy]\n[defaults.nodes]\n[defaults.route]\nkey = 'x'\n") == [
        "t.toml:1: topolgy: unknown key (known: topology, credentials, defaults, nodes, exchanges, queues, "
        "bindings, links, routes, federations, publishers, vhosts, users, permissions, topic_permissions)",
        "t.toml:2: defaults.nodes: unknown key (known: node, exchange, queue, link, route, federation)",
        "t.toml:4: defaults.route.key: unknown key (known: mode, durable, ack, credit, transport)",
    ]


def test_wrong_types() -> None:
    assert errors(
        """\
[nodes.a]
host = 1
port = "5701"
[[exchanges]]
name = "x"
type = "topic"
durable = "yes"
nodes = []
[[bindings]]
exchange = "x"
queue = "q"
arguments = ["a"]
[[routes]]
kind = "dynamic"
from = "a"
to = ["b"]
exchange = "x"
excludes = "b"
"""
    ) == [
        "t.toml:2: nodes.a.host: expected a host name or address, got 1",
        "t.toml:3: nodes.a.port: expected an integer 1-65535, got '5701'",
        "t.toml:7: exchanges[0].durable: expected true or false, got 'yes'",
        """t.toml:8: exchanges[0].nodes: expected a node name, "*" (every node) or an array of node names, got an array""",
        "t.toml:12: bindings[0].arguments: expected a table, got an array",
        "t.toml:16: routes[0].to: expected a node name (a non-empty string), got an array",
        "t.toml:18: routes[0].excludes: expected an array of tags (non-empty strings), got 'b'",
    ]


def test_wrong_shapes_at_the_top() -> None:
    assert errors(
        'topology = "x"\nnodes = ["a"]\ncredentials = 3\ndefaults = {node = 1}\nroutes = {kind = 1}\n'
    ) == [
        "t.toml:1: topology: expected a table, got 'x'",
        "t.toml:2: nodes: expected [nodes.<name>] tables, got an array",
        "t.toml:3: credentials: expected [credentials.<name>] tables, got 3",
        "t.toml:4: defaults.node: expected a table, got 1",
        "t.toml:5: routes: expected [[routes]] entries (an array of tables), got a table",
    ]
    assert errors('exchanges = [1, "x"]\n[nodes]\na = true\n') == [
        "t.toml:1: exchanges[0]: expected a table, got 1",
        "t.toml:1: exchanges[1]: expected a table, got 'x'",
        "t.toml:3: nodes.a: expected a table, got true",
    ]


def test_missing_keys() -> None:
    assert errors("[nodes.a]\n[[exchanges]]\n[[routes]]\nkind = 'exchange'\n[[federations]]\n") == [
        "t.toml:1: nodes.a: missing key 'host' (the node's host name or address)",
        "t.toml:1: nodes.a: missing key 'port' (the node's AMQP port, 1-65535)",
        "t.toml:2: exchanges[0]: missing key 'name' (the exchange's name)",
        "t.toml:2: exchanges[0]: missing key 'type' (one of direct, fanout, topic, headers)",
        "t.toml:3: routes[0]: missing key 'from' (the source node)",
        "t.toml:3: routes[0]: missing key 'to' (the destination node)",
        "t.toml:3: routes[0]: missing key 'exchange' (the exchange messages are routed into)",
        "t.toml:3: routes[0]: missing key 'key' (the binding key on the source, required for exchange routes)",
        "t.toml:5: federations[0]: missing key 'child' (the node that opens the peering)",
        "t.toml:5: federations[0]: missing key 'parent' (the node it attaches to)",
        "t.toml:5: federations[0]: missing key 'exchange' (the exchange to federate)",
    ]


def test_a_bad_default_is_reported_once_not_for_every_node() -> None:
    assert errors("[defaults.node]\nhost = ''\n[nodes.a]\nport = 1\n[nodes.b]\nport = 2\n") == [
        "t.toml:2: defaults.node.host: expected a host name or address, got ''"
    ]


def test_bad_ports_and_node_names() -> None:
    assert errors('[nodes."edge 1"]\nhost = "h"\nport = 0\n[nodes.".."]\nhost = "h"\nport = 65536\n') == [
        "t.toml:1: nodes.\"edge 1\": expected a node name of letters, digits, '.', '_' or '-', starting with a "
        "letter or digit, got 'edge 1'",
        't.toml:3: nodes."edge 1".port: expected an integer 1-65535, got 0',
        "t.toml:4: nodes.\"..\": expected a node name of letters, digits, '.', '_' or '-', starting with a "
        "letter or digit, got '..'",
        't.toml:6: nodes."..".port: expected an integer 1-65535, got 65536',
    ]


def test_unknown_credentials() -> None:
    text = """\
[credentials.admin]
username = "admin"
password = "x"
[defaults.node]
credentials = "amdin"
[nodes.a]
host = "h"
port = 1
credentials = "root"
"""
    assert errors(text) == [
        "t.toml:5: defaults.node.credentials: unknown credentials 'amdin' (known: admin, guest)",
        "t.toml:9: nodes.a.credentials: unknown credentials 'root' (known: admin, guest)",
    ]


def test_bad_enum_values_and_keys_of_the_wrong_route_kind() -> None:
    assert errors(
        """\
[[links]]
from = "a"
to = "b"
transport = "rdma"
[[routes]]
kind = "static"
from = "a"
to = "b"
exchange = "x"
[[routes]]
kind = "dynamic"
from = "a"
to = "b"
exchange = "x"
key = "k"
queue = "q"
mode = "push"
[[routes]]
kind = "queue"
from = "a"
to = "b"
exchange = "x"
tag = "t"
mode = "sideways"
"""
    ) == [
        "t.toml:4: links[0].transport: expected one of tcp, ssl, tls, got 'rdma'",
        "t.toml:6: routes[0].kind: expected one of dynamic, exchange, queue, got 'static'",
        "t.toml:15: routes[1].key: only exchange routes take 'key', this is a dynamic route",
        "t.toml:16: routes[1].queue: only queue routes take 'queue', this is a dynamic route",
        "t.toml:17: routes[1].mode: dynamic routes are always pulled by the destination (push is refused)",
        "t.toml:18: routes[2]: missing key 'queue' (the source's queue, required for queue routes)",
        "t.toml:23: routes[2].tag: only dynamic and exchange routes take 'tag', this is a queue route",
        "t.toml:24: routes[2].mode: expected one of pull, push, got 'sideways'",
    ]


def test_every_problem_is_reported_at_once_sorted_by_line() -> None:
    problems = errors(
        """\
[[publishers]]
node = "a"
[nodes.a]
host = "h"
port = -1
[credentials.c]
username = "u"
pasword = "p"
[topology]
name = 7
"""
    )
    assert problems == [
        "t.toml:1: publishers[0]: missing key 'exchange' (the exchange published to)",
        "t.toml:5: nodes.a.port: expected an integer 1-65535, got -1",
        "t.toml:6: credentials.c: missing key 'password' (the password)",
        "t.toml:8: credentials.c.pasword: unknown key (known: username, password)",
        "t.toml:10: topology.name: expected a topology name (a non-empty string), got 7",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "nodes = 1",
        "nodes = [[1]]",
        "[nodes.a]\nhost = {}\nport = [1]\ncredentials = 5",
        "defaults = []",
        "[defaults]\nnode = 'x'",
        "[defaults.exchange]\nnodes = {}\ntype = []",
        "[[bindings]]\nnodes = '*'\narguments = 1\nkey = 300",
        "[[routes]]\nkind = 1\nmode = 'push'\nkey = []",
        "[[routes]]\nkind = 'dynamic'\nexcludes = [1, 2]\nack = -5\ncredit = true",
        "[[federations]]\ntype = 'fanout'\nchild = {}\nparent = []",
        "credentials = {a = 1, b = {username = 1, password = []}}",
        "topology = {name = ''}",
        "[[exchanges]]\nname = 'x'\ntype = 'topic'\nnodes = ['*', '*']\n[[exchanges.nested]]\na = 1",
    ],
)
def test_garbage_gives_errors_never_a_traceback(text: str) -> None:
    problems = errors(text)
    assert problems and all(problem.startswith("t.toml:") for problem in problems)


# --------------------------------------------------------------------------------------------
# docs/topology.md says what the loader does


def doc_blocks(language: str) -> list[str]:
    """The fenced blocks of docs/topology.md opened with ```language."""
    blocks: list[tuple[str, list[str]]] = []
    inside = False
    for line in (ROOT / "docs" / "topology.md").read_text().splitlines():
        if line.startswith("```"):
            if not inside:
                blocks.append((line[3:], []))
            inside = not inside
        elif inside:
            blocks[-1][1].append(line)
    return ["\n".join(lines) + "\n" for tag, lines in blocks if tag == language]


def test_the_docs_complete_example_loads_and_uses_every_key() -> None:
    example = doc_blocks("toml")[-1]
    topology = load_topology_text(example, "example.toml")
    assert len(topology.nodes) == 4 and topology.federations and topology.publishers
    for section in (schema.NODE, schema.EXCHANGE, schema.QUEUE, schema.BINDING, schema.LINK, schema.ROUTE):
        for key in section.keys:
            assert re.search(rf"^{key} = ", example, re.MULTILINE), key
    for kind in schema.DEFAULTABLE:
        assert f"[defaults.{kind}]" in example


def test_the_docs_error_example_is_what_the_loader_says() -> None:
    bad = next(block for block in doc_blocks("toml") if block.startswith("[defaults.node]"))
    output = next(block for block in doc_blocks("") if block.startswith("bad.toml:"))
    assert errors(bad) == [line.replace("bad.toml", "t.toml", 1) for line in output.splitlines()]


# --- TLS ---------------------------------------------------------------------------------------

TLS_PAIR = """
[defaults.node]
host = "127.0.0.1"
tls_ca = "certs/ca.pem"

[nodes.a]
port = 1
tls_port = 2
tls_cert = "certs/a.pem"
tls_key = "certs/a.key"

[nodes.b]
port = 3
tls_cert = "certs/b.pem"
tls_key = "certs/b.key"

[[routes]]
kind = "dynamic"
from = "a"
to = "b"
exchange = "x"
transport = "tls"
"""


def test_an_ssl_route_makes_an_ssl_link_to_the_tls_port_logging_in_with_external() -> None:
    topology = load_topology_text(TLS_PAIR, "/top/t.toml")
    a, b = topology.nodes["a"], topology.nodes["b"]
    assert (a.tls_port, a.tls_cert, a.tls_key, a.tls_ca) == (
        2,
        "/top/certs/a.pem",
        "/top/certs/a.key",
        "/top/certs/ca.pem",
    )
    assert b.tls_endpoint == "127.0.0.1:5671"
    assert [(link.opener, link.peer, link.transport) for link in topology.effective_links()] == [
        ("b", "a", "ssl")
    ]
    method, arguments = link_add(a.link_address("ssl"), RouteOptions(durable=True, transport="ssl"))
    assert (method, arguments) == (
        "links.add",
        {"host": "127.0.0.1", "port": 2, "username": "", "password": "", "durable": True, "transport": "ssl"},
    )
    assert link_add(a.link_address("tcp"), RouteOptions())[1]["port"] == 1


def test_ssl_needs_a_certificate_on_both_nodes_and_a_certificate_its_key() -> None:
    text = TLS_PAIR.replace('tls_cert = "certs/b.pem"\n', "")
    assert errors(text) == [
        "t.toml:14: nodes.b.tls_key: needs tls_cert too",
        "t.toml:21: routes[0].transport: ssl needs a certificate on node 'b' (its tls_cert and tls_key)",
    ]
