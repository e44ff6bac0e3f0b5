"""What amq-route and amq-config say when something does not work, run as an operator runs
them (console scripts against real node processes on loopback): every failure is one clear
line on stderr and exit 1, never a silent exit 0. Every wait is bounded."""

from __future__ import annotations

from collections.abc import Callable

import trio

from tests.integration.test_federation_routes import at, cli
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
