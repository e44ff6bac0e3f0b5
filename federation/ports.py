"""What links, routes, federations and the management client use of an AMQP client connection
and its channels: `PeerConnection` and `PeerChannel`.

`federation.client`'s `Connection` and `Channel` provide them (mypy checks it where
`client.connect` is passed as a `Connect`); unit tests pass fakes that do too. Nothing here
runs: these are `typing.Protocol`s, and the modules that use them import no client, so the
client can change its insides (its pump, its buffers) without touching its users.

Only what the users call is listed. Add a member here when a user needs one, never a private one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from pamqp import base

from gateway.wire import Content, Negotiated, events

#: A message for one of our consumers, as a channel's `deliveries()` yields it.
Delivery = events.MessageDelivered


class PeerChannel(Protocol):
    """An open channel of a client connection to a peer."""

    #: Called with each Return (a mandatory publish nobody took); None: returns are dropped.
    on_return: Callable[[events.MessageReturned], None] | None

    async def call(self, method: base.Frame) -> Any:
        """Send a method and return the server's reply (a pamqp method, whose class depends on
        the method sent: hence Any); None for a nowait method.

        Error handling: federation.errors.ChannelClosedByPeer if the server refuses it;
        trio.TooSlowError after the connection's timeout."""
        ...

    async def qos(self, prefetch_count: int, prefetch_size: int = 0, global_: bool = False) -> None: ...

    async def confirm_select(self) -> None:
        """Publisher confirms: from now on `publish` returns sequence numbers."""
        ...

    async def consume(
        self,
        queue: str,
        *,
        no_ack: bool = False,
        consumer_tag: str = "",
        exclusive: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> str:
        """Start a consumer (its messages come out of `deliveries()`); its tag."""
        ...

    async def close(self) -> None: ...

    def publish(
        self, exchange: str, routing_key: str, content: Content, mandatory: bool = False
    ) -> int | None:
        """Queue a publish without waiting; its sequence number once confirms are on."""
        ...

    def ack(self, delivery_tag: int, multiple: bool = False) -> None: ...

    def deliveries(self) -> AsyncIterator[Delivery]:
        """The channel's deliveries in order (federation.errors.ConsumerCancelled where the
        server cancels a consumer)."""
        ...

    async def wait_for_confirms(self) -> None: ...

    async def wait_for_confirm(self, seq: int) -> None: ...

    def confirmed(self, seq: int) -> bool:
        """Whether publish `seq` is settled, without waiting (PublishNacked if it was nacked)."""
        ...


class PeerConnection(Protocol):
    """An open client connection to a peer (a node, or any AMQP 0-9-1 broker)."""

    @property
    def negotiated(self) -> Negotiated: ...

    @property
    def server_properties(self) -> dict[str, Any]: ...

    async def channel(self, *, buffer: int = ...) -> PeerChannel:
        """Open a channel; `buffer` bounds its unread deliveries."""
        ...


#: Opens a connection: `federation.client.connect(address, **options)`, or a fake in tests.
Connect = Callable[..., AbstractAsyncContextManager[PeerConnection]]
