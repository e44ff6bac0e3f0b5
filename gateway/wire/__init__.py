"""Sans-I/O AMQP 0-9-1: frames in, events out; calls in, frames out. No sockets, no Trio.

`ServerConnection` is the server side of one connection; `frames` is its codec, `states` its
state tables, `events` what it reports, `content` the message content it carries.
"""

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
    default_server_properties as default_server_properties,
)
from gateway.wire.content import Content as Content
from gateway.wire.errors import AMQPError as AMQPError
from gateway.wire.events import (
    NEED_DATA as NEED_DATA,
)
from gateway.wire.events import (
    ChannelClosed as ChannelClosed,
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
    ConnectionCloseRequested as ConnectionCloseRequested,
)
from gateway.wire.events import (
    Event as Event,
)
from gateway.wire.events import (
    HeartbeatReceived as HeartbeatReceived,
)
from gateway.wire.events import (
    LoginRequested as LoginRequested,
)
from gateway.wire.events import (
    MessageReceived as MessageReceived,
)
from gateway.wire.events import (
    MethodReceived as MethodReceived,
)
from gateway.wire.events import (
    ProtocolErrorOccurred as ProtocolErrorOccurred,
)
from gateway.wire.events import (
    ProtocolHeaderRejected as ProtocolHeaderRejected,
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
    "ChannelClosed",
    "ChannelCloseRequested",
    "ChannelOpened",
    "ChannelState",
    "ConnectionClosed",
    "ConnectionCloseRequested",
    "ConnectionState",
    "Content",
    "Event",
    "HeartbeatReceived",
    "LocalProtocolError",
    "LoginRequested",
    "MessageReceived",
    "MethodReceived",
    "Negotiated",
    "ProtocolErrorOccurred",
    "ProtocolHeaderRejected",
    "ServerConnection",
    "VhostRequested",
    "default_server_properties",
    "make_method",
]
