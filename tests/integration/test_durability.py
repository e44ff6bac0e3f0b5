"""Durability with real processes: SIGKILL mid-stream, restart, count what came back."""

from __future__ import annotations

import threading
import time

import pika
import pika.exceptions
import pytest

from tests.nodes import NodeProcess, start_node

QUEUE = "orders"
KILL_AFTER_CONFIRMS = 400
UNACKED = 10


def connect(node: NodeProcess) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(node.url()))


def publish_until_broken(node: NodeProcess, confirmed: list[int], stop: threading.Event) -> None:
    """Publish persistent messages with confirms; record each id the node confirmed."""
    try:
        connection = connect(node)
        channel = connection.channel()
        channel.confirm_delivery()
        n = 0
        while not stop.is_set():
            n += 1
            channel.basic_publish("durable-ex", "key", str(n).encode(), pika.BasicProperties(delivery_mode=2))
            confirmed.append(n)
    except (pika.exceptions.AMQPError, OSError):
        return


def test_sigkill_mid_stream_loses_nothing_confirmed(tmp_path) -> None:
    data_dir = tmp_path / "data"
    node = start_node(tmp_path, data_dir=data_dir, name="durable")
    setup = connect(node)
    channel = setup.channel()
    channel.exchange_declare("durable-ex", "direct", durable=True)
    channel.queue_declare(QUEUE, durable=True)
    channel.queue_bind(QUEUE, "durable-ex", "key")
    channel.exchange_declare("transient-ex", "fanout", durable=False)
    channel.queue_declare("transient-q", durable=False)
    channel.basic_publish("", "transient-q", b"gone", pika.BasicProperties(delivery_mode=2))

    # A consumer holds the first messages unacked when the node dies.
    consumer = connect(node)
    consumer_channel = consumer.channel()
    consumer_channel.basic_qos(prefetch_count=UNACKED)
    held: list[int] = []
    consumer_channel.basic_consume(QUEUE, lambda ch, m, p, body: held.append(int(body)))

    confirmed: list[int] = []
    stop = threading.Event()
    publisher = threading.Thread(target=publish_until_broken, args=(node, confirmed, stop))
    publisher.start()
    deadline = time.monotonic() + 60
    while (len(confirmed) < KILL_AFTER_CONFIRMS or len(held) < UNACKED) and time.monotonic() < deadline:
        consumer.process_data_events(time_limit=0.05)
    assert len(confirmed) >= KILL_AFTER_CONFIRMS and len(held) == UNACKED
    node.kill()
    stop.set()
    publisher.join(30)
    assert not publisher.is_alive()
    acknowledged_by_node = set(confirmed)

    restarted = start_node(tmp_path, data_dir=data_dir, name="durable")
    try:
        connection = connect(restarted)
        channel = connection.channel()
        received: list[tuple[int, bool]] = []
        while True:
            method, _, body = channel.basic_get(QUEUE, auto_ack=True)
            if method is None:
                break
            received.append((int(body), method.redelivered))
        ids = [n for n, _ in received]
        assert len(ids) == len(set(ids)), "a message came back twice"
        assert acknowledged_by_node <= set(ids), sorted(acknowledged_by_node - set(ids))[:10]
        redelivered = {n for n, flag in received if flag}
        assert set(held) <= redelivered
        assert redelivered <= set(held) | (set(ids) - acknowledged_by_node)
        assert ids == sorted(ids), "recovery must keep the queue's order"

        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            connection.channel().queue_declare("transient-q", passive=True)
        assert closed.value.reply_code == 404
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            connection.channel().exchange_declare("transient-ex", passive=True)
        assert closed.value.reply_code == 404
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("durable-ex", "key", b"after", pika.BasicProperties(delivery_mode=2))
        assert channel.basic_get(QUEUE, auto_ack=True)[2] == b"after"
        connection.close()
    finally:
        restarted.stop()


def test_acked_messages_stay_gone_after_restart(tmp_path) -> None:
    data_dir = tmp_path / "data"
    node = start_node(tmp_path, data_dir=data_dir)
    connection = connect(node)
    channel = connection.channel()
    channel.queue_declare("q", durable=True)
    channel.confirm_delivery()
    for i in range(20):
        channel.basic_publish("", "q", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    for _ in range(15):
        method, _, _ = channel.basic_get("q")
        channel.basic_ack(method.delivery_tag)
    channel.basic_publish("", "q", b"transient", pika.BasicProperties(delivery_mode=1))
    channel.queue_declare("", exclusive=True)  # a round trip: the acks above are processed
    connection.close()
    assert node.stop() == 0
    node = start_node(tmp_path, data_dir=data_dir)
    try:
        connection = connect(node)
        channel = connection.channel()
        bodies = []
        while True:
            method, _, body = channel.basic_get("q", auto_ack=True)
            if method is None:
                break
            bodies.append(body)
        assert bodies == [str(i).encode() for i in range(15, 20)]
        connection.close()
    finally:
        node.stop()


def test_second_node_on_same_data_dir_is_refused(tmp_path) -> None:
    data_dir = tmp_path / "data"
    node = start_node(tmp_path, data_dir=data_dir, name="first")
    try:
        with pytest.raises(AssertionError) as failed:
            start_node(tmp_path, data_dir=data_dir, name="second")
        message = str(failed.value)
        assert "exited with 1" in message
        assert str(data_dir) in message
        assert str(node.process.pid) in message
    finally:
        node.stop()


def test_sigterm_closes_clients_with_320_and_exits_cleanly(tmp_path) -> None:
    node = start_node(tmp_path, data_dir=tmp_path / "data")
    connection = connect(node)
    connection.channel()
    node.process.send_signal(15)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.1)
    assert closed.value.reply_code == 320
    assert node.process.wait(15) == 0


FLOODERS = 3


def flood(node: NodeProcess, started: threading.Event, stop: threading.Event) -> None:
    """Publish large persistent messages with confirms, one at a time: with a few of these
    the node's committer is always busy writing a batch, and what the node buffers meanwhile
    waits for the next commit."""
    try:
        channel = connect(node).channel()
        channel.queue_declare("flood", durable=True)
        channel.confirm_delivery()
        body = bytes(1024 * 1024)
        while not stop.is_set():
            channel.basic_publish("", "flood", body, pika.BasicProperties(delivery_mode=2))
            channel.queue_purge("flood")
            started.set()
    except (pika.exceptions.AMQPError, OSError):
        return


@pytest.mark.parametrize("kind", ["queue", "exchange"])
def test_sigkill_right_after_a_durable_declare_ok_keeps_it(tmp_path, kind: str) -> None:
    """The Declare-Ok of a durable queue or exchange follows its commit (issue 11): the
    flood keeps a commit in progress whenever we declare, so on a node that answered before
    committing, the declaration would still be in memory when it dies."""
    data_dir = tmp_path / "data"
    node = start_node(tmp_path, data_dir=data_dir)
    started, stop = threading.Event(), threading.Event()
    flooders = [threading.Thread(target=flood, args=(node, started, stop)) for _ in range(FLOODERS)]
    for flooder in flooders:
        flooder.start()
    try:
        assert started.wait(30)
        channel = connect(node).channel()
        names = [f"declared-{n}" for n in range(5)]
        for name in names:
            if kind == "queue":
                channel.queue_declare(name, durable=True)
            else:
                channel.exchange_declare(name, "topic", durable=True)
        node.kill()
    finally:
        stop.set()
        for flooder in flooders:
            flooder.join(30)
    restarted = start_node(tmp_path, data_dir=data_dir)
    try:
        missing = []
        for name in names:
            channel = connect(restarted).channel()
            try:
                if kind == "queue":
                    channel.queue_declare(name, passive=True)
                else:
                    channel.exchange_declare(name, passive=True)
            except pika.exceptions.ChannelClosedByBroker:
                missing.append(name)
        assert missing == []
    finally:
        restarted.stop()
