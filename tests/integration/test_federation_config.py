"""Exchange federation configured in the node file and by flags, with real node processes on
loopback: what the file asks for is federated (now and as exchanges appear), startup errors
are one precise line, and a full outbox either blocks publishers (pika sees
Connection.Blocked) or drops its oldest message and counts it. Every wait is bounded."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika
import pytest
import trio
from pamqp import commands

from federation.client import connect
from federation.management_client import ManagementFailed
from tests.integration.test_federation_routes import address, manage
from tests.integration.test_federation_types import publish, received, subscriber, wait_federated
from tests.nodes import NodeProcess


def node_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


async def declare(node: NodeProcess, exchange: str, kind: str, *, internal: bool = False) -> None:
    async with connect(address(node)) as connection:
        channel = await connection.channel()
        await channel.call(
            commands.Exchange.Declare(exchange=exchange, exchange_type=kind, internal=internal)
        )


async def federations(node: NodeProcess) -> dict[str, dict[str, Any]]:
    return {record["exchange"]: record for record in await manage(node, "federations.list")}


async def test_the_file_federates_the_esb_trio_patterns_and_entries(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    parent = nodes("p")
    config = node_file(
        tmp_path,
        "c1",
        f"""
[federation]
attach = "127.0.0.1:{parent.port}"
attach_all = "fed.*"

[[federate]]
exchange = "fed.orders"
type = "publisher"
""",
    )
    child = nodes("c1", "--config", str(config))
    with trio.fail_after(30):
        await wait_federated(child, {"amq.service", "amq.data", "amq.dataex"})
        records = await federations(child)
        assert {name: (r["type"], r["source"], r["parent"]) for name, r in records.items()} == {
            "amq.service": ("service", "config", f"127.0.0.1:{parent.port}"),
            "amq.data": ("fanout", "config", f"127.0.0.1:{parent.port}"),
            "amq.dataex": ("fanout", "config", f"127.0.0.1:{parent.port}"),
        }
        # Exchanges declared later are federated by the first rule that matches them.
        for node in (parent, child):
            await declare(node, "fed.orders", "direct")
            await declare(node, "fed.prices", "topic")
            await declare(node, "other", "topic")
        await declare(child, "fed.internal", "topic", internal=True)
        await wait_federated(child, {"fed.orders", "fed.prices"})
        records = await federations(child)
        assert set(records) == {"amq.service", "amq.data", "amq.dataex", "fed.orders", "fed.prices"}
        assert (records["fed.orders"]["type"], records["fed.prices"]["type"]) == ("publisher", "fanout")
        # publisher: routed locally and forwarded, once each.
        on_parent = await subscriber(parent, "fed.orders", "o", "orders-p")
        on_child = await subscriber(child, "fed.orders", "o", "orders-c")
        await publish(child, "fed.orders", "o", [b"order-1"])
        assert await received(parent, on_parent) == [b"order-1"]
        assert await received(child, on_child) == [b"order-1"]
        # At most once, and never the system or internal exchanges, at runtime too.
        refusals = [
            ({"exchange": "fed.prices"}, "duplicate - exchange 'fed.prices' is already federated to"),
            ({"exchange": "fed.internal"}, "usage - internal exchange 'fed.internal' cannot be federated"),
            (
                {"exchange": "amq.gateway.management"},
                "usage - system exchange 'amq.gateway.management' cannot",
            ),
        ]
        for arguments, message in refusals:
            with pytest.raises(ManagementFailed) as refused:
                await manage(
                    child, "federations.add", {"host": "127.0.0.1", "port": parent.port, **arguments}
                )
            assert str(refused.value).startswith(message)


def serve_error(tmp_path: Path, *args: str) -> tuple[int, str]:
    """A node that must refuse to start: (exit status, standard error)."""
    command = [sys.executable, "-m", "gateway.cli", "serve", "--host", "127.0.0.1", "--port", "0", "--memory"]
    result = subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    return result.returncode, result.stderr


@pytest.mark.parametrize(
    ("text", "flags", "message"),
    [
        (
            "[[federate]]\nexchange = 'prices.*'\n",
            (),
            "{path}:1: federate[0] (exchange 'prices.*'): no parent to attach to: give the entry an attach, "
            "or set federation.attach (--attach)",
        ),
        (
            "[federation]\nattach_all = 'amq.*'\n",
            (),
            "federation.attach_all 'amq.*' needs a parent: set federation.attach (--attach)",
        ),
        (
            "",
            ("--attach", "hub", "--attach-login", "edge"),
            "attach (amq.service): no password for login "
            "'edge': add it to the users file as [credentials.edge] password = \"...\"",
        ),
        ("", ("--attach", "hub:0"), "--attach: expected host[:port], got 'hub:0'"),
        (
            "[[federate]]\nexchange = 'x'\nattach = 'p'\n[[federate]]\nexchange = 'x'\n",
            (),
            "{path}:5: federate[1].exchange: 'x' is already federated by federate[0]: an exchange is "
            "federated at most once",
        ),
        (
            "[[federate]]\nexchange = ''\nattach = 'p'\n",
            (),
            "{path}:2: federate[0].exchange: the default exchange cannot be federated",
        ),
        (
            "[[federate]]\nexchange = 'x'\nattach = 'p'\ntype = 'fan'\n",
            (),
            "{path}:4: federate[0].type: "
            "expected one of subscriber, publisher, locator, fanout, service, data, got 'fan'",
        ),
    ],
)
def test_configuration_errors_stop_the_node_with_one_line(
    tmp_path: Path, text: str, flags: tuple[str, ...], message: str
) -> None:
    path = node_file(tmp_path, "bad", text)
    status, stderr = serve_error(tmp_path, "--config", str(path), *flags)
    assert (status, stderr) == (1, f"amq-gateway: error: {message.format(path=path)}\n")


async def stopped_parent_with_a_subscriber(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> tuple[Path, int]:
    """A parent's data dir with a durable queue 'sub' on amq.data (key k), and its port; the
    parent is stopped, so a child's outbox fills up."""
    data = tmp_path / "p-data"
    parent = nodes("p", data_dir=data)
    async with connect(address(parent)) as connection:
        channel = await connection.channel()
        await channel.call(commands.Queue.Declare(queue="sub", durable=True))
        await channel.call(commands.Queue.Bind(queue="sub", exchange="amq.data", routing_key="k"))
    parent.stop()
    return data, parent.port


def outbox_child(
    nodes: Callable[..., NodeProcess], tmp_path: Path, port: int, limit: int, policy: str
) -> NodeProcess:
    config = node_file(
        tmp_path,
        "c1",
        f'[federation]\nattach = "127.0.0.1:{port}"\noutbox_limit = {limit}\noutbox_policy = "{policy}"\n',
    )
    return nodes("c1", "--config", str(config))


async def test_a_full_outbox_blocks_pika_publishers_until_the_parent_drains_it(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    data, port = await stopped_parent_with_a_subscriber(nodes, tmp_path)
    child = outbox_child(nodes, tmp_path, port, 20, "block")
    sent = [f"m-{i}".encode() for i in range(60)]
    events: list[str] = []
    # pika drops a connection blocked for longer than blocked_connection_timeout: a bound.
    connection = pika.BlockingConnection(pika.URLParameters(child.url() + "?blocked_connection_timeout=20"))
    try:
        connection.add_on_connection_blocked_callback(lambda _conn, frame: events.append(frame.method.reason))
        connection.add_on_connection_unblocked_callback(lambda _conn, _frame: events.append("unblocked"))
        channel = connection.channel()
        for body in sent:
            channel.basic_publish("amq.data", "k", body, pika.BasicProperties(delivery_mode=2))
        with trio.fail_after(30):
            while not events:
                connection.process_data_events(time_limit=0.1)
                await trio.sleep(0)
            assert events == [
                f"federation outbox of exchange 'amq.data' is full (20 messages; parent 127.0.0.1:{port})"
            ]
            # Held, the node reads no more of this connection: the outbox stays at its limit.
            record = (await federations(child))["amq.data"]
            assert record["outbox"]["messages"] == 20 and record["state"] != "Operational"
            parent = nodes("p", data_dir=data, port=port)
            while events[-1] != "unblocked":
                connection.process_data_events(time_limit=0.1)
                await trio.sleep(0)
            channel.basic_publish("amq.data", "k", b"after", pika.BasicProperties(delivery_mode=2))
            connection.process_data_events(time_limit=0)
    finally:
        connection.close()
    with trio.fail_after(30):
        assert await received(parent, "sub") == [*sent, b"after"]


async def test_drop_oldest_keeps_the_newest_and_counts_the_rest(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    data, port = await stopped_parent_with_a_subscriber(nodes, tmp_path)
    child = outbox_child(nodes, tmp_path, port, 10, "drop-oldest")
    sent = [f"m-{i}".encode() for i in range(25)]
    with trio.fail_after(30):
        await publish(child, "amq.data", "k", sent, delivery_mode=2)  # all confirmed, none held
        outbox = (await federations(child))["amq.data"]["outbox"]
        assert (outbox["messages"], outbox["dropped"], outbox["policy"]) == (10, 15, "drop-oldest")
        parent = nodes("p", data_dir=data, port=port)
        await wait_federated(child, {"amq.data"})
        assert await received(parent, "sub") == sent[15:]
