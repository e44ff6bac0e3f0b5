"""The management requests a plan sends, made as amq-config and amq-route make them, and how
the plan names and describes each object on its lines (topology.plan builds on both)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from federation.requests import Request
from topology.model import Exchange, Queue


def show(value: Any) -> str:
    """An attribute value in old -> new lines: JSON (true, null, "text", ["a"])."""
    return json.dumps(value, sort_keys=True)


# -- requests, as amq-config and amq-route send them -------------------------------------------


def exchange_add(exchange: Exchange) -> Request:
    """`amq-config add exchange <type> <name> [--durable]`; auto_delete and internal (which
    amq-config has no options for) only when set."""
    arguments: dict[str, Any] = {"name": exchange.name, "type": exchange.type, "durable": exchange.durable}
    if exchange.auto_delete:
        arguments["auto_delete"] = True
    if exchange.internal:
        arguments["internal"] = True
    return ("exchanges.add", arguments)


def queue_add(queue: Queue) -> Request:
    """`amq-config add queue <name> [--durable]`; auto_delete only when set."""
    arguments: dict[str, Any] = {"name": queue.name, "durable": queue.durable, "arguments": {}}
    if queue.auto_delete:
        arguments["auto_delete"] = True
    return ("queues.add", arguments)


def queue_delete(name: str) -> Request:
    """`amq-config del queue <name>` without --force: the node refuses a queue that holds
    messages or has consumers, so apply never throws messages away."""
    return ("queues.delete", {"name": name, "if_empty": True, "if_unused": True})


def binding_request(method: str, exchange: str, queue: str, key: str, arguments: dict[str, Any]) -> Request:
    """`amq-config bind|unbind <exchange> <queue> <key>`; headers arguments only when given."""
    request: dict[str, Any] = {"exchange": exchange, "queue": queue, "routing_key": key}
    if arguments:
        request["arguments"] = dict(arguments)
    return (method, request)


# -- how objects are named and described in the plan -------------------------------------------


def exchange_detail(record: Mapping[str, Any]) -> list[str]:
    detail = [str(record.get("type")), "durable" if record.get("durable") else "transient"]
    detail += [flag.replace("_", "-") for flag in ("auto_delete", "internal") if record.get(flag)]
    return detail


def queue_detail(record: Mapping[str, Any]) -> list[str]:
    detail = ["durable" if record.get("durable") else "transient"]
    if record.get("auto_delete"):
        detail.append("auto-delete")
    if record.get("messages"):
        detail.append(f"{record['messages']} message(s)")
    if record.get("consumers"):
        detail.append(f"{record['consumers']} consumer(s)")
    return detail


def link_detail(durable: bool, transport: str) -> list[str]:
    return ["durable" if durable else "transient", transport]


def route_name(kind: str, exchange: str, key: str | None, queue: str | None, push: bool, far: str) -> str:
    """`dynamic fed.topic <= hub-us 127.0.0.1:5702` (pulled from there: `far` names the node
    and where its holder reaches it), `exchange amq.topic(global.#) => ...` (pushed there),
    `queue amq.fanout(public) <= ...`."""
    what = exchange if kind == "dynamic" else f"{exchange}({key if kind == 'exchange' else queue})"
    return f"{kind} {what} {'=>' if push else '<='} {far}"


def route_detail(attributes: dict[str, Any]) -> list[str]:
    detail = ["durable" if attributes.get("durable") else "transient"]
    if attributes.get("src_local"):
        detail.append("push")
    detail += [f"{name} {attributes[name]}" for name in ("ack", "credit") if attributes.get(name) is not None]
    if attributes.get("tag") is not None:
        detail.append(f"tag {show(attributes['tag'])}")
    if attributes.get("excludes"):
        detail.append(f"excludes {show(list(attributes['excludes']))}")
    return detail
