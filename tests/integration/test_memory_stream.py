"""A node serves a connection over any byte stream plus a peer name, not only a TCP socket:
here a trio memory stream pair, the way a TLS or WebSocket stream will plug in."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from pamqp import commands

from gateway.broker import Session
from gateway.node import Node
from gateway.security import UsersDB
from gateway.server import HIGH_WATER, RESUME_SLICE
from gateway.wire import Content
from gateway.wire.client import ClientConnection
from gateway.wire.events import (
    NEED_DATA,
    ChannelOpened,
    ConnectionClosed,
    ConnectionOpened,
    Event,
    MessageGot,
    MethodReceived,
)


async def until(stream: trio.abc.Stream, client: ClientConnection, kind: type[Event]) -> Event:
    """Send what the client queued (its requests, and what it answers on its own: Start-Ok,
    Tune-Ok, Open) and read until it reports an event of `kind`."""
    while True:
        while (event := client.next_event()) is not NEED_DATA:
            if isinstance(event, kind):
                return event
        data = client.data_to_send()
        if data:
            await stream.send_all(data)
        client.receive_data(await stream.receive_some())


async def test_a_connection_over_a_memory_stream_pair(nursery: trio.Nursery) -> None:
    node = Node(name="memory", users=UsersDB.default())
    ours, theirs = trio.testing.memory_stream_pair()
    served = trio.Event()

    async def serve() -> None:
        await node.serve_connection(theirs, "in-memory peer", "127.0.0.1")
        served.set()

    nursery.start_soon(serve)
    client = ClientConnection("guest", "guest", "/")
    with trio.fail_after(10):
        opened = await until(ours, client, ConnectionOpened)
        assert opened.server_properties["cluster_name"] == "memory"
        client.open_channel(1)
        await until(ours, client, ChannelOpened)
        client.send_method(1, commands.Queue.Declare(queue="over-memory"))
        declared = await until(ours, client, MethodReceived)
        assert isinstance(declared.method, commands.Queue.DeclareOk)
        client.send_publish(
            1, "", "over-memory", False, Content.from_properties(commands.Basic.Properties(), b"hi")
        )
        client.send_method(1, commands.Basic.Get(queue="over-memory", no_ack=True))
        got = await until(ours, client, MessageGot)
        assert (got.routing_key, got.message_count, got.content.body) == ("over-memory", 0, b"hi")
        client.close()
        await until(ours, client, ConnectionClosed)
        await served.wait()
    assert node.handlers == set()


async def test_a_backlog_reaches_a_consumer_a_bounded_slice_per_turn_of_the_loop(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Feeding a consumer its backlog renders at most RESUME_SLICE per resume (one step of the
    node's loop), however big the output window: a whole window per step held every other
    client's confirms for milliseconds (issue 11)."""
    node = Node(name="memory", users=UsersDB.default())
    ours, theirs = trio.testing.memory_stream_pair()
    nursery.start_soon(node.serve_connection, theirs, "in-memory peer", "127.0.0.1")
    client = ClientConnection("guest", "guest", "/")
    body = Content.from_properties(commands.Basic.Properties(), b"x" * 100)
    backlog = 20_000
    with trio.fail_after(30):
        await until(ours, client, ConnectionOpened)
        client.open_channel(1)
        await until(ours, client, ChannelOpened)
        client.send_method(1, commands.Queue.Declare(queue="backlog"))
        await until(ours, client, MethodReceived)
        for _ in range(backlog):
            client.send_publish(1, "", "backlog", False, body)
        client.send_method(1, commands.Queue.Declare(queue="backlog", passive=True))
        declared = await until(ours, client, MethodReceived)
        assert declared.method.message_count == backlog
        [handler] = node.handlers
        assert handler.session is not None
        rendered: list[int] = []
        resume = Session.resume

        def measured_resume(session: Session) -> None:
            before = handler.wire.pending_output()
            resume(session)
            rendered.append(handler.wire.pending_output() - before)

        monkeypatch.setattr(Session, "resume", measured_resume)
        client.send_method(1, commands.Basic.Consume(queue="backlog", no_ack=True))
        await ours.send_all(client.data_to_send())
        queue = node.broker.vhosts["/"].queues["backlog"]
        while queue.ready:
            await ours.receive_some()
    # The backlog (about 4 MB of frames) went out in many resumes, none over the slice by
    # more than the delivery that crossed it.
    assert len(rendered) > HIGH_WATER // RESUME_SLICE
    assert max(rendered) <= RESUME_SLICE + 1024
