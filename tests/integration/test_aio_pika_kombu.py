"""The node as aio-pika (asyncio) and kombu (py-amqp, what Celery uses) see it."""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
import kombu
import pytest
from pamqp import commands

from tests.nodes import NodeProcess


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_aio_pika_confirms_consume_and_qos(shared_node: NodeProcess) -> None:
    async def scenario() -> list[bytes]:
        connection = await aio_pika.connect_robust(shared_node.url())
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.set_qos(prefetch_count=10)
            queue = await channel.declare_queue(unique("aio"), durable=True)
            for i in range(50):
                confirmation = await channel.default_exchange.publish(
                    aio_pika.Message(str(i).encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=queue.name,
                )
                assert isinstance(confirmation, commands.Basic.Ack)
            received = []
            async with queue.iterator() as messages:
                async for message in messages:
                    async with message.process():
                        received.append(message.body)
                    if len(received) == 50:
                        break
            await queue.delete()
            return received

    received = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert received == [str(i).encode() for i in range(50)]


def test_aio_pika_mandatory_return(shared_node: NodeProcess) -> None:
    async def scenario() -> None:
        connection = await aio_pika.connect(shared_node.url())
        async with connection:
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            with pytest.raises(aio_pika.exceptions.DeliveryError) as refused:
                await channel.default_exchange.publish(
                    aio_pika.Message(b"nowhere"), routing_key=unique("absent"), mandatory=True
                )
            assert refused.value.frame.reply_code == 312

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_aio_pika_topic_exchange_and_nack_requeue(shared_node: NodeProcess) -> None:
    async def scenario() -> tuple[bool, bool]:
        connection = await aio_pika.connect(shared_node.url())
        async with connection:
            channel = await connection.channel()
            exchange = await channel.declare_exchange(unique("aio-topic"), aio_pika.ExchangeType.TOPIC)
            queue = await channel.declare_queue(exclusive=True)
            await queue.bind(exchange, "orders.*.created")
            await exchange.publish(aio_pika.Message(b"order"), routing_key="orders.eu.created")
            first = await queue.get(timeout=5)
            await first.nack(requeue=True)
            second = await queue.get(timeout=5)
            await second.ack()
            return first.redelivered, second.redelivered

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == (False, True)


def test_kombu_producer_consumer(shared_node: NodeProcess) -> None:
    exchange = kombu.Exchange(unique("kombu"), type="direct", durable=True)
    queue = kombu.Queue(unique("kombu-q"), exchange, routing_key="task", durable=True)
    received: list[dict] = []
    with kombu.Connection(shared_node.url(vhost="/"), connect_timeout=5) as connection:
        with connection.Producer() as producer:
            for i in range(5):
                producer.publish(
                    {"task": "add", "args": [i, i]},
                    exchange=exchange,
                    routing_key="task",
                    declare=[queue],
                    serializer="json",
                    delivery_mode=2,
                )

        def on_message(body: dict, message: kombu.Message) -> None:
            received.append(body)
            message.ack()

        with connection.Consumer(queue, callbacks=[on_message], accept=["json"]):
            while len(received) < 5:
                connection.drain_events(timeout=5)
    assert [m["args"] for m in received] == [[i, i] for i in range(5)]


def test_kombu_simple_queue_celery_style_names(shared_node: NodeProcess) -> None:
    """Celery's pidbox queues carry '@' in their names; the node must accept them like RabbitMQ."""
    name = f"celery@{uuid.uuid4().hex[:6]}.celery.pidbox"
    with kombu.Connection(shared_node.url(vhost="/"), connect_timeout=5) as connection:
        simple = connection.SimpleQueue(name)
        simple.put({"ping": 1})
        message = simple.get(timeout=5)
        assert message.payload == {"ping": 1}
        message.ack()
        simple.consumer.cancel()
        simple.queue.delete()
        simple.close()
