"""The hook dynamic routing attaches to an exchange: binding events, and a say in routing."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands

from gateway.broker import Broker
from gateway.broker.confirms import VERDICT_TIMEOUT
from gateway.broker.message import Message
from gateway.broker.queue import Queue
from gateway.wire.errors import AMQPError

from .broker_fakes import Client, FakeClock, Returned, content, undecodable_headers


class RecordingFederation:
    def __init__(self, local: bool = True) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self.routed: list[str] = []
        self.local = local

    def bound(self, key: str, arguments: dict[str, Any]) -> None:
        self.events.append(("bound", key, arguments))

    def unbound(self, key: str, arguments: dict[str, Any]) -> None:
        self.events.append(("unbound", key, arguments))

    def route(self, message: Message, found: set[Queue]) -> set[Queue]:
        self.routed.append(message.routing_key)
        return found if self.local else set()


def federated(local: bool = True) -> tuple[Client, RecordingFederation]:
    c = Client(Broker())
    c.exchange("fed.topic", "topic")
    federation = RecordingFederation(local)
    c.broker.vhosts["/"].exchanges["fed.topic"].federation = federation
    return c, federation


def test_queue_bindings_are_reported_and_withdrawn_with_unbind_and_queue_delete() -> None:
    c, federation = federated()
    c.declare("a")
    c.declare("b")
    c.bind("a", "fed.topic", "stock.#")
    c.bind("b", "fed.topic", "bond.*")
    c.bind("a", "fed.topic", "stock.#")  # the same binding again: no new event
    c.call(commands.Queue.Unbind(queue="b", exchange="fed.topic", routing_key="bond.*"))
    c.call(commands.Queue.Delete(queue="a"))
    assert federation.events == [
        ("bound", "stock.#", {}),
        ("bound", "bond.*", {}),
        ("unbound", "bond.*", {}),
        ("unbound", "stock.#", {}),
    ]


def test_exchange_to_exchange_bindings_are_not_interest() -> None:
    c, federation = federated()
    c.exchange("downstream", "fanout")
    c.call(commands.Exchange.Bind(destination="downstream", source="fed.topic", routing_key="#"))
    assert federation.events == []


def test_every_publish_is_offered_and_may_be_kept_from_local_queues() -> None:
    c, federation = federated(local=False)
    c.declare("q")
    c.bind("q", "fed.topic", "#")
    c.publish("fed.topic", "x.y")
    assert federation.routed == ["x.y"]
    assert c.call(commands.Queue.Declare(queue="q", passive=True)).message_count == 0
    federation.local = True
    c.publish("fed.topic", "x.z")
    assert c.call(commands.Queue.Declare(queue="q", passive=True)).message_count == 1


def test_a_publish_refused_with_502_is_not_forwarded_either() -> None:
    c, federation = federated()
    c.exchange("fed.match", "headers")
    c.declare("q")
    c.call(commands.Exchange.Bind(destination="fed.match", source="fed.topic", routing_key="#"))
    c.bind("q", "fed.match", arguments={"x-match": "all"})
    with pytest.raises(AMQPError) as raised:
        c.session.handle_publish(c.ch, "fed.topic", "k", False, False, undecodable_headers())
    assert raised.value.reply_code == 502
    assert federation.routed == []


class ForwardingFederation:
    """Forwards every publish to a parent (the outbox is a local queue), as a publisher-type
    attachment does: a mandatory publish's confirm waits for the parent's verdict."""

    def __init__(self, broker: Broker, outbox: Queue) -> None:
        self.broker = broker
        self.outbox = outbox
        self.forwarded: list[Any] = []

    def bound(self, key: str, arguments: dict[str, Any]) -> None: ...

    def unbound(self, key: str, arguments: dict[str, Any]) -> None: ...

    def route(self, message: Message, found: set[Queue]) -> set[Queue]:
        if message.return_to is not None:
            self.forwarded.append(message.return_to)
            self.broker.await_verdict(message.return_to)
        return {self.outbox}


def confirms_and_returns(c: Client) -> list[Any]:
    """Returns and publisher confirms sent since the last call, in order."""
    found: list[Any] = []
    for item in c.outbox.take():
        if isinstance(item, Returned):
            found.append(("Return", item.reply_code))
        elif isinstance(item, tuple) and isinstance(item[1], (commands.Basic.Ack, commands.Basic.Nack)):
            found.append((type(item[1]).__name__, item[1].delivery_tag, item[1].multiple))
    return found


def forwarding() -> tuple[Client, ForwardingFederation, FakeClock]:
    clock = FakeClock()
    c = Client(Broker(clock=clock))
    c.exchange("fed.direct", "direct")
    c.declare("outbox")
    vhost = c.broker.vhosts["/"]
    federation = ForwardingFederation(c.broker, vhost.queues["outbox"])
    vhost.exchanges["fed.direct"].federation = federation
    c.call(commands.Confirm.Select())
    c.outbox.take()
    return c, federation, clock


def test_a_forwarded_mandatory_publish_is_confirmed_after_the_parents_return() -> None:
    c, federation, _ = forwarding()
    c.publish("fed.direct", "k", b"one", mandatory=True)
    c.publish("fed.direct", "k", b"two")  # not mandatory: behind the held one all the same
    assert confirms_and_returns(c) == []
    (return_to,) = federation.forwarded
    c.broker.return_to_publisher(return_to, 312, "NO_ROUTE", "fed.direct", "k", content(b"one"))
    assert confirms_and_returns(c) == [("Return", 312), ("Ack", 2, True)]


def test_a_forwarded_mandatory_publish_is_confirmed_on_the_parents_confirm_or_after_the_timeout() -> None:
    c, federation, clock = forwarding()
    c.publish("fed.direct", "k", b"one", mandatory=True)
    c.broker.release_verdict(federation.forwarded[0])
    assert confirms_and_returns(c) == [("Ack", 1, False)]
    c.publish("fed.direct", "k", b"two", mandatory=True)
    assert c.broker.tick() == clock.now + VERDICT_TIMEOUT
    clock.advance(VERDICT_TIMEOUT)
    assert c.broker.tick() is None
    assert confirms_and_returns(c) == [("Ack", 2, False)]
    c.broker.return_to_publisher(federation.forwarded[1], 312, "NO_ROUTE", "fed.direct", "k", content(b"two"))
    assert confirms_and_returns(c) == [("Return", 312)]  # late: after its ack, nothing else
