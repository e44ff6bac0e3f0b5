"""CC and BCC (RabbitMQ's sender-selected distribution) in gateway.routing and the broker."""

from __future__ import annotations

import pytest
from pamqp import commands

from gateway.broker import Broker
from gateway.routing import ExchangeGraph, extra_routing_keys
from gateway.wire.errors import AMQPError

from .broker_fakes import Client, content


def test_extra_routing_keys_take_cc_then_bcc_strings_only() -> None:
    assert extra_routing_keys(None) == ()
    assert extra_routing_keys({"other": 1}) == ()
    assert extra_routing_keys({"BCC": ["b"], "CC": ["c1", b"c2", 5]}) == ("c1", "c2", "b")
    with pytest.raises(ValueError, match="the CC header must be an array of routing keys"):
        extra_routing_keys({"CC": "c"})


def test_graph_routes_with_every_key_and_alternate_only_when_none_matched() -> None:
    graph = ExchangeGraph(["a", "b", "spare"])
    graph.declare("x", "direct", alternate="ae")
    graph.declare("ae", "fanout")
    graph.bind("x", "ka", {}, "a")
    graph.bind("x", "kb", {}, "b")
    graph.bind("ae", "", {}, "spare")
    assert graph.route("x", "ka", {"CC": ["kb"], "BCC": ["ka"]}) == {"a", "b"}
    assert graph.route("x", "none", {"CC": ["kb"]}) == {"b"}
    assert graph.route("x", "none", {"CC": ["neither"]}) == {"spare"}
    assert graph.route("", "a", {"BCC": ["b", "missing"]}) == {"a", "b"}


def test_broker_delivers_to_cc_and_bcc_queues_without_bcc() -> None:
    c = Client(Broker())
    for queue in ("to", "cc", "bcc"):
        c.declare(queue)
    c.session.handle_publish(
        c.ch, "", "to", False, False, content(b"m", headers={"CC": ["cc"], "BCC": ["bcc"], "n": 1})
    )
    for queue in ("to", "cc", "bcc"):
        got = c.get(queue, no_ack=True)
        assert got.body == b"m", queue
        assert got.content.properties.headers == {"CC": ["cc"], "n": 1}, queue


def test_a_cc_header_that_is_not_an_array_is_406() -> None:
    c = Client(Broker())
    c.declare("to")
    with pytest.raises(AMQPError) as raised:
        c.session.handle_publish(c.ch, "", "to", False, False, content(b"m", headers={"CC": "cc"}))
    assert (raised.value.reply_code, raised.value.reply_text) == (
        406,
        "PRECONDITION_FAILED - invalid message: the CC header must be an array of routing keys",
    )
    assert c.call(commands.Queue.Declare(queue="to", passive=True)).message_count == 0
