"""Queue.Unbind and Exchange.Unbind are idempotent, as in RabbitMQ: cleanup code that unbinds
after the queue, the exchange or the binding is gone gets Unbind-Ok, not a closed channel."""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
from pamqp import commands

from tests.nodes import NodeProcess
from tests.rawclient import RawClient


def test_unbinding_what_no_longer_exists_answers_unbind_ok(shared_node: NodeProcess) -> None:
    tag = uuid.uuid4().hex[:8]
    queue, exchange, other = f"unbind-q-{tag}", f"unbind-x-{tag}", f"unbind-y-{tag}"
    client = RawClient(shared_node.port)
    try:
        client.handshake()
        client.open_channel()
        client.call(commands.Queue.Declare(queue=queue, exclusive=True))
        client.call(commands.Exchange.Declare(exchange=exchange, exchange_type="direct"))
        client.call(commands.Exchange.Declare(exchange=other, exchange_type="direct"))
        client.call(commands.Queue.Bind(queue=queue, exchange=exchange, routing_key="k"))
        client.call(commands.Exchange.Bind(destination=other, source=exchange, routing_key="k"))
        for unbind, ok in (
            (commands.Queue.Unbind(queue=queue, exchange=exchange, routing_key="k"), commands.Queue.UnbindOk),
            (commands.Exchange.Unbind(destination=other, source=exchange, routing_key="k"),
             commands.Exchange.UnbindOk),
        ):  # fmt: skip
            for _ in range(2):  # the binding, then a binding that is gone
                reply = client.call(unbind)
                assert isinstance(reply, ok), reply
        client.call(commands.Exchange.Delete(exchange=exchange))
        client.call(commands.Queue.Delete(queue=queue))
        replies = [
            client.call(commands.Queue.Unbind(queue=queue, exchange=other, routing_key="k")),
            client.call(commands.Queue.Unbind(queue=f"{queue}-never", exchange=other, routing_key="k")),
            client.call(commands.Exchange.Unbind(destination=other, source=exchange, routing_key="k")),
            client.call(commands.Exchange.Unbind(destination=exchange, source=other, routing_key="k")),
        ]
        assert [type(reply) for reply in replies] == [
            commands.Queue.UnbindOk,
            commands.Queue.UnbindOk,
            commands.Exchange.UnbindOk,
            commands.Exchange.UnbindOk,
        ], replies
        client.call(commands.Exchange.Delete(exchange=other))
    finally:
        client.close()


def test_aio_pika_cleanup_unbinds_after_the_exchange_and_queue_are_gone(shared_node: NodeProcess) -> None:
    """aio-pika's cleanup order in RPC patterns and test teardowns: unbind after delete."""

    async def scenario() -> None:
        connection = await aio_pika.connect(shared_node.url())
        async with connection:
            channel = await connection.channel()
            exchange = await channel.declare_exchange(f"aio-unbind-{uuid.uuid4().hex[:8]}", auto_delete=True)
            queue = await channel.declare_queue("", exclusive=True)
            await queue.bind(exchange, "k")
            await exchange.delete()
            await queue.unbind(exchange, "k")  # Unbind-Ok, the channel stays open
            await queue.delete()
            await queue.unbind(exchange, "k")
            assert not channel.is_closed
            await channel.declare_queue("", exclusive=True)  # the channel still works

    asyncio.run(asyncio.wait_for(scenario(), 30))
