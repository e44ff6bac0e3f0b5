"""The broker's side of the one check point: what each method asks the access port, in the
Qpid ACL's vocabulary (the contract the permissions and the ACL file are answered from), and
that a refusal is a 403 on the channel before anything changes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pamqp import commands

from gateway.broker import Broker
from gateway.wire.errors import AMQPError

from .broker_fakes import Client

Asked = tuple[str, str, str, dict[str, str]]


class Recorder:
    """An access port that records every question and refuses what `refuse` names."""

    def __init__(self, *refuse: str) -> None:
        self.refuse = set(refuse)
        self.asked: list[Asked] = []

    def check(self, action: str, obj: str, name: str, properties: Mapping[str, str]) -> str | None:
        self.asked.append((action, obj, name, dict(properties)))
        return f"refused {action} {name}" if action in self.refuse else None

    def publish(self, exchange: str, exchange_type: str, routing_key: str) -> str | None:
        return self.check("publish", "exchange", exchange, {"routingkey": routing_key, "type": exchange_type})


@pytest.fixture
def client() -> Client:
    c = Client(Broker())
    c.exchange("src", "topic")
    c.exchange("dst", "direct")
    c.declare("q")
    c.session.access = Recorder()
    return c


def asked(c: Client, method: Any) -> list[Asked]:
    recorder = c.session.access
    assert isinstance(recorder, Recorder)
    recorder.asked.clear()
    c.call(method)
    return recorder.asked


@pytest.mark.parametrize(
    ("method", "question"),
    [
        (
            commands.Exchange.Declare(exchange="x", exchange_type="fanout", durable=True),
            (
                "create",
                "exchange",
                "x",
                {"type": "fanout", "durable": "true", "autodelete": "false", "passive": "false"},
            ),
        ),
        (
            commands.Exchange.Declare(
                exchange="x", exchange_type="fanout", arguments={"alternate-exchange": "dst"}
            ),
            (
                "create",
                "exchange",
                "x",
                {
                    "type": "fanout",
                    "durable": "false",
                    "autodelete": "false",
                    "passive": "false",
                    "alternate": "dst",
                },
            ),
        ),
        (
            commands.Exchange.Declare(exchange="dst", passive=True),
            ("access", "exchange", "dst", {"passive": "true"}),
        ),
        (commands.Exchange.Delete(exchange="dst"), ("delete", "exchange", "dst", {})),
        (
            commands.Queue.Declare(queue="q2", exclusive=True, arguments={"x-dead-letter-exchange": "dst"}),
            (
                "create",
                "queue",
                "q2",
                {
                    "exclusive": "true",
                    "durable": "false",
                    "autodelete": "false",
                    "passive": "false",
                    "alternate": "dst",
                },
            ),
        ),
        (commands.Queue.Declare(queue="q", passive=True), ("access", "queue", "q", {"passive": "true"})),
        (
            commands.Queue.Bind(queue="q", exchange="src", routing_key="a.#"),
            ("bind", "exchange", "src", {"routingkey": "a.#", "queuename": "q", "type": "topic"}),
        ),
        (
            commands.Queue.Unbind(queue="q", exchange="src", routing_key="a.#"),
            ("unbind", "exchange", "src", {"routingkey": "a.#", "queuename": "q", "type": "topic"}),
        ),
        (
            commands.Exchange.Bind(destination="dst", source="src", routing_key="k"),
            ("bind", "exchange", "src", {"routingkey": "k", "exchangename": "dst", "type": "topic"}),
        ),
        (
            commands.Exchange.Unbind(destination="dst", source="gone", routing_key="k"),
            ("unbind", "exchange", "gone", {"routingkey": "k", "exchangename": "dst"}),
        ),
        (commands.Queue.Purge(queue="q"), ("purge", "queue", "q", {})),
        (commands.Queue.Delete(queue="q"), ("delete", "queue", "q", {})),
        (commands.Basic.Get(queue="q"), ("consume", "queue", "q", {})),
        (commands.Basic.Consume(queue="q"), ("consume", "queue", "q", {})),
    ],
)
def test_each_method_asks_once_in_the_acls_vocabulary(client: Client, method: Any, question: Asked) -> None:
    assert asked(client, method) == [question]


def test_a_server_named_queue_is_asked_under_its_generated_name(client: Client) -> None:
    (question,) = asked(client, commands.Queue.Declare(queue="", exclusive=True))
    assert question[:2] == ("create", "queue") and question[2].startswith("amq.gen-")
    assert question[2] in client.session.vhost.queues


def test_the_empty_queue_name_is_asked_as_the_queue_it_stands_for(client: Client) -> None:
    client.declare("last")
    assert asked(client, commands.Basic.Get(queue="")) == [("consume", "queue", "last", {})]


def test_a_publish_asks_with_its_routing_key(client: Client) -> None:
    recorder = client.session.access
    assert isinstance(recorder, Recorder)
    client.publish("src", "a.b")
    assert recorder.asked == [("publish", "exchange", "src", {"routingkey": "a.b", "type": "topic"})]


@pytest.mark.parametrize(
    ("action", "method"),
    [
        ("create", commands.Queue.Declare(queue="new")),
        ("delete", commands.Queue.Delete(queue="q")),
        ("purge", commands.Queue.Purge(queue="q")),
        ("consume", commands.Basic.Get(queue="q")),
        ("bind", commands.Queue.Bind(queue="q", exchange="src", routing_key="k")),
        ("create", commands.Exchange.Declare(exchange="new", exchange_type="direct")),
        ("delete", commands.Exchange.Delete(exchange="dst")),
    ],
)
def test_a_refusal_is_a_403_and_changes_nothing(client: Client, action: str, method: Any) -> None:
    client.publish("", "q", b"kept")
    vhost = client.session.vhost
    before = (
        set(vhost.queues),
        set(vhost.exchanges),
        len(vhost.queues["q"].ready),
        len(vhost.exchanges["src"].matcher),
    )
    client.session.access = Recorder(action)
    with pytest.raises(AMQPError) as refused:
        client.call(method)
    assert refused.value.reply_code == 403
    assert refused.value.reply_text.startswith(f"ACCESS_REFUSED - refused {action} ")
    assert (refused.value.class_id, refused.value.method_id) == (method.index >> 16, method.index & 0xFFFF)
    after = (
        set(vhost.queues),
        set(vhost.exchanges),
        len(vhost.queues["q"].ready),
        len(vhost.exchanges["src"].matcher),
    )
    assert after == before


def test_a_refused_publish_is_routed_nowhere(client: Client) -> None:
    client.session.access = Recorder("publish")
    with pytest.raises(AMQPError) as refused:
        client.publish("", "q", b"forged")
    assert refused.value.reply_code == 403
    assert not client.session.vhost.queues["q"].ready


def test_a_missing_exchange_is_refused_before_it_is_found_missing(client: Client) -> None:
    """RabbitMQ checks the permission first: a refused user learns nothing of what exists."""
    client.session.access = Recorder("publish")
    with pytest.raises(AMQPError) as refused:
        client.publish("no-such-exchange", "k")
    assert refused.value.reply_code == 403
