"""A node serves a connection over any byte stream plus a peer name, not only a TCP socket:
here a trio memory stream pair, the way a TLS or WebSocket stream will plug in."""

from __future__ import annotations

import trio
import trio.testing
from pamqp import commands

from gateway.node import Node
from gateway.security import UsersDB
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
