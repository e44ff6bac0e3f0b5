import pytest
from pamqp import commands

from gateway.broker import Broker
from gateway.wire.errors import AMQPError

from .broker_fakes import Client, GetOk


def error(c, method):
    with pytest.raises(AMQPError) as info:
        c.call(method)
    return info.value


def setup(*queues, broker=None):
    c = Client(broker or Broker())
    for q in queues:
        c.declare(q)
    return c


def publish_n(c, n, queue="q"):
    for i in range(n):
        c.publish("", queue, str(i).encode())


def test_consume_ok_comes_before_deliveries_and_server_tag():
    c = setup("q")
    publish_n(c, 2)
    c.session.handle_method(1, commands.Basic.Consume(queue="q"))
    sent = c.outbox.take()
    assert isinstance(sent[0][1], commands.Basic.ConsumeOk)
    tag = sent[0][1].consumer_tag
    assert tag.startswith("amq.ctag-")
    assert [(d.consumer_tag, d.delivery_tag, d.redelivered, d.body) for d in sent[1:]] == [
        (tag, 1, False, b"0"),
        (tag, 2, False, b"1"),
    ]


def test_consume_unknown_queue_404_and_duplicate_tag_530():
    c = setup("q")
    e = error(c, commands.Basic.Consume(queue="nope"))
    assert (e.reply_code, e.reply_text) == (404, "NOT_FOUND - no queue 'nope' in vhost '/'")
    c = Client(c.broker)
    c.consume("q", "t")
    e = error(c, commands.Basic.Consume(queue="q", consumer_tag="t"))
    assert (e.reply_code, e.reply_text) == (530, "NOT_ALLOWED - attempt to reuse consumer tag 't'")
    assert e.connection_level


def test_same_tag_on_another_channel_is_fine():
    c = setup("q")
    c.consume("q", "t")
    c.session.open_channel(2)
    c.session.handle_method(2, commands.Basic.Consume(queue="q", consumer_tag="t"))


def test_exclusive_consumer_both_ways_403():
    broker = Broker()
    a = setup("q", broker=broker)
    a.consume("q", "a", exclusive=True)
    b = Client(broker)
    e = error(b, commands.Basic.Consume(queue="q"))
    assert (e.reply_code, e.reply_text) == (403, "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use")
    c = setup("r", broker=broker)
    c.consume("r", "plain")
    d = Client(broker)
    assert error(d, commands.Basic.Consume(queue="r", exclusive=True)).reply_code == 403


def test_round_robin_between_consumers():
    c = setup("q")
    c.consume("q", "a", no_ack=True)
    c.consume("q", "b", no_ack=True)
    publish_n(c, 4)
    assert [d.consumer_tag for d in c.outbox.deliveries()] == ["a", "b", "a", "b"]


def test_per_consumer_prefetch_and_ack_releases():
    c = setup("q")
    c.call(commands.Basic.Qos(prefetch_count=2))
    c.consume("q", "a")
    publish_n(c, 5)
    assert [d.delivery_tag for d in c.outbox.deliveries()] == [1, 2]
    c.ack(1)
    assert [d.body for d in c.outbox.deliveries()] == [b"2"]
    c.ack(3, multiple=True)
    assert [d.body for d in c.outbox.deliveries()] == [b"3", b"4"]


def test_qos_non_global_applies_to_consumers_started_after():
    c = setup("q")
    c.consume("q", "unlimited")
    c.call(commands.Basic.Qos(prefetch_count=1))
    publish_n(c, 3)
    assert len(c.outbox.deliveries()) == 3


def test_global_prefetch_is_shared_by_the_channel():
    c = setup("q1", "q2")
    c.call(commands.Basic.Qos(prefetch_count=3, global_=True))
    c.consume("q1", "a")
    c.consume("q2", "b")
    publish_n(c, 3, "q1")
    publish_n(c, 3, "q2")
    assert [d.consumer_tag for d in c.outbox.deliveries()] == ["a", "a", "a"]
    c.ack(2, multiple=True)
    assert [d.consumer_tag for d in c.outbox.deliveries()] == ["b", "b"]


def test_prefetch_size_limits_bytes_but_never_blocks_a_single_message():
    c = setup("q")
    c.call(commands.Basic.Qos(prefetch_size=10))
    c.consume("q", "a")
    c.publish("", "q", b"x" * 20)
    c.publish("", "q", b"y" * 4)
    assert [d.body for d in c.outbox.deliveries()] == [b"x" * 20]
    c.ack(1)
    c.publish("", "q", b"z" * 4)
    c.publish("", "q", b"w" * 4)
    assert [d.body for d in c.outbox.deliveries()] == [b"y" * 4, b"z" * 4]


def test_qos_ok_is_sent():
    c = setup()
    assert isinstance(c.call(commands.Basic.Qos(prefetch_count=5)), commands.Basic.QosOk)


def test_cancel_stops_deliveries_and_keeps_unacked():
    c = setup("q")
    c.consume("q", "a")
    publish_n(c, 1)
    assert isinstance(c.call(commands.Basic.Cancel(consumer_tag="a")), commands.Basic.CancelOk)
    publish_n(c, 1)
    assert [d.body for d in c.outbox.deliveries()] == [b"0"]
    c.ack(1)
    assert c.call(commands.Basic.Cancel(consumer_tag="a", nowait=True)) is None
    assert isinstance(c.call(commands.Basic.Cancel(consumer_tag="unknown")), commands.Basic.CancelOk)


def test_get_and_get_empty_with_message_count():
    c = setup("q")
    assert isinstance(c.get("q"), commands.Basic.GetEmpty)
    publish_n(c, 3)
    got = c.get("q")
    assert isinstance(got, GetOk)
    assert (
        got.delivery_tag,
        got.redelivered,
        got.exchange,
        got.routing_key,
        got.message_count,
        got.body,
    ) == (
        1,
        False,
        "",
        "q",
        2,
        b"0",
    )
    e = error(c, commands.Basic.Get(queue="nope"))
    assert e.reply_code == 404


def test_nack_requeue_puts_message_back_in_order_redelivered():
    c = setup("q")
    publish_n(c, 3)
    first = c.get("q")
    second = c.get("q")
    c.call(commands.Basic.Nack(delivery_tag=second.delivery_tag, requeue=True))
    c.call(commands.Basic.Nack(delivery_tag=first.delivery_tag, requeue=True))
    again = [c.get("q", no_ack=True) for _ in range(3)]
    assert [(g.body, g.redelivered) for g in again] == [(b"0", True), (b"1", True), (b"2", False)]


def test_requeue_merges_with_messages_requeued_earlier():
    c = setup("q")
    publish_n(c, 4)
    tags = [c.get("q").delivery_tag for _ in range(3)]
    c.call(commands.Basic.Reject(delivery_tag=tags[1], requeue=True))
    c.call(commands.Basic.Nack(delivery_tag=tags[2], multiple=True, requeue=True))
    assert [c.get("q", no_ack=True).body for _ in range(4)] == [b"0", b"1", b"2", b"3"]


def test_nack_multiple_without_requeue_drops():
    c = setup("q")
    publish_n(c, 3)
    c.consume("q", "a")
    c.outbox.take()
    c.call(commands.Basic.Nack(delivery_tag=2, multiple=True, requeue=False))
    assert c.session.channels[1].unacked.keys() == {3}
    assert c.session.vhost.queues["q"].ready == type(c.session.vhost.queues["q"].ready)()


def test_ack_multiple_zero_acks_all():
    c = setup("q")
    publish_n(c, 3)
    c.consume("q", "a")
    c.outbox.take()
    c.ack(0, multiple=True)
    assert c.session.channels[1].unacked == {}


@pytest.mark.parametrize(
    "act",
    [
        lambda c: c.ack(7),
        lambda c: c.ack(7, multiple=True),
        lambda c: c.call(commands.Basic.Ack(delivery_tag=7)),
        lambda c: c.call(commands.Basic.Nack(delivery_tag=7)),
        lambda c: c.call(commands.Basic.Reject(delivery_tag=7)),
    ],
)
def test_unknown_delivery_tag_is_406_channel_error(act):
    c = setup("q")
    with pytest.raises(AMQPError) as info:
        act(c)
    assert (info.value.reply_code, info.value.reply_text) == (
        406,
        "PRECONDITION_FAILED - unknown delivery tag 7",
    )
    assert not info.value.connection_level
    assert info.value.class_id == 60


def test_double_ack_and_ack_of_no_ack_delivery_are_406():
    c = setup("q")
    publish_n(c, 1)
    got = c.get("q")
    c.ack(got.delivery_tag)
    with pytest.raises(AMQPError) as info:
        c.ack(got.delivery_tag)
    assert info.value.reply_code == 406
    c = setup("q", broker=c.broker)
    c.consume("q", "n", no_ack=True)
    publish_n(c, 1)
    tag = c.outbox.deliveries()[0].delivery_tag
    with pytest.raises(AMQPError) as info:
        c.ack(tag)
    assert info.value.reply_code == 406


def test_recover_requeues_unacked_redelivered():
    c = setup("q")
    c.consume("q", "a")
    publish_n(c, 2)
    c.outbox.take()
    assert isinstance(c.call(commands.Basic.Recover(requeue=True)), commands.Basic.RecoverOk)
    assert [(d.body, d.redelivered, d.delivery_tag) for d in c.outbox.deliveries()] == [
        (b"0", True, 3),
        (b"1", True, 4),
    ]
    e = error(c, commands.Basic.Recover(requeue=False))
    assert e.reply_code == 540


def test_closing_channel_requeues_and_cancels():
    broker = Broker()
    a = setup("q", broker=broker)
    b = Client(broker)
    b.consume("q", "b")
    publish_n(a, 2)
    assert len(b.outbox.deliveries()) == 2
    a.consume("q", "a")
    b.session.close_channel(1)
    assert [(d.body, d.redelivered) for d in a.outbox.deliveries()] == [(b"0", True), (b"1", True)]
    assert len(broker.vhosts["/"].queues["q"].consumers) == 1


def test_disconnect_requeues_everything():
    broker = Broker()
    a = setup("q", broker=broker)
    publish_n(a, 1)
    a.get("q")
    a.session.disconnect()
    assert [e.redelivered for e in broker.vhosts["/"].queues["q"].ready] == [True]
    assert a.session.id not in broker.sessions


def test_channel_flow_pauses_this_channel():
    c = setup("q")
    c.consume("q", "a")
    reply = c.call(commands.Channel.Flow(active=False))
    assert isinstance(reply, commands.Channel.FlowOk) and reply.active is False
    publish_n(c, 2)
    assert c.outbox.deliveries() == []
    assert c.call(commands.Channel.Flow(active=True)).active is True
    assert [d.body for d in c.outbox.deliveries()] == [b"0", b"1"]


def test_paused_channel_lets_other_consumers_take_messages():
    broker = Broker()
    a = setup("q", broker=broker)
    b = Client(broker)
    a.consume("q", "a")
    b.consume("q", "b")
    a.call(commands.Channel.Flow(active=False))
    publish_n(a, 2)
    assert [d.consumer_tag for d in b.outbox.deliveries()] == ["b", "b"]


def test_unwritable_outbox_stops_dispatch_until_resume():
    c = setup("q")
    c.consume("q", "a")
    c.outbox.open = False
    publish_n(c, 3)
    assert c.outbox.deliveries() == []
    c.outbox.open = True
    c.session.resume()
    assert [d.body for d in c.outbox.deliveries()] == [b"0", b"1", b"2"]


def test_publishing_behind_a_head_no_consumer_can_take_waits_for_credit():
    c = setup("q")
    c.call(commands.Basic.Qos(prefetch_count=1))
    c.consume("q", "a")
    publish_n(c, 4)
    assert c.bodies() == [b"0"]
    c.ack(1)
    assert c.bodies() == [b"1"]
    c.ack(2, multiple=True)
    assert c.bodies() == [b"2"]


def test_cancelling_a_consumer_lets_the_owner_discard_a_head_it_held_up():
    broker = Broker()
    a = Client(broker)
    a.declare("mine", exclusive=True)
    a.call(commands.Basic.Qos(prefetch_count=1))
    a.consume("mine", "full")
    a.consume("mine", "local", no_local=True)
    a.publish("", "mine", b"first")
    a.publish("", "mine", b"own")  # "full" has no credit and "local" refuses its own messages
    assert a.bodies() == [b"first"]
    a.call(commands.Basic.Cancel(consumer_tag="full"))
    a.publish("", "mine", b"own again")  # now only the no-local consumer is left: both go
    assert len(broker.vhosts["/"].queues["mine"].ready) == 0


def test_no_local_skips_own_messages():
    broker = Broker()
    a = setup("q", broker=broker)
    a.consume("q", "mine", no_local=True)
    b = Client(broker)
    b.publish("", "q", b"from-b")
    a.publish("", "q", b"from-a")
    assert a.bodies() == [b"from-b"]
    c = Client(broker)
    c.consume("q", "other")
    assert c.bodies() == [b"from-a"]


def test_no_local_on_own_exclusive_queue_discards_own_messages():
    broker = Broker()
    a = Client(broker)
    a.declare("mine", exclusive=True)
    a.bind("mine", "amq.fanout")
    a.consume("mine", "t", no_local=True)
    a.publish("amq.fanout", "", b"own")
    Client(broker).publish("amq.fanout", "", b"theirs")
    assert a.bodies() == [b"theirs"]
    assert len(broker.vhosts["/"].queues["mine"].ready) == 0


def test_method_on_unopened_channel_is_504():
    c = setup()
    with pytest.raises(AMQPError) as info:
        c.call(commands.Basic.Qos(), channel=9)
    assert info.value.reply_code == 504


def test_auto_delete_queue_deleted_on_cancel_keeps_unacked_ackable():
    c = Client(Broker())
    c.declare("q", auto_delete=True)
    c.consume("q", "a")
    publish_n(c, 1)
    c.outbox.take()
    c.call(commands.Basic.Cancel(consumer_tag="a"))
    assert "q" not in c.session.vhost.queues
    c.ack(1)


def test_client_answers_to_server_cancel_and_flow_are_accepted():
    c = setup("q")
    c.consume("q", tag="t1")
    c.outbox.take()
    assert c.call(commands.Basic.CancelOk("t1")) is None
    assert c.call(commands.Channel.FlowOk(active=True)) is None
    assert c.outbox.take() == []


def test_no_local_head_does_not_hold_back_other_connections_messages():
    broker = Broker()
    a = setup("q", broker=broker)
    a.consume("q", "mine", no_local=True)
    b = Client(broker)
    a.publish("", "q", b"own-1")  # waits: only a no-local consumer of its own connection
    b.publish("", "q", b"from-b-1")
    a.publish("", "q", b"own-2")
    b.publish("", "q", b"from-b-2")
    assert a.bodies() == [b"from-b-1", b"from-b-2"]
    c = Client(broker)
    c.consume("q", "other")
    assert c.bodies() == [b"own-1", b"own-2"]


def test_no_local_head_does_not_hold_back_messages_however_deep():
    broker = Broker()
    a = setup("q", broker=broker)
    a.consume("q", "mine", no_local=True)
    b = Client(broker)
    publish_n(a, 1500)  # nobody here may take these
    b.publish("", "q", b"from-b-1")
    assert a.bodies() == [b"from-b-1"]
    b.publish("", "q", b"from-b-2")  # offered at once, behind the held-back head
    assert a.bodies() == [b"from-b-2"]
    assert len(broker.vhosts["/"].queues["q"].ready) == 1500


def test_no_local_skipping_keeps_each_consumers_fifo():
    broker = Broker()
    a = setup("q", broker=broker)
    b = Client(broker)
    x = Client(broker)
    x.call(commands.Basic.Qos(prefetch_size=10))
    x.consume("q", "x")
    b.publish("", "q", b"12345")  # x holds 5 bytes of its 10
    a.call(commands.Basic.Qos(prefetch_count=1))
    a.consume("q", "a", no_local=True)
    b.publish("", "q", b"123456")  # too big for x now: a takes it and is full
    a.publish("", "q", b"own, 30 bytes: for x only")
    b.publish("", "q", b"abc")  # x could take it, but x is owed the head first
    assert x.bodies() == [b"12345"]
    assert a.bodies() == [b"123456"]
    x.ack(1)
    assert x.bodies() == [b"own, 30 bytes: for x only"]
    a.ack(1)
    assert a.bodies() == [b"abc"]


def test_a_closed_channel_requeues_in_steps_that_keep_the_queue_in_order():
    """Each step is one turn of the server's loop (Broker.defer): 12,000 unacked messages go
    back as 5,000 + 5,000 + 2,000, the last deliveries first, and end in publish order."""
    from gateway.broker.channel import REQUEUE_STEP

    broker = Broker()
    steps = []
    broker.on_later = lambda: steps.append(len(broker.later))
    a = setup("q", broker=broker)
    publish_n(a, 12_000)
    b = Client(broker)
    b.consume("q", "b")
    assert len(b.outbox.deliveries()) == 12_000
    ready = broker.vhosts["/"].queues["q"].ready
    b.session.close_channel(1)
    assert len(ready) == REQUEUE_STEP and [e.message.content.body for e in ready][:1] == [b"7000"]
    while broker.later:
        broker.later.popleft()()
    assert steps == [1, 1]
    assert [e.message.content.body for e in ready] == [str(n).encode() for n in range(12_000)]
    assert all(e.redelivered for e in ready)
