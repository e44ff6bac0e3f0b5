"""A TCP proxy for fault injection: network failures on demand, on loopback. `amq-sim validate`
puts one between every two nodes to cut links and partition the federation, and the tests use
it to break single connections.

Usage::

    proxy = TcpProxy("127.0.0.1", node.port)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(proxy.serve)   # listening on 127.0.0.1:port
        ...                                       # connect to the proxy, not the node
        proxy.cut()        # silence: bytes are dropped both ways, sockets stay open (half-open)
        proxy.partition()  # the same, and new connections wait, unread, until restore()
        proxy.restore()    # forward again (bytes dropped meanwhile are lost for good)
        proxy.close_all()  # drop every proxied connection, as a dead link would
        proxy.sever()      # close_all, and close new connections at once until restore()
        proxy.heartbeats   # AMQP heartbeat frames seen each way ("to_target", "from_target"),
                           # dropped ones included: what idle connections are saying
        nursery.cancel_scope.cancel()
"""

from __future__ import annotations

import trio

RECEIVE_SIZE = 64 * 1024
#: An AMQP 0-9-1 heartbeat frame (type 8, channel 0, empty payload, frame end).
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"


class TcpProxy:
    """Forwards every connection made to it to (target_host, target_port).

    While cut, what either side sends is read and dropped, and an EOF from either side is not
    passed on: each end sees a live socket that has gone quiet, which is exactly what a
    half-open TCP connection (a pulled cable, a silent firewall) looks like, and what only
    heartbeats detect.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self.connections = 0  # accepted so far
        #: Heartbeat frames read so far, per direction: "to_target" (client to node) and
        #: "from_target". Counted in each read, so meaningful on an idle connection only.
        self.heartbeats = {"to_target": 0, "from_target": 0}
        self._cut = False
        self._severed = False
        #: Set while partitioned: new connections wait for it.
        self._held: trio.Event | None = None
        self._scopes: set[trio.CancelScope] = set()

    def cut(self) -> None:
        """Drop all traffic silently from now on, keeping every socket open."""
        self._cut = True

    def partition(self) -> None:
        """A network partition: what flows on every connection is dropped silently (only
        heartbeats tell), and new connections wait, their bytes unread, until `restore` (as a
        connect attempt into a partition waits for its SYN to get through)."""
        self._cut = True
        self._held = trio.Event()

    def restore(self) -> None:
        """Forward traffic again, accept connections again after `sever`, and let those a
        partition held through."""
        self._cut = False
        self._severed = False
        if self._held is not None:
            self._held.set()
            self._held = None

    def sever(self) -> None:
        """A cable cut both ends notice: close every connection, and every new one at once
        (a retrying client sees its connection refused) until `restore`."""
        self._severed = True
        self.close_all()

    def close_all(self) -> None:
        """Close both sockets of every proxied connection (new connections are still accepted)."""
        for scope in self._scopes:
            scope.cancel()

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 (a free port) until cancelled; started() hands back the port."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            await trio.serve_listeners(self._proxy, listeners, handler_nursery=nursery)

    async def _proxy(self, client: trio.SocketStream) -> None:
        self.connections += 1
        if self._severed:
            await trio.aclose_forcefully(client)
            return
        if self._held is not None:
            await self._held.wait()
        try:
            server = await trio.open_tcp_stream(self.target_host, self.target_port)
        except OSError:
            await trio.aclose_forcefully(client)
            return
        scope = trio.CancelScope()
        self._scopes.add(scope)
        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, client, server, "to_target")
                    nursery.start_soon(self._pump, server, client, "from_target")
        finally:
            self._scopes.discard(scope)
            await trio.aclose_forcefully(client)
            await trio.aclose_forcefully(server)

    async def _pump(self, source: trio.SocketStream, sink: trio.SocketStream, direction: str) -> None:
        """Copy one direction; an EOF or error ends both directions unless the proxy is cut."""
        try:
            while data := await source.receive_some(RECEIVE_SIZE):
                self.heartbeats[direction] += data.count(HEARTBEAT_FRAME)
                if not self._cut:
                    await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        if self._cut:
            await trio.sleep_forever()  # keep the other end open and quiet
        await trio.aclose_forcefully(sink)
