import pytest
from pamqp import commands

from gateway.broker import Broker
from gateway.wire.errors import AMQPError

from .broker_fakes import Client, Returned, content


def client(broker=None):
    return Client(broker or Broker())


def error(c, method):
    with pytest.raises(AMQPError) as info:
        c.call(method)
    return info.value


def test_standard_exchanges_exist_and_are_durable():
    vhost = Broker().vhosts["/"]
    expected = {
        "": "direct",
        "amq.direct": "direct",
        "amq.fanout": "fanout",
        "amq.topic": "topic",
        "amq.headers": "headers",
        "amq.match": "headers",
        "amq.service": "direct",
        "amq.data": "topic",
        "amq.dataex": "headers",
        "amq.gateway.management": "direct",
        "amq.gateway.federation": "direct",
    }
    assert {name: x.type for name, x in vhost.exchanges.items()} == expected
    assert all(x.durable for x in vhost.exchanges.values())


def test_unknown_vhost_is_530():
    with pytest.raises(AMQPError) as info:
        Broker().connect(object(), "guest", "nope", {})
    assert info.value.reply_code == 530
    assert info.value.reply_text == "NOT_ALLOWED - vhost 'nope' not found"
    assert info.value.connection_level


def test_add_vhost():
    broker = Broker()
    broker.add_vhost("v")
    c = Client(broker, vhost="v")
    assert "amq.topic" in broker.vhosts["v"].exchanges
    assert c.declare("q").queue == "q"
    assert "q" not in broker.vhosts["/"].queues


def test_declare_reply_and_nowait():
    c = client()
    assert isinstance(c.exchange("x", "topic"), commands.Exchange.DeclareOk)
    assert c.call(commands.Exchange.Declare(exchange="y", exchange_type="fanout", nowait=True)) is None
    assert c.session.vhost.exchanges["y"].type == "fanout"


def test_declare_passive():
    c = client()
    e = error(c, commands.Exchange.Declare(exchange="nope", passive=True))
    assert (e.reply_code, e.reply_text) == (404, "NOT_FOUND - no exchange 'nope' in vhost '/'")
    assert (e.class_id, e.method_id) == (40, 10)
    c = client(c.broker)
    c.exchange("x", "fanout")
    assert isinstance(
        c.call(commands.Exchange.Declare(exchange="x", exchange_type="direct", passive=True)),
        commands.Exchange.DeclareOk,
    )


def test_declare_reserved_and_default_names_refused():
    c = client()
    e = error(c, commands.Exchange.Declare(exchange="amq.foo"))
    assert (e.reply_code, e.reply_text) == (
        403,
        "ACCESS_REFUSED - exchange name 'amq.foo' contains reserved prefix 'amq.*'",
    )
    e = error(client(c.broker), commands.Exchange.Declare(exchange=""))
    assert (e.reply_code, e.reply_text) == (
        403,
        "ACCESS_REFUSED - operation not permitted on the default exchange",
    )


def test_redeclare_standard_exchange_with_same_properties_is_ok():
    c = client()
    assert isinstance(c.exchange("amq.topic", "topic", durable=True), commands.Exchange.DeclareOk)
    e = error(c, commands.Exchange.Declare(exchange="amq.topic", exchange_type="topic"))
    assert e.reply_code == 406


def test_unknown_type_is_406_channel_error():
    # As RabbitMQ answers since 2024 (pika's acceptance suite expects it): the channel
    # closes, the connection and its other channels go on.
    e = error(client(), commands.Exchange.Declare(exchange="x", exchange_type="x-weird"))
    assert (e.reply_code, e.reply_text) == (406, "PRECONDITION_FAILED - unknown exchange type 'x-weird'")
    assert (e.class_id, e.method_id) == (40, 10)
    assert not e.connection_level


@pytest.mark.parametrize(
    "changed, text",
    [
        (
            {"exchange_type": "fanout"},
            "inequivalent arg 'type' for exchange 'x' in vhost '/': received 'fanout' but current is 'direct'",
        ),
        (
            {"durable": False},
            "inequivalent arg 'durable' for exchange 'x' in vhost '/': received 'false' but current is 'true'",
        ),
        (
            {"auto_delete": True},
            "inequivalent arg 'auto_delete' for exchange 'x' in vhost '/': received 'true' but current is 'false'",
        ),
        (
            {"internal": True},
            "inequivalent arg 'internal' for exchange 'x' in vhost '/': received 'true' but current is 'false'",
        ),
        (
            {"arguments": {"alternate-exchange": "ae"}},
            "inequivalent arg 'alternate-exchange' for exchange 'x' in vhost '/': received the value 'ae' of type 'longstr' but current is none",
        ),
    ],
)
def test_redeclare_inequivalent_is_406(changed, text):
    c = client()
    c.exchange("x", "direct", durable=True)
    fields = {"exchange": "x", "exchange_type": "direct", "durable": True, **changed}
    e = error(c, commands.Exchange.Declare(**fields))
    assert (e.reply_code, e.reply_text) == (406, "PRECONDITION_FAILED - " + text)
    assert not e.connection_level


def test_other_arguments_do_not_matter_for_equivalence():
    c = client()
    c.exchange("x", arguments={"foo": 1})
    assert isinstance(c.exchange("x", arguments={"foo": 2}), commands.Exchange.DeclareOk)


def test_delete_and_if_unused():
    c = client()
    c.exchange("x")
    c.declare("q")
    c.bind("q", "x", "k")
    e = error(c, commands.Exchange.Delete(exchange="x", if_unused=True))
    assert (e.reply_code, e.reply_text) == (406, "PRECONDITION_FAILED - exchange 'x' in vhost '/' in use")
    c = client(c.broker)
    assert isinstance(c.call(commands.Exchange.Delete(exchange="x")), commands.Exchange.DeleteOk)
    vhost = c.session.vhost
    assert "x" not in vhost.exchanges
    assert vhost.queues["q"].sources == {}
    assert isinstance(c.call(commands.Exchange.Delete(exchange="x")), commands.Exchange.DeleteOk)


def test_delete_default_or_system_exchange_refused():
    c = client()
    e = error(c, commands.Exchange.Delete(exchange=""))
    assert e.reply_code == 403
    e = error(client(c.broker), commands.Exchange.Delete(exchange="amq.direct"))
    assert (e.reply_code, e.reply_text) == (
        403,
        "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed",
    )


def test_default_exchange_routes_by_queue_name_and_cannot_be_bound():
    c = client()
    c.declare("q")
    c.consume("q")
    c.publish("", "q", b"1")
    c.publish("", "other", b"2")
    assert c.bodies() == [b"1"]
    e = error(c, commands.Queue.Bind(queue="q", exchange="", routing_key="q"))
    assert (e.reply_code, e.reply_text) == (
        403,
        "ACCESS_REFUSED - operation not permitted on the default exchange",
    )
    c = client(c.broker)
    e = error(c, commands.Queue.Unbind(queue="q", exchange="", routing_key="q"))
    assert e.reply_code == 403


def test_bind_unknown_queue_or_exchange_is_404():
    c = client()
    c.declare("q")
    e = error(c, commands.Queue.Bind(queue="q", exchange="nope"))
    assert (e.reply_code, e.reply_text) == (404, "NOT_FOUND - no exchange 'nope' in vhost '/'")
    c = client(c.broker)
    e = error(c, commands.Queue.Bind(queue="nope", exchange="amq.direct"))
    assert (e.reply_code, e.reply_text) == (404, "NOT_FOUND - no queue 'nope' in vhost '/'")


def test_topic_fanout_headers_exchanges_route():
    c = client()
    for q in ("t", "f", "h"):
        c.declare(q)
    c.bind("t", "amq.topic", "a.*.c")
    c.bind("f", "amq.fanout")
    c.bind("h", "amq.headers", "", {"x-match": "any", "k": "v"})
    c.consume("t", "ct")
    c.consume("f", "cf")
    c.consume("h", "ch")
    c.publish("amq.topic", "a.b.c", b"topic")
    c.publish("amq.fanout", "zz", b"fanout")
    c.publish("amq.headers", "", b"headers", headers={"k": "v"})
    c.publish("amq.headers", "", b"no", headers={"k": "w"})
    got = {(d.consumer_tag, d.body, d.exchange) for d in c.outbox.deliveries()}
    assert got == {
        ("ct", b"topic", "amq.topic"),
        ("cf", b"fanout", "amq.fanout"),
        ("ch", b"headers", "amq.headers"),
    }


def test_bad_headers_binding_is_406():
    c = client()
    c.declare("q")
    e = error(c, commands.Queue.Bind(queue="q", exchange="amq.match", arguments={"x-match": "most"}))
    assert e.reply_code == 406
    assert "x-match" in e.reply_text


def test_unbind_stops_routing_and_is_idempotent():
    c = client()
    c.declare("q")
    c.bind("q", "amq.direct", "k")
    assert isinstance(
        c.call(commands.Queue.Unbind(queue="q", exchange="amq.direct", routing_key="k")),
        commands.Queue.UnbindOk,
    )
    assert isinstance(
        c.call(commands.Queue.Unbind(queue="q", exchange="amq.direct", routing_key="k")),
        commands.Queue.UnbindOk,
    )
    c.consume("q")
    c.publish("amq.direct", "k")
    assert c.bodies() == []


def test_auto_delete_exchange_goes_with_its_last_binding():
    c = client()
    c.exchange("ad", "fanout", auto_delete=True)
    c.declare("q1")
    c.declare("q2")
    c.bind("q1", "ad")
    c.bind("q2", "ad")
    c.call(commands.Queue.Unbind(queue="q1", exchange="ad"))
    assert "ad" in c.session.vhost.exchanges
    c.call(commands.Queue.Delete(queue="q2"))
    assert "ad" not in c.session.vhost.exchanges


def test_internal_exchange_refuses_publish_but_routes_from_e2e():
    c = client()
    c.exchange("inner", "fanout", internal=True)
    c.declare("q")
    c.bind("q", "inner")
    with pytest.raises(AMQPError) as info:
        c.publish("inner", "k")
    assert (info.value.reply_code, info.value.reply_text) == (
        403,
        "ACCESS_REFUSED - cannot publish to internal exchange 'inner' in vhost '/'",
    )
    assert (info.value.class_id, info.value.method_id) == (60, 40)
    c = client(c.broker)
    c.call(commands.Exchange.Bind(destination="inner", source="amq.fanout"))
    c.consume("q")
    c.publish("amq.fanout", "k", b"via")
    assert c.bodies() == [b"via"]


def test_publish_to_unknown_exchange_is_404_channel_error():
    c = client()
    with pytest.raises(AMQPError) as info:
        c.publish("nope", "k")
    assert (info.value.reply_code, info.value.reply_text) == (
        404,
        "NOT_FOUND - no exchange 'nope' in vhost '/'",
    )
    assert not info.value.connection_level


def test_exchange_to_exchange_graph_delivers_once_and_does_not_loop():
    c = client()
    c.exchange("a", "fanout")
    c.exchange("b", "fanout")
    c.exchange("c", "topic")
    c.declare("q")
    c.call(commands.Exchange.Bind(destination="b", source="a"))
    c.call(commands.Exchange.Bind(destination="a", source="b"))
    c.call(commands.Exchange.Bind(destination="c", source="a", routing_key="#"))
    c.bind("q", "b")
    c.bind("q", "c", "k")
    c.bind("q", "a")
    c.consume("q")
    c.publish("a", "k", b"x")
    assert c.bodies() == [b"x"]


def test_exchange_unbind_and_404s():
    c = client()
    c.exchange("a", "fanout")
    c.exchange("b", "fanout")
    c.declare("q")
    c.bind("q", "b")
    c.call(commands.Exchange.Bind(destination="b", source="a"))
    assert isinstance(
        c.call(commands.Exchange.Unbind(destination="b", source="a")), commands.Exchange.UnbindOk
    )
    c.consume("q")
    c.publish("a", "k")
    assert c.bodies() == []
    e = error(c, commands.Exchange.Bind(destination="b", source="nope"))
    assert (e.reply_code, e.reply_text) == (404, "NOT_FOUND - no exchange 'nope' in vhost '/'")
    e = error(client(c.broker), commands.Exchange.Bind(destination="", source="a"))
    assert e.reply_code == 403


def test_deleting_destination_exchange_removes_e2e_binding_and_auto_deletes_source():
    c = client()
    c.exchange("src", "fanout", auto_delete=True)
    c.exchange("dst", "fanout")
    c.call(commands.Exchange.Bind(destination="dst", source="src"))
    c.call(commands.Exchange.Delete(exchange="dst"))
    assert "src" not in c.session.vhost.exchanges


def test_alternate_exchange_gets_unroutable_messages():
    c = client()
    c.exchange("ae", "fanout")
    c.exchange("main", "direct", arguments={"alternate-exchange": "ae"})
    c.declare("routed")
    c.declare("spill")
    c.bind("routed", "main", "k")
    c.bind("spill", "ae")
    c.consume("routed", "r")
    c.consume("spill", "s")
    c.publish("main", "k", b"1", mandatory=True)
    c.publish("main", "other", b"2", mandatory=True)
    sent = c.outbox.take()
    assert [(d.consumer_tag, d.body) for d in sent] == [("r", b"1"), ("s", b"2")]


def test_mandatory_unroutable_is_returned():
    c = client()
    c.publish("amq.direct", "nowhere", b"lost", mandatory=True)
    c.publish("amq.direct", "nowhere", b"quiet")
    sent = c.outbox.take()
    assert len(sent) == 1
    assert isinstance(sent[0], Returned)
    assert (sent[0].reply_code, sent[0].reply_text, sent[0].exchange, sent[0].routing_key) == (
        312,
        "NO_ROUTE",
        "amq.direct",
        "nowhere",
    )
    assert sent[0].content.body == b"lost"


def test_immediate_is_540_connection_error():
    c = client()
    with pytest.raises(AMQPError) as info:
        c.session.handle_publish(1, "", "q", False, True, content())
    assert info.value.reply_code == 540
    assert info.value.connection_level


def test_one_message_routed_to_several_queues_is_shared():
    c = client()
    c.declare("q1")
    c.declare("q2")
    c.bind("q1", "amq.fanout")
    c.bind("q2", "amq.fanout")
    c.publish("amq.fanout", "")
    vhost = c.session.vhost
    assert vhost.queues["q1"].ready[0].message is vhost.queues["q2"].ready[0].message


def test_bad_alternate_exchange_argument_is_406():
    e = error(client(), commands.Exchange.Declare(exchange="x", arguments={"alternate-exchange": 5}))
    assert e.reply_code == 406
    assert "alternate-exchange" in e.reply_text


def test_unsupported_method_is_540():
    e = error(client(), commands.Basic.Deliver(consumer_tag="t", delivery_tag=1))
    assert e.reply_code == 540


def test_a_handled_exchange_gives_publishes_to_its_handler_and_never_to_a_queue():
    broker = Broker()
    received = []
    broker.exchange_handlers["amq.gateway.management"] = lambda session, body: received.append(
        (session, body.body)
    )
    c = client(broker)
    c.declare("spy")
    vhost = broker.vhosts["/"]
    # As a binding made by an older version and recovered from its store would be.
    vhost.bind(vhost.exchanges["amq.gateway.management"], vhost.queues["spy"], "", {})
    c.call(commands.Confirm.Select())
    c.publish("amq.gateway.management", "", b"request", mandatory=True)
    assert received == [(c.session, b"request")]
    assert [(ack.delivery_tag, ack.multiple) for ack in c.outbox.methods(commands.Basic.Ack)] == [(1, False)]
    assert not [m for m in c.outbox.sent if isinstance(m, Returned)]
    assert len(vhost.queues["spy"].ready) == 0


@pytest.mark.parametrize(
    "method",
    [
        commands.Queue.Bind(queue="q", exchange="handled"),
        commands.Exchange.Bind(destination="amq.topic", source="handled"),
        commands.Exchange.Bind(destination="handled", source="amq.topic"),
    ],
)
def test_nobody_binds_to_or_from_a_handled_exchange(method):
    broker = Broker()
    broker.exchange_handlers["handled"] = lambda session, body: None
    c = client(broker)
    c.declare("q")
    c.exchange("handled")
    refused = error(c, method)
    assert refused.reply_code == 403
    assert "cannot bind to or from exchange 'handled'" in refused.reply_text
