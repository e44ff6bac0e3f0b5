"""A federated child that restarts keeps its parent's queue bound with exactly its own local
bindings: those that did not outlive the restart, or were withdrawn while the parent was away,
are unbound on its first connection, since the child stores what it bound there
(federation.db). Real node processes on loopback (the `nodes` fixture of tests/conftest.py);
every wait is bounded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio
from pamqp import commands

from federation.client import connect
from gateway.wire import Content
from tests.integration.test_federation_routes import address, manage
from tests.integration.test_federation_types import attach, wait_bound_upstream, wait_federated
from tests.nodes import NodeProcess

#: The child's queue on the parent for amq.data (federation.<child name>.<exchange>).
UPSTREAM = "federation.c1.amq.data"


async def bind_local(child: NodeProcess, queue: str, key: str, *, durable: bool = True) -> None:
    async with connect(address(child)) as connection:
        channel = await connection.channel()
        await channel.call(commands.Queue.Declare(queue=queue, durable=durable))
        await channel.call(commands.Queue.Bind(queue=queue, exchange="amq.data", routing_key=key))


async def unbind_local(child: NodeProcess, queue: str, key: str) -> None:
    async with connect(address(child)) as connection:
        channel = await connection.channel()
        await channel.call(commands.Queue.Unbind(queue=queue, exchange="amq.data", routing_key=key))


async def wait_upstream_keys(parent: NodeProcess, keys: list[str]) -> None:
    """Until the child's queue on the parent is bound with exactly `keys` (caller bounds it)."""
    while True:
        bindings = await manage(parent, "bindings.list")
        if sorted(b["routing_key"] for b in bindings if b["destination"] == UPSTREAM) == keys:
            return
        await trio.sleep(0.05)


async def routed_on_parent(parent: NodeProcess, key: str) -> bool:
    """Whether a mandatory publish on the parent's amq.data with `key` reached any queue (the
    Return comes before the confirm)."""
    returns: list[object] = []
    async with connect(address(parent)) as connection:
        channel = await connection.channel()
        channel.on_return = returns.append
        await channel.confirm_select()
        channel.publish("amq.data", key, Content.from_properties(None, b"probe"), mandatory=True)
        await channel.wait_for_confirms()
    return not returns


async def federated_child(nodes: Callable[..., NodeProcess], data: Path, parent_port: int) -> NodeProcess:
    """The child c1 (durable, in `data`) with amq.data durably federated to the parent."""
    child = nodes("c1", data_dir=data)
    await attach(child, parent_port, "amq.data", type="fanout", durable=True)
    await wait_federated(child, {"amq.data"})
    return child


async def test_bindings_gone_with_a_restart_are_unbound_on_the_parent(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    parent = nodes("p")
    with trio.fail_after(60):
        child = await federated_child(nodes, tmp_path / "c1-data", parent.port)
        await bind_local(child, "qa", "a")
        await bind_local(child, "qb", "b")
        await bind_local(child, "qt", "t", durable=False)  # does not outlive a restart
        for key in ("a", "b", "t"):
            await wait_bound_upstream(parent, "amq.data", key, 1)
        child.kill()
        child = nodes("c1", data_dir=tmp_path / "c1-data", port=child.port)
        await wait_federated(child, {"amq.data"})
        await wait_upstream_keys(parent, ["a", "b"])
        await unbind_local(child, "qb", "b")
        await wait_upstream_keys(parent, ["a"])
        assert [await routed_on_parent(parent, key) for key in ("a", "b", "t")] == [True, False, False]


async def test_bindings_withdrawn_while_restarted_without_the_parent_are_unbound_when_it_is_back(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    parent = nodes("p", data_dir=tmp_path / "p-data")
    port = parent.port
    with trio.fail_after(90):
        child = await federated_child(nodes, tmp_path / "c1-data", port)
        await bind_local(child, "qa", "a")
        await bind_local(child, "qb", "b")
        await wait_upstream_keys(parent, ["a", "b"])
        child.kill()
        parent.stop()
        child = nodes("c1", data_dir=tmp_path / "c1-data", port=child.port)
        await unbind_local(child, "qb", "b")  # while the child cannot tell the parent
        parent = nodes("p", data_dir=tmp_path / "p-data", port=port)
        await wait_federated(child, {"amq.data"})
        await wait_upstream_keys(parent, ["a"])
        assert [await routed_on_parent(parent, key) for key in ("a", "b")] == [True, False]
