"""amq-route against fake nodes: golden output, requests sent, errors and exit codes.

FakeNetwork stands for the nodes: a dict of "host:port" to FakeNode, each keeping links and
routes the way docs/federation-design.md describes the records; an address with no node in the
dict is unreachable. Every request is recorded so tests check what each command sends.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
from pamqp import commands

from federation import management_client
from federation.address import BrokerAddress
from federation.cli import route_cli
from federation.errors import AuthenticationRefused, ConnectFailed
from federation.management_client import ManagementClient, ManagementFailed
from gateway.wire.content import Content
from tests.unit.test_cli_formatting import SEED_LINK_LIST, federation_record

#: What amq-route adds to a failure to reach a node.
HINT = "name the node as HOST:PORT"

SEED_ROUTE_MAP = """
Finding Linked Brokers:
localhost:10003 (n3)... Ok
localhost:10004 (n4)... Ok

Dynamic Routes:

Exchange fed.topic:
localhost:10004 <=> localhost:10003

Static Routes:
none found
"""


@dataclass
class FakeNode:
    """One node's links, routes and federated exchanges, changed by the requests the CLI sends."""

    name: str
    links: list[dict[str, Any]] = field(default_factory=list)
    routes: list[dict[str, Any]] = field(default_factory=list)
    federations: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    refusals: dict[str, ManagementFailed] = field(default_factory=dict)
    #: What a route's far end is checked against: the exchanges and queues the node has.
    exchanges: list[str] = field(default_factory=lambda: ["amq.topic", "amq.fanout", "fed.topic"])
    queues: list[str] = field(default_factory=lambda: ["public"])
    #: Each link's (user, password), by (host, port).
    logins: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)
    node_name: str | None = None

    async def call(self, method: str, arguments: dict[str, Any] | None = None) -> Any:
        arguments = arguments or {}
        self.requests.append((method, arguments))
        if method in self.refusals:
            raise self.refusals[method]
        return getattr(self, method.replace(".", "_"))(**arguments)

    def links_list(self) -> list[dict[str, Any]]:
        return [dict(link) for link in self.links]

    def links_add(
        self,
        host: str,
        port: int,
        username: str,
        password: str,
        durable: bool,
        transport: str,
        vhost: str | None = None,
    ) -> dict[str, Any]:
        """As federation.manager: an existing link takes other credentials ("updated")."""
        known = self.logins.get((host, port))
        self.logins[(host, port)] = (username, password)
        for link in self.links:
            if link["host"] == host and link["port"] == port:
                return {**link, "change": "unchanged" if known == (username, password) else "updated"}
        record = {
            "host": host,
            "port": port,
            "transport": transport,
            "durable": durable,
            "state": "Operational",
            "last_error": "",
            "connected_since": 0,
            "reconnects": 0,
        }
        self.links.append(record)
        return {**record, "change": "added"}

    def links_delete(self, host: str, port: int) -> None:
        self.links = [link for link in self.links if (link["host"], link["port"]) != (host, port)]
        self.routes = [route for route in self.routes if peer(route) != str(BrokerAddress(host, port))]

    def node_info(self) -> dict[str, Any]:
        """The name the node reports: its own, or its address's letters and digits ("a:1" is
        "a1")."""
        return {"name": self.node_name or "".join(char for char in self.name if char.isalnum())}

    def exchanges_list(self, vhost: str = "/") -> list[dict[str, Any]]:
        """The same in every vhost (which vhost was asked is in `requests`)."""
        return [{"name": name} for name in self.exchanges]

    def queues_list(self, vhost: str = "/") -> list[dict[str, Any]]:
        return [{"name": name} for name in self.queues]

    def routes_list(self) -> list[dict[str, Any]]:
        return [dict(route) for route in self.routes]

    def routes_add(self, host: str, port: int, src_local: bool, **fields: Any) -> None:
        ends = (
            {"dest": str(BrokerAddress(host, port)), "src": self.name}
            if src_local
            else {"dest": self.name, "src": str(BrokerAddress(host, port))}
        )
        self.routes.append({**ends, "src_local": src_local, "key": None, "queue": None, **fields})

    def routes_delete(self, host: str, port: int, **identity: Any) -> None:
        self.routes = [
            route
            for route in self.routes
            if not (
                peer(route) == str(BrokerAddress(host, port))
                and all(route.get(k) == v for k, v in identity.items())
            )
        ]

    def routes_flush(self, links: bool) -> dict[str, Any]:
        flushed = {"routes": self.routes, "links": self.links if links else []}
        self.routes = []
        if links:
            self.links = []
        return flushed

    def federations_list(self) -> list[dict[str, Any]]:
        return [dict(federation) for federation in self.federations]

    def federations_add(
        self,
        host: str,
        port: int,
        exchange: str,
        vhost: str,
        type: str | None,
        username: str | None,
        password: str | None,
        durable: bool,
        parent_vhost: str | None = None,
    ) -> dict[str, Any]:
        """As federation.federations: one federation per exchange, the type defaulted (every
        exchange here is a topic exchange, so fanout) and data read as fanout."""
        for current in self.federations:
            if (current["vhost"], current["exchange"]) == (vhost, exchange):
                raise ManagementFailed(
                    "duplicate",
                    f"exchange '{exchange}' is already federated to {current['parent']} ({current['type']}): "
                    "an exchange is federated at most once",
                )
        record = federation_record(exchange, f"{host}:{port}", "fanout" if type in (None, "data") else type)
        record.update(vhost=vhost, login=username or "peering", durable=durable, source="runtime")
        self.federations.append(record)
        return dict(record)

    def federations_delete(self, host: str, port: int, exchange: str, vhost: str) -> None:
        kept = [
            federation
            for federation in self.federations
            if (federation["vhost"], federation["exchange"], federation["parent"])
            != (vhost, exchange, f"{host}:{port}")
        ]
        if len(kept) == len(self.federations):
            raise ManagementFailed("NOT_FOUND", f"exchange '{exchange}' is not federated to {host}:{port}")
        self.federations = kept


def peer(route: dict[str, Any]) -> str:
    return route["dest"] if route["src_local"] else route["src"]


class FakeNetwork:
    """Nodes by "host:port"; `connect` is the client factory the CLI is given."""

    def __init__(self, *names: str, node_names: dict[str, str] | None = None) -> None:
        self.nodes = {name: FakeNode(name) for name in names}
        for address, node_name in (node_names or {}).items():
            self.nodes[address].node_name = node_name
        self.connected: list[tuple[BrokerAddress, float]] = []

    def __getitem__(self, name: str) -> FakeNode:
        return self.nodes[name]

    @asynccontextmanager
    async def connect(self, address: BrokerAddress, timeout: float) -> AsyncIterator[FakeNode]:
        self.connected.append((address, timeout))
        node = self.nodes.get(str(BrokerAddress(address.host, address.port)))
        if node is None:
            raise ManagementFailed(
                "ConnectFailed", f"cannot connect to {address}: Connection refused; is a node running there?"
            )
        yield node

    def run(self, *argv: str) -> int:
        return route_cli.main(list(argv), connect=self.connect)


def methods(node: FakeNode) -> list[str]:
    return [method for method, _ in node.requests]


def sent(node: FakeNode, method: str) -> dict[str, Any]:
    """The arguments of the node's last request of this method."""
    return [arguments for name, arguments in node.requests if name == method][-1]


# -- the seed's walkthrough ---------------------------------------------------------------------


def test_seed_walkthrough(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork(
        "localhost:10001",
        "localhost:10002",
        "localhost:10003",
        "localhost:10004",
        node_names={f"localhost:1000{n}": f"n{n}" for n in range(1, 5)},
    )

    assert net.run("-v", "link", "add", "localhost:10001", "localhost:10002") == 0
    assert capsys.readouterr().out == "Adding link localhost:10001 -> localhost:10002\n"
    assert net.run("link", "add", "localhost:10001", "localhost:10003") == 0
    assert net.run("link", "add", "localhost:10001", "localhost:10009") == 0
    net["localhost:10001"].links[0].update(node="broker2")  # the names the peers gave
    net["localhost:10001"].links[1].update(node="broker3")
    net["localhost:10001"].links[2].update(state="Waiting", last_error="Connection refused")
    capsys.readouterr()
    assert net.run("link", "list", "localhost:10001") == 0
    assert capsys.readouterr().out == SEED_LINK_LIST + "\n"

    assert net.run("-v", "link", "del", "localhost:10001", "localhost:10009") == 0
    assert capsys.readouterr().out == "Deleting link localhost:10001 -> localhost:10009\n"

    assert net.run("dynamic", "add", "localhost:10003", "localhost:10004", "fed.topic") == 0
    assert net.run("dynamic", "add", "localhost:10004", "localhost:10003", "fed.topic") == 0
    assert net.run("route", "list", "localhost:10003") == 0
    assert capsys.readouterr().out == "localhost:10003 localhost:10004 fed.topic <dynamic>\n"

    assert net.run("route", "add", "localhost:10001", "localhost:10002", "amq.topic", "global.#") == 0
    assert net.run("queue", "add", "localhost:10001", "localhost:10002", "amq.fanout", "public") == 0
    assert net.run("route", "list", "localhost:10001") == 0
    assert capsys.readouterr().out == (
        "localhost:10001 localhost:10002 amq.topic global.#\nlocalhost:10001 localhost:10002 amq.fanout \n"
    )

    assert net.run("route", "map", "localhost:10003") == 0
    assert capsys.readouterr() == (SEED_ROUTE_MAP, "")

    assert net.run("-v", "route", "flush", "localhost:10001") == 0
    assert capsys.readouterr().out == (
        "Deleted route: localhost:10002 amq.topic global.#\nDeleted route: localhost:10002 amq.fanout \n"
    )
    assert net["localhost:10001"].routes == []
    assert len(net["localhost:10001"].links) == 2


def test_route_list_of_an_empty_node_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("localhost:5672")
    assert net.run("route", "list") == 0
    assert capsys.readouterr() == ("", "")


def test_list_map_and_flush_default_to_localhost() -> None:
    net = FakeNetwork("localhost:5672")
    for command in ("link list", "route list", "route map", "route flush", "federate list"):
        assert net.run(*command.split()) == 0
    assert {(a.host, a.port) for a, _ in net.connected} == {("localhost", 5672)}


def test_ipv6_nodes_are_named_with_brackets(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("[::1]:10003", "[::1]:10004")
    assert net.run("dynamic", "add", "[::1]:10003", "[::1]:10004", "fed.topic") == 0
    assert net.run("dynamic", "add", "[::1]:10004", "[::1]:10003", "fed.topic") == 0
    assert net.run("route", "list", "[::1]:10003") == 0
    assert net.run("route", "map", "[::1]:10003") == 0
    out = capsys.readouterr().out
    assert out.startswith("[::1]:10003 [::1]:10004 fed.topic <dynamic>\n")
    assert "[::1]:10004 (110004)... Ok\n" in out and "[::1]:10004 <=> [::1]:10003\n" in out


# -- what each command sends ------------------------------------------------------------------


def test_link_add_sends_the_peer_and_its_credentials_to_the_destination() -> None:
    net = FakeNetwork("dest:5672")
    assert net.run("-d", "link", "add", "admin/secret@dest", "fed/pw@src:5673") == 0
    assert net.connected[0][0] == BrokerAddress("dest", 5672, "admin", "secret")
    assert methods(net["dest:5672"]) == ["links.list", "links.add"]
    assert sent(net["dest:5672"], "links.add") == {
        "host": "src",
        "port": 5673,
        "username": "fed",
        "password": "pw",
        "durable": True,
        "transport": "tcp",
    }


def test_link_add_of_an_existing_link_sends_its_login_and_says_if_it_changed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    net = FakeNetwork("dest:5672")
    net.run("link", "add", "dest", "src")
    net["dest:5672"].requests.clear()
    assert net.run("-d", "link", "add", "dest", "src") == 0
    assert methods(net["dest:5672"]) == ["links.list", "links.add"]
    assert capsys.readouterr() == ("", "")
    assert net.run("link", "add", "dest", "admin/secret@src") == 0
    assert capsys.readouterr() == ("Updated link dest:5672 -> src:5672: it logs in as 'admin' now\n", "")


def test_src_local_sends_to_the_source_which_links_to_the_destination() -> None:
    net = FakeNetwork("src:5672")
    argv = ["-s", "--ack", "50", "--credit", "200", "route", "add", "dest:5673", "src", "amq.topic", "k"]
    assert net.run(*argv) == 0
    assert sent(net["src:5672"], "links.add")["host"] == "dest"
    assert sent(net["src:5672"], "routes.add") == {
        "host": "dest",
        "port": 5673,
        "kind": "exchange",
        "exchange": "amq.topic",
        "key": "k",
        "tag": None,
        "excludes": [],
        "durable": False,
        "src_local": True,
        "ack": 50,
        "credit": 200,
    }


def test_route_options_may_follow_the_command() -> None:
    net = FakeNetwork("dest:5672")
    assert net.run("route", "add", "dest", "src", "amq.topic", "k", "--durable", "--ack", "5") == 0
    assert sent(net["dest:5672"], "links.add")["durable"] is True
    assert sent(net["dest:5672"], "routes.add")["durable"] is True
    assert sent(net["dest:5672"], "routes.add")["ack"] == 5


def test_dynamic_add_sends_tag_and_excludes() -> None:
    net = FakeNetwork("a:5672")
    assert net.run("dynamic", "add", "a", "b", "fed.topic", "tag-a", "b,c") == 0
    assert sent(net["a:5672"], "routes.add") == {
        "host": "b",
        "port": 5672,
        "kind": "dynamic",
        "exchange": "fed.topic",
        "tag": "tag-a",
        "excludes": ["b", "c"],
        "durable": False,
        "src_local": False,
        "ack": None,
        "credit": None,
    }


def test_queue_add_and_del_send_exchange_and_queue() -> None:
    net = FakeNetwork("a:5672")
    assert net.run("queue", "add", "a", "b", "amq.fanout", "public") == 0
    arguments = sent(net["a:5672"], "routes.add")
    assert (arguments["kind"], arguments["exchange"], arguments["queue"]) == ("queue", "amq.fanout", "public")
    assert "key" not in arguments and "tag" not in arguments
    assert net.run("queue", "del", "a", "b", "amq.fanout", "public") == 0
    assert sent(net["a:5672"], "routes.delete") == {
        "host": "b",
        "port": 5672,
        "kind": "queue",
        "exchange": "amq.fanout",
        "queue": "public",
    }
    assert net["a:5672"].routes == []


def test_verbose_route_add_says_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("a:5672")
    assert net.run("-v", "route", "add", "a", "b", "amq.topic", "global.#") == 0
    assert capsys.readouterr().out == (
        "Not checking b:5672 (ConnectFailed - cannot connect to b:5672: Connection refused; is a node "
        "running there?): the route waits for it\n"
        "Adding link a:5672 -> b:5672\nAdding exchange route a:5672 <= b:5672 amq.topic(global.#)\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("queue", "add", "a", "b", "amq.fanout", "missing"),
            "no queue 'missing' on b:5672: the route's source queue must exist there",
        ),
        (
            ("dynamic", "add", "a", "b", "fed.other"),
            "no exchange 'fed.other' on b:5672: the route's source exchange must exist there",
        ),
        (
            ("route", "add", "a", "b", "fed.other", "k"),
            "no exchange 'fed.other' on b:5672: the route's source exchange must exist there",
        ),
        (
            ("-s", "route", "add", "b", "a", "fed.other", "k"),
            "no exchange 'fed.other' on b:5672: the route's destination exchange must exist there",
        ),
    ],
)
def test_a_route_whose_far_end_is_missing_is_refused_before_anything_is_added(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    net = FakeNetwork("a:5672", "b:5672")
    assert net.run(*argv) == 1
    assert capsys.readouterr() == ("", f"Failed: NOT_FOUND - {message}\n")
    assert (net["a:5672"].links, net["a:5672"].routes) == ([], [])


# -- duplicates, deletes and -e ---------------------------------------------------------------


def test_duplicate_route_is_reported_and_not_sent(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("a:5672")
    net.run("route", "add", "a", "b", "amq.topic", "global.#")
    assert net.run("route", "add", "a", "b", "amq.topic", "global.#") == 1
    assert capsys.readouterr() == ("", "Duplicate Route - ignoring: amq.topic(global.#)\n")
    assert methods(net["a:5672"]).count("routes.add") == 1


def test_duplicate_dynamic_and_queue_routes(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("a:5672")
    net.run("dynamic", "add", "a", "b", "fed.topic")
    net.run("queue", "add", "a", "b", "amq.fanout", "public")
    capsys.readouterr()
    assert net.run("dynamic", "add", "a", "b", "fed.topic") == 1
    assert net.run("queue", "add", "a", "b", "amq.fanout", "public") == 1
    assert capsys.readouterr().err == (
        "Duplicate Route - ignoring: fed.topic()\nDuplicate Route - ignoring: amq.fanout(public)\n"
    )


def test_quiet_duplicate_is_silent_success(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("a:5672")
    net.run("route", "add", "a", "b", "amq.topic", "k")
    assert net.run("-q", "route", "add", "a", "b", "amq.topic", "k") == 0
    assert capsys.readouterr() == ("", "")


def test_same_key_on_another_link_is_not_a_duplicate() -> None:
    net = FakeNetwork("a:5672")
    assert net.run("route", "add", "a", "b", "amq.topic", "k") == 0
    assert net.run("route", "add", "a", "c", "amq.topic", "k") == 0
    assert len(net["a:5672"].routes) == 2


def test_deleting_a_missing_route_or_link(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("a:5672")
    assert net.run("route", "del", "a", "b", "amq.topic", "k") == 1
    assert capsys.readouterr().err == "Failed: NOT_FOUND - a:5672 has no link to b:5672\n"
    net.run("link", "add", "a", "b")
    assert net.run("dynamic", "del", "a", "b", "fed.topic") == 1
    assert (
        capsys.readouterr().err == "Failed: NOT_FOUND - no route fed.topic() on the link a:5672 -> b:5672\n"
    )
    assert net.run("link", "del", "a", "c") == 1
    assert capsys.readouterr().err == "Failed: NOT_FOUND - a:5672 has no link to c:5672\n"
    assert "routes.delete" not in methods(net["a:5672"])


def test_quiet_delete_of_what_is_missing_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("a:5672")
    assert net.run("-q", "route", "del", "a", "b", "amq.topic", "k") == 0
    net.run("link", "add", "a", "b")
    assert net.run("-q", "queue", "del", "a", "b", "amq.fanout", "public") == 0
    assert capsys.readouterr() == ("", "")


def test_del_empty_link_deletes_the_link_with_its_last_route(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("a:5672")
    net.run("route", "add", "a", "b", "amq.topic", "k1")
    net.run("route", "add", "a", "b", "amq.topic", "k2")
    net.run("route", "add", "a", "c", "amq.topic", "k1")
    assert net.run("-e", "route", "del", "a", "b", "amq.topic", "k1") == 0
    assert [link["host"] for link in net["a:5672"].links] == ["b", "c"]
    assert net.run("-e", "-v", "route", "del", "a", "b", "amq.topic", "k2") == 0
    assert [link["host"] for link in net["a:5672"].links] == ["c"]
    assert sent(net["a:5672"], "links.delete") == {"host": "b", "port": 5672}
    assert (
        capsys.readouterr().out.splitlines()[-1] == "Deleting link a:5672 -> b:5672: its last route is gone"
    )


def test_without_e_the_empty_link_stays() -> None:
    net = FakeNetwork("a:5672")
    net.run("route", "add", "a", "b", "amq.topic", "k")
    assert net.run("route", "del", "a", "b", "amq.topic", "k") == 0
    assert len(net["a:5672"].links) == 1
    assert "links.delete" not in methods(net["a:5672"])


def test_flush_with_e_deletes_links_too(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("a:5672")
    net.run("dynamic", "add", "a", "b", "fed.topic")
    assert net.run("-e", "-v", "route", "flush", "a") == 0
    assert sent(net["a:5672"], "routes.flush") == {"links": True}
    assert net["a:5672"].links == []
    assert capsys.readouterr().out == "Deleted route: b:5672 fed.topic <dynamic>\nDeleted link: b:5672\n"


def test_flush_without_v_is_silent(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("a:5672")
    net.run("route", "add", "a", "b", "amq.topic", "k")
    assert net.run("route", "flush", "a") == 0
    assert sent(net["a:5672"], "routes.flush") == {"links": False}
    assert capsys.readouterr() == ("", "")


# -- route map --------------------------------------------------------------------------------


def test_route_map_walks_three_nodes_with_one_down(capsys: pytest.CaptureFixture[str]) -> None:
    # a links to b; b links to a, c and the unreachable d; c links to b only.
    net = FakeNetwork("a:1", "b:2", "c:3")
    net.run("dynamic", "add", "a:1", "b:2", "fed.topic")
    net.run("dynamic", "add", "b:2", "a:1", "fed.topic")
    net.run("dynamic", "add", "b:2", "c:3", "fed.topic")
    net.run("route", "add", "c:3", "b:2", "amq.topic", "global.#")
    net.run("queue", "add", "b:2", "d:4", "amq.fanout", "public")
    capsys.readouterr()
    assert net.run("route", "map", "admin/pw@a:1") == 0
    assert capsys.readouterr().out == (
        "\n"
        "Finding Linked Brokers:\n"
        "a:1 (a1)... Ok\n"
        "b:2 (b2)... Ok\n"
        "c:3 (c3)... Ok\n"
        "d:4... Failed: ConnectFailed - cannot connect to d:4: Connection refused; is a node running there?\n"
        "\n"
        "Dynamic Routes:\n"
        "\n"
        "Exchange fed.topic:\n"
        "b:2 <=> a:1\n"
        "c:3  => b:2\n"
        "\n"
        "Static Routes:\n"
        "\n"
        "b:2(ex=amq.fanout) <= d:4(queue=public)\n"
        "c:3(ex=amq.topic) <= b:2(ex=amq.topic) key=global.#\n"
    )
    # Every node is read with the first node's credentials, once.
    walked = net.connected[-4:]
    assert [(a.host, a.port) for a, _ in walked] == [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
    assert {(a.username, a.password) for a, _ in walked} == {("admin", "pw")}


def test_route_map_fails_when_the_first_node_is_down(capsys: pytest.CaptureFixture[str]) -> None:
    assert FakeNetwork().run("route", "map", "a:1") == 1
    assert capsys.readouterr() == (
        "",
        f"Failed: ConnectFailed - cannot connect to a:1: Connection refused; is a node running there? "
        f"{HINT}\n",
    )


def test_route_map_walks_and_draws_federations(capsys: pytest.CaptureFixture[str]) -> None:
    # a links to b and federates to it too (b is visited once); b federates to c, which no link
    # reaches; c federates to the unreachable e.
    net = FakeNetwork("a:1", "b:2", "c:3")
    net.run("dynamic", "add", "a:1", "b:2", "fed.topic")
    net.run("federate", "add", "a:1", "b:2", "amq.dataex")
    net.run("federate", "add", "b:2", "c:3", "amq.data")
    net.run("federate", "add", "c:3", "e:5", "amq.service", "--type", "service")
    capsys.readouterr()
    assert net.run("route", "map", "admin/pw@a:1") == 0
    assert capsys.readouterr().out == (
        "\n"
        "Finding Linked Brokers:\n"
        "a:1 (a1)... Ok\n"
        "b:2 (b2)... Ok\n"
        "c:3 (c3)... Ok\n"
        "e:5... Failed: ConnectFailed - cannot connect to e:5: Connection refused; is a node running there?\n"
        "\n"
        "Dynamic Routes:\n"
        "\n"
        "Exchange fed.topic:\n"
        "b:2  => a:1\n"
        "\n"
        "Static Routes:\n"
        "none found\n"
        "\n"
        "Federations:\n"
        "\n"
        "a:1 => b:2 amq.dataex (fanout)\n"
        "b:2 => c:3 amq.data (fanout)\n"
        "c:3 => e:5 amq.service (service)\n"
    )
    walked = net.connected[-4:]
    assert [(a.host, a.port) for a, _ in walked] == [("a", 1), ("b", 2), ("c", 3), ("e", 5)]
    assert {(a.username, a.password) for a, _ in walked} == {("admin", "pw")}
    assert methods(net["c:3"])[-4:] == ["links.list", "routes.list", "federations.list", "node.info"]


def test_route_map_reaches_an_ipv6_parent(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("a:1", "[::1]:5673")
    net.run("federate", "add", "a:1", "[::1]:5673", "amq.data")
    capsys.readouterr()
    assert net.run("route", "map", "a:1") == 0
    out = capsys.readouterr().out
    assert "[::1]:5673 (15673)... Ok\n" in out and out.endswith("a:1 => [::1]:5673 amq.data (fanout)\n")


# -- federate ---------------------------------------------------------------------------------

FEDERATE_LIST = "\n".join(
    [
        "Exchange     Type        Parent          Source   State        Outbox    Forwarded  Received  "
        "Returned  Last Error",
        "=" * 114,
        "amq.data     fanout      localhost:5672  runtime  Operational  0/100000  0          0         "
        "0" + " " * 9,
        "amq.service  service     localhost:5672  durable  Waiting      7/100000  0          0         "
        "0         Connection refused",
    ]
)


# docs/cli.md's federate walkthrough, its output verbatim.
WALKTHROUGH_LIST = """\
Exchange     Type        Parent          Source   State        Outbox    Forwarded  Received  Returned  Last Error
==================================================================================================================
amq.data     fanout      localhost:5672  runtime  Operational  0/100000  0          0         0         
amq.service  service     localhost:5672  durable  Operational  0/100000  0          0         0         
"""  # noqa: W291 - rows keep the padding of their empty last column, as link list's do

WALKTHROUGH_MAP = """
Finding Linked Brokers:
localhost:5673 (localhost5673)... Ok
localhost:5672 (localhost5672)... Ok

Dynamic Routes:
none found

Static Routes:
none found

Federations:

localhost:5673 => localhost:5672 amq.data (fanout)
localhost:5673 => localhost:5672 amq.service (service)
"""


def test_federate_walkthrough(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("localhost:5672", "localhost:5673")
    assert net.run("federate", "add", "localhost:5673", "localhost:5672", "amq.data") == 0
    argv = ["-d", "-v", "federate", "add", "localhost:5673", "peering/secret@localhost:5672", "amq.service"]
    assert net.run(*argv, "--type", "service") == 0
    assert capsys.readouterr() == (
        "Added federation localhost:5673 => localhost:5672 amq.service (service)\n",
        "",
    )
    assert net.run("federate", "list", "localhost:5673") == 0
    assert capsys.readouterr() == (WALKTHROUGH_LIST, "")
    assert net.run("route", "map", "localhost:5673") == 0
    assert capsys.readouterr() == (WALKTHROUGH_MAP, "")
    assert net.run("federate", "add", "localhost:5673", "localhost:5674", "amq.data") == 1
    assert capsys.readouterr() == (
        "",
        "Failed: duplicate - exchange 'amq.data' is already federated to localhost:5672 (fanout): "
        "an exchange is federated at most once\n",
    )
    assert net.run("-v", "federate", "del", "localhost:5673", "localhost:5672", "amq.data") == 0
    assert capsys.readouterr() == ("Deleted federation localhost:5673 => localhost:5672 amq.data\n", "")
    assert net.run("federate", "del", "localhost:5673", "localhost:5672", "amq.data") == 1
    assert capsys.readouterr() == (
        "",
        "Failed: NOT_FOUND - exchange 'amq.data' is not federated to localhost:5672\n",
    )
    assert net.run("federate", "list", "localhost:5672") == 0
    assert capsys.readouterr() == ("No Federations Found\n", "")


def test_federate_add_without_parent_credentials_lets_the_child_use_its_attach_login() -> None:
    net = FakeNetwork("child:5673")
    assert net.run("federate", "add", "admin/secret@child:5673", "parent", "amq.data") == 0
    assert net.connected[0][0] == BrokerAddress("child", 5673, "admin", "secret")
    assert net["child:5673"].requests == [
        (
            "federations.add",
            {
                "host": "parent",
                "port": 5672,
                "exchange": "amq.data",
                "vhost": "/",
                "type": None,
                "username": None,
                "password": None,
                "durable": False,
            },
        )
    ]


def test_federate_add_with_parent_credentials_durable_type_and_vhost() -> None:
    net = FakeNetwork("child:5672")
    argv = [
        "-d",
        "federate",
        "add",
        "child",
        "fed/pw@parent:5673",
        "orders",
        "--type",
        "data",
        "--vhost",
        "v",
    ]
    assert net.run(*argv) == 0
    assert sent(net["child:5672"], "federations.add") == {
        "host": "parent",
        "port": 5673,
        "exchange": "orders",
        "vhost": "v",
        "type": "data",
        "username": "fed",
        "password": "pw",
        "durable": True,
    }


def test_federate_add_sends_guest_when_the_parent_address_names_it() -> None:
    net = FakeNetwork("child:5672")
    assert net.run("federate", "add", "child", "guest/guest@parent", "amq.data") == 0
    arguments = sent(net["child:5672"], "federations.add")
    assert (arguments["username"], arguments["password"]) == ("guest", "guest")


@pytest.mark.parametrize(
    ("options", "sent_type"),
    [
        ([], None),
        (["--type", "subscriber"], "subscriber"),
        (["--type", "publisher"], "publisher"),
        (["--type", "locator"], "locator"),
        (["--type", "fanout"], "fanout"),
        (["--type", "service"], "service"),
        (["--type=data"], "data"),
    ],
)
def test_federate_add_type(options: list[str], sent_type: str | None) -> None:
    net = FakeNetwork("child:5672")
    assert net.run("federate", "add", "child", "parent", "amq.data", *options) == 0
    assert sent(net["child:5672"], "federations.add")["type"] == sent_type


def test_federate_add_names_the_types_when_refusing_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        FakeNetwork("child:5672").run("federate", "add", "child", "parent", "amq.data", "--type=fan")
    assert exited.value.code == 2
    choices = capsys.readouterr().err.splitlines()[0].partition("(choose from ")[2]
    assert choices.replace("'", "") == "subscriber, publisher, locator, fanout, service, data)"


def test_federate_options_may_come_first_or_last() -> None:
    net = FakeNetwork("child:5672")
    assert net.run("federate", "add", "--type", "locator", "child", "parent", "x", "--durable") == 0
    arguments = sent(net["child:5672"], "federations.add")
    assert (arguments["type"], arguments["durable"]) == ("locator", True)


def test_verbose_federate_add_and_del_say_what_was_done(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("child:5673")
    assert net.run("-v", "federate", "add", "child:5673", "parent", "amq.data") == 0
    assert net.run("-v", "federate", "del", "child:5673", "parent", "amq.data") == 0
    assert (
        net.run("-v", "federate", "add", "child:5673", "[::1]", "orders", "--vhost", "v", "--type", "data")
        == 0
    )
    assert capsys.readouterr() == (
        "Added federation child:5673 => parent:5672 amq.data (fanout)\n"
        "Deleted federation child:5673 => parent:5672 amq.data\n"
        "Added federation child:5673 => [::1]:5672 orders (vhost v) (fanout)\n",
        "",
    )


def test_federate_add_and_del_print_nothing_without_v(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("child:5672")
    assert net.run("federate", "add", "child", "parent", "amq.data") == 0
    assert net.run("federate", "del", "child", "parent", "amq.data") == 0
    assert capsys.readouterr() == ("", "")


def test_federate_del_sends_the_parent_exchange_and_vhost() -> None:
    net = FakeNetwork("child:5672")
    net.run("federate", "add", "child", "parent:5673", "orders", "--vhost", "v")
    assert net.run("federate", "del", "child", "fed/pw@parent:5673", "orders", "--vhost", "v") == 0
    assert net["child:5672"].requests[-1] == (
        "federations.delete",
        {"host": "parent", "port": 5673, "exchange": "orders", "vhost": "v"},
    )
    assert net["child:5672"].federations == []


def test_federate_del_of_what_is_not_federated(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("child:5672")
    assert net.run("federate", "del", "child", "parent", "amq.data") == 1
    assert capsys.readouterr() == (
        "",
        "Failed: NOT_FOUND - exchange 'amq.data' is not federated to parent:5672\n",
    )
    net.run("federate", "add", "child", "parent", "amq.data")
    assert net.run("federate", "del", "child", "other", "amq.data") == 1
    assert (
        capsys.readouterr().err == "Failed: NOT_FOUND - exchange 'amq.data' is not federated to other:5672\n"
    )
    assert len(net["child:5672"].federations) == 1


def test_federate_add_of_an_exchange_already_federated(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("child:5672")
    net.run("federate", "add", "child", "parent", "amq.data")
    assert net.run("federate", "add", "child", "other", "amq.data", "--type", "subscriber") == 1
    assert capsys.readouterr() == (
        "",
        "Failed: duplicate - exchange 'amq.data' is already federated to parent:5672 (fanout): "
        "an exchange is federated at most once\n",
    )


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("usage", "internal exchange 'fed.internal' cannot be federated"),
        ("NOT_FOUND", "no exchange 'fed.missing' in vhost '/' on node 'child'"),
        ("unavailable", "federation is not running on this node"),
    ],
)
def test_federate_add_refused_by_the_node(
    kind: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    net = FakeNetwork("child:5672")
    net["child:5672"].refusals["federations.add"] = ManagementFailed(kind, message)
    assert net.run("federate", "add", "child", "parent", "fed.internal") == 1
    assert capsys.readouterr() == ("", f"Failed: {kind} - {message}\n")


def test_federating_a_node_to_itself_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("a:5672")
    assert net.run("federate", "add", "a", "peer/pw@a:5672", "amq.data") == 1
    assert capsys.readouterr().err == "Failed: usage - federating a node to itself is not permitted\n"
    assert net.connected == []


def test_federate_to_an_unreachable_child(capsys: pytest.CaptureFixture[str]) -> None:
    assert FakeNetwork().run("federate", "add", "child", "parent", "amq.data") == 1
    assert capsys.readouterr() == (
        "",
        f"Failed: ConnectFailed - cannot connect to child:5672: Connection refused; is a node running there? "
        f"{HINT}\n",
    )


def test_federate_list(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("child:5673")
    net.run("federate", "add", "child:5673", "localhost", "amq.data")
    net.run("-d", "federate", "add", "child:5673", "localhost", "amq.service", "--type", "service")
    net["child:5673"].federations[1].update(
        state="Waiting",
        last_error="Connection refused",
        outbox={"messages": 7, "limit": 100000, "dropped": 0},
    )
    assert net.run("federate", "list", "child:5673") == 0
    assert capsys.readouterr() == (FEDERATE_LIST + "\n", "")
    assert methods(net["child:5673"])[-1] == "federations.list"


def test_federate_list_of_a_node_without_federations(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("localhost:5672")
    assert net.run("federate", "list") == 0
    assert capsys.readouterr() == ("No Federations Found\n", "")


# -- failures and usage errors ----------------------------------------------------------------


def test_unreachable_node(capsys: pytest.CaptureFixture[str]) -> None:
    assert FakeNetwork().run("link", "list", "localhost:10001") == 1
    assert capsys.readouterr() == (
        "",
        f"Failed: ConnectFailed - cannot connect to localhost:10001: Connection refused; is a node running there? "
        f"{HINT}\n",
    )


def test_a_refused_request_prints_the_nodes_kind_and_message(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("a:5672")
    net["a:5672"].refusals["routes.add"] = ManagementFailed(
        "usage", "a durable route needs a durable link (add the link with -d)"
    )
    assert net.run("-d", "dynamic", "add", "a", "b", "fed.topic") == 1
    assert capsys.readouterr().err == (
        "Failed: usage - a durable route needs a durable link (add the link with -d)\n"
    )


def test_linking_a_node_to_itself_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork("a:5672")
    assert net.run("link", "add", "a", "a:5672") == 1
    assert capsys.readouterr().err == "Failed: usage - linking a node to itself is not permitted\n"
    assert "links.add" not in methods(net["a:5672"])


def test_timeout_is_given_to_the_client_factory() -> None:
    net = FakeNetwork("a:5672")
    net.run("--timeout", "2.5", "link", "list", "a")
    net.run("link", "list", "a", "--timeout", "0")
    assert [timeout for _, timeout in net.connected] == [2.5, 0.0]


@pytest.mark.parametrize(
    ("argv", "usage", "message"),
    [
        ([], "usage: amq-route", "required"),
        (["link"], "usage: amq-route link", "required"),
        (["link", "add", "a"], "usage: amq-route link add", "required: src-broker"),
        (["route", "add", "a", "b", "amq.topic"], "usage: amq-route route add", "routing-key"),
        (
            ["route", "del", "a", "b", "x", "k", "extra"],
            "usage: amq-route route del",
            "unrecognized arguments: extra",
        ),
        (["route", "jump"], "usage: amq-route route", "invalid choice: 'jump'"),
        (["link", "add", "a:port", "b"], "usage: amq-route link add", "dest-broker"),
        (["--ack", "-1", "route", "list"], "usage: amq-route", "-1 is negative"),
        (
            ["-t", "rdma", "link", "add", "a", "b"],
            "usage: amq-route link add",
            "transport 'rdma' is not supported",
        ),
        (
            ["-s", "dynamic", "add", "a", "b", "fed.topic"],
            "usage: amq-route dynamic add",
            "--src-local is not permitted",
        ),
        (
            ["dynamic", "del", "a", "b", "x", "-s"],
            "usage: amq-route dynamic del",
            "unrecognized arguments: -s",
        ),
        (["--timeout", "soon", "route", "list"], "usage: amq-route", "'soon' is not a number"),
        (
            ["federate", "add", "a", "b", "amq.data", "--type", "fan"],
            "usage: amq-route federate add",
            "argument --type: invalid choice: 'fan'",
        ),
        (["federate", "add", "a", "b"], "usage: amq-route federate add", "required: exchange"),
        (
            ["federate", "add", "a", "fed@b", "x"],
            "usage: amq-route federate add",
            "fed@b:5672: no password: give",
        ),
        (
            ["federate", "del", "a", "b", "x", "--type", "fanout"],
            "usage: amq-route federate del",
            "unrecognized arguments: --type fanout",
        ),
        (["federate", "list", "a", "b"], "usage: amq-route federate list", "unrecognized arguments: b"),
    ],
)
def test_usage_errors_exit_2_with_the_commands_usage(
    argv: list[str], usage: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    net = FakeNetwork("a:5672")
    with pytest.raises(SystemExit) as exited:
        net.run(*argv)
    assert exited.value.code == 2
    first, *rest = capsys.readouterr().err.splitlines()
    # The line that matters first, then the command's usage.
    assert first.startswith(usage.removeprefix("usage: ") + ": error: ") and message in first
    assert rest[0].startswith(usage)
    assert net.connected == []


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["link"],
        ["link", "add"],
        ["link", "del"],
        ["link", "list"],
        ["dynamic", "add"],
        ["dynamic", "del"],
        ["route", "add"],
        ["route", "del"],
        ["route", "list"],
        ["route", "map"],
        ["route", "flush"],
        ["queue", "add"],
        ["queue", "del"],
        ["federate"],
        ["federate", "add"],
        ["federate", "del"],
        ["federate", "list"],
    ],
)
def test_help_on_every_command(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        route_cli.main([*command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: amq-route")
    if len(command) == 2:
        # Only the options the command takes.
        assert "--timeout SECS" in out
        assert ("--src-local" in out) == (
            command[0] in ("link", "route", "queue") and command[1] in ("add", "del")
        )
        assert ("--ack" in out) == (command[1] == "add" and command[0] != "link" and command[0] != "federate")


def test_a_usage_error_prints_its_line_first_and_an_option_of_another_command_is_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        route_cli.main(["link", "list", "localhost", "--durable"])
    assert capsys.readouterr().err == (
        "amq-route link list: error: unrecognized arguments: --durable\n"
        "usage: amq-route link list [-h] [--timeout SECS] [--password-stdin]\n"
        "                           [--password-file FILE] [--stats]\n"
        "                           [broker]\n"
    )
    with pytest.raises(SystemExit):
        route_cli.main([])
    assert capsys.readouterr().err.startswith(
        "amq-route: error: the following arguments are required: {link,dynamic,route,queue,federate}\n"
        "usage: amq-route [OPTIONS] link add"
    )


# -- the management client --------------------------------------------------------------------


class FakeChannel:
    """A channel whose node answers each published request with `answer(request)`."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.published: list[tuple[str, str, Content]] = []
        self.send, self.receive = trio.open_memory_channel[Any](10)

    def publish(self, exchange: str, routing_key: str, content: Content) -> int:
        self.published.append((exchange, routing_key, content))
        for body, correlation_id in self.answer(json.loads(content.body), content.properties.correlation_id):
            properties = commands.Basic.Properties(correlation_id=correlation_id)
            self.send.send_nowait(Delivery(Content.from_properties(properties, body)))
        return len(self.published)

    async def deliveries(self) -> AsyncIterator[Delivery]:
        async for delivery in self.receive:
            yield delivery


@dataclass
class Delivery:
    content: Content


def client_on(answer: Any, timeout: float = 5.0) -> tuple[ManagementClient, FakeChannel]:
    channel = FakeChannel(answer)
    return ManagementClient(channel, "amq.gen-reply", aiter(channel.deliveries()), timeout, "a:5672"), channel


async def test_call_publishes_the_request_and_returns_the_result() -> None:
    client, channel = client_on(
        lambda request, cid: [(json.dumps({"ok": True, "result": request}).encode(), cid)]
    )
    assert await client.call("links.add", {"host": "b"}) == {
        "method": "links.add",
        "arguments": {"host": "b"},
    }
    exchange, routing_key, content = channel.published[0]
    assert (exchange, routing_key) == ("amq.gateway.management", "")
    assert content.properties.reply_to == "amq.gen-reply"
    assert content.properties.content_type == "application/json"


async def test_call_skips_stale_replies_and_raises_refusals() -> None:
    refusal = json.dumps({"ok": False, "error": {"kind": "NOT_FOUND", "message": "no link"}}).encode()
    client, _ = client_on(lambda request, cid: [(b'{"ok": true, "result": "stale"}', "old"), (refusal, cid)])
    with pytest.raises(ManagementFailed) as raised:
        await client.call("links.delete", {})
    assert (raised.value.kind, raised.value.message) == ("NOT_FOUND", "no link")


async def test_call_times_out_and_rejects_bad_replies() -> None:
    client, _ = client_on(lambda request, cid: [], timeout=0.01)
    with pytest.raises(ManagementFailed) as raised:
        await client.call("links.list")
    assert raised.value.kind == "Timeout"
    assert "no reply from a:5672 to links.list within 0.01 s" in raised.value.message
    client, _ = client_on(lambda request, cid: [(b"[1]", cid)])
    with pytest.raises(ManagementFailed) as raised:
        await client.call("links.list")
    assert raised.value.kind == "protocol"


async def test_connect_reports_client_errors_by_class(monkeypatch: pytest.MonkeyPatch) -> None:
    @asynccontextmanager
    async def refused(address: BrokerAddress, timeout: float) -> AsyncIterator[Any]:
        raise ConnectFailed("Connection refused")
        yield

    monkeypatch.setattr(management_client, "_client_connect", refused)
    with pytest.raises(ManagementFailed) as raised:
        async with ManagementClient.connect(BrokerAddress("a", 5672), 1.0):
            pass
    assert str(raised.value) == (
        "ConnectFailed - cannot connect to a:5672: Connection refused; is a node running there?"
    )


async def test_a_refused_login_names_the_node_and_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    @asynccontextmanager
    async def refused(address: BrokerAddress, timeout: float) -> AsyncIterator[Any]:
        raise AuthenticationRefused("ACCESS_REFUSED - Login was refused")
        yield

    monkeypatch.setattr(management_client, "_client_connect", refused)
    with pytest.raises(ManagementFailed) as raised:
        async with ManagementClient.connect(BrokerAddress("a", 5672, "ops", "pw"), 1.0):
            pass
    assert str(raised.value) == (
        "AuthenticationRefused - a:5672 refused the login of user 'ops': ACCESS_REFUSED - Login was refused"
    )


async def test_connect_unwraps_a_single_failure_from_the_connections_nursery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Connection:
        async def channel(self) -> Any:
            class Channel:
                async def call(self, method: Any) -> Any:
                    return commands.Queue.DeclareOk(queue="amq.gen-1")

                async def consume(self, queue: str, no_ack: bool) -> str:
                    return "ctag"

                def deliveries(self) -> Any:
                    return FakeChannel(None).deliveries()

            return Channel()

    @asynccontextmanager
    async def grouping(address: BrokerAddress, timeout: float) -> AsyncIterator[Any]:
        async with trio.open_nursery() as nursery:
            nursery.cancel_scope.deadline = trio.current_time() + 60
            yield Connection()
            nursery.cancel_scope.cancel()

    monkeypatch.setattr(management_client, "_client_connect", grouping)
    with pytest.raises(ManagementFailed) as raised:
        async with ManagementClient.connect(BrokerAddress("a", 5672), 1.0):
            raise ManagementFailed("NOT_FOUND", "gone")
    assert str(raised.value) == "NOT_FOUND - gone"


# -- nodes by the names they report -------------------------------------------------------------


def test_one_node_at_two_addresses_is_linked_once_and_mapped_once(capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork(
        "a:1", "127.0.0.1:2", "localhost:2", node_names={"127.0.0.1:2": "b", "localhost:2": "b"}
    )
    assert net.run("link", "add", "a:1", "127.0.0.1:2") == 0
    net["a:1"].links[0]["node"] = "b"  # the name it gave when the link connected
    assert net.run("-v", "link", "add", "a:1", "localhost:2") == 0
    assert capsys.readouterr().out == "localhost:2 is node 'b', linked as 127.0.0.1:2: using that link\n"
    assert [(link["host"], link["port"]) for link in net["a:1"].links] == [("127.0.0.1", 2)]
    assert net.run("route", "add", "a:1", "localhost:2", "amq.topic", "k") == 0
    assert [route["src"] for route in net["a:1"].routes] == ["127.0.0.1:2"]

    # A link made before the name was known: the map reads the second address and says so.
    net["a:1"].links.append({**net["a:1"].links[0], "host": "localhost", "node": None})
    capsys.readouterr()
    assert net.run("route", "map", "a:1") == 0
    assert capsys.readouterr().out.splitlines()[1:5] == [
        "Finding Linked Brokers:",
        "a:1 (a1)... Ok",
        "127.0.0.1:2 (b)... Ok",
        "localhost:2 (b)... Ok: the same node as 127.0.0.1:2",
    ]


# -- vhosts ---------------------------------------------------------------------------------------


def test_routes_in_another_vhost_by_option_or_url() -> None:
    net = FakeNetwork("a:5672", "b:5672")
    assert net.run("--vhost", "prod", "route", "add", "a", "b", "amq.topic", "k") == 0
    assert sent(net["b:5672"], "exchanges.list") == {"vhost": "prod"}  # the far end, checked there
    assert sent(net["a:5672"], "links.add")["vhost"] == "prod"  # the peer's: the node's by default
    assert sent(net["a:5672"], "routes.add")["vhost"] == "prod"
    assert net.run("route", "del", "a", "b", "amq.topic", "k", "--vhost", "prod") == 0
    assert net["a:5672"].routes == []

    # URLs: the node's vhost from its own, the peer's from the peer's ("/" is sent as nothing).
    net = FakeNetwork("a:5672", "b:5672")
    assert net.run("route", "add", "amqp://a/sales", "amqp://b/%2F", "amq.topic", "j") == 0
    assert sent(net["a:5672"], "routes.add")["vhost"] == "sales"
    assert "vhost" not in sent(net["a:5672"], "links.add")
    assert sent(net["b:5672"], "exchanges.list") == {"vhost": "/"}


def test_federate_add_takes_the_parent_vhost_from_its_url() -> None:
    net = FakeNetwork("child:5672")
    assert net.run("federate", "add", "amqp://guest:guest@child/eu", "amqp://p:pw@parent/central", "x") == 0
    arguments = sent(net["child:5672"], "federations.add")
    assert (arguments["vhost"], arguments["parent_vhost"], arguments["username"]) == ("eu", "central", "p")
