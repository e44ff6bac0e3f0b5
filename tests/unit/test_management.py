"""Management operations against a real broker model (no I/O)."""

from __future__ import annotations

import decimal
import time

import pytest

from gateway.broker import Broker
from gateway.management import Management, ManagementError, jsonable


@pytest.fixture
def management() -> Management:
    return Management(Broker(node_name="m"), "m")


def names(records: list[dict]) -> set[str]:
    return {record["name"] for record in records}


def test_add_list_and_delete_exchange(management: Management) -> None:
    management.call("exchanges.add", {"name": "fed.topic", "type": "topic", "durable": True})
    record = next(e for e in management.call("exchanges.list", {}) if e["name"] == "fed.topic")
    assert record == {
        "name": "fed.topic",
        "type": "topic",
        "durable": True,
        "auto_delete": False,
        "internal": False,
        "alternate_exchange": None,
        "arguments": {},
        "bindings": 0,
        "published": 0,
        "routed": 0,
        "unroutable": 0,
        "dropped_looping": 0,
        "interest": 0,
        "interest_hops": 0,
    }
    management.call("exchanges.delete", {"name": "fed.topic"})
    assert "fed.topic" not in names(management.call("exchanges.list", {}))


def test_alternate_exchange_is_an_argument(management: Management) -> None:
    management.call("exchanges.add", {"name": "alt", "type": "fanout"})
    management.call("exchanges.add", {"name": "main", "type": "direct", "alternate_exchange": "alt"})
    record = next(e for e in management.call("exchanges.list", {}) if e["name"] == "main")
    assert record["alternate_exchange"] == "alt"


def test_model_errors_come_back_with_their_kind(management: Management) -> None:
    management.call("exchanges.add", {"name": "x", "type": "direct"})
    with pytest.raises(ManagementError) as raised:
        management.call("exchanges.add", {"name": "x", "type": "fanout"})
    assert raised.value.kind == "PRECONDITION_FAILED"
    assert raised.value.message.startswith("inequivalent arg 'type' for exchange 'x'")
    with pytest.raises(ManagementError) as raised:
        management.call("exchanges.add", {"name": "amq.mine", "type": "direct"})
    assert raised.value.kind == "ACCESS_REFUSED"


def test_deleting_what_does_not_exist_is_reported(management: Management) -> None:
    with pytest.raises(ManagementError) as raised:
        management.call("queues.delete", {"name": "ghost"})
    assert (raised.value.kind, raised.value.message) == ("NOT_FOUND", "no queue 'ghost' in vhost '/'")
    with pytest.raises(ManagementError) as raised:
        management.call("exchanges.delete", {"name": "ghost"})
    assert raised.value.kind == "NOT_FOUND"


def test_queues_and_bindings(management: Management) -> None:
    management.call("queues.add", {"name": "public", "durable": True, "arguments": {"x-max-length": 5}})
    management.call("bindings.add", {"exchange": "amq.topic", "queue": "public", "routing_key": "global.#"})
    queue = next(q for q in management.call("queues.list", {}) if q["name"] == "public")
    assert queue == {
        "name": "public",
        "durable": True,
        "auto_delete": False,
        "exclusive": False,
        "type": "classic",
        "messages": 0,
        "bytes": 0,
        "bytes_on_disk": 0,
        "capacity": None,
        "flow_resume_capacity": None,
        "overfull": False,
        "enqueued": 0,
        "delivered": 0,
        "acknowledged": 0,
        "dead_lettered": 0,
        "dropped": 0,
        "consumers": 0,
        "bindings": 1,
        "arguments": {"x-max-length": 5},
    }
    assert {
        "exchange": "amq.topic",
        "destination_kind": "queue",
        "destination": "public",
        "routing_key": "global.#",
        "arguments": {},
    } in management.call("bindings.list", {})
    management.call(
        "bindings.delete", {"exchange": "amq.topic", "queue": "public", "routing_key": "global.#"}
    )
    assert not [b for b in management.call("bindings.list", {}) if b["destination"] == "public"]
    # Unbind is idempotent on the wire, but an operator's typo is still an error.
    for request, text in (
        ({"exchange": "amq.topic", "queue": "ghost"}, "no queue 'ghost' in vhost '/'"),
        ({"exchange": "ghost", "queue": "public"}, "no exchange 'ghost' in vhost '/'"),
    ):
        with pytest.raises(ManagementError) as raised:
            management.call("bindings.delete", request)
        assert (raised.value.kind, raised.value.message) == ("NOT_FOUND", text)
    assert management.call("queues.delete", {"name": "public"}) == 0


def test_unknown_method_and_bad_arguments(management: Management) -> None:
    with pytest.raises(ManagementError) as raised:
        management.call("links.explode", {})
    assert raised.value.kind == "usage"
    with pytest.raises(ManagementError) as raised:
        management.call("queues.add", {"nmae": "typo"})
    assert raised.value.kind == "usage" and "nmae" in raised.value.message


def test_unknown_vhost(management: Management) -> None:
    with pytest.raises(ManagementError) as raised:
        management.call("queues.list", {"vhost": "nowhere"})
    assert (raised.value.kind, raised.value.message) == ("NOT_FOUND", "no vhost 'nowhere'")


def test_internal_sessions_do_not_linger(management: Management) -> None:
    management.call("queues.add", {"name": "q"})
    info = management.call("node.info", {})
    assert info["connections"] == 0
    assert 0 < info["started"] <= time.time()  # when the counters began: the node's start


def test_jsonable_field_values() -> None:
    assert jsonable({"b": b"raw", "d": decimal.Decimal("1.5"), "l": [1, (2, b"x")]}) == {
        "b": "raw",
        "d": "1.5",
        "l": [1, [2, "x"]],
    }
