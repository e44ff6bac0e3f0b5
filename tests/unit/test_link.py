"""Links against a fake peer, in virtual time (autojump_clock): retry schedules, states, routes.

The fake `connect` follows a script, one step per attempt (an exception to raise, HANG to never
answer, OK to connect); past the script's end every attempt connects. A fake connection can be
dropped, which raises ConnectionLost inside the link's `async with`, as the real client does when
its reader task fails. Waits go through events or virtual sleeps, never the wall clock.
"""

from __future__ import annotations

import itertools
import logging
import pickle
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import trio
import trio.testing

from federation.errors import (
    AuthenticationRefused,
    ChannelClosedByPeer,
    ClientError,
    ConnectFailed,
    ConnectionClosedByPeer,
    ConnectionLost,
)
from federation.link import CLOSE_TIMEOUT, Link, LinkState, node_name
from federation.timing import Backoff

#: Far beyond any schedule here; in virtual time a deadlock reaches it at once and fails the test.
GUARD = 100_000

OK = "ok"
HANG = "hang"
FINISH = "finish"


@dataclass(frozen=True)
class Address:
    """Stands in for federation.address.BrokerAddress: host, port, and str() as host:port."""

    host: str = "peer"
    port: int = 5673

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class History:
    """Things that happened, in order, and a way to wait until there are enough of them."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._changed = trio.Event()

    def add(self, item: Any) -> None:
        self.items.append(item)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, count: int) -> None:
        while len(self.items) < count:
            await self._changed.wait()

    def __len__(self) -> int:
        return len(self.items)


class FakeConnection:
    """What the link hands its routes; `drop()` breaks it as a failed reader task would."""

    def __init__(self, number: int) -> None:
        self.number = number
        #: The peer is the node "peer" (server properties product and cluster_name).
        self.server_properties = {"product": "amq-gateway", "cluster_name": "peer"}
        self.closed_cleanly = False
        self._dropped = trio.Event()
        self._error: Exception = ConnectionLost("")

    def drop(self, error: Exception | None = None) -> None:
        self._error = error or ConnectionLost("missed heartbeats")
        self._dropped.set()

    async def watch(self) -> None:
        await self._dropped.wait()
        raise self._error


class FakePeer:
    """The far end of the link: follows its script, records attempt times and connections."""

    def __init__(self, *script: Any, hang_on_close: bool = False) -> None:
        self.script = list(script)
        self.hang_on_close = hang_on_close
        self.attempts = History()
        self.connections = History()
        self.options: list[dict[str, Any]] = []

    @asynccontextmanager
    async def connect(self, address: Address, **options: Any) -> AsyncIterator[FakeConnection]:
        self.attempts.add(trio.current_time())
        self.options.append(options)
        await trio.sleep(0)
        step = self.script.pop(0) if self.script else OK
        if step == HANG:
            await trio.sleep_forever()
        if isinstance(step, BaseException):
            raise step
        connection = FakeConnection(len(self.connections))
        self.connections.add(connection)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(connection.watch)
            yield connection
            nursery.cancel_scope.cancel()
        if self.hang_on_close:
            await trio.sleep_forever()
        connection.closed_cleanly = True

    def times(self) -> list[float]:
        return list(self.attempts.items)


class FakeRoute:
    """A route following a script, one step per run: an exception to raise at once, a number of
    seconds to run before raising RuntimeError, or FINISH to return; then it runs until cancelled."""

    def __init__(self, name: str, *script: Any) -> None:
        self.name = name
        self.script = list(script)
        self.runs = History()
        # Connections it is running on now: a list, as a detached run may still be unwinding
        # when the route is attached again.
        self.active: list[FakeConnection] = []
        self.cancelled = 0

    async def run(self, connection: FakeConnection) -> None:
        self.runs.add((trio.current_time(), connection.number))
        step = self.script.pop(0) if self.script else None
        if isinstance(step, BaseException):
            raise step
        if step == FINISH:
            return
        self.active.append(connection)
        try:
            if step is None:
                await trio.sleep_forever()
            await trio.sleep(step)
            raise RuntimeError(f"{self.name} broke after {step} s")
        except trio.Cancelled:
            self.cancelled += 1
            raise
        finally:
            self.active.remove(connection)

    def connections(self) -> list[int]:
        return [number for _, number in self.runs.items]


def refused() -> ConnectFailed:
    return ConnectFailed("Connection refused")


def make_link(peer: FakePeer, **options: Any) -> Link:
    return Link(Address(), connect=peer.connect, **options)


@asynccontextmanager
async def running(link: Link) -> AsyncIterator[trio.Nursery]:
    """The link's run task in a nursery, closed on the way out, under the GUARD deadline."""
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            await nursery.start(link.run)
            yield nursery
            await link.close()


async def settle() -> None:
    """Let every task run until all are blocked, without moving the clock."""
    await trio.testing.wait_all_tasks_blocked()


def gaps(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in zip(times, times[1:], strict=False)]


# Backoff -------------------------------------------------------------------------------------


def schedule(backoff: Backoff, count: int) -> list[float]:
    return list(itertools.islice(backoff.delays(), count))


def test_backoff_doubles_from_2_to_64_then_stays() -> None:
    assert schedule(Backoff(), 10) == [2, 4, 8, 16, 32, 64, 64, 64, 64, 64]


def test_backoff_ceiling_need_not_be_a_power_of_two_of_first() -> None:
    assert schedule(Backoff(first=3, ceiling=10), 4) == [3, 6, 10, 10]


@pytest.mark.parametrize(("first", "ceiling"), [(0, 64), (-1, 64), (8, 4)])
def test_backoff_rejects_nonsense(first: float, ceiling: float) -> None:
    with pytest.raises(ValueError, match="0 < first <= ceiling"):
        Backoff(first=first, ceiling=ceiling)


# Errors --------------------------------------------------------------------------------------


def test_error_texts_are_what_link_list_shows() -> None:
    assert str(ConnectFailed("Connection refused")) == "Connection refused"
    closed = ConnectionClosedByPeer(320, "CONNECTION_FORCED - shutdown")
    assert str(closed) == "connection closed by peer: 320 CONNECTION_FORCED - shutdown"
    assert (closed.reply_code, closed.reply_text) == (320, "CONNECTION_FORCED - shutdown")
    assert (
        str(ChannelClosedByPeer(404, "NOT_FOUND - no queue 'q'"))
        == "channel closed by peer: 404 NOT_FOUND - no queue 'q'"
    )


def test_errors_share_a_base_but_auth_is_not_a_connect_failure() -> None:
    for cls in (ConnectFailed, AuthenticationRefused, ConnectionLost):
        assert issubclass(cls, ClientError)
    assert not issubclass(AuthenticationRefused, ConnectFailed)


def test_closed_by_peer_errors_pickle() -> None:
    copy = pickle.loads(pickle.dumps(ChannelClosedByPeer(406, "PRECONDITION_FAILED - x")))
    assert (type(copy), copy.reply_code, copy.reply_text) == (
        ChannelClosedByPeer,
        406,
        "PRECONDITION_FAILED - x",
    )


# Retry schedule ------------------------------------------------------------------------------


async def test_retries_at_2_4_8_16_32_64_then_every_64_s(autojump_clock: trio.testing.MockClock) -> None:
    peer = FakePeer(*[refused() for _ in range(8)])
    link = make_link(peer)
    async with running(link):
        start = trio.current_time()
        await peer.connections.wait_for(1)
        assert gaps(peer.times()) == [2, 4, 8, 16, 32, 64, 64, 64]
        assert [t - start for t in peer.times()] == [0, 2, 6, 14, 30, 62, 126, 190, 254]
        await settle()
        assert link.state is LinkState.OPERATIONAL
        assert link.reconnects == 8
        assert link.last_error == ""


async def test_first_attempt_is_immediate_and_started_reports_connecting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    peer = FakePeer(HANG)
    link = make_link(peer, heartbeat=5)
    assert link.state is LinkState.WAITING
    async with running(link):
        assert link.state is LinkState.CONNECTING
        await peer.attempts.wait_for(1)
        assert peer.options == [{"heartbeat": 5}]


async def test_waiting_shows_the_error_and_connecting_keeps_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    peer = FakePeer(ConnectionRefusedError(111, "Connection refused"), HANG)
    link = make_link(peer)
    async with running(link):
        await trio.sleep(1)
        assert (link.state, link.last_error, link.reconnects) == (LinkState.WAITING, "Connection refused", 0)
        await peer.attempts.wait_for(2)
        await settle()
        assert (link.state, link.last_error, link.reconnects) == (
            LinkState.CONNECTING,
            "Connection refused",
            1,
        )


async def test_a_successful_connection_resets_the_schedule(autojump_clock: trio.testing.MockClock) -> None:
    peer = FakePeer(refused(), refused(), refused(), OK, refused(), refused())
    link = make_link(peer)
    async with running(link):
        await peer.connections.wait_for(1)
        assert gaps(peer.times()) == [2, 4, 8]
        await trio.sleep(100)
        dropped = trio.current_time()
        peer.connections.items[0].drop()
        await peer.connections.wait_for(2)
        assert [t - dropped for t in peer.times()[4:]] == [2, 6, 14]
        assert link.reconnects == 6


async def test_authentication_refused_fails_for_good(autojump_clock: trio.testing.MockClock) -> None:
    peer = FakePeer(refused(), AuthenticationRefused("ACCESS_REFUSED - Login was refused"))
    link = make_link(peer)
    with trio.fail_after(GUARD):
        await link.run()
        assert (link.state, link.last_error) == (LinkState.FAILED, "ACCESS_REFUSED - Login was refused")
        await trio.sleep(10 * 3600)
    assert len(peer.attempts) == 2
    assert link.reconnects == 1


@pytest.mark.parametrize(
    "error",
    [OSError(113, "No route to host"), ConnectionClosedByPeer(320, "CONNECTION_FORCED - shutdown")],
)
async def test_other_communication_errors_are_retried(
    autojump_clock: trio.testing.MockClock, error: Exception
) -> None:
    peer = FakePeer(error)
    link = make_link(peer)
    async with running(link):
        await peer.connections.wait_for(1)
        assert gaps(peer.times()) == [2]


async def test_an_unexpected_error_is_not_retried(autojump_clock: trio.testing.MockClock) -> None:
    peer = FakePeer(KeyError("a bug"))
    link = make_link(peer)
    with pytest.raises(KeyError):
        await link.run()
    assert len(peer.attempts) == 1


# Connections and routes ----------------------------------------------------------------------


async def test_operational_runs_routes_and_a_drop_reruns_them_on_the_new_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    peer = FakePeer()
    first, second = FakeRoute("first"), FakeRoute("second")
    link = make_link(peer)
    link.attach(first)
    link.attach(second)
    before = time.time()
    async with running(link):
        await peer.connections.wait_for(1)
        await settle()
        assert link.state is LinkState.OPERATIONAL
        assert before <= (link.connected_since or 0) <= time.time()
        assert (first.connections(), second.connections()) == ([0], [0])
        peer.connections.items[0].drop()
        await settle()
        assert (link.state, link.last_error, link.connected_since) == (
            LinkState.WAITING,
            "missed heartbeats",
            None,
        )
        assert (first.active, second.active, first.cancelled, second.cancelled) == ([], [], 1, 1)
        await peer.connections.wait_for(2)
        await settle()
        assert link.state is LinkState.OPERATIONAL
        assert (first.connections(), second.connections()) == ([0, 1], [0, 1])


async def test_a_failing_route_is_restarted_on_the_schedule_without_disturbing_the_rest(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    peer = FakePeer()
    flaky = FakeRoute("flaky", *[ValueError("no such exchange") for _ in range(7)])
    steady = FakeRoute("steady")
    link = make_link(peer)
    link.attach(flaky)
    link.attach(steady)
    caplog.set_level(logging.INFO, logger="federation.link")
    async with running(link):
        await flaky.runs.wait_for(8)
        await settle()
        assert gaps([t for t, _ in flaky.runs.items]) == [2, 4, 8, 16, 32, 64, 64]
        assert flaky.active == [peer.connections.items[0]]
        assert link.state is LinkState.OPERATIONAL
        assert (len(peer.attempts), link.reconnects) == (1, 0)
        assert (steady.connections(), steady.cancelled) == ([0], 0)
        assert steady.active == [peer.connections.items[0]]
    failures = [r for r in caplog.records if "route flaky failed" in r.getMessage()]
    assert (
        failures[0].getMessage()
        == "link to peer:5673: route flaky failed (no such exchange); restarting in 2 s"
    )
    assert failures[0].levelno == logging.ERROR and failures[0].exc_info
    assert len(failures) == 7


async def test_a_route_that_worked_a_while_restarts_fast(autojump_clock: trio.testing.MockClock) -> None:
    peer = FakePeer()
    route = FakeRoute("route", ValueError("x"), ValueError("x"), 100, ValueError("x"))
    link = make_link(peer)
    link.attach(route)
    async with running(link):
        await route.runs.wait_for(5)
        # 2 and 4 s after quick failures; ran 100 s (more than the ceiling): 2 s again, then 4.
        assert gaps([t for t, _ in route.runs.items]) == [2, 4, 100 + 2, 4]


async def test_a_channel_closed_by_the_peer_is_a_warning_without_traceback(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    peer = FakePeer()
    route = FakeRoute("queue-route", ChannelClosedByPeer(404, "NOT_FOUND - no queue 'q'"))
    link = make_link(peer)
    link.attach(route)
    async with running(link):
        await route.runs.wait_for(2)
    (record,) = [r for r in caplog.records if "failed" in r.getMessage()]
    assert record.levelno == logging.WARNING and not record.exc_info
    assert "channel closed by peer: 404 NOT_FOUND" in record.getMessage()


async def test_a_route_seeing_the_connection_lost_makes_the_link_reconnect(
    autojump_clock: trio.testing.MockClock,
) -> None:
    peer = FakePeer()
    route = FakeRoute("route", ConnectionLost("Connection reset by peer"))
    other = FakeRoute("other")
    link = make_link(peer)
    link.attach(route)
    link.attach(other)
    async with running(link):
        await trio.sleep(1)
        assert (link.state, link.last_error) == (LinkState.WAITING, "Connection reset by peer")
        assert other.cancelled == 1
        await peer.connections.wait_for(2)
        await settle()
        assert (route.connections(), other.connections()) == ([0, 1], [0, 1])


async def test_a_route_that_returns_waits_for_the_next_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    peer = FakePeer()
    route = FakeRoute("route", FINISH)
    link = make_link(peer)
    link.attach(route)
    async with running(link):
        await trio.sleep(1000)
        assert route.connections() == [0]
        peer.connections.items[0].drop()
        await peer.connections.wait_for(2)
        await settle()
        assert route.connections() == [0, 1]


async def test_attach_while_operational_starts_at_once_and_while_waiting_on_the_next_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    peer = FakePeer(OK, refused())
    link = make_link(peer)
    async with running(link):
        await peer.connections.wait_for(1)
        now = FakeRoute("now")
        link.attach(now)
        await settle()
        assert now.active == [peer.connections.items[0]]
        peer.connections.items[0].drop()
        await trio.sleep(3)
        assert link.state is LinkState.WAITING
        later = FakeRoute("later")
        link.attach(later)
        await settle()
        assert len(later.runs) == 0
        await peer.connections.wait_for(2)
        await settle()
        assert (now.connections(), later.connections()) == ([0, 1], [1])
        assert link.routes == [now, later]


async def test_detach_stops_just_that_route_for_good(autojump_clock: trio.testing.MockClock) -> None:
    peer = FakePeer()
    gone, kept = FakeRoute("gone"), FakeRoute("kept")
    link = make_link(peer)
    link.attach(gone)
    link.attach(kept)
    async with running(link):
        await peer.connections.wait_for(1)
        await settle()
        link.detach(gone)
        await settle()
        assert (gone.active, gone.cancelled) == ([], 1)
        assert (kept.active, kept.cancelled) == ([peer.connections.items[0]], 0)
        assert link.state is LinkState.OPERATIONAL
        assert link.routes == [kept]
        peer.connections.items[0].drop()
        await peer.connections.wait_for(2)
        await settle()
        assert (gone.connections(), kept.connections()) == ([0], [0, 1])


async def test_detach_during_a_route_restart_delay_cancels_the_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    peer = FakePeer()
    route = FakeRoute("route", ValueError("x"))
    link = make_link(peer)
    link.attach(route)
    async with running(link):
        await route.runs.wait_for(1)
        await trio.sleep(1)
        link.detach(route)
        await trio.sleep(1000)
        assert len(route.runs) == 1


async def test_detach_then_attach_again_runs_the_route_once(autojump_clock: trio.testing.MockClock) -> None:
    peer = FakePeer()
    route = FakeRoute("route")
    link = make_link(peer)
    link.attach(route)
    async with running(link):
        await peer.connections.wait_for(1)
        await settle()
        link.detach(route)
        link.attach(route)
        await settle()
        assert (route.connections(), route.cancelled) == ([0, 0], 1)
        assert route.active == [peer.connections.items[0]]
        link.detach(route)
        await settle()
        assert route.active == []


def test_attach_twice_or_detach_a_stranger_is_an_error() -> None:
    link = make_link(FakePeer())
    route = FakeRoute("r")
    link.attach(route)
    with pytest.raises(ValueError, match="already attached"):
        link.attach(route)
    with pytest.raises(ValueError, match="not attached"):
        link.detach(FakeRoute("other"))


# close() from every state --------------------------------------------------------------------


async def test_close_before_run_means_run_never_connects() -> None:
    peer = FakePeer()
    link = make_link(peer)
    await link.close()
    assert link.state is LinkState.CLOSED
    async with trio.open_nursery() as nursery:
        await nursery.start(link.run)
    assert len(peer.attempts) == 0


async def test_close_while_connecting(autojump_clock: trio.testing.MockClock) -> None:
    peer = FakePeer(HANG)
    link = make_link(peer)
    async with running(link):
        await peer.attempts.wait_for(1)
        await link.close()
        assert link.state is LinkState.CLOSED
        await trio.sleep(1000)
        assert len(peer.attempts) == 1


async def test_close_while_waiting(autojump_clock: trio.testing.MockClock) -> None:
    peer = FakePeer(refused())
    link = make_link(peer)
    async with running(link):
        await trio.sleep(1)
        assert link.state is LinkState.WAITING
        await link.close()
        await trio.sleep(1000)
        assert (link.state, len(peer.attempts)) == (LinkState.CLOSED, 1)


async def test_close_while_operational_stops_routes_and_closes_cleanly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    peer = FakePeer()
    route = FakeRoute("route")
    link = make_link(peer)
    link.attach(route)
    async with running(link):
        await peer.connections.wait_for(1)
        await settle()
        await link.close()
        assert (link.state, link.connected_since) == (LinkState.CLOSED, None)
        assert (route.active, route.cancelled) == ([], 1)
        assert peer.connections.items[0].closed_cleanly
        await trio.sleep(1000)
        assert len(peer.attempts) == 1


async def test_close_gives_up_on_a_connection_that_will_not_close(
    autojump_clock: trio.testing.MockClock,
) -> None:
    peer = FakePeer(hang_on_close=True)
    link = make_link(peer)
    async with running(link):
        await peer.connections.wait_for(1)
        started = trio.current_time()
        await link.close()
        assert trio.current_time() - started == CLOSE_TIMEOUT
        assert not peer.connections.items[0].closed_cleanly


async def test_close_after_failed_and_close_twice(autojump_clock: trio.testing.MockClock) -> None:
    peer = FakePeer(AuthenticationRefused("ACCESS_REFUSED"))
    link = make_link(peer)
    await link.run()
    await link.close()
    assert (link.state, link.last_error) == (LinkState.CLOSED, "ACCESS_REFUSED")
    await link.close()
    assert link.state is LinkState.CLOSED
    with pytest.raises(RuntimeError, match="already been run"):
        await link.run()


# Management view and logs --------------------------------------------------------------------


async def test_snapshot_is_the_link_list_record(autojump_clock: trio.testing.MockClock) -> None:
    peer = FakePeer(refused())
    link = Link(Address("broker-host", 10000), durable=True, connect=peer.connect, clock=trio.current_time)
    created = link.snapshot().pop("since")
    assert {name: value for name, value in link.snapshot().items() if name != "since"} == {
        "host": "broker-host",
        "port": 10000,
        "transport": "tcp",
        "durable": True,
        "state": "Waiting",
        "last_error": "",
        "node": None,
        "connected_since": None,
        "reconnects": 0,
        "messages_in": 0,
        "messages_out": 0,
        "bytes_in": 0,
        "bytes_out": 0,
        "down_seconds": 0.0,
        "state_seconds": 0.0,
    }
    async with running(link):
        await peer.connections.wait_for(1)
        await settle()
        record = link.snapshot()
        assert (record["state"], record["last_error"], record["reconnects"]) == ("Operational", "", 1)
        assert record["node"] == "peer"
        assert record["connected_since"] is not None
        assert record["connected_since"] == link.connected_since
        assert record["since"] >= created  # the state changed since the link was made
    assert link.snapshot()["state"] == "Closed"


async def test_down_seconds_count_every_state_but_operational(autojump_clock: trio.testing.MockClock) -> None:
    peer = FakePeer(refused())
    link = Link(Address("broker-host", 10000), connect=peer.connect, clock=trio.current_time)
    await trio.sleep(5)  # made, not yet run: Waiting counts
    assert (link.snapshot()["down_seconds"], link.snapshot()["state_seconds"]) == (5, 5)
    async with running(link):
        await peer.connections.wait_for(1)  # refused at once, then connected 2 s later
        await settle()
        up = link.snapshot()
        assert (up["state"], up["down_seconds"]) == ("Operational", 7)
        await trio.sleep(30)
        up = link.snapshot()
        assert (up["down_seconds"], up["state_seconds"]) == (7, 30)
        peer.connections.items[0].drop()
        await peer.connections.wait_for(2)  # Waiting 2 s (the schedule starts again)
        await settle()
        again = link.snapshot()
        assert (again["state"], again["down_seconds"], again["state_seconds"]) == ("Operational", 9, 0)


def test_state_values_are_qpid_route_words() -> None:
    assert [str(state) for state in LinkState] == ["Waiting", "Connecting", "Operational", "Failed", "Closed"]


def test_unsupported_transport_is_refused() -> None:
    with pytest.raises(ValueError, match="transport 'rdma' is not supported"):
        Link(Address(), transport="rdma", connect=FakePeer().connect)


async def test_state_changes_are_logged_with_address_error_and_delay(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    peer = FakePeer(refused(), refused(), OK, AuthenticationRefused("ACCESS_REFUSED - bad password"))
    link = make_link(peer)
    caplog.set_level(logging.INFO, logger="federation.link")
    async with running(link):
        await peer.connections.wait_for(1)
        await settle()
        peer.connections.items[0].drop()
        await peer.attempts.wait_for(4)
        await settle()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "link to peer:5673: Connecting"),
        ("INFO", "link to peer:5673: Waiting (Connection refused); retrying in 2 s"),
        ("INFO", "link to peer:5673: Connecting"),
        ("INFO", "link to peer:5673: Waiting (Connection refused); retrying in 4 s"),
        ("INFO", "link to peer:5673: Connecting"),
        ("INFO", "link to peer:5673: Operational"),
        ("INFO", "link to peer:5673: Waiting (missed heartbeats); retrying in 2 s"),
        ("INFO", "link to peer:5673: Connecting"),
        ("WARNING", "link to peer:5673: Failed (ACCESS_REFUSED - bad password)"),
        ("INFO", "link to peer:5673: Closed"),
    ]


async def test_a_named_link_logs_under_its_name(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    peer = FakePeer(OK)
    link = make_link(peer, name="peering of exchange 'amq.data' to peer:5673")
    caplog.set_level(logging.INFO, logger="federation.link")
    async with running(link):
        await peer.connections.wait_for(1)
        await settle()
    assert [r.getMessage() for r in caplog.records][:2] == [
        "peering of exchange 'amq.data' to peer:5673: Connecting",
        "peering of exchange 'amq.data' to peer:5673: Operational",
    ]


def test_only_a_gateway_node_is_named_by_its_cluster_name() -> None:
    node, rabbit = FakeConnection(1), FakeConnection(2)
    rabbit.server_properties = {"product": "RabbitMQ", "cluster_name": "rabbit@host-1"}
    assert (node_name(node), node_name(rabbit)) == ("peer", None)
