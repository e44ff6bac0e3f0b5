"""federation.client against real node processes: round trips, pipelining with confirms, and
every way a connection can fail (refused, wrong password, killed node, silent network)."""

from __future__ import annotations

import uuid

import pytest
import trio
from pamqp import commands

from federation.address import BrokerAddress
from federation.client import (
    AuthenticationRefused,
    ChannelClosedByPeer,
    ClientError,
    ConnectFailed,
    Connection,
    ConnectionLost,
    ConsumerCancelled,
    PublishNacked,
    connect,
)
from gateway.wire import ClientState, Content, MessageReturned
from tests.nodes import NodeProcess
from topology.processes import free_port
from topology.proxy import TcpProxy

PERSISTENT = commands.Basic.Properties(delivery_mode=2, content_type="text/plain", headers={"n": 1})


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def address(node: NodeProcess, credentials: str = "") -> BrokerAddress:
    return BrokerAddress.parse(f"{credentials}127.0.0.1:{node.port}")


async def test_declare_publish_consume_ack_round_trip(shared_node: NodeProcess) -> None:
    queue = unique("fc-round-trip")
    with trio.fail_after(20):
        async with connect(address(shared_node), client_properties={"connection_name": "test"}) as conn:
            assert conn.server_properties["product"] == "amq-gateway"
            channel = await conn.channel()
            declare_ok = await channel.call(commands.Queue.Declare(queue=queue, exclusive=True))
            assert (declare_ok.queue, declare_ok.message_count) == (queue, 0)
            await channel.confirm_select()
            sent = [Content.from_properties(PERSISTENT, f"message {i}".encode()) for i in range(3)]
            seqs = [channel.publish("", queue, content) for content in sent]
            assert seqs == [1, 2, 3]
            await channel.wait_for_confirm(2)
            await channel.wait_for_confirms()

            await channel.qos(prefetch_count=10)
            tag = await channel.consume(queue)
            received = []
            async for delivery in channel.deliveries():
                received.append(delivery)
                channel.ack(delivery.delivery_tag)
                if len(received) == 3:
                    break
            assert [d.content.body for d in received] == [c.body for c in sent]
            assert [d.content.header for d in received] == [c.header for c in sent]  # byte-exact
            assert {(d.consumer_tag, d.exchange, d.routing_key, d.redelivered) for d in received} == {
                (tag, "", queue, False)
            }
            assert received[0].content.headers == {"n": 1}
            await channel.call(commands.Basic.Cancel(tag))
            # Acked, so nothing is left; get() says so.
            assert await channel.get(queue) is None
            await channel.close()


async def test_get_and_mandatory_return(shared_node: NodeProcess) -> None:
    queue = unique("fc-get")
    returned: list[MessageReturned] = []
    with trio.fail_after(20):
        async with connect(address(shared_node)) as conn:
            channel = await conn.channel()
            channel.on_return = returned.append
            await channel.call(commands.Queue.Declare(queue=queue, auto_delete=True))
            await channel.confirm_select()
            channel.publish("", queue, Content.from_properties(None, b"got"))
            channel.publish("amq.direct", "nobody-binds-this", Content.from_properties(None, b"lost"), True)
            await channel.wait_for_confirms()  # the Return precedes the unroutable's ack
            got = await channel.get(queue, no_ack=True)
            assert got is not None and (got.content.body, got.message_count) == (b"got", 0)
    assert [(r.reply_code, r.reply_text, r.routing_key, r.content.body) for r in returned] == [
        (312, "NO_ROUTE", "nobody-binds-this", b"lost")
    ]


async def test_ten_thousand_pipelined_publishes_with_confirms(shared_node: NodeProcess) -> None:
    queue = unique("fc-pipelined")
    count = 10_000
    with trio.fail_after(60):
        async with connect(address(shared_node)) as conn:
            publisher = await conn.channel()
            await publisher.call(commands.Queue.Declare(queue=queue, auto_delete=True))
            await publisher.confirm_select()
            for i in range(count):
                publisher.publish("", queue, Content.from_properties(None, i.to_bytes(4, "big")))
            await publisher.wait_for_confirms()

            consumer = await conn.channel(buffer=100)
            await consumer.qos(prefetch_count=100)  # within the buffer: see federation.client
            await consumer.consume(queue)
            expected = 0
            async for delivery in consumer.deliveries():
                assert int.from_bytes(delivery.content.body, "big") == expected
                expected += 1
                if expected % 50 == 0 or expected == count:
                    consumer.ack(delivery.delivery_tag, multiple=True)
                if expected == count:
                    break
            declare_ok = await publisher.call(commands.Queue.Declare(queue=queue, passive=True))
            assert declare_ok.message_count == 0


async def reader_stalls(conn: Connection) -> None:
    """Until the connection's reader waits for room in a full channel buffer (caller bounds it)."""
    while not conn.reading_paused:
        await trio.sleep(0.01)


async def test_a_slow_consumer_loses_nothing_with_a_tiny_buffer(shared_node: NodeProcess) -> None:
    """No qos and a 5-delivery buffer: the reader waits for the application instead of
    buffering, and every message still arrives, in order, once the application reads."""
    queue = unique("fc-slow")
    with trio.fail_after(30):
        async with connect(address(shared_node)) as conn:
            channel = await conn.channel(buffer=5)
            await channel.call(commands.Queue.Declare(queue=queue, auto_delete=True))
            for i in range(500):
                channel.publish("", queue, Content.from_properties(None, b"%d" % i))
            await channel.consume(queue, no_ack=True)
            await reader_stalls(conn)
            bodies = []
            async for delivery in channel.deliveries():
                bodies.append(delivery.content.body)
                if len(bodies) == 500:
                    break
            assert bodies == [b"%d" % i for i in range(500)]


async def test_channel_error_raises_channel_closed_by_peer(shared_node: NodeProcess) -> None:
    with trio.fail_after(20):
        async with connect(address(shared_node)) as conn:
            channel = await conn.channel()
            with pytest.raises(ChannelClosedByPeer) as caught:
                await channel.call(commands.Queue.Declare(queue=unique("fc-missing"), passive=True))
            assert caught.value.reply_code == 404
            assert "NOT_FOUND" in caught.value.reply_text
            with pytest.raises(ChannelClosedByPeer):
                channel.publish("", "q", Content.from_properties(None, b""))
            other = await conn.channel()  # the connection is fine
            await other.call(commands.Exchange.Declare(exchange="amq.direct", passive=True))


async def test_wrong_password_is_authentication_refused(shared_node: NodeProcess) -> None:
    with trio.fail_after(20), pytest.raises(AuthenticationRefused) as caught:
        async with connect(address(shared_node, "guest/wrong@")):
            pytest.fail("connected with a wrong password")
    assert str(caught.value).startswith(
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN"
    )


async def test_refused_port_is_connect_failed() -> None:
    with trio.fail_after(20), pytest.raises(ConnectFailed) as caught:
        async with connect(BrokerAddress("127.0.0.1", free_port())):
            pytest.fail("connected to a closed port")
    assert str(caught.value) == "Connection refused"


async def test_unknown_vhost_is_closed_by_peer(shared_node: NodeProcess) -> None:
    with trio.fail_after(20), pytest.raises(ClientError) as caught:
        async with connect(address(shared_node), vhost="no-such-vhost"):
            pytest.fail("opened a missing vhost")
    assert "no-such-vhost" in str(caught.value)


async def test_a_killed_node_is_connection_lost(fresh_node: NodeProcess) -> None:
    with trio.fail_after(20), pytest.raises(ConnectionLost) as caught:
        async with connect(address(fresh_node)) as conn:
            channel = await conn.channel()
            await channel.call(commands.Queue.Declare(queue="q"))
            fresh_node.kill()
            await trio.sleep_forever()  # the connection's failure cancels the body
    assert str(caught.value).startswith(f"connection to 127.0.0.1:{fresh_node.port} lost")


async def test_silent_network_is_detected_by_heartbeats(shared_node: NodeProcess) -> None:
    proxy = TcpProxy("127.0.0.1", shared_node.port)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(proxy.serve)
        sent_at_cut: int | None = None
        with trio.fail_after(20), pytest.raises(ConnectionLost) as caught:
            async with connect(BrokerAddress("127.0.0.1", port), heartbeat=1) as conn:
                channel = await conn.channel()
                await channel.call(commands.Queue.Declare(queue=unique("fc-heartbeat"), auto_delete=True))
                # Idle for more than two intervals (the client beats every 0.5 s, the node
                # every 1 s), and the heartbeats alone keep it alive: the proxy counts them.
                while proxy.heartbeats["to_target"] < 5 or proxy.heartbeats["from_target"] < 3:
                    await trio.sleep(0.05)
                proxy.cut()
                sent_at_cut = proxy.heartbeats["to_target"]
                await trio.sleep_forever()
        assert sent_at_cut is not None, f"lost before the cut: {caught.value}"
        assert str(caught.value) == f"missed heartbeats from 127.0.0.1:{port}"
        # Two intervals of silence since the node's last heartbeat (up to one interval before
        # the cut): the client gives up after a few of its own beats into the silence, counted
        # in beats rather than seconds.
        assert 1 <= proxy.heartbeats["to_target"] - sent_at_cut <= 6
        nursery.cancel_scope.cancel()


async def test_proxy_close_all_is_connection_lost(shared_node: NodeProcess) -> None:
    proxy = TcpProxy("127.0.0.1", shared_node.port)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(proxy.serve)
        with trio.fail_after(20), pytest.raises(ConnectionLost):
            async with connect(BrokerAddress("127.0.0.1", port)) as conn:
                channel = await conn.channel()
                proxy.close_all()
                async for _ in channel.deliveries():
                    pass
        assert proxy.connections == 1
        nursery.cancel_scope.cancel()


async def test_cancelled_body_still_closes_cleanly(shared_node: NodeProcess) -> None:
    with trio.fail_after(20):
        with trio.move_on_after(0.5) as scope:
            async with connect(address(shared_node)) as conn:
                await conn.channel()
                await trio.sleep_forever()
        assert scope.cancelled_caught
    # The Close went out and its Close-Ok came back although the body was cancelled.
    assert conn._wire.state is ClientState.CLOSED
    with pytest.raises(ClientError):
        await conn.channel()


async def test_nacks_raise_publish_nacked(shared_node: NodeProcess) -> None:
    queue = unique("fc-nack")
    arguments = {"x-max-length": 1, "x-overflow": "reject-publish"}
    with trio.fail_after(20):
        async with connect(address(shared_node)) as conn:
            channel = await conn.channel()
            await channel.call(commands.Queue.Declare(queue=queue, exclusive=True, arguments=arguments))
            await channel.confirm_select()
            first = channel.publish("", queue, Content.from_properties(None, b"fits"))
            second = channel.publish("", queue, Content.from_properties(None, b"refused"))
            await channel.wait_for_confirm(first)
            with pytest.raises(PublishNacked) as caught:
                await channel.wait_for_confirm(second)
            assert caught.value.seqs == [second]
            third = channel.publish("", queue, Content.from_properties(None, b"refused too"))
            with pytest.raises(PublishNacked) as caught:
                await channel.wait_for_confirms()
            assert caught.value.seqs == [third]
            await channel.wait_for_confirms()  # reported once


async def test_deleted_queue_ends_deliveries_with_consumer_cancelled(shared_node: NodeProcess) -> None:
    queue = unique("fc-cancel")
    with trio.fail_after(20):
        async with connect(address(shared_node)) as conn:
            channel = await conn.channel()
            await channel.call(commands.Queue.Declare(queue=queue))
            channel.publish("", queue, Content.from_properties(None, b"before"))
            tag = await channel.consume(queue, no_ack=True)
            other = await conn.channel()
            iterator = channel.deliveries()
            assert (await iterator.__anext__()).content.body == b"before"
            await other.call(commands.Queue.Delete(queue=queue))
            with pytest.raises(ConsumerCancelled) as caught:
                await iterator.__anext__()
            assert caught.value.consumer_tag == tag


async def test_closing_a_stalled_channel_frees_the_reader(shared_node: NodeProcess) -> None:
    """The reader waits for room in a full channel; closing that channel must release it, or
    the Close-Ok (and everything else on the connection) could never be read."""
    queue = unique("fc-stalled")
    with trio.fail_after(20):
        async with connect(address(shared_node)) as conn:
            stalled = await conn.channel(buffer=1)
            await stalled.call(commands.Queue.Declare(queue=queue, auto_delete=True))
            for _ in range(50):
                stalled.publish("", queue, Content.from_properties(None, b"m"))
            await stalled.consume(queue)
            await reader_stalls(conn)
            with trio.fail_after(2):
                await stalled.close()
            other = await conn.channel()
            declare_ok = await other.call(commands.Queue.Declare(queue=unique("fc-after"), exclusive=True))
            assert declare_ok.message_count == 0
            with pytest.raises(ClientError, match="is closed"):
                stalled.ack(1)
