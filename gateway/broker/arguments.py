"""Queue and exchange arguments: validation on declare, equivalence on redeclare.

Texts follow RabbitMQ's so that clients and operators see familiar errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.wire.errors import AMQPError, precondition_failed

OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")

#: Qpid's queue limit policies (qpid.policy_type) as our overflow modes. ring_strict never drops
#: a message a client was given and has not acknowledged: neither does ring here, since limits
#: count ready messages only (as RabbitMQ's x-max-length does), so the two are one.
QPID_POLICIES = {"reject": "reject-publish", "ring": "drop-head", "ring_strict": "drop-head"}
#: Qpid's default policy for a durable queue: its limits are not limits but the point beyond which
#: message bodies leave memory for disk (gateway.broker.paging); nothing is refused or dropped.
FLOW_TO_DISK = "flow_to_disk"

#: The highest x-max-priority (message priorities are octets).
MAX_PRIORITY = 255

#: Queue arguments compared when a queue is redeclared (RabbitMQ's list, minus features we lack).
QUEUE_EQUIVALENCE_KEYS = (
    "x-expires",
    "x-message-ttl",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-type",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-qpid-capacity",
    "x-qpid-flow-resume-capacity",
    "qpid.max_count",
    "qpid.max_size",
    "qpid.policy_type",
    "x-delivery-limit",
)

#: What a missing queue argument means when redeclares are compared: no x-queue-type is a
#: classic queue, so declaring one with `x-queue-type: classic` and the other without agree.
QUEUE_ARGUMENT_DEFAULTS: dict[str, Any] = {"x-queue-type": "classic"}

#: The queue types a node serves. A quorum queue is a durable classic queue here (no
#: replication) with quorum's argument rules; streams have no equivalent.
QUEUE_TYPES = ("classic", "quorum")

EXCHANGE_EQUIVALENCE_KEYS = ("alternate-exchange",)


@dataclass(frozen=True, slots=True)
class QueueOptions:
    """The arguments that change a queue's behaviour, parsed once at declare."""

    message_ttl: int | None = None  # milliseconds
    expires: int | None = None  # milliseconds
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_priority: int | None = None  # 0 and None: a plain FIFO queue
    #: Qpid's reject policy: a publisher not in confirm mode (which a nack would tell) has its
    #: channel closed when the queue refuses its message, as Qpid raises an exception.
    refusal_closes_channel: bool = False
    #: Producer flow control (gateway.broker.flow): bytes of ready messages over which the
    #: queue holds its publishers, and under which it releases them; None: no flow control.
    capacity: int | None = None
    flow_resume_capacity: int | None = None
    queue_type: str = "classic"
    #: quorum only: a message returned more often than this is dead-lettered (or dropped).
    delivery_limit: int | None = None
    #: flow_to_disk: ready messages, and bytes of them, beyond which bodies go to disk.
    flow_to_disk_count: int | None = None
    flow_to_disk_bytes: int | None = None


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, (str, bytes)):
        return "longstr"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _integer(value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{{unacceptable_type,{_type_name(value)}}}")
    if value < minimum:
        raise ValueError(f"{{value_negative,{value}}}" if value < 0 else f"{{value_zero,{value}}}")
    return value


def _priority(value: Any) -> int:
    """x-max-priority: 0-255, as in RabbitMQ (whose texts these are)."""
    priority = _integer(value, 0)
    if priority > MAX_PRIORITY:
        raise ValueError(f"{{max_value_exceeded,{priority}}}")
    return priority


def _string(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if not isinstance(value, str):
        raise ValueError(f"{{unacceptable_type,{_type_name(value)}}}")
    return value


def parse_queue_arguments(arguments: dict[str, Any], description: str, durable: bool = False) -> QueueOptions:
    """Validate a queue's x-arguments and Qpid's qpid.* limits; 406 names the bad one, as
    RabbitMQ does. `durable` picks Qpid's default policy for limits given without one."""
    parsed: dict[str, Any] = {}
    name = ""
    try:
        for name, rabbit in (("qpid.max_count", "x-max-length"), ("qpid.max_size", "x-max-length-bytes")):
            if name in arguments:
                if rabbit in arguments:
                    raise ValueError(f"{{conflicting_arguments,{rabbit}}}: give one of the two")
                parsed["max_length" if rabbit == "x-max-length" else "max_length_bytes"] = _integer(
                    arguments[name], 0
                )
        name = "qpid.policy_type"
        if name in arguments and "x-overflow" in arguments:
            raise ValueError("{conflicting_arguments,x-overflow}: give one of the two")
        if name in arguments or (parsed and "x-overflow" not in arguments):
            policy = _string(arguments[name]) if name in arguments else FLOW_TO_DISK if durable else "reject"
            if policy == FLOW_TO_DISK:
                parsed["flow_to_disk_count"] = parsed.pop("max_length", None)
                parsed["flow_to_disk_bytes"] = parsed.pop("max_length_bytes", None)
            elif policy in QPID_POLICIES:
                parsed["overflow"] = QPID_POLICIES[policy]
                parsed["refusal_closes_channel"] = policy == "reject"
            else:
                raise ValueError(f"{{invalid_policy_type,{policy}}}")
        for name, key, convert in (
            ("x-message-ttl", "message_ttl", lambda v: _integer(v, 0)),
            ("x-expires", "expires", lambda v: _integer(v, 1)),
            ("x-max-length", "max_length", lambda v: _integer(v, 0)),
            ("x-max-length-bytes", "max_length_bytes", lambda v: _integer(v, 0)),
            ("x-dead-letter-exchange", "dead_letter_exchange", _string),
            ("x-dead-letter-routing-key", "dead_letter_routing_key", _string),
            ("x-overflow", "overflow", _string),
            ("x-max-priority", "max_priority", _priority),
            ("x-qpid-capacity", "capacity", lambda v: _integer(v, 0)),
            ("x-qpid-flow-resume-capacity", "flow_resume_capacity", lambda v: _integer(v, 0)),
        ):
            if name in arguments:
                parsed[key] = convert(arguments[name])
        name = "x-overflow"
        if parsed.get("overflow", "drop-head") not in OVERFLOW_MODES:
            raise ValueError(f"{{invalid_overflow,{parsed['overflow']}}}")
        name = "x-dead-letter-routing-key"
        if "dead_letter_routing_key" in parsed and "dead_letter_exchange" not in parsed:
            raise ValueError("{routing_key_but_no_dlx_defined}")
        name = "x-qpid-flow-resume-capacity"
        capacity = parsed.pop("capacity", 0) or None  # 0: no capacity limit, as in Qpid
        resume = parsed.pop("flow_resume_capacity", None)
        if capacity is None and resume is not None:
            raise ValueError("{resume_capacity_but_no_capacity_defined}")
        if capacity is not None:
            if resume is None:
                resume = capacity  # Qpid's default
            elif resume > capacity:
                raise ValueError(f"{{greater_than_capacity,{resume}}}")
            parsed.update(capacity=capacity, flow_resume_capacity=resume)
        name = "x-queue-type"
        if name in arguments:
            parsed["queue_type"] = _queue_type(arguments[name])
        if parsed.get("queue_type") == "quorum":
            # Quorum's rules: x-delivery-limit, no priorities, no reject-publish-dlx.
            name = "x-delivery-limit"
            if name in arguments:
                parsed["delivery_limit"] = _integer(arguments[name], 0)
            name = "x-max-priority"
            if name in arguments:
                raise ValueError("quorum queues have no priorities")
            name = "x-overflow"
            if parsed.get("overflow") == "reject-publish-dlx":
                raise ValueError("quorum queues support x-overflow drop-head and reject-publish only")
    except ValueError as exc:
        raise precondition_failed(f"invalid arg '{name}' for {description}: {exc}") from None
    return QueueOptions(**parsed)


def _queue_type(value: Any) -> str:
    """Accepting another type and ignoring it would mislead: say plainly what the node lacks."""
    queue_type = _string(value)
    if queue_type == "stream":
        raise ValueError("{unsupported_queue_type,stream}: streams are not supported")
    if queue_type not in QUEUE_TYPES:
        raise ValueError(
            f"{{unsupported_queue_type,{queue_type}}}: only classic and quorum queues are supported"
        )
    return queue_type


def check_queue_type(
    options: QueueOptions, durable: bool, exclusive: bool, auto_delete: bool, description: str
) -> None:
    """A quorum queue must be durable, not exclusive, not auto-delete: RabbitMQ's 406 texts."""
    if options.queue_type != "quorum":
        return
    for refused, name in (
        (not durable, "non-durable"),
        (exclusive, "exclusive-owner"),
        (auto_delete, "auto-delete"),
    ):
        if refused:
            raise precondition_failed(
                f"invalid property '{name}' for {description}: quorum queues are durable, not exclusive, not auto-delete"
            )


def check_exchange_arguments(arguments: dict[str, Any], description: str) -> None:
    if "alternate-exchange" in arguments:
        try:
            _string(arguments["alternate-exchange"])
        except ValueError as exc:
            raise precondition_failed(f"invalid arg 'alternate-exchange' for {description}: {exc}") from None


def _render(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return f"the value '{value}' of type '{_type_name(value)}'"


def inequivalent(name: str, description: str, received: Any, current: Any) -> AMQPError:
    """406 for a redeclare that differs; flags render as 'true'/'false', arguments as values."""
    if isinstance(received, bool) and isinstance(current, bool):
        detail = f"received '{str(received).lower()}' but current is '{str(current).lower()}'"
    elif isinstance(received, str) and isinstance(current, str) and name == "type":
        detail = f"received '{received}' but current is '{current}'"
    else:
        detail = f"received {_render(received)} but current is {_render(current)}"
    return precondition_failed(f"inequivalent arg '{name}' for {description}: {detail}")


def check_equivalent_arguments(
    received: dict[str, Any],
    current: dict[str, Any],
    keys: tuple[str, ...],
    description: str,
    defaults: dict[str, Any] | None = None,
) -> None:
    """406 for the first of `keys` whose value differs (a missing one counts as its value in
    `defaults`, if any)."""
    defaults = defaults or {}
    for key in keys:
        new, old = received.get(key, defaults.get(key)), current.get(key, defaults.get(key))
        if isinstance(new, bytes):
            new = new.decode("utf-8", "replace")
        if isinstance(old, bytes):
            old = old.decode("utf-8", "replace")
        if new != old or type(new) is not type(old) and not (isinstance(new, int) and isinstance(old, int)):
            raise inequivalent(key, description, new, old)
