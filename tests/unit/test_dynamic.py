"""Dynamic routing between two in-memory broker models, the transport played by the test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pamqp import commands

from federation.dynamic import AdvertRefused, FederatedExchange, bridge_queue, decode_adverts, encode_adverts
from federation.dynamic_route import FederatedExchanges
from federation.persistence import FederationStore
from federation.stamps import DEST_HEADER, TRACE_HEADER
from gateway.broker import Broker
from gateway.routing.interest import Advert
from gateway.wire.content import Content

from .broker_fakes import Client, FakeStore

BRIDGE_B = bridge_queue("b", "fed.topic")
BRIDGE_C = bridge_queue("c", "fed.topic")


class Node:
    def __init__(self, tag: str) -> None:
        self.broker = Broker(node_name=tag)
        self.client = Client(self.broker)
        self.client.exchange("fed.topic", "topic")
        vhost = self.broker.vhosts["/"]
        self.federated = FederatedExchange(vhost, "fed.topic", "topic", tag)
        vhost.exchanges["fed.topic"].federation = self.federated
        self.changes = 0
        self.federated.on_change = self._changed

    def _changed(self) -> None:
        self.changes += 1


def link(downstream: Node, upstream: Node) -> str:
    """downstream pulls from upstream: it declares its bridge queue there and advertises."""
    bridge = f"bridge.{downstream.federated.tag}"
    upstream.client.declare(bridge)
    adverts = downstream.federated.adverts_for(upstream.federated.tag, [])
    body = encode_adverts("fed.topic", downstream.federated.tag, bridge, adverts)
    exchange, sender, queue, decoded = decode_adverts(body)
    assert (exchange, sender, queue, decoded) == ("fed.topic", downstream.federated.tag, bridge, adverts)
    upstream.federated.receive_adverts(sender, upstream.broker.vhosts["/"].queues[queue], decoded)
    return bridge


def carry(upstream: Node, bridge: str, downstream: Node) -> int:
    """Move everything in the bridge queue into the downstream exchange, as a route would."""
    moved = 0
    while True:
        got = upstream.client.get(bridge, no_ack=True)
        if isinstance(got, commands.Basic.GetEmpty):
            return moved
        downstream.client.session.handle_publish(
            downstream.client.ch, "fed.topic", got.routing_key, False, False, got.content
        )
        moved += 1


def test_interest_flows_up_and_messages_flow_down_exactly_once() -> None:
    a, b = Node("a"), Node("b")
    b.client.declare("q")
    b.client.bind("q", "fed.topic", "stock.#")
    assert b.changes == 1
    bridge = link(b, a)
    a.client.declare("local")
    a.client.bind("local", "fed.topic", "#")
    a.client.publish("fed.topic", "stock.ibm", b"tick")
    a.client.publish("fed.topic", "bond.x", b"not for b")
    assert carry(a, bridge, b) == 1
    got = b.client.get("q", no_ack=True)
    assert got.body == b"tick"
    assert got.content.headers[DEST_HEADER] == ["b"] and got.content.headers[TRACE_HEADER] == ["a"]
    assert isinstance(b.client.get("q"), commands.Basic.GetEmpty)
    assert a.client.call(commands.Queue.Declare(queue="local", passive=True)).message_count == 2
    a.client.call(commands.Queue.Unbind(queue="local", exchange="fed.topic", routing_key="#"))
    a.client.publish("fed.topic", "stock.x", b"only forwarded")
    a.client.publish("fed.topic", "bond.y", b"nowhere")
    # Published 4: 2 reached a local queue, 1 went only to b's bridge queue, 1 nowhere.
    exchange = a.broker.vhosts["/"].exchanges["fed.topic"]
    assert (exchange.published, exchange.routed, exchange.unroutable, exchange.dropped_looping) == (
        4,
        3,
        1,
        0,
    )


def test_a_message_for_other_nodes_skips_local_queues() -> None:
    b = Node("b")
    b.client.declare("q")
    b.client.bind("q", "fed.topic", "#")
    b.client.session.handle_publish(
        b.client.ch,
        "fed.topic",
        "k",
        False,
        False,
        _content({DEST_HEADER: ["c"], TRACE_HEADER: ["a"]}),
    )
    assert isinstance(b.client.get("q"), commands.Basic.GetEmpty)
    # For c, but b has no path to c: it reached nothing here.
    exchange = b.broker.vhosts["/"].exchanges["fed.topic"]
    assert (exchange.published, exchange.routed, exchange.unroutable) == (1, 0, 1)


def test_a_message_that_passed_this_node_is_dropped() -> None:
    a = Node("a")
    a.client.declare("q")
    a.client.bind("q", "fed.topic", "#")
    a.client.session.handle_publish(
        a.client.ch, "fed.topic", "k", False, False, _content({DEST_HEADER: ["a"], TRACE_HEADER: ["a", "b"]})
    )
    assert isinstance(a.client.get("q"), commands.Basic.GetEmpty)
    exchange = a.broker.vhosts["/"].exchanges["fed.topic"]
    assert (exchange.published, exchange.routed, exchange.dropped_looping, exchange.unroutable) == (
        1,
        0,
        1,
        0,
    )


def test_deleted_bridge_withdraws_the_neighbours_interest() -> None:
    a, b = Node("a"), Node("b")
    b.client.declare("q")
    b.client.bind("q", "fed.topic", "#")
    bridge = link(b, a)
    a.client.call(commands.Queue.Delete(queue=bridge))
    a.client.publish("fed.topic", "k", b"m")
    assert a.federated.table.next_hops() == {}


def test_unbinding_the_last_identical_binding_is_one_change() -> None:
    b = Node("b")
    b.client.declare("q1")
    b.client.declare("q2")
    b.client.bind("q1", "fed.topic", "k")
    b.client.bind("q2", "fed.topic", "k")
    assert b.changes == 1
    b.client.call(commands.Queue.Unbind(queue="q1", exchange="fed.topic", routing_key="k"))
    assert b.changes == 1
    b.client.call(commands.Queue.Unbind(queue="q2", exchange="fed.topic", routing_key="k"))
    assert b.changes == 2
    assert b.federated.adverts_for("a", []) == set()


def test_malformed_adverts_are_a_value_error() -> None:
    for body in (b"{", b"{}", b'{"exchange": "x", "from": "b", "queue": "q", "adverts": [{"key": 1}]}'):
        try:
            decode_adverts(body)
        except ValueError as exc:
            assert "malformed federation adverts" in str(exc)
        else:
            raise AssertionError(body)


def test_adverts_round_trip_with_headers_arguments() -> None:
    adverts = {Advert.of("c", "", {"x-match": "all", "region": "eu"}, ("b", "c"))}
    assert decode_adverts(encode_adverts("x", "b", "q", adverts))[3] == adverts


def _content(headers: dict) -> Content:
    return Content.from_properties(commands.Basic.Properties(headers=headers), b"m")


def test_control_messages_attach_on_demand_and_bad_ones_are_ignored(caplog: Any) -> None:
    a = Broker(node_name="a")
    client = Client(a)
    client.exchange("fed.topic", "topic")
    client.declare(BRIDGE_B)
    vhost = a.vhosts["/"]
    exchanges = FederatedExchanges("a")
    unknown = encode_adverts("fed.topic", "x", bridge_queue("x", "fed.topic"), set())  # never declared
    for body in (b"not json", b'{"exchange": "fed.topic"}', unknown):
        exchanges.receive(vhost, body, None)
    assert vhost.exchanges["fed.topic"].federation is None
    assert len(caplog.records) == 3
    interest = {Advert.of("b", "k", {}, ("b",))}
    exchanges.receive(vhost, encode_adverts("fed.topic", "b", BRIDGE_B, interest), None)
    federated = vhost.exchanges["fed.topic"].federation
    assert isinstance(federated, FederatedExchange) and federated.table.next_hops() == {"b": "b"}
    exchanges.receive(vhost, encode_adverts("fed.topic", "b", BRIDGE_B, set()), None)
    assert vhost.exchanges["fed.topic"].federation is None  # no route here, no interest left


def test_adverts_in_another_nodes_name_or_into_another_queue_are_refused_and_change_nothing() -> None:
    a = Broker(node_name="a")
    client = Client(a)
    client.exchange("fed.topic", "topic")
    client.declare(BRIDGE_B)
    client.declare("stolen")
    vhost = a.vhosts["/"]
    exchanges = FederatedExchanges("a")
    exchanges.receive(
        vhost, encode_adverts("fed.topic", "b", BRIDGE_B, {Advert.of("b", "k", {}, ("b",))}), "b"
    )
    federated = vhost.exchanges["fed.topic"].federation
    assert isinstance(federated, FederatedExchange)
    forged = (
        # b's interest, sent by the login of c
        (encode_adverts("fed.topic", "b", BRIDGE_B, set()), "c"),
        # b's own login, naming a queue that is not b's bridge queue
        (encode_adverts("fed.topic", "b", "stolen", {Advert.of("b", "k", {}, ("b",))}), "b"),
        # a shared login may speak for any node, but only into that node's bridge queue
        (encode_adverts("fed.topic", "b", "stolen", {Advert.of("b", "k", {}, ("b",))}), None),
    )
    for body, speaker in forged:
        with pytest.raises(AdvertRefused):
            exchanges.receive(vhost, body, speaker)
    assert federated.table.next_hops() == {"b": "b"}
    assert federated.bridges["b"] is vhost.queues[BRIDGE_B]


def test_a_persistent_message_forwarded_only_to_a_durable_bridge_is_confirmed_once_stored() -> None:
    store = FakeStore()
    a = Broker(node_name="a", store=store)
    client = Client(a)
    client.exchange("fed.topic", "topic")
    client.declare(BRIDGE_B, durable=True)
    FederatedExchanges("a").receive(
        a.vhosts["/"], encode_adverts("fed.topic", "b", BRIDGE_B, {Advert.of("b", "k", {}, ("b",))}), None
    )
    client.call(commands.Confirm.Select())
    store.commit()
    client.publish("fed.topic", "k", delivery_mode=2)
    assert [name for name, *_ in store.calls].count("add_message") == 1
    assert client.outbox.methods(commands.Basic.Ack) == []  # not before the bridge's copy is stored
    a.on_durable(store.commit())
    assert [m.delivery_tag for m in client.outbox.methods(commands.Basic.Ack)] == [1]
    client.publish("fed.topic", "k")  # transient: nothing to wait for
    assert [m.delivery_tag for m in client.outbox.methods(commands.Basic.Ack)] == [2]


def test_adverts_with_a_durable_bridge_are_kept_and_restored_after_a_restart(tmp_path: Path) -> None:
    interest = {Advert.of("b", "k", {}, ("b",))}

    def node(store: FederationStore) -> tuple[Client, FederatedExchanges]:
        broker = Broker(node_name="a")
        client = Client(broker)
        client.exchange("fed.topic", "topic")
        client.declare(BRIDGE_B, durable=True)  # a store would have restored it
        client.declare(BRIDGE_C, exclusive=True)
        exchanges = FederatedExchanges("a")
        exchanges.restore(broker.vhosts, store)
        return client, exchanges

    store = FederationStore.open(tmp_path)
    client, exchanges = node(store)
    vhost = client.broker.vhosts["/"]
    exchanges.receive(vhost, encode_adverts("fed.topic", "b", BRIDGE_B, interest), None)
    exchanges.receive(
        vhost, encode_adverts("fed.topic", "c", BRIDGE_C, {Advert.of("c", "x", {}, ("c",))}), None
    )
    assert [(row[0], row[1], row[2]) for row in store.load_adverts()] == [("/", "fed.topic", "b")]
    store.close()

    store = FederationStore.open(tmp_path)
    client, _ = node(store)
    federated = client.broker.vhosts["/"].exchanges["fed.topic"].federation
    assert isinstance(federated, FederatedExchange) and federated.table.next_hops() == {"b": "b"}
    client.publish("fed.topic", "k")
    assert not isinstance(client.get(BRIDGE_B, no_ack=True), commands.Basic.GetEmpty)


def test_stored_adverts_of_a_bridge_gone_meanwhile_are_dropped(tmp_path: Path) -> None:
    store = FederationStore.open(tmp_path)
    store.put_adverts("/", "fed.topic", "b", encode_adverts("fed.topic", "b", BRIDGE_B, set()))
    broker = Broker(node_name="a")
    Client(broker).exchange("fed.topic", "topic")
    FederatedExchanges("a").restore(broker.vhosts, store)  # no bridge.b: it expired
    assert store.load_adverts() == []
    assert broker.vhosts["/"].exchanges["fed.topic"].federation is None
