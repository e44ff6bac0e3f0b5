"""The broker side of exchange federation, on a real broker model: where each type sends local
publishes, binding aggregation, the outbox's limit policies, and the peering's mirrored
bindings on the parent (kept in federation.db across restarts)."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands

from federation.attachment import Attachment, AttachmentConfig, Peering, normalize_type
from federation.health import Health
from federation.local import LocalSink
from federation.persistence import FederationStore
from federation.routes import LocalNode
from gateway.broker import Broker
from gateway.management import Management, ManagementError
from gateway.wire import Content

from .broker_fakes import Client
from .test_federation_persistence import AWKWARD


def attached(kind: str, port: int = 5673, **options: Any) -> tuple[Client, Attachment]:
    broker = Broker()
    client = Client(broker)
    client.declare("local")
    client.bind("local", "amq.data", "k")
    vhost = broker.vhosts["/"]
    config = AttachmentConfig("amq.data", "/", kind, "127.0.0.1", port, **options)
    attachment = Attachment(config, LocalNode("child", Management(broker, "child"), lambda: None), vhost)
    attachment.attach(vhost.exchanges["amq.data"])
    return client, attachment


def depths(client: Client) -> tuple[int, int]:
    """(local queue, outbox) message counts."""
    queues = client.broker.vhosts["/"].queues
    outbox = queues.get("federation.outbox.amq.data")
    return len(queues["local"].ready), len(outbox.ready) if outbox is not None else -1


@pytest.mark.parametrize(
    ("kind", "routed", "unrouted"),
    [
        # (local, outbox) after a publish that matches the local binding, and one that does not
        ("subscriber", (1, -1), (0, -1)),
        ("publisher", (1, 1), (0, 1)),
        ("locator", (1, 0), (0, 1)),
        ("fanout", (0, 1), (0, 1)),
        ("service", (1, 0), (0, 1)),
    ],
)
def test_where_each_type_sends_a_local_publish(kind: str, routed: tuple, unrouted: tuple) -> None:
    client, _ = attached(kind)
    client.publish("amq.data", "k")
    assert depths(client) == routed
    client.call(commands.Queue.Purge(queue="local"))
    if routed[1] > 0:
        client.call(commands.Queue.Purge(queue="federation.outbox.amq.data"))
    client.publish("amq.data", "other")
    assert depths(client) == unrouted


def test_messages_from_the_parent_are_routed_locally_and_never_forwarded() -> None:
    client, attachment = attached("fanout")
    sink = LocalSink(client.broker, lambda: None)
    attachment.inbound_sessions.add(sink.session_id)
    sink.publish("amq.data", "k", Content.from_properties(None, b"from the parent"))
    assert depths(client) == (1, 0)


def test_identical_local_bindings_make_one_remote_binding() -> None:
    client, attachment = attached("subscriber")
    client.declare("second")
    client.bind("second", "amq.data", "k")
    client.bind("second", "amq.data", "j")
    assert sorted(key for key, _ in attachment.bindings.values()) == ["j", "k"]
    client.call(commands.Queue.Unbind(queue="local", exchange="amq.data", routing_key="k"))
    assert sorted(key for key, _ in attachment.bindings.values()) == ["j", "k"]
    client.call(commands.Queue.Delete(queue="second"))
    assert attachment.bindings == {}


def test_a_full_outbox_holds_its_publisher_until_it_drains() -> None:
    client, attachment = attached("fanout", outbox_limit=3)
    for _ in range(2):
        client.publish("amq.data", "k")
    assert client.session.hold is None
    client.publish("amq.data", "k")  # fills it: kept, and its publisher is held
    assert client.session.hold is not None
    assert "federation outbox of exchange 'amq.data' is full (3 messages" in client.session.hold.reason
    assert depths(client) == (0, 3)
    assert attachment.record(Health().record())["outbox"]["messages"] == 3
    client.call(commands.Queue.Purge(queue="federation.outbox.amq.data"))
    attachment.drained()
    assert attachment._gate is None


def test_drop_oldest_counts_what_it_drops() -> None:
    client, attachment = attached("fanout", outbox_limit=2, outbox_policy="drop-oldest")
    for _ in range(5):
        client.publish("amq.data", "k")
    assert client.session.hold is None
    record = attachment.record(Health().record())
    assert record["outbox"] == {"messages": 2, "limit": 2, "policy": "drop-oldest", "dropped": 3}


def test_types_default_by_exchange_type_and_data_means_fanout() -> None:
    assert normalize_type(None, "direct") == "service"
    assert normalize_type(None, "topic") == "fanout"
    assert normalize_type("data", "direct") == "fanout"
    with pytest.raises(ManagementError, match="unknown federation type 'bogus'"):
        normalize_type("bogus", "topic")


class Parent:
    """The parent as the peering's binding sync sees it: every Bind and Unbind answered."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def call(self, method: Any) -> None:
        assert method.queue == "federation.child.amq.data"
        self.calls.append((method.name, method.routing_key))


async def synced(peering: Peering) -> list[tuple[str, str]]:
    """What one sync of the peering's bindings asked of the parent."""
    parent = Parent()
    await peering._sync_bindings(parent)
    return sorted(parent.calls)


def bound_elsewhere(client: Client, key: str, arguments: dict[str, Any] | None = None) -> None:
    client.declare(f"queue-{key}")
    client.bind(f"queue-{key}", "amq.data", key, arguments)


async def test_bindings_withdrawn_while_the_peering_was_down_are_unbound_on_reconnect() -> None:
    client, attachment = attached("fanout")
    bound_elsewhere(client, "gone")
    peering = Peering(attachment)
    await synced(peering)
    client.call(commands.Queue.Delete(queue="queue-gone"))
    assert await synced(peering) == [("Queue.Bind", "k"), ("Queue.Unbind", "gone")]
    assert await synced(peering) == [("Queue.Bind", "k")]


async def test_a_restarted_child_unbinds_what_it_no_longer_has() -> None:
    store = FederationStore.open(None)
    client, attachment = attached("fanout")
    bound_elsewhere(client, "gone")  # a transient queue, say: it does not outlive the restart
    bound_elsewhere(client, "odd", AWKWARD)
    await synced(Peering(attachment, store))
    client, restarted = attached("fanout")
    bound_elsewhere(client, "odd", dict(reversed(AWKWARD.items())))
    peering = Peering(restarted, store)
    assert await synced(peering) == [("Queue.Bind", "k"), ("Queue.Bind", "odd"), ("Queue.Unbind", "gone")]
    assert sorted(key for key, _ in store.load_bindings(peering._target)) == ["k", "odd"]


async def test_bindings_stored_for_another_parent_are_not_unbound_on_this_one() -> None:
    store = FederationStore.open(None)
    client, attachment = attached("fanout", port=5673)
    bound_elsewhere(client, "old")
    await synced(Peering(attachment, store))
    _, moved = attached("fanout", port=5674)
    assert await synced(Peering(moved, store)) == [("Queue.Bind", "k")]


async def test_a_deleted_federation_forgets_its_stored_bindings() -> None:
    store = FederationStore.open(None)
    _, attachment = attached("fanout")
    peering = Peering(attachment, store)
    await synced(peering)
    peering.retire()
    await synced(peering)  # a sync still under way when it was deleted stores nothing
    assert store.load_bindings(peering._target) == []
