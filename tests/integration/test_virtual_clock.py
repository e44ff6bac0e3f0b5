"""A node on Trio's virtual clock: TTL expiry and heartbeats are deadlines of one injectable
clock, so these tests prove them in virtual seconds (trio.testing.MockClock jumps while every
task waits) with no wall-clock wait, over a memory stream pair."""

from __future__ import annotations

import math

import trio
import trio.testing
from pamqp import commands

from gateway.node import Node
from gateway.security import UsersDB
from gateway.server import Limits
from gateway.wire import Content
from gateway.wire.client import ClientConnection
from gateway.wire.events import NEED_DATA, ChannelOpened, ConnectionOpened, Event, MethodReceived

HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"


async def until(stream: trio.abc.Stream, client: ClientConnection, kind: type[Event]) -> Event:
    """Send what the client queued and read until it reports an event of `kind`."""
    while True:
        while (event := client.next_event()) is not NEED_DATA:
            if isinstance(event, kind):
                return event
        data = client.data_to_send()
        if data:
            await stream.send_all(data)
        client.receive_data(bytes(await stream.receive_some()))


async def open_connection(
    node: Node, nursery: trio.Nursery, clock: trio.testing.MockClock, heartbeat: int
) -> tuple[trio.abc.Stream, ClientConnection, trio.Event]:
    """A client connection, opened with the clock held: the password check runs in a worker
    thread, which autojump would take for idleness (and jump past the handshake timeout).
    The event is set once the node has finished serving it."""
    ours, theirs = trio.testing.memory_stream_pair()
    served = trio.Event()

    async def serve() -> None:
        await node.serve_connection(theirs, "in-memory peer", "127.0.0.1")
        served.set()

    nursery.start_soon(serve)
    client = ClientConnection("guest", "guest", "/", heartbeat=heartbeat)
    clock.autojump_threshold = math.inf
    try:
        await until(ours, client, ConnectionOpened)
    finally:
        clock.autojump_threshold = 0
    return ours, client, served


async def test_a_message_ttl_expires_on_the_virtual_clock(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """The node's timer expires a message when its TTL falls due on the node's clock: not
    before, and without any client asking."""
    node = Node(name="virtual", users=UsersDB.default(), clock=trio.current_time)
    await nursery.start(node.serve, "127.0.0.1", 0)  # the node's timers run in serve()
    ours, client, _ = await open_connection(node, nursery, autojump_clock, heartbeat=0)
    client.open_channel(1)
    await until(ours, client, ChannelOpened)
    client.send_method(1, commands.Queue.Declare(queue="ttl", arguments={"x-message-ttl": 60_000}))
    await until(ours, client, MethodReceived)
    client.send_publish(1, "", "ttl", False, Content.from_properties(commands.Basic.Properties(), b"x"))
    await ours.send_all(client.data_to_send())
    queue = node.broker.vhosts["/"].queues["ttl"]
    while not queue.ready:
        await trio.sleep(0)
    published = trio.current_time()
    await trio.sleep_until(published + 59.9)
    assert len(queue.ready) == 1
    await trio.sleep_until(published + 60.1)
    assert len(queue.ready) == 0
    nursery.cancel_scope.cancel()


async def test_a_silent_client_is_dropped_after_two_heartbeat_intervals(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """The node sends a heartbeat after half an interval without sending, and drops a client
    that sent nothing for two intervals (virtual seconds, measured on Trio's clock)."""
    node = Node(name="virtual", users=UsersDB.default(), limits=Limits(heartbeat=10))
    ours, _, served = await open_connection(node, nursery, autojump_clock, heartbeat=10)
    opened = trio.current_time()
    received = b""
    with trio.fail_after(60):
        while data := await ours.receive_some():
            received += data
    dropped = trio.current_time() - opened
    assert 20.0 <= dropped < 20.1
    assert received == HEARTBEAT_FRAME * 3  # at 5, 10 and 15 s; at 20 s the client is dropped
    await served.wait()
    assert node.handlers == set()
