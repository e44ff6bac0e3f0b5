"""`amq-route federate` against real node processes: a federation added with the CLI carries
messages, shows in `federate list` and `route map`, refuses what the node refuses, and stops
when deleted. Every wait is bounded."""

from __future__ import annotations

from collections.abc import Callable

import trio

from tests.integration.test_federation_routes import at, cli, route, unstated
from tests.integration.test_federation_types import (
    publish,
    received,
    subscriber,
    wait_bound_upstream,
    wait_federated,
)
from tests.nodes import NodeProcess

EXCHANGE = "fed.cli"


async def test_federate_add_list_map_and_del(nodes: Callable[..., NodeProcess]) -> None:
    parent, child = nodes("parent"), nodes("child")
    with trio.fail_after(40):
        for node in (parent, child):
            status, _, err = await cli("amq-config", "-a", at(node), "add", "exchange", "topic", EXCHANGE)
            assert status == 0, err
        # No login in the parent's address: the child logs in with its attach login, the
        # built-in loopback user peering.
        added = await route("-v", "federate", "add", at(child), at(parent), EXCHANGE, "--type", "subscriber")
        assert added == f"Added federation {at(child)} => {at(parent)} {EXCHANGE} (subscriber)\n"
        await wait_federated(child, {EXCHANGE})

        listing = (await route("federate", "list", at(child))).splitlines()
        assert listing[0].split() == [
            *("Exchange", "Type", "Parent", "Source", "State", "Outbox"),
            *("Forwarded", "Received", "Returned", "Last", "Error"),
        ]
        assert listing[2].split() == [
            EXCHANGE,
            "subscriber",
            at(parent),
            "(parent)",
            "runtime",
            "Operational",
            "0/100000",
        ] + ["0", "(0", "B)"] * 2 + ["0"]
        peerings = await route("link", "list", at(parent))
        assert peerings == "No Links Found\n"  # the parent sees an ordinary client

        route_map = await route("route", "map", at(child))
        assert f"{at(child)} (child)... Ok\n{at(parent)} (parent)... Ok\n" in route_map
        assert unstated(route_map).endswith(
            f"Federations:\n\n{at(child)} => {at(parent)} {EXCHANGE} (subscriber)\n"
        )

        queue = await subscriber(child, EXCHANGE, "news.#", "cli-sub")
        await wait_bound_upstream(parent, EXCHANGE, "news.#", 1)
        await publish(parent, EXCHANGE, "news.eu", [b"one", b"two"])
        assert await received(child, queue) == [b"one", b"two"]

        status, out, err = await cli("amq-route", "federate", "add", at(child), at(parent), EXCHANGE)
        assert (status, out) == (1, "")
        assert err == (
            f"Failed: duplicate - exchange '{EXCHANGE}' is already federated to {at(parent)} (subscriber): "
            "an exchange is federated at most once\n"
        )
        status, _, err = await cli(
            "amq-route", "federate", "add", at(child), at(parent), "amq.gateway.management"
        )
        assert status == 1 and err.startswith("Failed: usage - ") and "cannot be federated" in err

        await route("federate", "del", at(child), at(parent), EXCHANGE)
        assert await route("federate", "list", at(child)) == "No Federations Found\n"
        await publish(parent, EXCHANGE, "news.eu", [b"three"])
        assert await received(child, queue) == []
