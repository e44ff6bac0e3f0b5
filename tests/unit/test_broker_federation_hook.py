"""The hook dynamic routing attaches to an exchange: binding events, and a say in routing."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands

from gateway.broker import Broker
from gateway.broker.message import Message
from gateway.broker.queue import Queue
from gateway.wire.errors import AMQPError

from .broker_fakes import Client, undecodable_headers


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
