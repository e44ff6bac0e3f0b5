import pytest
from pamqp import commands

from gateway.broker import Broker
from gateway.broker.hold import Hold
from gateway.wire.errors import AMQPError

from .broker_fakes import Client, FakeStore, Returned, content, undecodable_headers


def error(c, method):
    with pytest.raises(AMQPError) as info:
        c.call(method)
    return info.value


def confirms(c):
    """The publisher confirms sent so far, as (kind, delivery tag, multiple)."""
    return [
        (type(m).__name__, m.delivery_tag, m.multiple)
        for m in c.outbox.methods()
        if isinstance(m, (commands.Basic.Ack, commands.Basic.Nack))
    ]


def confirming(broker):
    c = Client(broker)
    assert isinstance(c.call(commands.Confirm.Select()), commands.Confirm.SelectOk)
    return c


def test_transient_messages_are_confirmed_at_once_counting_from_one():
    c = confirming(Broker())
    c.declare("q")
    c.publish("", "q")
    c.publish("", "q", delivery_mode=2)
    c.publish("", "nowhere")
    assert confirms(c) == [("Ack", 1, False), ("Ack", 2, False), ("Ack", 3, False)]


def test_publishes_of_one_batch_get_one_multiple_ack_and_a_nack_splits_the_run():
    """What one read of the server brings (flushed once at its end) is confirmed together,
    transient and unroutable publishes included, as RabbitMQ coalesces confirms."""
    c = confirming(Broker())
    c.declare("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    c.outbox.take()
    for key in ("nowhere", "nowhere", "q", "q", "nowhere", "nowhere"):  # the second "q" is refused
        c.session.handle_publish(c.ch, "", key, False, False, content(b"m"))
    assert confirms(c) == []
    c.session.flush_confirms()
    assert confirms(c) == [("Ack", 3, True), ("Nack", 4, False), ("Ack", 6, True)]


def test_confirm_select_nowait():
    c = Client(Broker())
    assert c.call(commands.Confirm.Select(nowait=True)) is None
    c.publish("", "x")
    assert confirms(c) == [("Ack", 1, False)]


def test_unroutable_mandatory_returns_before_ack():
    c = confirming(Broker())
    c.publish("amq.direct", "nowhere", mandatory=True)
    sent = c.outbox.take()
    assert isinstance(sent[0], Returned)
    assert isinstance(sent[1][1], commands.Basic.Ack) and sent[1][1].delivery_tag == 1


def test_persistent_on_durable_queue_waits_for_store_and_coalesces():
    store = FakeStore()
    broker = Broker(store=store)
    c = confirming(broker)
    c.declare("d", durable=True)
    c.declare("t")
    c.publish("", "d", b"1", delivery_mode=2)
    c.publish("", "d", b"2", delivery_mode=2)
    c.publish("", "t", b"3", delivery_mode=2)
    assert confirms(c) == []
    broker.on_durable(store.commit())
    assert confirms(c) == [("Ack", 3, True)]
    c.publish("", "d", b"4", delivery_mode=2)
    c.publish("", "t", b"5")
    assert confirms(c) == []
    broker.on_durable(store.commit())
    assert confirms(c) == [("Ack", 5, True)]
    c.publish("", "t", b"6")
    assert confirms(c) == [("Ack", 6, False)]


def test_confirms_wait_only_for_their_own_ticket():
    store = FakeStore()
    broker = Broker(store=store)
    c = confirming(broker)
    c.declare("d", durable=True)
    c.publish("", "d", b"1", delivery_mode=2)
    first = store.commit()
    c.publish("", "d", b"2", delivery_mode=2)
    broker.on_durable(first)
    assert confirms(c) == [("Ack", 1, False)]
    broker.on_durable(store.commit())
    assert confirms(c) == [("Ack", 2, False)]


def test_transient_message_on_durable_queue_is_not_stored_and_confirmed_at_once():
    store = FakeStore()
    broker = Broker(store=store)
    c = confirming(broker)
    c.declare("d", durable=True)
    broker.on_durable(store.commit())  # the queue itself
    c.publish("", "d", b"1")
    assert confirms(c) == [("Ack", 1, False)]
    assert store.named("add_message") == []


def test_reject_publish_nacks():
    c = confirming(Broker())
    c.declare("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    c.publish("", "q")
    c.publish("", "q")
    c.publish("", "q")
    assert confirms(c) == [("Ack", 1, False), ("Nack", 2, False), ("Nack", 3, False)]


def test_nacks_interleave_in_order_with_waiting_acks():
    store = FakeStore()
    broker = Broker(store=store)
    c = confirming(broker)
    c.declare("d", durable=True)
    c.declare("full", arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    c.publish("", "d", delivery_mode=2)
    c.publish("", "d", delivery_mode=2)
    c.publish("", "full")
    c.publish("", "d", delivery_mode=2)
    broker.on_durable(store.commit())
    assert confirms(c) == [("Ack", 2, True), ("Nack", 3, False), ("Ack", 4, False)]


def test_closed_channel_forgets_pending_confirms():
    store = FakeStore()
    broker = Broker(store=store)
    c = confirming(broker)
    c.declare("d", durable=True)
    c.publish("", "d", delivery_mode=2)
    c.session.close_channel(1)
    broker.on_durable(store.commit())
    assert confirms(c) == []


def test_tx_and_confirm_are_exclusive():
    c = confirming(Broker())
    e = error(c, commands.Tx.Select())
    assert (e.reply_code, e.reply_text) == (
        406,
        "PRECONDITION_FAILED - cannot switch from confirm to tx mode",
    )
    c = Client(c.broker)
    c.call(commands.Tx.Select())
    e = error(c, commands.Confirm.Select())
    assert (e.reply_code, e.reply_text) == (
        406,
        "PRECONDITION_FAILED - cannot switch from tx to confirm mode",
    )


def test_commit_or_rollback_without_select_is_406():
    for method in (commands.Tx.Commit(), commands.Tx.Rollback()):
        e = error(Client(Broker()), method)
        assert (e.reply_code, e.reply_text) == (406, "PRECONDITION_FAILED - channel is not transactional")
        assert not e.connection_level


def test_tx_publishes_wait_for_commit_and_rollback_discards():
    c = Client(Broker())
    c.declare("q")
    assert isinstance(c.call(commands.Tx.Select()), commands.Tx.SelectOk)
    c.publish("", "q", b"1")
    c.publish("", "nowhere", b"r", mandatory=True)
    assert len(c.session.vhost.queues["q"].ready) == 0
    assert c.outbox.take() == []
    assert isinstance(c.call(commands.Tx.Commit()), commands.Tx.CommitOk)
    assert len(c.session.vhost.queues["q"].ready) == 1
    c.publish("", "q", b"2")
    assert isinstance(c.call(commands.Tx.Rollback()), commands.Tx.RollbackOk)
    c.call(commands.Tx.Commit())
    assert len(c.session.vhost.queues["q"].ready) == 1


def test_tx_commit_sends_returns_then_commit_ok():
    c = Client(Broker())
    c.call(commands.Tx.Select())
    c.publish("", "nowhere", b"r", mandatory=True)
    c.session.handle_method(1, commands.Tx.Commit())
    sent = c.outbox.take()
    assert isinstance(sent[0], Returned)
    assert isinstance(sent[1][1], commands.Tx.CommitOk)


def test_tx_acks_apply_on_commit_and_come_back_on_rollback():
    c = Client(Broker())
    c.declare("q")
    for body in (b"1", b"2"):
        c.publish("", "q", body)
    c.call(commands.Tx.Select())
    c.call(commands.Basic.Qos(prefetch_count=2))
    c.consume("q", "a")
    c.outbox.take()
    c.ack(1)
    c.call(commands.Basic.Reject(delivery_tag=2, requeue=True))
    queue = c.session.vhost.queues["q"]
    assert len(queue.ready) == 0
    c.call(commands.Tx.Rollback())
    assert list(c.session.channels[1].unacked) == [1, 2]
    c.ack(2)
    c.call(commands.Tx.Commit())
    assert list(c.session.channels[1].unacked) == [1]
    assert len(queue.ready) == 0
    c.call(commands.Basic.Nack(delivery_tag=1, requeue=True))
    assert c.outbox.deliveries() == []
    c.call(commands.Tx.Commit())
    assert [(d.body, d.redelivered) for d in c.outbox.deliveries()] == [(b"1", True)]


def test_unknown_tag_in_tx_fails_at_once():
    c = Client(Broker())
    c.call(commands.Tx.Select())
    with pytest.raises(AMQPError) as info:
        c.ack(3)
    assert info.value.reply_code == 406


def test_closing_tx_channel_requeues_uncommitted_acks():
    c = Client(Broker())
    c.declare("q")
    c.publish("", "q")
    c.call(commands.Tx.Select())
    got = c.get("q")
    c.ack(got.delivery_tag)
    c.session.close_channel(1)
    assert [e.redelivered for e in c.session.vhost.queues["q"].ready] == [True]


def test_tx_publish_to_unknown_exchange_fails_at_publish():
    c = Client(Broker())
    c.call(commands.Tx.Select())
    with pytest.raises(AMQPError) as info:
        c.publish("nope", "k")
    assert info.value.reply_code == 404


def test_tx_commit_ok_waits_for_the_store_when_the_transaction_wrote_to_it():
    store = FakeStore()
    broker = Broker(store=store)
    c = Client(broker)
    c.declare("durable", durable=True)
    store.commit()
    broker.on_durable(store.batch - 1)
    c.call(commands.Tx.Select())
    c.publish("", "durable", b"persistent", delivery_mode=2)
    c.session.handle_method(c.ch, commands.Tx.Commit())
    assert c.outbox.methods(commands.Tx.CommitOk) == []
    # A second commit with nothing to store still answers after the first one.
    c.publish("", "durable", b"transient")
    c.session.handle_method(c.ch, commands.Tx.Commit())
    assert c.outbox.methods(commands.Tx.CommitOk) == []
    broker.on_durable(store.commit())
    assert len(c.outbox.methods(commands.Tx.CommitOk)) == 2


def test_tx_commit_ok_is_immediate_without_store_writes():
    store = FakeStore()
    broker = Broker(store=store)
    c = Client(broker)
    c.declare("transient-q")
    c.call(commands.Tx.Select())
    c.publish("", "transient-q", b"m")
    assert isinstance(c.call(commands.Tx.Commit()), commands.Tx.CommitOk)


def test_tx_commit_to_a_deleted_exchange_applies_nothing():
    c = Client(Broker())
    c.declare("q")
    c.exchange("gone", "fanout")
    c.bind("q", "gone")
    c.call(commands.Tx.Select())
    c.publish("", "q", b"first")
    c.publish("gone", "", b"second")
    other = Client(c.broker)
    other.call(commands.Exchange.Delete(exchange="gone"))
    with pytest.raises(AMQPError) as raised:
        c.call(commands.Tx.Commit())
    assert raised.value.reply_code == 404
    assert other.call(commands.Queue.Declare(queue="q", passive=True)).message_count == 0


def test_tx_commit_with_an_unreadable_headers_table_applies_nothing():
    c = Client(Broker())
    c.declare("q")
    c.bind("q", "amq.headers", arguments={"x-match": "all"})
    c.call(commands.Tx.Select())
    c.publish("", "q", b"first")
    c.session.handle_publish(c.ch, "amq.headers", "", False, False, undecodable_headers())
    with pytest.raises(AMQPError) as raised:
        c.call(commands.Tx.Commit())
    assert (raised.value.reply_code, raised.value.connection_level) == (502, True)
    assert "malformed headers table" in raised.value.reply_text
    assert len(c.session.vhost.queues["q"].ready) == 0


def test_a_lost_ticket_nacks_its_publishes_and_later_ones_are_acked():
    store = FakeStore()
    broker = Broker(store=store)
    c = confirming(broker)
    c.declare("d", durable=True)
    c.publish("", "d", b"1", delivery_mode=2)
    broker.on_durable(store.commit())
    c.publish("", "d", b"2", delivery_mode=2)
    c.publish("", "d", b"3", delivery_mode=2)
    lost = store.commit()
    c.publish("", "d", b"4", delivery_mode=2)
    broker.on_lost(lost)
    assert confirms(c) == [("Ack", 1, False), ("Nack", 2, False), ("Nack", 3, False)]
    broker.on_durable(store.commit())
    assert confirms(c) == [("Ack", 4, False)]
    # The nacked messages stay queued (in memory only): consumers still get them.
    c.consume("d", no_ack=True)
    assert c.bodies() == [b"1", b"2", b"3", b"4"]


def test_a_lost_ticket_closes_a_transaction_waiting_for_it():
    store = FakeStore()
    broker = Broker(store=store)
    c = Client(broker)
    c.declare("d", durable=True)
    c.call(commands.Tx.Select())
    c.publish("", "d", b"1", delivery_mode=2)
    assert c.call(commands.Tx.Commit()) is None  # Commit-Ok waits for the store
    broker.on_lost(store.commit())
    closed = [item for item in c.outbox.take() if item[0] == "close_channel"]
    assert [(channel, e.reply_code) for _, channel, e in closed] == [(1, 506)]
    assert "the store failed to write the transaction" in closed[0][2].reply_text
    assert 1 not in c.session.channels


def test_the_alarm_holds_sessions_that_publish_to_the_store_only():
    store = FakeStore()
    broker = Broker(store=store)
    persistent, transient, management = Client(broker), Client(broker), Client(broker)
    persistent.declare("d", durable=True)
    transient.declare("t")
    broker.disk_hold = hold = Hold("low on disk space")
    transient.publish("", "t", delivery_mode=2)  # a queue the store does not keep
    transient.publish("", "d")  # a transient message
    management.publish("amq.gateway.management", "", b"{}")
    assert transient.session.hold is None and management.session.hold is None
    persistent.publish("", "d", delivery_mode=2)
    assert persistent.session.hold is hold
    assert persistent.outbox.blocked == "low on disk space"
    assert len(store.named("add_message")) == 1  # the publish that found the alarm is kept
