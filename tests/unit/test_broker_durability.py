import pytest
from pamqp import commands

from gateway.broker import Broker
from gateway.broker.records import BindingRecord as B
from gateway.broker.records import ExchangeRecord as X
from gateway.broker.records import MessageRecord as M
from gateway.broker.records import QueueRecord as Q
from gateway.broker.records import Snapshot

from .broker_fakes import Client, FakeClock, FakeStore, content


def stored(broker=None, clock=None):
    store = FakeStore()
    broker = Broker(store=store, clock=clock or FakeClock())
    return store, broker, Client(broker)


def test_only_durable_topology_is_stored():
    store, broker, c = stored()
    c.exchange("dx", "topic", durable=True, arguments={"alternate-exchange": "ae"})
    c.exchange("tx", "fanout")
    c.declare("dq", durable=True, arguments={"x-max-length": 5})
    c.declare("tq")
    c.declare("eq", durable=True, exclusive=True)
    c.bind("dq", "dx", "a.#")
    c.bind("tq", "dx", "a.#")
    c.bind("dq", "tx")
    c.bind("eq", "amq.direct", "k")
    c.bind("dq", "amq.direct", "k")
    c.call(commands.Exchange.Bind(destination="dx", source="amq.topic", routing_key="#"))
    c.call(commands.Exchange.Bind(destination="tx", source="amq.topic", routing_key="#"))
    assert store.named("put_exchange") == [("/", "dx", "topic", False, False, {"alternate-exchange": "ae"})]
    assert store.named("put_queue") == [("/", "dq", False, {"x-max-length": 5})]
    assert store.named("put_binding") == [
        ("/", "dx", "queue", "dq", "a.#", {}),
        ("/", "amq.direct", "queue", "dq", "k", {}),
        ("/", "amq.topic", "exchange", "dx", "#", {}),
    ]


def test_deletes_reach_the_store():
    store, broker, c = stored()
    c.exchange("dx", "direct", durable=True)
    c.declare("dq", durable=True)
    c.bind("dq", "dx", "k")
    c.call(commands.Queue.Unbind(queue="dq", exchange="dx", routing_key="k"))
    c.bind("dq", "dx", "k2")
    c.call(commands.Exchange.Delete(exchange="dx"))
    c.call(commands.Queue.Delete(queue="dq"))
    assert store.named("delete_binding") == [
        ("/", "dx", "queue", "dq", "k", {}),
        ("/", "dx", "queue", "dq", "k2", {}),
    ]
    assert store.named("delete_exchange") == [("/", "dx")]
    assert store.named("delete_queue") == [("/", "dq")]


def test_add_vhost_is_stored():
    store, broker, c = stored()
    broker.add_vhost("v")
    assert store.named("put_vhost") == [("v",)]


def test_persistent_messages_on_durable_queues_lifecycle():
    store, broker, c = stored()
    c.declare("dq", durable=True)
    broker.on_durable(store.commit())  # its Declare-Ok
    c.declare("tq")
    c.bind("dq", "amq.fanout")
    c.bind("tq", "amq.fanout")
    c.publish("amq.fanout", "k", b"p", delivery_mode=2)
    c.publish("amq.fanout", "k", b"t", delivery_mode=1)
    adds = store.named("add_message")
    assert len(adds) == 1
    vhost, queue, message_id, exchange, key, stored_content, routed_at = adds[0]
    assert (vhost, queue, exchange, key, stored_content.body) == ("/", "dq", "amq.fanout", "k", b"p")
    assert routed_at == broker.clock()
    got = c.get("dq")
    assert store.named("mark_delivered") == [("/", "dq", message_id)]
    c.call(commands.Basic.Reject(delivery_tag=got.delivery_tag, requeue=True))
    got = c.get("dq")
    assert len(store.named("mark_delivered")) == 1
    c.ack(got.delivery_tag)
    assert store.named("remove_message") == [("/", "dq", message_id)]


def test_message_removed_on_no_ack_purge_expiry_and_drop():
    clock = FakeClock()
    store, broker, c = stored(clock=clock)
    c.declare("dq", durable=True, arguments={"x-max-length": 1})
    broker.on_durable(store.commit())  # its Declare-Ok
    c.publish("", "dq", b"1", delivery_mode=2)
    c.publish("", "dq", b"2", delivery_mode=2)
    c.get("dq", no_ack=True)
    c.publish("", "dq", b"3", delivery_mode=2)
    c.call(commands.Queue.Purge(queue="dq"))
    c.publish("", "dq", b"4", delivery_mode=2, expiration="10")
    clock.advance(1)
    broker.tick()
    ids = [call[2] for call in store.named("add_message")]
    assert [call[2] for call in store.named("remove_message")] == ids


def test_message_ids_are_unique_and_shared_across_queues():
    store, broker, c = stored()
    c.declare("a", durable=True)
    c.declare("b", durable=True)
    c.bind("a", "amq.fanout")
    c.bind("b", "amq.fanout")
    c.publish("amq.fanout", "", b"1", delivery_mode=2)
    c.publish("amq.fanout", "", b"2", delivery_mode=2)
    ids = [call[2] for call in store.named("add_message")]
    assert ids[0] == ids[1] != ids[2] == ids[3]


def test_recover_rebuilds_state_without_writing_it_again():
    shared = content(b"both", delivery_mode=2)
    snapshot = Snapshot(
        vhosts=["/", "v"],
        exchanges=[X("/", "dx", "topic", False, False, {}), X("/", "amq.topic", "topic", False, False, {})],
        queues=[Q("/", "a", False, {"x-max-length": 10}), Q("/", "b", False, {}), Q("v", "c", False, {})],
        bindings=[
            B("/", "dx", "queue", "a", "x.*", {}),
            B("/", "amq.topic", "exchange", "dx", "#", {}),
            B("/", "dx", "queue", "gone", "k", {}),
        ],
        messages={
            ("/", "a"): [
                M(7, "dx", "x.y", shared, True),
                M(9, "", "a", content(b"second", delivery_mode=2), False),
            ],
            ("/", "b"): [M(7, "dx", "x.y", shared, False)],
        },
        next_message_id=12,
    )
    store = FakeStore()
    broker = Broker(store=store)
    broker.recover(snapshot)
    assert store.calls == []
    assert "c" in broker.vhosts["v"].queues
    a = broker.vhosts["/"].queues["a"]
    b = broker.vhosts["/"].queues["b"]
    assert a.ready[0].message is b.ready[0].message
    c = Client(broker)
    first = c.get("a")
    assert (first.body, first.redelivered, first.exchange, first.routing_key) == (b"both", True, "dx", "x.y")
    assert c.get("b").redelivered is False
    c.publish("amq.topic", "x.z", b"new", delivery_mode=2)
    assert store.named("add_message")[0][2] == 12
    assert [e.message.content.body for e in a.ready] == [b"second", b"new"]
    c.ack(first.delivery_tag)
    assert store.named("remove_message") == [("/", "a", 7)]


def test_recovered_ids_never_reused_even_if_next_id_is_stale():
    snapshot = Snapshot(
        queues=[Q("/", "a", False, {})], messages={("/", "a"): [M(40, "", "a", content(b"x"), False)]}
    )
    store = FakeStore()
    broker = Broker(store=store)
    broker.recover(snapshot)
    c = Client(broker)
    c.publish("", "a", b"y", delivery_mode=2)
    assert store.named("add_message")[0][2] == 41


def test_dead_lettered_persistent_message_is_stored_in_target():
    store, broker, c = stored()
    c.declare("dead", durable=True)
    c.declare(
        "work", durable=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}
    )
    broker.on_durable(store.commit())  # the Declare-Oks
    c.publish("", "work", b"m", delivery_mode=2)
    got = c.get("work")
    c.call(commands.Basic.Reject(delivery_tag=got.delivery_tag, requeue=False))
    adds = store.named("add_message")
    assert [(call[1], call[4]) for call in adds] == [("work", "work"), ("dead", "dead")]
    assert adds[0][2] != adds[1][2]
    assert store.named("remove_message") == [("/", "work", adds[0][2])]


def test_recovered_messages_expire_when_they_would_have_without_the_restart():
    clock = FakeClock()
    routed = clock.now - 5  # five seconds before the restart
    dead = Q("/", "dead", False, {})
    ttl = Q(
        "/",
        "ttl",
        False,
        {"x-message-ttl": 8000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"},
    )
    snapshot = Snapshot(
        queues=[dead, ttl],
        messages={
            ("/", "ttl"): [
                M(1, "", "ttl", content(b"own 7s", delivery_mode=2, expiration="7000"), False, routed),
                M(2, "", "ttl", content(b"queue 8s", delivery_mode=2), False, routed),
                M(3, "", "ttl", content(b"schema 1", delivery_mode=2), False, None),
            ]
        },
    )
    broker = Broker(clock=clock)
    broker.recover(snapshot)
    assert broker.tick() == pytest.approx(routed + 7)
    clock.advance(2.5)
    broker.tick()
    queues = broker.vhosts["/"].queues
    assert [e.message.content.body for e in queues["ttl"].ready] == [b"queue 8s", b"schema 1"]
    clock.advance(1)
    broker.tick()
    assert [e.message.content.body for e in queues["ttl"].ready] == [b"schema 1"]
    assert [e.message.content.body for e in queues["dead"].ready] == [b"own 7s", b"queue 8s"]
    clock.advance(4.4)  # a message stored without routed_at counts from the restart
    broker.tick()
    assert len(queues["ttl"].ready) == 1
    clock.advance(0.2)
    broker.tick()
    assert len(queues["ttl"].ready) == 0


def test_routed_at_is_stored_with_each_message():
    clock = FakeClock()
    store = FakeStore()
    c = Client(Broker(store=store, clock=clock))
    c.declare("q", durable=True)
    c.publish("", "q", b"m", delivery_mode=2)
    assert [call[-1] for call in store.named("add_message")] == [clock.now]


def test_priority_queue_recovery_keeps_priority_order():
    queue = Q("/", "p", False, {"x-max-priority": 3})
    stored_order = [(1, None), (2, 2), (3, 7), (4, 2), (5, 1)]
    snapshot = Snapshot(
        queues=[queue],
        messages={
            ("/", "p"): [
                M(n, "", "p", content(b"%d" % n, delivery_mode=2, priority=priority), False, 1.0)
                for n, priority in stored_order
            ]
        },
    )
    broker = Broker()
    broker.recover(snapshot)
    c = Client(broker)
    assert [c.get("p", no_ack=True).body for _ in range(5)] == [b"3", b"2", b"4", b"5", b"1"]


def test_durable_declare_ok_follows_the_commit_in_order_with_later_replies():
    """A SIGKILL right after a Declare-Ok must not lose the queue or exchange (issue 11)."""
    store, broker, c = stored()
    assert c.declare("dq", durable=True) is None
    assert c.exchange("dx", "topic", durable=True) is None
    assert c.bind("dq", "dx", "k") is None  # answered after the Declare-Oks it followed
    assert c.outbox.take() == []
    broker.on_durable(store.commit())
    replies = [type(m).__name__ for m in c.outbox.methods()]
    assert replies == ["DeclareOk", "DeclareOk", "BindOk"]
    # Declared again once durable: answered at once; a transient one never waits.
    assert isinstance(c.declare("dq", durable=True), commands.Queue.DeclareOk)
    assert isinstance(c.declare("tq"), commands.Queue.DeclareOk)


def test_redeclaring_a_durable_queue_not_yet_committed_waits_for_the_commit():
    store, broker, c = stored()
    other = Client(broker)
    assert c.declare("dq", durable=True) is None
    assert other.declare("dq", durable=True) is None
    broker.on_durable(store.commit())
    assert isinstance(other.outbox.methods()[-1], commands.Queue.DeclareOk)


def test_deliveries_wait_behind_a_held_declare_ok():
    store, broker, c = stored()
    c.declare("dq", durable=True)
    c.publish("", "dq", b"m")
    c.call(commands.Basic.Consume(queue="dq", consumer_tag="t"))
    assert c.outbox.take() == []
    broker.on_durable(store.commit())
    assert [type(m).__name__ for m in c.outbox.methods()] == ["DeclareOk", "ConsumeOk"]
    assert c.bodies() == [b"m"]


def test_tx_commit_ok_waits_until_its_acks_are_written():
    """The store writes big batches of removals over several commits: Commit-Ok promises the
    transaction's acks, so it waits for the ticket they settle at, not the first commit."""
    store, broker, c = stored()
    c.declare("dq", durable=True)
    c.publish("", "dq", b"m", delivery_mode=2)
    broker.on_durable(store.commit())
    c.call(commands.Tx.Select())
    c.session.handle_method(c.ch, commands.Basic.Get(queue="dq"))
    c.ack(1)
    c.session.handle_method(c.ch, commands.Tx.Commit())
    ticket = store.commit()
    broker.on_durable(ticket, ticket - 1)  # committed, but its removals not all written
    assert c.outbox.methods(commands.Tx.CommitOk) == []
    broker.on_durable(ticket, ticket)
    assert len(c.outbox.methods(commands.Tx.CommitOk)) == 1


def test_get_ok_and_return_wait_behind_a_held_declare_ok():
    store, broker, c = stored()
    c.declare("other", durable=True)
    broker.on_durable(store.commit())
    c.publish("", "other", b"m")
    c.declare("dq", durable=True)
    c.publish("amq.direct", "nowhere", b"r", mandatory=True)
    c.session.handle_method(c.ch, commands.Basic.Get(queue="other", no_ack=True))
    assert c.outbox.take() == []
    broker.on_durable(store.commit())
    sent = c.outbox.take()
    assert [type(item[1] if isinstance(item, tuple) else item).__name__ for item in sent] == [
        "DeclareOk",
        "Returned",
        "GetOk",
    ]
