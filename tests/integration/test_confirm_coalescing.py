"""Publisher confirms are coalesced as RabbitMQ does: publishes confirmed at once get one
Basic.Ack with multiple=true (a client test provokes multi-acks with 640 quick publishes)."""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
from pamqp import commands, frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from tests.nodes import NodeProcess
from tests.rawclient import RawClient

PUBLISHES = 640


def test_640_quick_transient_publishes_get_multiple_acks(shared_node: NodeProcess) -> None:
    queue = f"coalesce-{uuid.uuid4().hex[:8]}"
    client = RawClient(shared_node.port)
    try:
        client.handshake()
        client.open_channel()
        client.call(commands.Queue.Declare(queue=queue, exclusive=True))
        assert isinstance(client.call(commands.Confirm.Select()), commands.Confirm.SelectOk)
        one = (
            frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1)
            + frame.marshal(ContentHeader(body_size=1), 1)
            + frame.marshal(ContentBody(b"x"), 1)
        )
        client.send(one * PUBLISHES)
        acks = []
        while not acks or acks[-1].delivery_tag < PUBLISHES:
            _, ack = client.read_frame()
            assert isinstance(ack, commands.Basic.Ack), ack
            acks.append(ack)
        assert any(ack.multiple for ack in acks)
        assert len(acks) < PUBLISHES
        tags = [ack.delivery_tag for ack in acks]
        assert tags == sorted(set(tags))  # in order, each publish confirmed once
        assert client.call(commands.Queue.Declare(queue=queue, passive=True)).message_count == PUBLISHES
    finally:
        client.close()


def test_aio_pika_gets_every_one_of_640_concurrent_publishes_confirmed(shared_node: NodeProcess) -> None:
    async def main() -> None:
        connection = await aio_pika.connect(shared_node.url())
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            queue = await channel.declare_queue("", exclusive=True)
            await asyncio.wait_for(
                asyncio.gather(
                    *(
                        channel.default_exchange.publish(aio_pika.Message(b"%d" % i), queue.name)
                        for i in range(PUBLISHES)
                    )
                ),
                timeout=30,
            )
            declared = await channel.declare_queue(queue.name, passive=True)
            assert declared.declaration_result.message_count == PUBLISHES

    asyncio.run(main())
