"""A mandatory publish on a federated exchange with publisher confirms, as pika's blocking
channel makes it: the parent's Return must reach the publisher before the ack, or
UnroutableError never fires. The node holds the confirm until the parent's verdict."""

from __future__ import annotations

from collections.abc import Callable

import pika
import pika.exceptions
import pytest
import trio

from tests.integration.test_federation_types import declare, federate_to, received, subscriber
from tests.nodes import NodeProcess


@pytest.mark.parametrize("kind", ["publisher", "locator"])
async def test_blocking_channel_sees_unroutable_error_for_a_parent_return(
    nodes: Callable[..., NodeProcess], kind: str
) -> None:
    parent, child = nodes("p"), nodes("c")
    exchange = f"fed.mandatory.{kind}"
    with trio.fail_after(30):
        await declare(exchange, "direct", parent, child)
        await federate_to(parent, (child,), exchange, kind)
        routed = await subscriber(parent, exchange, "routed", "on-parent")

    def publish_blocking() -> None:
        connection = pika.BlockingConnection(pika.URLParameters(child.url()))
        try:
            channel = connection.channel()
            channel.confirm_delivery()
            with pytest.raises(pika.exceptions.UnroutableError) as unroutable:
                channel.basic_publish(exchange, "nowhere", b"lost?", mandatory=True)
            (returned,) = unroutable.value.messages
            assert (returned.method.reply_code, returned.body) == (312, b"lost?")
            # Routable on the parent: confirmed once the parent confirmed it, nothing returned.
            channel.basic_publish(exchange, "routed", b"kept", mandatory=True)
        finally:
            connection.close()

    with trio.fail_after(30):
        await trio.to_thread.run_sync(publish_blocking)
        assert await received(parent, routed) == [b"kept"]
