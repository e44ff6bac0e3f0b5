import pytest
from pamqp import commands

from gateway.broker import Broker
from gateway.wire.errors import AMQPError

from .broker_fakes import Client, FakeClock, undecodable_headers


def error(c, method):
    with pytest.raises(AMQPError) as info:
        c.call(method)
    return info.value


def test_declare_reply_counts():
    c = Client(Broker())
    ok = c.declare("q")
    assert (ok.queue, ok.message_count, ok.consumer_count) == ("q", 0, 0)
    c.publish("", "q")
    c.publish("", "q")
    c.consume("q", "t", no_ack=False)
    c.call(commands.Basic.Qos(prefetch_count=1))
    ok = c.declare("q")
    assert (ok.message_count, ok.consumer_count) == (0, 1)


def test_server_named_queue():
    c = Client(Broker())
    name = c.declare("").queue
    assert name.startswith("amq.gen-") and len(name) > 20
    assert name != Client(c.broker).declare("").queue
    assert name in c.session.vhost.queues


def test_empty_name_means_last_declared_queue():
    c = Client(Broker())
    name = c.declare("").queue
    c.call(commands.Queue.Bind(queue="", exchange="amq.direct", routing_key=""))
    c.publish("amq.direct", name, b"x")
    assert c.get("").body == b"x"
    e = error(Client(c.broker), commands.Basic.Get(queue=""))
    assert (e.reply_code, e.reply_text) == (404, "NOT_FOUND - no previously declared queue")


def test_reserved_prefix_refused():
    e = error(Client(Broker()), commands.Queue.Declare(queue="amq.q"))
    assert (e.reply_code, e.reply_text) == (
        403,
        "ACCESS_REFUSED - queue name 'amq.q' contains reserved prefix 'amq.*'",
    )


def test_passive_declare():
    c = Client(Broker())
    e = error(c, commands.Queue.Declare(queue="q", passive=True))
    assert (e.reply_code, e.reply_text) == (404, "NOT_FOUND - no queue 'q' in vhost '/'")
    assert (e.class_id, e.method_id) == (50, 10)
    c = Client(c.broker)
    c.declare("q", durable=True)
    c.publish("", "q")
    ok = c.call(commands.Queue.Declare(queue="q", passive=True))
    assert (ok.queue, ok.message_count) == ("q", 1)


@pytest.mark.parametrize(
    "first, second, text",
    [
        (
            {"durable": True},
            {},
            "inequivalent arg 'durable' for queue 'q' in vhost '/': received 'false' but current is 'true'",
        ),
        (
            {},
            {"auto_delete": True},
            "inequivalent arg 'auto_delete' for queue 'q' in vhost '/': received 'true' but current is 'false'",
        ),
        (
            {"arguments": {"x-message-ttl": 100}},
            {},
            "inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received none but current is the value '100' of type 'long'",
        ),
        (
            {"arguments": {"x-max-length": 1}},
            {"arguments": {"x-max-length": 2}},
            "inequivalent arg 'x-max-length' for queue 'q' in vhost '/': received the value '2' of type 'long' but current is the value '1' of type 'long'",
        ),
    ],
)
def test_redeclare_inequivalent_is_406(first, second, text):
    c = Client(Broker())
    c.declare("q", **first)
    e = error(c, commands.Queue.Declare(queue="q", **second))
    assert (e.reply_code, e.reply_text) == (406, "PRECONDITION_FAILED - " + text)


def test_unrelated_arguments_are_not_compared():
    c = Client(Broker())
    c.declare("q", arguments={"x-custom": 1})
    assert c.declare("q").queue == "q"


@pytest.mark.parametrize(
    "arguments, name",
    [
        ({"x-message-ttl": -1}, "x-message-ttl"),
        ({"x-message-ttl": "10"}, "x-message-ttl"),
        ({"x-expires": 0}, "x-expires"),
        ({"x-max-length": -5}, "x-max-length"),
        ({"x-max-length-bytes": 1.5}, "x-max-length-bytes"),
        ({"x-overflow": "drop-tail"}, "x-overflow"),
        ({"x-dead-letter-exchange": 5}, "x-dead-letter-exchange"),
        ({"x-dead-letter-routing-key": "k"}, "x-dead-letter-routing-key"),
    ],
)
def test_bad_argument_values_are_406(arguments, name):
    c = Client(Broker())
    e = error(c, commands.Queue.Declare(queue="q", arguments=arguments))
    assert e.reply_code == 406
    assert e.reply_text.startswith(f"PRECONDITION_FAILED - invalid arg '{name}' for queue 'q' in vhost '/': ")
    assert "q" not in c.session.vhost.queues


def test_exclusive_queue_is_locked_to_its_session_and_deleted_on_disconnect():
    broker = Broker()
    owner = Client(broker)
    owner.declare("q", exclusive=True)
    other = Client(broker)
    lock = "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'q' in vhost '/'"
    for method in (
        commands.Queue.Declare(queue="q", exclusive=True),
        commands.Queue.Declare(queue="q", passive=True),
        commands.Queue.Bind(queue="q", exchange="amq.direct"),
        commands.Queue.Unbind(queue="q", exchange="amq.direct"),
        commands.Queue.Purge(queue="q"),
        commands.Queue.Delete(queue="q"),
        commands.Basic.Consume(queue="q"),
        commands.Basic.Get(queue="q"),
    ):
        other = Client(broker)
        e = error(other, method)
        assert (e.reply_code, e.reply_text) == (405, lock), method
        assert not e.connection_level
    assert owner.declare("q", exclusive=True).queue == "q"
    e = error(owner, commands.Queue.Declare(queue="q"))
    assert e.reply_code == 405
    owner = Client(broker)
    owner.session = broker.vhosts["/"].queues["q"].owner
    owner.session.disconnect()
    assert "q" not in broker.vhosts["/"].queues


def test_non_exclusive_queue_redeclared_exclusive_is_405():
    c = Client(Broker())
    c.declare("q")
    assert error(c, commands.Queue.Declare(queue="q", exclusive=True)).reply_code == 405


def test_auto_delete_queue_goes_when_last_consumer_cancels():
    c = Client(Broker())
    c.declare("q", auto_delete=True)
    c.bind("q", "amq.fanout")
    c.consume("q", "a")
    c.consume("q", "b")
    c.call(commands.Basic.Cancel(consumer_tag="a"))
    assert "q" in c.session.vhost.queues
    c.call(commands.Basic.Cancel(consumer_tag="b"))
    assert "q" not in c.session.vhost.queues
    assert len(c.session.vhost.exchanges["amq.fanout"].matcher) == 0


def test_auto_delete_queue_without_consumers_stays():
    c = Client(Broker())
    c.declare("q", auto_delete=True)
    c.session.close_channel(1)
    assert "q" in c.session.vhost.queues


def test_auto_delete_queue_goes_when_consumer_channel_closes():
    c = Client(Broker())
    c.declare("q", auto_delete=True)
    c.consume("q")
    c.session.close_channel(1)
    assert "q" not in c.session.vhost.queues


def test_purge_drops_ready_only():
    c = Client(Broker())
    c.declare("q")
    for body in (b"1", b"2", b"3"):
        c.publish("", "q", body)
    held = c.get("q")
    ok = c.call(commands.Queue.Purge(queue="q"))
    assert ok.message_count == 2
    c.call(commands.Basic.Reject(delivery_tag=held.delivery_tag, requeue=True))
    assert c.get("q").body == b"1"
    e = error(c, commands.Queue.Purge(queue="nope"))
    assert e.reply_code == 404


def test_delete_if_unused_if_empty_and_count():
    c = Client(Broker())
    c.declare("q")
    c.publish("", "q")
    e = error(c, commands.Queue.Delete(queue="q", if_empty=True))
    assert (e.reply_code, e.reply_text) == (406, "PRECONDITION_FAILED - queue 'q' in vhost '/' not empty")
    c = Client(c.broker)
    c.consume("q", "t", no_ack=True)
    c.outbox.take()
    other = Client(c.broker)
    e = error(other, commands.Queue.Delete(queue="q", if_unused=True))
    assert (e.reply_code, e.reply_text) == (406, "PRECONDITION_FAILED - queue 'q' in vhost '/' in use")
    c.call(commands.Basic.Cancel(consumer_tag="t"))
    c.publish("", "q")
    c.publish("", "q")
    assert c.call(commands.Queue.Delete(queue="q")).message_count == 2
    assert c.call(commands.Queue.Delete(queue="q")).message_count == 0


def test_delete_cancels_consumers_with_notification_when_capable():
    broker = Broker()
    notified = Client(broker)
    silent = Client(broker, cancel_notify=False)
    notified.declare("q")
    notified.consume("q", "n")
    silent.consume("q", "s")
    notified.session.handle_method(1, commands.Queue.Delete(queue="q"))
    sent = notified.outbox.methods()
    assert isinstance(sent[0], commands.Queue.DeleteOk)
    cancels = [m for m in sent if isinstance(m, commands.Basic.Cancel)]
    assert [(m.consumer_tag, m.nowait) for m in cancels] == [("n", True)]
    assert silent.outbox.methods() == []
    assert notified.session.channels[1].consumers == {}


def test_message_ttl_expires_and_tick_returns_deadline():
    clock = FakeClock()
    broker = Broker(clock=clock)
    c = Client(broker)
    c.declare("q", arguments={"x-message-ttl": 1000})
    c.publish("", "q", b"old")
    clock.advance(0.5)
    c.publish("", "q", b"new")
    assert broker.tick() == pytest.approx(clock.now + 0.5)
    clock.advance(0.5)
    assert broker.tick() == pytest.approx(clock.now + 0.5)
    assert [e.message.content.body for e in broker.vhosts["/"].queues["q"].ready] == [b"new"]
    clock.advance(0.5)
    assert broker.tick() is None
    assert len(broker.vhosts["/"].queues["q"].ready) == 0


def test_per_message_expiration():
    clock = FakeClock()
    broker = Broker(clock=clock)
    c = Client(broker)
    c.declare("q")
    c.publish("", "q", b"short", expiration="100")
    c.publish("", "q", b"keep")
    assert broker.tick() == pytest.approx(clock.now + 0.1)
    clock.advance(0.1)
    broker.tick()
    assert c.get("q").body == b"keep"


def test_expired_head_is_skipped_on_get_and_consume():
    clock = FakeClock()
    broker = Broker(clock=clock)
    c = Client(broker)
    c.declare("q")
    c.publish("", "q", b"a", expiration="10")
    c.publish("", "q", b"b")
    clock.advance(1)
    assert c.get("q").body == b"b"
    c.publish("", "q", b"c", expiration="10")
    c.publish("", "q", b"d")
    clock.advance(1)
    c.consume("q")
    assert c.bodies() == [b"d"]


def test_zero_ttl_delivers_to_waiting_consumer_only():
    clock = FakeClock()
    broker = Broker(clock=clock)
    c = Client(broker)
    c.declare("q", arguments={"x-message-ttl": 0})
    c.publish("", "q", b"dropped")
    broker.tick()
    c.consume("q")
    c.publish("", "q", b"delivered")
    assert c.bodies() == [b"delivered"]


def test_invalid_expiration_is_406():
    c = Client(Broker())
    c.declare("q")
    with pytest.raises(AMQPError) as info:
        c.publish("", "q", expiration="soon")
    assert info.value.reply_code == 406


def test_on_deadline_hook_is_told_of_earlier_deadlines():
    clock = FakeClock()
    broker = Broker(clock=clock)
    seen = []
    broker.on_deadline = seen.append
    c = Client(broker)
    c.declare("q")
    assert broker.tick() is None
    c.publish("", "q", b"x", expiration="200")
    assert seen == [pytest.approx(clock.now + 0.2)]
    c.publish("", "q", b"y", expiration="300")
    assert len(seen) == 1


def test_x_expires_deletes_unused_queue():
    clock = FakeClock()
    broker = Broker(clock=clock)
    c = Client(broker)
    c.declare("q", arguments={"x-expires": 1000})
    assert broker.tick() == pytest.approx(clock.now + 1)
    clock.advance(0.8)
    c.declare("q", arguments={"x-expires": 1000})
    clock.advance(0.8)
    broker.tick()
    assert "q" in broker.vhosts["/"].queues
    c.consume("q", "t")
    clock.advance(5)
    assert broker.tick() is None
    assert "q" in broker.vhosts["/"].queues
    c.call(commands.Basic.Cancel(consumer_tag="t"))
    clock.advance(0.5)
    broker.tick()
    assert "q" in broker.vhosts["/"].queues
    clock.advance(0.5)
    broker.tick()
    assert "q" not in broker.vhosts["/"].queues


def test_max_length_drop_head():
    c = Client(Broker())
    c.declare("q", arguments={"x-max-length": 2})
    for body in (b"1", b"2", b"3"):
        c.publish("", "q", body)
    assert [c.get("q", no_ack=True).body for _ in range(2)] == [b"2", b"3"]


def test_max_length_bytes():
    c = Client(Broker())
    c.declare("q", arguments={"x-max-length-bytes": 10})
    for body in (b"aaaa", b"bbbb", b"cccc"):
        c.publish("", "q", body)
    assert [c.get("q", no_ack=True).body for _ in range(2)] == [b"bbbb", b"cccc"]


def test_reject_publish_refuses_new_messages():
    c = Client(Broker())
    c.declare("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    c.publish("", "q", b"1")
    c.publish("", "q", b"2")
    assert c.get("q", no_ack=True).body == b"1"
    assert isinstance(c.get("q"), commands.Basic.GetEmpty)


def test_dead_letter_on_reject_with_x_death():
    clock = FakeClock(1_700_000_000.0)
    c = Client(Broker(clock=clock))
    c.declare("dlq")
    c.declare("work", arguments={"x-dead-letter-exchange": ""})
    c.call(
        commands.Queue.Declare(
            queue="work2", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
        )
    )
    c.bind("work2", "amq.direct", "orig")
    c.publish("amq.direct", "orig", b"m", expiration="60000", headers={"app": 1})
    got = c.get("work2")
    c.call(commands.Basic.Reject(delivery_tag=got.delivery_tag, requeue=False))
    dead = c.get("dlq")
    assert (dead.body, dead.exchange, dead.routing_key) == (b"m", "", "dlq")
    props = dead.content.properties
    assert props.expiration is None
    headers = props.headers
    assert headers["app"] == 1
    death = headers["x-death"][0]
    assert death["count"] == 1
    assert death["reason"] == "rejected"
    assert death["queue"] == "work2"
    assert death["exchange"] == "amq.direct"
    assert death["routing-keys"] == ["orig"]
    assert death["original-expiration"] == "60000"
    assert int(death["time"].timestamp()) == 1_700_000_000
    assert headers["x-first-death-reason"] == "rejected"
    assert headers["x-first-death-queue"] == "work2"
    assert headers["x-first-death-exchange"] == "amq.direct"


def test_dead_letter_on_expiry_and_maxlen_and_counts_repeat():
    clock = FakeClock()
    broker = Broker(clock=clock)
    c = Client(broker)
    c.exchange("dlx", "fanout")
    c.declare("dead")
    c.bind("dead", "dlx")
    c.declare("ttl", arguments={"x-message-ttl": 10, "x-dead-letter-exchange": "dlx"})
    c.declare("short", arguments={"x-max-length": 1, "x-dead-letter-exchange": "dlx"})
    c.publish("", "ttl", b"e")
    clock.advance(1)
    broker.tick()
    c.publish("", "short", b"first")
    c.publish("", "short", b"second")
    expired = c.get("dead", no_ack=True)
    dropped = c.get("dead", no_ack=True)
    assert expired.body == b"e" and expired.content.headers["x-death"][0]["reason"] == "expired"
    assert dropped.body == b"first" and dropped.content.headers["x-death"][0]["reason"] == "maxlen"
    # the same message dead-lettered twice from the same queue for the same reason counts 2
    c.declare("loop", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "loop"})
    c.publish("", "loop", b"again")
    for _ in range(2):
        got = c.get("loop")
        c.call(commands.Basic.Reject(delivery_tag=got.delivery_tag, requeue=False))
    deaths = c.get("loop").content.headers["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [("loop", "rejected", 2)]


def test_dead_letter_cycle_without_rejection_is_dropped():
    clock = FakeClock()
    broker = Broker(clock=clock)
    c = Client(broker)
    c.declare(
        "q", arguments={"x-message-ttl": 10, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q"}
    )
    c.publish("", "q", b"x")
    clock.advance(1)
    broker.tick()
    assert len(broker.vhosts["/"].queues["q"].ready) == 0


def test_missing_dead_letter_exchange_drops():
    c = Client(Broker())
    c.declare("q", arguments={"x-dead-letter-exchange": "nope"})
    c.publish("", "q")
    got = c.get("q")
    c.call(commands.Basic.Reject(delivery_tag=got.delivery_tag, requeue=False))
    assert isinstance(c.get("q"), commands.Basic.GetEmpty)


def test_basic_get_counts_as_use_for_x_expires():
    clock = FakeClock()
    broker = Broker(clock=clock)
    c = Client(broker)
    c.declare("q", arguments={"x-expires": 1000})
    clock.advance(0.9)
    c.get("q")
    clock.advance(0.9)
    broker.tick()
    assert "q" in broker.vhosts["/"].queues


def test_tick_reports_deadlines_of_messages_dead_lettered_while_expiring():
    clock = FakeClock()
    broker = Broker(clock=clock)
    c = Client(broker)
    c.declare("second", arguments={"x-message-ttl": 5000})
    c.declare(
        "first",
        arguments={
            "x-message-ttl": 1000,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "second",
        },
    )
    c.publish("", "first", b"x")
    clock.advance(1)
    assert broker.tick() == pytest.approx(clock.now + 5)
    assert [e.message.content.body for e in broker.vhosts["/"].queues["second"].ready] == [b"x"]


def test_requeue_into_a_full_reject_publish_queue_keeps_the_message():
    c = Client(Broker())
    c.declare("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    c.publish("", "q", b"m1")
    first = c.get("q")
    c.publish("", "q", b"m2")
    c.call(commands.Basic.Nack(first.delivery_tag, requeue=True))
    assert [c.get("q", no_ack=True).body for _ in range(2)] == [b"m1", b"m2"]


def test_undecodable_headers_through_a_headers_exchange_are_a_syntax_error():
    c = Client(Broker())
    c.declare("q")
    c.bind("q", "amq.headers", arguments={"x-match": "any", "k": 1})
    with pytest.raises(AMQPError) as raised:
        c.session.handle_publish(c.ch, "amq.headers", "", False, False, undecodable_headers())
    assert raised.value.reply_code == 502 and raised.value.connection_level
    assert isinstance(c.get("q"), commands.Basic.GetEmpty)


def test_undecodable_headers_are_dead_lettered_unchanged_on_expiry_and_reject():
    clock = FakeClock()
    c = Client(Broker(clock=clock))
    c.declare("dead")
    c.declare("loop", arguments={"x-message-ttl": 100, "x-dead-letter-exchange": ""})
    for name in ("q", "r"):
        c.declare(
            name,
            arguments={
                "x-message-ttl": 100,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "dead",
            },
        )
    c.session.handle_publish(c.ch, "", "q", False, False, undecodable_headers(b"expired"))
    c.session.handle_publish(c.ch, "", "r", False, False, undecodable_headers(b"rejected"))
    c.session.handle_publish(c.ch, "", "loop", False, False, undecodable_headers(b"looping"))
    got = c.get("r")
    c.call(commands.Basic.Reject(got.delivery_tag, requeue=False))
    clock.advance(1)
    c.broker.tick()
    clock.advance(1)
    c.broker.tick()
    bodies = sorted(c.get("dead", no_ack=True).body for _ in range(2))
    assert bodies == [b"expired", b"rejected"]
    assert isinstance(c.get("dead"), commands.Basic.GetEmpty)
    assert c.call(commands.Queue.Declare(queue="loop", passive=True)).message_count == 0


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ("lake", "{unsupported_queue_type,lake}: only classic and quorum queues are supported"),
        (b"stream", "{unsupported_queue_type,stream}: streams are not supported"),
        (1, "{unacceptable_type,long}"),
    ],
)
def test_only_classic_and_quorum_queues_are_supported(value, detail):
    c = Client(Broker())
    with pytest.raises(AMQPError) as raised:
        c.declare("q", arguments={"x-queue-type": value})
    assert (raised.value.reply_code, raised.value.connection_level) == (406, False)
    assert raised.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue 'q' in vhost '/': {detail}"
    )
    assert c.declare("q", arguments={"x-queue-type": "classic"}).queue == "q"


@pytest.mark.parametrize(
    ("value", "detail"),
    [(256, "{max_value_exceeded,256}"), (-1, "{value_negative,-1}"), ("5", "{unacceptable_type,longstr}")],
)
def test_max_priority_is_validated_like_rabbitmq(value, detail):
    c = Client(Broker())
    with pytest.raises(AMQPError) as raised:
        c.declare("q", arguments={"x-max-priority": value})
    assert (raised.value.reply_code, raised.value.connection_level) == (406, False)
    assert raised.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'q' in vhost '/': {detail}"
    )


def test_priority_queue_delivers_highest_first_and_fifo_within_a_priority():
    c = Client(Broker())
    c.declare("q", arguments={"x-max-priority": 5})
    for body, priority in ((b"none", None), (b"3a", 3), (b"9-as-5", 9), (b"5", 5), (b"3b", 3), (b"0", 0)):
        c.publish("", "q", body, priority=priority)
    assert c.call(commands.Queue.Declare(queue="q", passive=True)).message_count == 6
    got = [c.get("q", no_ack=True).body for _ in range(6)]
    assert got == [b"9-as-5", b"5", b"3a", b"3b", b"none", b"0"]


def test_priority_queue_consumers_and_requeue_keep_priority_order():
    c = Client(Broker())
    c.declare("q", arguments={"x-max-priority": 10})
    c.call(commands.Basic.Qos(prefetch_count=1))
    c.consume("q", "a")
    for body, priority in ((b"first", 1), (b"low", 1), (b"high", 8), (b"mid", 4)):
        c.publish("", "q", body, priority=priority)
    assert c.bodies() == [b"first"]
    c.call(commands.Basic.Nack(delivery_tag=1, requeue=True))  # back ahead of "low"
    assert c.bodies() == [b"high"]
    for tag in (2, 3, 4, 5):
        c.ack(tag)
    assert c.bodies() == [b"mid", b"first", b"low"]


def test_priority_queue_drop_head_drops_the_next_message_to_deliver():
    c = Client(Broker())
    c.declare("q", arguments={"x-max-priority": 2, "x-max-length": 2})
    for body, priority in ((b"low", 0), (b"high", 2), (b"mid", 1)):
        c.publish("", "q", body, priority=priority)
    assert [c.get("q", no_ack=True).body for _ in range(2)] == [b"mid", b"low"]


def test_max_priority_zero_is_a_plain_queue():
    c = Client(Broker())
    c.declare("q", arguments={"x-max-priority": 0})
    for body, priority in ((b"a", 0), (b"b", 9)):
        c.publish("", "q", body, priority=priority)
    assert [c.get("q", no_ack=True).body for _ in range(2)] == [b"a", b"b"]


def test_tick_dispatches_what_an_expired_head_held_back():
    clock = FakeClock()
    c = Client(Broker(clock=clock))
    c.declare("q")
    c.call(commands.Basic.Qos(prefetch_size=10))
    c.consume("q", "a")
    c.publish("", "q", b"12345")
    c.publish("", "q", b"too big for the credit", expiration="1000")
    c.publish("", "q", b"tiny")  # fits, but waits behind the big head (FIFO)
    assert c.bodies() == [b"12345"]
    clock.advance(2)
    c.broker.tick()
    assert c.bodies() == [b"tiny"]


def test_undecodable_headers_dead_letter_cycle_through_two_queues_is_cut():
    clock = FakeClock()
    c = Client(Broker(clock=clock))
    c.declare(
        "one",
        arguments={"x-message-ttl": 100, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "two"},
    )
    c.declare(
        "two",
        arguments={"x-message-ttl": 100, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "one"},
    )
    c.session.handle_publish(c.ch, "", "one", False, False, undecodable_headers(b"round"))
    counts = []
    for _ in range(4):
        clock.advance(1)
        c.broker.tick()
        counts.append(tuple(len(c.session.vhost.queues[name].ready) for name in ("one", "two")))
    assert counts == [(0, 1), (0, 0), (0, 0), (0, 0)]


def test_rejected_undecodable_message_may_come_back_to_its_own_queue():
    c = Client(Broker())
    c.declare("q", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q"})
    c.session.handle_publish(c.ch, "", "q", False, False, undecodable_headers(b"again"))
    for _ in range(2):  # a client's rejection breaks the cycle rule, as in RabbitMQ
        got = c.get("q")
        assert got.body == b"again"
        assert got.content.header == undecodable_headers().header
        c.call(commands.Basic.Reject(got.delivery_tag, requeue=False))
    assert len(c.session.vhost.queues["q"].ready) == 1


def test_classic_queue_type_is_equivalent_to_none_on_redeclare():
    c = Client(Broker())
    c.declare("plain")
    assert c.declare("plain", arguments={"x-queue-type": "classic"}).queue == "plain"
    c.declare("typed", arguments={"x-queue-type": b"classic"})
    assert c.declare("typed").queue == "typed"
    e = error(c, commands.Queue.Declare(queue="typed", durable=True, arguments={"x-queue-type": "quorum"}))
    assert e.reply_code == 406


def test_quorum_queue_is_a_durable_queue_with_quorum_rules():
    c = Client(Broker())
    quorum = {"x-queue-type": "quorum"}
    assert c.declare("qq", durable=True, arguments=quorum).queue == "qq"
    e = error(c, commands.Queue.Declare(queue="qq", durable=True))
    assert e.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'qq' in vhost '/': "
        "received the value 'classic' of type 'longstr' but current is the value 'quorum' of type 'longstr'"
    )
    for flags, name in (
        ({"durable": False}, "non-durable"),
        ({"durable": True, "exclusive": True}, "exclusive-owner"),
        ({"durable": True, "auto_delete": True}, "auto-delete"),
    ):
        e = error(Client(c.broker), commands.Queue.Declare(queue="other", arguments=quorum, **flags))
        assert (e.reply_code, e.reply_text) == (
            406,
            f"PRECONDITION_FAILED - invalid property '{name}' for queue 'other' in vhost '/': "
            "quorum queues are durable, not exclusive, not auto-delete",
        )
    for arguments, detail in (
        ({"x-max-priority": 5}, "invalid arg 'x-max-priority' for queue 'other' in vhost '/': quorum queues have no priorities"),
        ({"x-delivery-limit": -1}, "invalid arg 'x-delivery-limit' for queue 'other' in vhost '/': {value_negative,-1}"),
        (
            {"x-overflow": "reject-publish-dlx"},
            "invalid arg 'x-overflow' for queue 'other' in vhost '/': "
            "quorum queues support x-overflow drop-head and reject-publish only",
        ),
    ):  # fmt: skip
        e = error(
            Client(c.broker),
            commands.Queue.Declare(queue="other", durable=True, arguments={**quorum, **arguments}),
        )
        assert e.reply_text == f"PRECONDITION_FAILED - {detail}"
    assert "other" not in c.broker.vhosts["/"].queues


def test_quorum_delivery_limit_dead_letters_a_message_returned_too_often():
    c = Client(Broker())
    c.declare("dead")
    c.declare(
        "qq",
        durable=True,
        arguments={
            "x-queue-type": "quorum",
            "x-delivery-limit": 1,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dead",
        },
    )
    c.publish("", "qq", b"poison")
    for _ in range(2):  # delivered, returned once (within the limit), delivered again
        get_ok = c.get("qq")
        c.call(commands.Basic.Reject(delivery_tag=get_ok.delivery_tag, requeue=True))
    assert c.call(commands.Queue.Declare(queue="qq", passive=True)).message_count == 0
    dead = c.get("dead", no_ack=True)
    assert dead.body == b"poison"
    assert dead.content.properties.headers["x-first-death-reason"] == "delivery_limit"
