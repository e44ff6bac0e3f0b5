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
