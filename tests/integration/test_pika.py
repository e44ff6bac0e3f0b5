"""The node as pika (blocking) sees it: every basic feature, with the replies RabbitMQ gives."""

from __future__ import annotations

import datetime
import decimal
import struct
import time
import uuid
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest
from pamqp import commands

from gateway.wire import server_properties
from tests.nodes import NodeProcess, start_node
from tests.rawclient import RawClient


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def connection(shared_node: NodeProcess) -> Iterator[pika.BlockingConnection]:
    conn = pika.BlockingConnection(pika.URLParameters(shared_node.url()))
    yield conn
    if conn.is_open:
        conn.close()


@pytest.fixture
def channel(connection: pika.BlockingConnection) -> pika.adapters.blocking_connection.BlockingChannel:
    return connection.channel()


def get_all(channel, queue: str, limit: int = 1000) -> list[tuple]:
    """Drain a queue with basic.get, acking as we go."""
    out = []
    for _ in range(limit):
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((method, properties, body))
    return out


def test_server_properties_announce_capabilities(connection) -> None:
    properties = connection._impl.server_properties
    assert properties["product"] == b"amq-gateway" or properties["product"] == "amq-gateway"
    capabilities = properties["capabilities"]
    for name in (
        "publisher_confirms",
        "consumer_cancel_notify",
        "basic.nack",
        "exchange_exchange_bindings",
        "connection.blocked",
        "authentication_failure_close",
    ):
        assert capabilities[name] is True, name


def _plain(value):
    """pika's decoded table value with its byte strings as text."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value.decode() if isinstance(value, bytes) else value


def test_the_node_announces_the_wire_layers_server_properties(connection) -> None:
    """What the node really sends in Connection.Start is gateway.wire's one definition: the
    capabilities docs/amqp.md lists (direct_reply_to false included) and the node's name."""
    announced = _plain(connection._impl.server_properties)
    assert announced == server_properties("shared")  # conftest starts shared_node as "shared"
    assert announced["capabilities"]["direct_reply_to"] is False


def test_publish_and_get_round_trip_every_property(channel) -> None:
    queue = unique("props")
    channel.queue_declare(queue)
    stamp = datetime.datetime(2026, 11, 21, 12, 30, 15, tzinfo=datetime.UTC)
    headers = {
        "string": "text",
        "long-string": "x" * 1000,
        "int": 42,
        "negative": -7,
        "big": 2**40,
        "bool": True,
        "decimal": decimal.Decimal("3.14"),
        "timestamp": stamp,
        "array": [1, "two", [3, {"four": 4}]],
        "nested": {"a": {"b": {"c": "deep"}}},
        "none": None,
    }
    sent = pika.BasicProperties(
        content_type="application/json",
        content_encoding="utf-8",
        headers=headers,
        delivery_mode=2,
        priority=5,
        correlation_id="corr-1",
        reply_to="replies",
        expiration="60000",
        message_id="msg-1",
        timestamp=1_700_000_000,
        type="greeting",
        user_id="guest",
        app_id="tests",
    )
    channel.basic_publish("", queue, b"\x00binary\xffbody", sent)
    method, received, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"\x00binary\xffbody"
    assert method.routing_key == queue and method.exchange == "" and not method.redelivered
    for name in (
        "content_type",
        "content_encoding",
        "delivery_mode",
        "priority",
        "correlation_id",
        "reply_to",
        "expiration",
        "message_id",
        "timestamp",
        "type",
        "user_id",
        "app_id",
    ):
        assert getattr(received, name) == getattr(sent, name), name
    got = received.headers
    assert got["string"] == "text" and got["long-string"] == "x" * 1000
    assert got["int"] == 42 and got["negative"] == -7 and got["big"] == 2**40
    assert got["bool"] is True
    assert got["decimal"] == decimal.Decimal("3.14")
    assert got["timestamp"] == stamp
    assert got["array"] == [1, "two", [3, {"four": 4}]]
    assert got["nested"] == {"a": {"b": {"c": "deep"}}}
    assert got["none"] is None


def test_large_body_spans_frames(channel) -> None:
    queue = unique("large")
    channel.queue_declare(queue)
    body = bytes(range(256)) * 4000  # 1 MB: many body frames at frame_max 131072
    channel.basic_publish("", queue, body)
    _, _, received = channel.basic_get(queue, auto_ack=True)
    assert received == body


def test_get_empty(channel) -> None:
    queue = unique("empty")
    channel.queue_declare(queue)
    assert channel.basic_get(queue) == (None, None, None)


def test_publisher_confirms_and_mandatory_return(channel) -> None:
    channel.confirm_delivery()
    queue = unique("confirmed")
    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"routed", mandatory=True)
    with pytest.raises(pika.exceptions.UnroutableError) as raised:
        channel.basic_publish("amq.direct", unique("nowhere"), b"lost", mandatory=True)
    returned = raised.value.messages[0]
    assert returned.method.reply_code == 312
    assert returned.method.reply_text == "NO_ROUTE"
    assert returned.body == b"lost"
    assert [body for _, _, body in get_all(channel, queue)] == [b"routed"]


def test_return_without_confirms(connection, channel) -> None:
    returned = []
    channel.add_on_return_callback(lambda ch, method, props, body: returned.append((method, body)))
    channel.basic_publish("amq.topic", unique("no.binding"), b"bounce", mandatory=True)
    deadline = time.monotonic() + 5
    while not returned and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    assert [(m.reply_code, body) for m, body in returned] == [(312, b"bounce")]


def test_qos_prefetch_count_is_honoured(connection, channel) -> None:
    queue = unique("qos")
    channel.queue_declare(queue)
    for i in range(10):
        channel.basic_publish("", queue, str(i).encode())
    channel.basic_qos(prefetch_count=3)
    delivered = []
    channel.basic_consume(queue, lambda ch, method, props, body: delivered.append(method))
    connection.process_data_events(time_limit=0.5)
    assert len(delivered) == 3
    channel.basic_ack(delivered[-1].delivery_tag, multiple=True)
    connection.process_data_events(time_limit=0.5)
    assert len(delivered) == 6


def test_nack_with_requeue_redelivers_with_flag(channel) -> None:
    queue = unique("nack")
    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"first")
    channel.basic_publish("", queue, b"second")
    method, _, body = channel.basic_get(queue)
    assert body == b"first" and not method.redelivered
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, _, body = channel.basic_get(queue)
    assert body == b"first" and method.redelivered
    channel.basic_reject(method.delivery_tag, requeue=False)
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"second" and not method.redelivered
    assert channel.basic_get(queue) == (None, None, None)


def test_closing_channel_requeues_unacked(connection) -> None:
    queue = unique("requeue")
    first = connection.channel()
    first.queue_declare(queue)
    first.basic_publish("", queue, b"m")
    method, _, _ = first.basic_get(queue)
    assert not method.redelivered
    first.close()
    second = connection.channel()
    method, _, body = second.basic_get(queue, auto_ack=True)
    assert body == b"m" and method.redelivered


def test_recover_redelivers_unacked(connection, channel) -> None:
    queue = unique("recover")
    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"again")
    received = []
    channel.basic_consume(queue, lambda ch, method, props, body: received.append(method))
    connection.process_data_events(time_limit=0.3)
    assert len(received) == 1 and not received[0].redelivered
    channel.basic_recover(requeue=True)
    connection.process_data_events(time_limit=0.3)
    assert len(received) == 2 and received[1].redelivered


def test_unknown_delivery_tag_closes_channel_406(connection, channel) -> None:
    queue = unique("tag")
    channel.queue_declare(queue)
    channel.basic_ack(12345)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(queue, passive=True)
    assert closed.value.reply_code == 406
    assert "unknown delivery tag 12345" in closed.value.reply_text
    assert connection.is_open


def test_unknown_exchange_and_queue_are_404_on_the_channel(connection) -> None:
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.exchange_declare(unique("missing"), passive=True)
    assert closed.value.reply_code == 404
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(unique("missing"), passive=True)
    assert closed.value.reply_code == 404 and "no queue" in closed.value.reply_text
    channel = connection.channel()
    channel.basic_publish(unique("no-such-exchange"), "k", b"x")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(unique("after"))
    assert closed.value.reply_code == 404
    assert connection.is_open
    assert connection.channel().is_open


def test_redeclare_with_different_arguments_is_406(connection) -> None:
    queue = unique("redeclare")
    channel = connection.channel()
    channel.queue_declare(queue, durable=False)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(queue, durable=True)
    assert closed.value.reply_code == 406
    assert "inequivalent arg 'durable'" in closed.value.reply_text
    channel = connection.channel()
    name = unique("ex")
    channel.exchange_declare(name, "direct")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.exchange_declare(name, "fanout")
    assert closed.value.reply_code == 406


def test_exclusive_queue_is_locked_to_its_connection(shared_node, channel) -> None:
    queue = unique("exclusive")
    channel.queue_declare(queue, exclusive=True)
    other = pika.BlockingConnection(pika.URLParameters(shared_node.url()))
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            other.channel().queue_declare(queue)
        assert closed.value.reply_code == 405
    finally:
        other.close()


def test_exclusive_queue_disappears_with_its_connection(shared_node, channel) -> None:
    queue = unique("gone")
    owner = pika.BlockingConnection(pika.URLParameters(shared_node.url()))
    owner.channel().queue_declare(queue, exclusive=True)
    owner.close()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(queue, passive=True)
    assert closed.value.reply_code == 404


def test_server_named_queue(channel) -> None:
    result = channel.queue_declare("", exclusive=True)
    assert result.method.queue.startswith("amq.gen-")
    channel.basic_publish("", result.method.queue, b"x")
    assert channel.queue_declare(result.method.queue, passive=True).method.message_count == 1


def test_topic_routing(channel) -> None:
    exchange = unique("topic")
    channel.exchange_declare(exchange, "topic")
    queues = {}
    for pattern in ("stocks.*.ibm", "stocks.#.ibm", "#", "stocks.nyse.*", "*.*"):
        queues[pattern] = unique("t")
        channel.queue_declare(queues[pattern])
        channel.queue_bind(queues[pattern], exchange, pattern)
    for key in ("stocks.nyse.ibm", "stocks.ibm", "stocks.world.us.ibm", "other"):
        channel.basic_publish(exchange, key, key.encode())
    got = {p: sorted(body.decode() for _, _, body in get_all(channel, q)) for p, q in queues.items()}
    assert got["stocks.*.ibm"] == ["stocks.nyse.ibm"]
    assert got["stocks.#.ibm"] == ["stocks.ibm", "stocks.nyse.ibm", "stocks.world.us.ibm"]
    assert got["#"] == ["other", "stocks.ibm", "stocks.nyse.ibm", "stocks.world.us.ibm"]
    assert got["stocks.nyse.*"] == ["stocks.nyse.ibm"]
    assert got["*.*"] == ["stocks.ibm"]


def test_headers_routing_all_and_any(channel) -> None:
    q_all, q_any = unique("all"), unique("any")
    for queue, match in ((q_all, "all"), (q_any, "any")):
        channel.queue_declare(queue)
        channel.queue_bind(queue, "amq.headers", arguments={"x-match": match, "a": 1, "b": "two"})
    for name, headers in (("both", {"a": 1, "b": "two"}), ("one", {"a": 1}), ("none", {"c": 3})):
        channel.basic_publish("amq.headers", "", name.encode(), pika.BasicProperties(headers=headers))
    assert sorted(b for _, _, b in get_all(channel, q_all)) == [b"both"]
    assert sorted(b for _, _, b in get_all(channel, q_any)) == [b"both", b"one"]


def test_fanout_and_exchange_to_exchange_binding(channel) -> None:
    source, middle = unique("src"), unique("mid")
    channel.exchange_declare(source, "direct")
    channel.exchange_declare(middle, "fanout")
    channel.exchange_bind(middle, source, "k")
    queues = [unique("fan") for _ in range(3)]
    for queue in queues:
        channel.queue_declare(queue)
        channel.queue_bind(queue, middle)
    channel.basic_publish(source, "k", b"via-e2e")
    channel.basic_publish(source, "other", b"dropped")
    for queue in queues:
        assert [b for _, _, b in get_all(channel, queue)] == [b"via-e2e"]
    channel.exchange_unbind(middle, source, "k")
    channel.basic_publish(source, "k", b"after-unbind")
    assert get_all(channel, queues[0]) == []


def test_alternate_exchange_catches_unroutable(channel) -> None:
    main, alternate, queue = unique("main"), unique("alt"), unique("alt-q")
    channel.exchange_declare(alternate, "fanout")
    channel.exchange_declare(main, "direct", arguments={"alternate-exchange": alternate})
    channel.queue_declare(queue)
    channel.queue_bind(queue, alternate)
    channel.basic_publish(main, "unbound", b"caught")
    assert [b for _, _, b in get_all(channel, queue)] == [b"caught"]


def wait_depth(channel, queue: str, depth: int, bound: float = 5.0) -> None:
    """Until `queue` holds `depth` ready messages (passive declares do not touch messages)."""
    deadline = time.monotonic() + bound
    while (count := channel.queue_declare(queue, passive=True).method.message_count) != depth:
        assert time.monotonic() < deadline, f"{queue}: {count} messages, not {depth}, after {bound}s"
        time.sleep(0.02)


def test_message_ttl_and_per_message_expiration(channel) -> None:
    queue = unique("ttl")
    channel.queue_declare(queue, arguments={"x-message-ttl": 200})
    channel.basic_publish("", queue, b"short-lived")
    plain = unique("expiration")
    channel.queue_declare(plain)
    channel.basic_publish("", plain, b"expires", pika.BasicProperties(expiration="200"))
    channel.basic_publish("", plain, b"stays")
    wait_depth(channel, queue, 0)
    wait_depth(channel, plain, 1)
    assert get_all(channel, queue) == []
    assert [b for _, _, b in get_all(channel, plain)] == [b"stays"]


def test_max_length_drop_head(channel) -> None:
    queue = unique("maxlen")
    channel.queue_declare(queue, arguments={"x-max-length": 2})
    for body in (b"1", b"2", b"3"):
        channel.basic_publish("", queue, body)
    assert [b for _, _, b in get_all(channel, queue)] == [b"2", b"3"]


def test_max_length_bytes(channel) -> None:
    queue = unique("maxbytes")
    channel.queue_declare(queue, arguments={"x-max-length-bytes": 10})
    for body in (b"aaaa", b"bbbb", b"cccc"):
        channel.basic_publish("", queue, body)
    assert [b for _, _, b in get_all(channel, queue)] == [b"bbbb", b"cccc"]


def test_reject_publish_overflow_nacks_with_confirms(channel) -> None:
    queue = unique("reject-publish")
    channel.queue_declare(queue, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"fits")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", queue, b"refused")
    assert [b for _, _, b in get_all(channel, queue)] == [b"fits"]


def test_dead_lettering_on_reject_expiry_and_overflow(channel) -> None:
    dlx, dead = unique("dlx"), unique("dead")
    channel.exchange_declare(dlx, "fanout")
    channel.queue_declare(dead)
    channel.queue_bind(dead, dlx)
    source = unique("source")
    channel.queue_declare(
        source,
        arguments={"x-dead-letter-exchange": dlx, "x-max-length": 2, "x-message-ttl": 300},
    )
    for body in (b"overflowed", b"rejected", b"expired"):
        channel.basic_publish("", source, body)
    method, _, body = channel.basic_get(source)
    assert body == b"rejected"
    channel.basic_reject(method.delivery_tag, requeue=False)
    wait_depth(channel, dead, 3)  # the overflowed, the rejected and, after its TTL, the expired
    dead_letters = {body: props.headers for _, props, body in get_all(channel, dead)}
    assert set(dead_letters) == {b"overflowed", b"rejected", b"expired"}
    reasons = {body: headers["x-death"][0]["reason"] for body, headers in dead_letters.items()}
    assert reasons == {b"overflowed": "maxlen", b"rejected": "rejected", b"expired": "expired"}
    death = dead_letters[b"rejected"]["x-death"][0]
    assert death["queue"] == source and death["count"] == 1 and death["routing-keys"] == [source]
    assert dead_letters[b"rejected"]["x-first-death-reason"] == "rejected"


def test_dead_letter_routing_key(channel) -> None:
    dead = unique("dead-rk")
    channel.queue_declare(dead)
    source = unique("src-rk")
    channel.queue_declare(source, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead})
    channel.basic_publish("", source, b"to-default")
    method, _, _ = channel.basic_get(source)
    channel.basic_nack(method.delivery_tag, requeue=False)
    assert [b for _, _, b in get_all(channel, dead)] == [b"to-default"]


def test_transactions_commit_and_rollback(connection, channel) -> None:
    queue = unique("tx")
    channel.queue_declare(queue)
    channel.tx_select()
    channel.basic_publish("", queue, b"rolled-back")
    channel.tx_rollback()
    channel.basic_publish("", queue, b"committed")
    other = connection.channel()
    assert other.queue_declare(queue, passive=True).method.message_count == 0
    channel.tx_commit()
    assert [b for _, _, b in get_all(other, queue)] == [b"committed"]


def test_commit_without_select_is_406(connection) -> None:
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.tx_commit()
    assert closed.value.reply_code == 406


def test_consumer_cancelled_when_queue_deleted(connection, channel) -> None:
    queue = unique("cancelled")
    channel.queue_declare(queue)
    cancelled = []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = channel.basic_consume(queue, lambda *args: None)
    other = connection.channel()
    other.queue_delete(queue)
    connection.process_data_events(time_limit=0.5)
    assert cancelled == [tag]


def test_queue_delete_if_empty_and_purge(channel, connection) -> None:
    queue = unique("purge")
    channel.queue_declare(queue)
    for _ in range(3):
        channel.basic_publish("", queue, b"x")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_delete(queue, if_empty=True)
    assert closed.value.reply_code == 406
    channel = connection.channel()
    assert channel.queue_purge(queue).method.message_count == 3
    assert channel.queue_delete(queue, if_empty=True).method.message_count == 0


def test_declaring_amq_prefixed_exchange_is_refused(connection) -> None:
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.exchange_declare("amq.custom", "direct")
    assert closed.value.reply_code == 403


def test_ootb_exchanges_exist(channel) -> None:
    for name, kind in (
        ("amq.direct", "direct"),
        ("amq.fanout", "fanout"),
        ("amq.topic", "topic"),
        ("amq.headers", "headers"),
        ("amq.match", "headers"),
        ("amq.service", "direct"),
        ("amq.data", "topic"),
        ("amq.dataex", "headers"),
    ):
        channel.exchange_declare(name, kind, passive=True)


def test_bad_login_is_refused_403(shared_node) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as refused:
        pika.BlockingConnection(pika.URLParameters(shared_node.url(password="wrong")))
    assert "ACCESS_REFUSED" in str(refused.value)


def test_unknown_vhost_is_530(shared_node) -> None:
    # pika reports any close before Open-Ok as a probable access denial; the code is inside.
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
        pika.BlockingConnection(pika.URLParameters(shared_node.url(vhost="nowhere")))
    assert '(530) "NOT_ALLOWED - ' in str(refused.value)


def test_consumer_round_robin_and_no_ack(connection, channel) -> None:
    queue = unique("rr")
    channel.queue_declare(queue)
    seen: dict[str, list[bytes]] = {"a": [], "b": []}
    channel.basic_consume(queue, lambda ch, m, p, body: seen["a"].append(body), auto_ack=True)
    channel.basic_consume(queue, lambda ch, m, p, body: seen["b"].append(body), auto_ack=True)
    for i in range(10):
        channel.basic_publish("", queue, str(i).encode())
    deadline = time.monotonic() + 5
    while len(seen["a"]) + len(seen["b"]) < 10 and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    assert len(seen["a"]) == 5 and len(seen["b"]) == 5


def test_unused_queue_expires(connection, channel) -> None:
    queue = unique("expires")
    channel.queue_declare(queue, arguments={"x-expires": 300})
    channel.basic_publish("", queue, b"does not keep it alive")
    # Until a passive declare (which does not count as use) finds it gone; a 404 closes the
    # channel, so each look has a channel of its own.
    deadline = time.monotonic() + 5
    while True:
        look = connection.channel()
        try:
            look.queue_declare(queue, passive=True)
        except pika.exceptions.ChannelClosedByBroker as closed:
            assert closed.reply_code == 404
            break
        look.close()
        assert time.monotonic() < deadline, f"{queue} still there after 5 s"
        time.sleep(0.02)


def test_ttl_expires_promptly_at_the_head(connection, channel) -> None:
    """A short TTL is honoured when it passes, with nobody asking the queue: the message is
    dead-lettered by the node's timer (waited for, not slept past)."""
    queue, dead = unique("prompt"), unique("prompt-dead")
    channel.queue_declare(dead)
    channel.queue_declare(
        queue,
        arguments={"x-message-ttl": 50, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead},
    )
    channel.basic_publish("", queue, b"x")
    method, _, body = next(channel.consume(dead, auto_ack=True, inactivity_timeout=10))
    channel.cancel()
    assert method is not None and body == b"x"
    assert channel.queue_declare(queue, passive=True).method.message_count == 0


# -- fixes of docs/amqp.md's former known issues ----------------------------------------------

UNDECODABLE_HEADERS = struct.pack(">HI", 1 << 13, 4) + b"\x01kZ\x00"  # field type 'Z' does not exist


def raw_client(node: NodeProcess) -> RawClient:
    client = RawClient(node.port)
    client.handshake()
    client.open_channel()
    return client


def test_undecodable_headers_are_502_through_a_headers_exchange_and_dead_lettered_unchanged(
    shared_node, channel
) -> None:
    queue, dead = unique("bad-headers"), unique("bad-headers-dead")
    channel.queue_declare(dead)
    channel.queue_declare(
        queue,
        arguments={"x-message-ttl": 50, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead},
    )
    client = raw_client(shared_node)
    try:
        client.publish_raw_properties(1, "", queue, UNDECODABLE_HEADERS, b"expires")
        deadline = time.monotonic() + 5
        while channel.queue_declare(dead, passive=True).method.message_count == 0:
            assert time.monotonic() < deadline, "never dead-lettered"
            time.sleep(0.05)
        # Read with the raw client: pika cannot decode a table with an unknown field type.
        client.send_frame(commands.Basic.Get(queue=dead, no_ack=True), 1)
        _, properties, body = client.read_message()
        assert (body, properties) == (b"expires", UNDECODABLE_HEADERS)
        client.publish_raw_properties(1, "amq.headers", "", UNDECODABLE_HEADERS, b"routed")
        _, close = client.read_frame()
        assert isinstance(close, commands.Connection.Close)
        assert close.reply_code == 502 and "malformed headers table" in close.reply_text
    finally:
        client.close()
    assert channel.queue_declare(queue, passive=True).method.message_count == 0


def test_no_local_head_does_not_block_other_connections_messages(shared_node, channel) -> None:
    queue = unique("no-local")
    channel.queue_declare(queue)
    client = raw_client(shared_node)
    try:
        client.call(commands.Basic.Consume(queue=queue, consumer_tag="mine", no_local=True, no_ack=True))
        for n in range(3):
            client.publish_raw_properties(1, "", queue, b"\x00\x00", b"own %d" % n)
        # A round trip: the node has queued them (for nobody) before pika publishes.
        assert client.call(commands.Queue.Declare(queue=queue, passive=True)).message_count == 3
        channel.basic_publish("", queue, b"from pika")
        method, _, body = client.read_message()
        assert (method.consumer_tag, body) == ("mine", b"from pika")
    finally:
        client.close()
    assert [b for _, _, b in get_all(channel, queue)] == [b"own 0", b"own 1", b"own 2"]


def test_requeue_into_a_full_reject_publish_queue_keeps_the_message(channel) -> None:
    queue = unique("reject-publish-requeue")
    channel.queue_declare(queue, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    channel.basic_publish("", queue, b"first")
    method, _, _ = channel.basic_get(queue)
    channel.basic_publish("", queue, b"second")  # fits: "first" is unacked, not ready
    channel.basic_nack(method.delivery_tag, requeue=True)
    assert [b for _, _, b in get_all(channel, queue)] == [b"first", b"second"]


def test_client_cancel_ok_and_flow_ok_are_accepted(connection, channel) -> None:
    # pika never sends these, other clients do: send them through pika's internals.
    channel._impl._send_method(pika.spec.Basic.CancelOk(consumer_tag="no-such-consumer"))
    channel._impl._send_method(pika.spec.Channel.FlowOk(active=True))
    assert channel.queue_declare("", exclusive=True).method.queue
    assert connection.is_open and channel.is_open


def test_tx_commit_to_a_deleted_exchange_is_404_and_applies_nothing(connection, channel) -> None:
    queue, exchange = unique("tx-atomic"), unique("tx-atomic-x")
    channel.queue_declare(queue)
    channel.exchange_declare(exchange, "fanout")
    channel.tx_select()
    channel.basic_publish("", queue, b"first")
    channel.basic_publish(exchange, "", b"second")
    other = connection.channel()
    other.exchange_delete(exchange)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.tx_commit()
    assert closed.value.reply_code == 404
    assert other.queue_declare(queue, passive=True).method.message_count == 0


def test_tx_commit_ok_means_the_messages_survive_a_kill(tmp_path) -> None:
    data_dir = tmp_path / "data"
    node = start_node(tmp_path, data_dir=data_dir, name="tx")
    conn = pika.BlockingConnection(pika.URLParameters(node.url()))
    channel = conn.channel()
    channel.queue_declare("tx-durable", durable=True)
    channel.tx_select()
    for n in range(50):
        channel.basic_publish("", "tx-durable", b"%d" % n, pika.BasicProperties(delivery_mode=2))
    channel.tx_commit()
    node.kill()  # no clean stop: only what Commit-Ok promised is there
    node = start_node(tmp_path, data_dir=data_dir, name="tx")
    try:
        conn = pika.BlockingConnection(pika.URLParameters(node.url()))
        bodies = [b for _, _, b in get_all(conn.channel(), "tx-durable")]
        assert bodies == [b"%d" % n for n in range(50)]
        conn.close()
    finally:
        node.stop()


def test_message_ttl_counts_across_a_restart(tmp_path) -> None:
    data_dir = tmp_path / "data"
    node = start_node(tmp_path, data_dir=data_dir, name="ttl")
    conn = pika.BlockingConnection(pika.URLParameters(node.url()))
    channel = conn.channel()
    channel.queue_declare("ttl-durable", durable=True, arguments={"x-message-ttl": 3000})
    channel.confirm_delivery()
    published = time.monotonic()
    channel.basic_publish("", "ttl-durable", b"m", pika.BasicProperties(delivery_mode=2))
    conn.close()
    time.sleep(1.5)
    assert node.stop() == 0
    node = start_node(tmp_path, data_dir=data_dir, name="ttl")
    try:
        conn = pika.BlockingConnection(pika.URLParameters(node.url()))
        channel = conn.channel()
        time.sleep(max(0.0, published + 4 - time.monotonic()))
        # Counted from the restart (1.5 s or more after the publish), it would still be there.
        assert channel.queue_declare("ttl-durable", passive=True).method.message_count == 0
        conn.close()
    finally:
        node.stop()


def test_priority_queue_and_queue_types(connection, channel) -> None:
    queue = unique("priority")
    channel.queue_declare(queue, arguments={"x-max-priority": 10})
    for body, priority in ((b"low", 1), (b"none", None), (b"high", 9), (b"over", 200), (b"low2", 1)):
        channel.basic_publish("", queue, body, pika.BasicProperties(priority=priority))
    assert [b for _, _, b in get_all(channel, queue)] == [b"over", b"high", b"low", b"low2", b"none"]
    classic = unique("classic")
    channel.queue_declare(classic, arguments={"x-queue-type": "classic"})
    channel.queue_declare(classic)  # no type is classic
    quorum = unique("quorum")
    channel.queue_declare(quorum, durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_delete(quorum)
    other = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        other.queue_declare(unique("stream"), durable=True, arguments={"x-queue-type": "stream"})
    assert closed.value.reply_code == 406
    assert closed.value.reply_text.endswith("{unsupported_queue_type,stream}: streams are not supported")
