"""Sans-I/O AMQP 0-9-1: frames in, events out; calls in, frames out. No sockets, no Trio.

`ServerConnection` is the server side of one connection and `ClientConnection` the client
side (federation's); `frames` is their shared codec, `states` the server's state tables,
`events` what they report, `content` the message content they carry.

It imports pamqp and the standard library only (tests/test_layers.py checks it): the broker,
the Trio adapter and federation's client all build on it.
"""

from gateway.wire.client import (
    ClientConnection as ClientConnection,
)
from gateway.wire.client import (
    ClientState as ClientState,
)
from gateway.wire.connection import (
    LocalProtocolError as LocalProtocolError,
)
from gateway.wire.connection import (
    Negotiated as Negotiated,
)
from gateway.wire.connection import (
    ServerConnection as ServerConnection,
)
from gateway.wire.connection import (
    server_properties as server_properties,
)
from gateway.wire.content import Content as Content
from gateway.wire.errors import AMQPError as AMQPError
from gateway.wire.events import (
    NEED_DATA as NEED_DATA,
)
from gateway.wire.events import (
    Acked as Acked,
)
from gateway.wire.events import (
    ChannelClosed as ChannelClosed,
)
from gateway.wire.events import (
    ChannelClosedByPeer as ChannelClosedByPeer,
)
from gateway.wire.events import (
    ChannelCloseRequested as ChannelCloseRequested,
)
from gateway.wire.events import (
    ChannelOpened as ChannelOpened,
)
from gateway.wire.events import (
    ConnectionClosed as ConnectionClosed,
)
from gateway.wire.events import (
    ConnectionClosedByPeer as ConnectionClosedByPeer,
)
from gateway.wire.events import (
    ConnectionCloseRequested as ConnectionCloseRequested,
)
from gateway.wire.events import (
    ConnectionOpened as ConnectionOpened,
)
from gateway.wire.events import (
    Event as Event,
)
from gateway.wire.events import (
    HeartbeatReceived as HeartbeatReceived,
)
from gateway.wire.events import (
    LoginRefused as LoginRefused,
)
from gateway.wire.events import (
    LoginRequested as LoginRequested,
)
from gateway.wire.events import (
    MessageDelivered as MessageDelivered,
)
from gateway.wire.events import (
    MessageGot as MessageGot,
)
from gateway.wire.events import (
    MessageReceived as MessageReceived,
)
from gateway.wire.events import (
    MessageReturned as MessageReturned,
)
from gateway.wire.events import (
    MethodReceived as MethodReceived,
)
from gateway.wire.events import (
    Nacked as Nacked,
)
from gateway.wire.events import (
    ProtocolErrorOccurred as ProtocolErrorOccurred,
)
from gateway.wire.events import (
    ProtocolHeaderRejected as ProtocolHeaderRejected,
)
from gateway.wire.events import (
    SecretUpdateRequested as SecretUpdateRequested,
)
from gateway.wire.events import (
    VhostRequested as VhostRequested,
)
from gateway.wire.frames import make_method as make_method
from gateway.wire.states import ChannelState as ChannelState
from gateway.wire.states import ConnectionState as ConnectionState

__all__ = [
    "AMQPError",
    "NEED_DATA",
    "Acked",
    "ChannelCloseRequested",
    "ChannelClosed",
    "ChannelClosedByPeer",
    "ChannelOpened",
    "ChannelState",
    "ClientConnection",
    "ClientState",
    "ConnectionCloseRequested",
    "ConnectionClosed",
    "ConnectionClosedByPeer",
    "ConnectionOpened",
    "ConnectionState",
    "Content",
    "Event",
    "HeartbeatReceived",
    "LocalProtocolError",
    "LoginRefused",
    "LoginRequested",
    "MessageDelivered",
    "MessageGot",
    "MessageReceived",
    "MessageReturned",
    "MethodReceived",
    "Nacked",
    "Negotiated",
    "ProtocolErrorOccurred",
    "ProtocolHeaderRejected",
    "ServerConnection",
    "SecretUpdateRequested",
    "VhostRequested",
    "make_method",
    "server_properties",
]
