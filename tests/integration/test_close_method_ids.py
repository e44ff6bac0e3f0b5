"""Every Channel.Close and Connection.Close sent for a failing method names that method.

Clients report (and their test suites check) the class-id and method-id of the Close; each
case below sets up a state with raw frames, sends one failing method and reads the Close.
"""

from __future__ import annotations

import uuid

import pytest
from pamqp import commands

from tests.nodes import NodeProcess
from tests.rawclient import RawClient


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"ids-q-{tag}", f"ids-x-{tag}"


def _cases() -> list[tuple[str, object]]:
    """(case id, builder) pairs; a builder takes (queue, exchange) names and returns
    (setup methods, failing method, reply code, class id, method id)."""
    Q, E, B, C, T = commands.Queue, commands.Exchange, commands.Basic, commands.Confirm, commands.Tx
    return [
        ("queue.declare other durable", lambda q, x: (
            [Q.Declare(queue=q, auto_delete=True)], Q.Declare(queue=q, durable=True, auto_delete=True),
            406, 50, 10)),
        ("queue.declare other argument", lambda q, x: (
            [Q.Declare(queue=q, auto_delete=True, arguments={"x-max-length": 5})],
            Q.Declare(queue=q, auto_delete=True, arguments={"x-max-length": 6}), 406, 50, 10)),
        ("queue.declare bad argument", lambda q, x: (
            [], Q.Declare(queue=q, auto_delete=True, arguments={"x-max-priority": "high"}), 406, 50, 10)),
        ("queue.declare bad queue type", lambda q, x: (
            [], Q.Declare(queue=q, auto_delete=True, arguments={"x-queue-type": "lake"}), 406, 50, 10)),
        ("queue.declare dlx key without dlx", lambda q, x: (
            [], Q.Declare(queue=q, auto_delete=True, arguments={"x-dead-letter-routing-key": "k"}),
            406, 50, 10)),
        ("exchange.declare other type", lambda q, x: (
            [E.Declare(exchange=x, exchange_type="direct", auto_delete=True)],
            E.Declare(exchange=x, exchange_type="fanout", auto_delete=True), 406, 40, 10)),
        ("exchange.declare other argument", lambda q, x: (
            [E.Declare(exchange=x, exchange_type="direct", auto_delete=True)],
            E.Declare(exchange=x, exchange_type="direct", auto_delete=True,
                      arguments={"alternate-exchange": "ae"}), 406, 40, 10)),
        ("exchange.declare bad argument", lambda q, x: (
            [], E.Declare(exchange=x, exchange_type="direct", auto_delete=True,
                          arguments={"alternate-exchange": 5}), 406, 40, 10)),
        ("exchange.declare unknown type", lambda q, x: (
            [], E.Declare(exchange=x, exchange_type="nonsense"), 406, 40, 10)),
        ("exchange.declare passive missing", lambda q, x: (
            [], E.Declare(exchange=x, passive=True), 404, 40, 10)),
        ("exchange.delete if-unused", lambda q, x: (
            [E.Declare(exchange=x, auto_delete=False), Q.Declare(queue=q, exclusive=True),
             Q.Bind(queue=q, exchange=x, routing_key="k")],
            E.Delete(exchange=x, if_unused=True), 406, 40, 20)),
        ("exchange.bind missing source", lambda q, x: (
            [E.Declare(exchange=x, auto_delete=True)],
            E.Bind(destination=x, source=x + "-missing", routing_key="k"), 404, 40, 30)),
        ("exchange.bind bad x-match", lambda q, x: (
            [E.Declare(exchange=x, exchange_type="headers", auto_delete=True)],
            E.Bind(destination="amq.fanout", source=x, arguments={"x-match": "some"}), 406, 40, 30)),
        ("queue.bind missing exchange", lambda q, x: (
            [Q.Declare(queue=q, exclusive=True)], Q.Bind(queue=q, exchange=x, routing_key="k"),
            404, 50, 20)),
        ("queue.bind default exchange", lambda q, x: (
            [Q.Declare(queue=q, exclusive=True)], Q.Bind(queue=q, exchange="", routing_key="k"),
            403, 50, 20)),
        ("queue.purge missing", lambda q, x: ([], Q.Purge(queue=q), 404, 50, 30)),
        ("queue.delete if-unused", lambda q, x: (
            [Q.Declare(queue=q, exclusive=True), B.Consume(queue=q)],
            Q.Delete(queue=q, if_unused=True), 406, 50, 40)),
        ("basic.consume missing queue", lambda q, x: ([], B.Consume(queue=q), 404, 60, 20)),
        ("basic.consume reused tag", lambda q, x: (
            [Q.Declare(queue=q, exclusive=True), B.Consume(queue=q, consumer_tag="t")],
            B.Consume(queue=q, consumer_tag="t"), 530, 60, 20)),
        ("basic.get missing queue", lambda q, x: ([], B.Get(queue=q), 404, 60, 70)),
        ("basic.ack unknown tag", lambda q, x: ([], B.Ack(delivery_tag=7), 406, 60, 80)),
        ("basic.reject unknown tag", lambda q, x: ([], B.Reject(delivery_tag=7), 406, 60, 90)),
        ("basic.nack unknown tag", lambda q, x: ([], B.Nack(delivery_tag=7), 406, 60, 120)),
        ("confirm.select in tx", lambda q, x: ([T.Select()], C.Select(), 406, 85, 10)),
        ("tx.select in confirm", lambda q, x: ([C.Select()], T.Select(), 406, 90, 10)),
        ("tx.commit without select", lambda q, x: ([], T.Commit(), 406, 90, 20)),
        ("tx.rollback without select", lambda q, x: ([], T.Rollback(), 406, 90, 30)),
    ]  # fmt: skip


CASES = _cases()


@pytest.mark.parametrize("build", [builder for _, builder in CASES], ids=[name for name, _ in CASES])
def test_close_names_the_failing_method(shared_node: NodeProcess, build) -> None:
    queue, exchange = _names()
    setup, failing, code, class_id, method_id = build(queue, exchange)
    client = RawClient(shared_node.port)
    try:
        client.handshake()
        client.open_channel()
        for method in setup:
            reply = client.call(method)
            assert not isinstance(reply, (commands.Channel.Close, commands.Connection.Close)), reply
        close = client.call(failing)
        assert isinstance(close, (commands.Channel.Close, commands.Connection.Close)), close
        assert close.reply_code == code, close.reply_text
        assert (close.class_id, close.method_id) == (class_id, method_id), close.reply_text
    finally:
        client.close()


def test_a_channel_method_before_connection_open_names_itself(shared_node: NodeProcess) -> None:
    client = RawClient(shared_node.port)
    try:
        client.send(b"AMQP\x00\x00\x09\x01")
        client.read_frame()  # Start
        client.send_frame(
            commands.Connection.StartOk(client_properties={}, mechanism="PLAIN", response="\0guest\0guest")
        )
        client.read_frame()  # Tune
        client.send_frame(commands.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=0))
        close = client.call(commands.Channel.Open(), 1)  # no Connection.Open yet
        assert isinstance(close, commands.Connection.Close), close
        assert (close.reply_code, close.class_id, close.method_id) == (504, 20, 10), close.reply_text
    finally:
        client.close()
