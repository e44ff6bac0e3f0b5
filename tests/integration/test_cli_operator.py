"""amq-route and amq-config run as an operator runs them (console scripts against real node
processes on loopback): every failure is one clear line on stderr and exit 1, never a silent
exit 0; routes and federations show whether they forward; any vhost, any address form. Every
wait is bounded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio
from pamqp import commands

from federation.address import BrokerAddress
from federation.client import connect
from gateway.wire import Content
from tests.integration.test_federation_routes import at, cli, manage, publish, route
from tests.nodes import NodeProcess, free_port


async def test_an_unreachable_node_is_named_with_the_fix() -> None:
    port = free_port()
    with trio.fail_after(30):
        status, out, err = await cli("amq-config", "-a", f"127.0.0.1:{port}", "exchanges")
        assert (status, out) == (1, "")
        assert err == (
            f"Failed: ConnectFailed - cannot connect to 127.0.0.1:{port}: Connection refused; "
            "is a node running there? use -a HOST:PORT\n"
        )
        status, out, err = await cli("amq-route", "link", "list", f"127.0.0.1:{port}")
        assert (status, out) == (1, "")
        assert err.startswith(
            f"Failed: ConnectFailed - cannot connect to 127.0.0.1:{port}: Connection refused"
        )
        assert err.endswith("name the node as HOST:PORT\n")


async def test_a_route_whose_source_is_missing_is_refused(nodes: Callable[..., NodeProcess]) -> None:
    a, b = nodes("A"), nodes("B")
    with trio.fail_after(40):
        status, out, err = await cli("amq-route", "queue", "add", at(a), at(b), "amq.fanout", "nosuch")
        assert (status, out) == (1, "")
        assert err == (
            f"Failed: NOT_FOUND - no queue 'nosuch' on {at(b)}: the route's source queue must exist there\n"
        )
        status, _, err = await cli("amq-config", "-a", at(a), "add", "exchange", "topic", "fed.only-here")
        assert status == 0, err
        status, out, err = await cli("amq-route", "dynamic", "add", at(a), at(b), "fed.only-here")
        assert (status, out) == (1, "")
        assert err == (
            f"Failed: NOT_FOUND - no exchange 'fed.only-here' on {at(b)}: "
            "the route's source exchange must exist there\n"
        )
        assert (await cli("amq-route", "link", "list", at(a)))[1] == "No Links Found\n"
        assert (await cli("amq-route", "route", "list", at(a)))[1] == ""


async def until_output(contains: str, *args: str) -> str:
    """Run amq-route until its output contains `contains`; the caller bounds the wait."""
    while True:
        status, out, err = await cli("amq-route", *args)
        assert status == 0, err
        if contains in out:
            return out
        await trio.sleep(0.2)


async def test_a_route_shows_its_state_and_traffic_and_fails_when_its_source_goes(
    nodes: Callable[..., NodeProcess],
) -> None:
    a, b = nodes("A"), nodes("B")
    with trio.fail_after(60):
        status, _, err = await cli("amq-config", "-a", at(b), "add", "queue", "public")
        assert status == 0, err
        status, _, err = await cli("amq-route", "queue", "add", at(a), at(b), "amq.fanout", "public")
        assert status == 0, err
        await until_output("[Operational; 0 messages, 0 bytes]", "route", "list", at(a))
        await publish(b, "", "public", [b"one", b"two"])
        listed = await until_output("[Operational; 2 messages, 6 bytes]", "route", "list", at(a))
        assert listed == f"{at(a)} {at(b)} amq.fanout   [Operational; 2 messages, 6 bytes]\n"

        status, _, err = await cli("amq-config", "-a", at(b), "del", "queue", "public", "--force")
        assert status == 0, err
        # First its consumer is cancelled; the retry (2 s later) finds no queue.
        listed = await until_output("no queue 'public'", "route", "list", at(a))
        assert "[Failed since " in listed and listed.endswith("; 2 messages, 6 bytes]\n")
        route_map = await route("route", "map", at(a))
        assert f"{at(a)}(ex=amq.fanout) <= {at(b)}(queue=public)  [Failed since " in route_map


async def test_a_federation_whose_parent_lacks_the_exchange_is_failed(
    nodes: Callable[..., NodeProcess],
) -> None:
    parent, child = nodes("parent"), nodes("child")
    with trio.fail_after(60):
        status, _, err = await cli("amq-config", "-a", at(child), "add", "exchange", "topic", "fed.lonely")
        assert status == 0, err
        await route("federate", "add", at(child), at(parent), "fed.lonely")
        listing = await until_output("Failed", "federate", "list", at(child))
        row = listing.splitlines()[2]
        assert row.split()[2:6] == [at(parent), "(parent)", "runtime", "Failed"], row
        assert f"exchange 'fed.lonely' does not exist on {at(parent)} (since " in row
        route_map = await route("route", "map", at(child))
        assert "fed.lonely (fanout)  [Failed since " in route_map


async def test_link_add_again_with_other_credentials_updates_the_link(
    nodes: Callable[..., NodeProcess],
) -> None:
    a, b = nodes("A"), nodes("B")
    with trio.fail_after(40):
        # The route's link is made with the wrong password (and B not checked: refused too).
        assert await route("route", "add", at(a), f"guest/wrong@{at(b)}", "amq.topic", "k") == ""
        await until_output("Failed", "link", "list", at(a))
        await until_output("[Failed since ", "route", "list", at(a))
        updated = await route("link", "add", at(a), f"guest/guest@{at(b)}")
        assert updated == f"Updated link {at(a)} -> {at(b)}: it logs in as 'guest' now\n"
        await until_output("Operational", "link", "list", at(a))
        await until_output("[Operational; ", "route", "list", at(a))  # the route moved with it
        assert await route("link", "add", at(a), f"guest/guest@{at(b)}") == ""


async def test_amq_config_reaches_other_vhosts_by_option_or_url(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    config = tmp_path / "node.toml"
    config.write_text('[node]\nvhosts = ["prod"]\n')
    node = nodes("V", "--config", str(config))
    url = f"amqp://guest:guest@127.0.0.1:{node.port}/prod"
    with trio.fail_after(30):
        status, _, err = await cli("amq-config", "-a", url, "add", "queue", "in-prod")
        assert status == 0, err
        status, out, err = await cli("amq-config", "-a", at(node), "--vhost", "prod", "queues")
        assert status == 0 and "in-prod" in out, err
        status, out, err = await cli("amq-config", "-a", at(node), "queues")
        assert status == 0 and "in-prod" not in out, err


async def test_a_usage_error_says_what_is_wrong_on_its_first_line() -> None:
    with trio.fail_after(30):
        status, out, err = await cli("amq-route", "link", "add", "localhost:1")
        assert (status, out) == (2, "")
        assert (
            err.splitlines()[0]
            == "amq-route link add: error: the following arguments are required: src-broker"
        )
        status, out, err = await cli("amq-config", "node", "--bindings")
        assert (status, out) == (2, "")
        assert err.splitlines()[0] == "amq-config node: error: unrecognized arguments: --bindings"


async def test_a_node_is_known_by_its_name_whatever_the_address(nodes: Callable[..., NodeProcess]) -> None:
    a, b = nodes("A"), nodes("B")
    with trio.fail_after(40):
        await route("link", "add", at(a), at(b))
        listed = await until_output("Operational", "link", "list", at(a))
        assert listed.splitlines()[2].split()[:3] == ["127.0.0.1", str(b.port), "B"]
        said = await route("-v", "link", "add", at(a), f"localhost:{b.port}")
        assert said == f"localhost:{b.port} is node 'B', linked as {at(b)}: using that link\n"
        assert len((await route("link", "list", at(a))).splitlines()) == 3  # still one link
        route_map = await route("route", "map", f"localhost:{a.port}")
        assert f"\nlocalhost:{a.port} (A)... Ok\n{at(b)} (B)... Ok\n\n" in route_map


async def test_a_queue_route_between_two_nodes_other_vhosts(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    config = tmp_path / "node.toml"
    config.write_text('[node]\nvhosts = ["prod"]\n')
    a, b = nodes("A", "--config", str(config)), nodes("B", "--config", str(config))
    with trio.fail_after(40):
        for node in (a, b):
            status, _, err = await cli(
                "amq-config", "-a", at(node), "--vhost", "prod", "add", "queue", "public"
            )
            assert status == 0, err
        async with connect(BrokerAddress("127.0.0.1", a.port), vhost="prod") as connection:
            channel = await connection.channel()
            await channel.call(commands.Queue.Bind(queue="public", exchange="amq.fanout", routing_key=""))
        # The source queue is checked in B's prod; the route takes it into A's prod amq.fanout.
        await route("--vhost", "prod", "queue", "add", at(a), at(b), "amq.fanout", "public")
        await until_output("[Operational; ", "route", "list", at(a))
        async with connect(BrokerAddress("127.0.0.1", b.port), vhost="prod") as connection:
            channel = await connection.channel()
            await channel.confirm_select()
            channel.publish("", "public", Content.from_properties(commands.Basic.Properties(), b"in prod"))
            await channel.wait_for_confirms()
        async with connect(BrokerAddress("127.0.0.1", a.port), vhost="prod") as connection:
            channel = await connection.channel()
            await channel.consume("public", no_ack=True)
            delivery = await anext(aiter(channel.deliveries()))
            assert delivery.content.body == b"in prod"


async def test_a_node_refuses_a_second_link_to_a_node_it_reaches_already(
    nodes: Callable[..., NodeProcess],
) -> None:
    """Through management (as the planner sends it), where amq-route's check does not run."""
    a, b = nodes("A"), nodes("B")
    with trio.fail_after(40):
        await route("link", "add", at(a), at(b))
        await until_output("Operational", "link", "list", at(a))
        await manage(a, "links.add", {"host": "localhost", "port": b.port})
        listed = await until_output("Failed", "link", "list", at(a))
        assert f"node 'B' is linked already as {at(b)}: one link per node" in listed
