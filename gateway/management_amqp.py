"""Management over AMQP: JSON requests published to `amq.gateway.management`, replies to reply_to.

Any AMQP client can manage a node this way, on the node's one port, authenticated like any
client; the CLIs do. A request is a message on the exchange MANAGEMENT_EXCHANGE with a
`reply_to` queue, an optional `correlation_id` and a JSON body
``{"method": "queues.add", "arguments": {...}}``. The answer, to `reply_to` with the same
correlation id, is ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": {"kind": ..., "message": ...}}``. Only users tagged `administrator`
may manage a node.

Requests and replies are private: the exchange is one the node handles itself (nobody can bind
a queue to it, so nobody reads another user's `links.add` and its password), and `reply_to`
must name an exclusive queue of the requesting connection, so a reply never lands in a queue
someone else reads.

Monitoring users see, in the `*.list` answers, only what their permissions let them read or
configure (issue 26): the queues and exchanges their read or configure pattern matches in the
vhost listed, and the bindings whose two ends they see; nothing in a vhost they have no
permission in. Administrators see everything.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from pamqp import commands

from gateway.broker import Session
from gateway.broker.names import describe
from gateway.jsonbody import load_json
from gateway.management import Management, ManagementError
from gateway.names import ADMINISTRATOR_TAG, DEFAULT_VHOST, MONITORING_TAG
from gateway.wire.content import Content
from gateway.wire.errors import precondition_failed

LOGGER = logging.getLogger("gateway.management")

_PUBLISH = commands.Basic.Publish()
#: Listings only administrators may read: who may log in and what each may do (RabbitMQ's
#: monitoring users do not see users or permissions either).
ADMINISTRATOR_READS = frozenset({"users.list", "permissions.list", "topic_permissions.list"})

#: (user, vhost) -> whether that user may see a (kind, name) there (Authority.visible).
Visibility = Callable[[str, str], Callable[[str, str], bool]]


def handle_request(management: Management, visible: Visibility, session: Session, request: Content) -> None:
    """The broker's handler for MANAGEMENT_EXCHANGE: answer a request into the requester's own
    exclusive reply queue; 406 on the publishing channel if it names none."""
    vhost = session.vhost
    reply_to = request.reply_to
    queue = vhost.queues.get(reply_to) if reply_to else None
    if not reply_to or queue is None or queue.owner is not session:
        named = describe("queue", reply_to, vhost.name) if reply_to else "no queue"
        raise precondition_failed(
            "a management request's reply_to must name an exclusive queue of the requesting"
            f" connection; it names {named}",
            _PUBLISH,
        )
    # Straight into the queue, as the default exchange would route it, but not counted as a
    # publish to it: the node's counters count the applications' messages, and reading them
    # must not change them.
    vhost.enqueue(queue, "", reply_to, answer(management, visible, session.user, request))


def answer(management: Management, visible: Visibility, user: Any, request: Content) -> Content:
    """The reply message for one request message (never raises for a bad request)."""
    try:
        method, arguments = parse_request(request.body)
        check_access(user, method)
        result = management.call(method, arguments, user.name)
        if ADMINISTRATOR_TAG not in user.tags:
            result = visible_only(method, result, visible(user.name, arguments.get("vhost", DEFAULT_VHOST)))
        reply: dict[str, Any] = {"ok": True, "result": result}
        LOGGER.info("management: %s by %s", method, user.name)
    except ManagementError as error:
        reply = {"ok": False, "error": {"kind": error.kind, "message": error.message}}
    properties = commands.Basic.Properties(
        content_type="application/json", correlation_id=request.properties.correlation_id
    )
    return Content.from_properties(properties, json.dumps(reply).encode())


def check_access(user: Any, method: str) -> None:
    """Administrators may call anything, monitoring users the reads (node.info and the
    `*.list` methods but ADMINISTRATOR_READS); ManagementError("access") for anything else."""
    tags = getattr(user, "tags", ())
    if ADMINISTRATOR_TAG in tags:
        return
    if MONITORING_TAG in tags:
        if method == "node.info" or (method.endswith(".list") and method not in ADMINISTRATOR_READS):
            return
        raise ManagementError(
            "access", f"user '{user.name}' may only read this node's state (monitoring), not call '{method}'"
        )
    raise ManagementError("access", f"user '{user.name}' may not manage this node (not an administrator)")


def visible_only(method: str, result: Any, sees: Callable[[str, str], bool]) -> Any:
    """A listing's records that a non-administrator may see (other answers as they are)."""
    if method == "queues.list":
        return [record for record in result if sees("queue", record["name"])]
    if method == "exchanges.list":
        return [record for record in result if sees("exchange", record["name"])]
    if method == "bindings.list":
        return [
            record
            for record in result
            if sees("exchange", record["exchange"])
            and sees(record["destination_kind"], record["destination"])
        ]
    return result


def parse_request(body: bytes) -> tuple[str, dict[str, Any]]:
    """(method, arguments) from a request body, with a usage error naming what is wrong."""
    try:
        request = load_json(body)
    except ValueError as exc:  # not UTF-8, not JSON, or nested too deep
        raise ManagementError("usage", f"the request is not JSON: {exc}") from None
    if not isinstance(request, dict) or not isinstance(request.get("method"), str):
        raise ManagementError("usage", 'a request is a JSON object with a "method" string')
    arguments = request.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ManagementError("usage", '"arguments" must be a JSON object')
    return request["method"], arguments
