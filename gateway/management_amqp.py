"""Management over AMQP: JSON requests published to `amq.gateway.management`, replies to reply_to.

Any AMQP client can manage a node this way, on the node's one port, authenticated like any
client; the CLIs do. A request is a message on the exchange MANAGEMENT_EXCHANGE with a
`reply_to` queue, an optional `correlation_id` and a JSON body
``{"method": "queues.add", "arguments": {...}}``. The answer, on the default exchange to
`reply_to` with the same correlation id, is ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": {"kind": ..., "message": ...}}``. Only users tagged `administrator`
may manage a node.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pamqp import commands

from gateway.management import Management, ManagementError
from gateway.wire.content import Content

LOGGER = logging.getLogger("gateway.management")

MANAGEMENT_EXCHANGE = "amq.gateway.management"
ADMINISTRATOR_TAG = "administrator"


def answer(management: Management, user: Any, request: Content) -> Content:
    """The reply message for one request message (never raises for a bad request)."""
    try:
        method, arguments = parse_request(request.body)
        if ADMINISTRATOR_TAG not in getattr(user, "tags", ()):
            raise ManagementError(
                "access", f"user '{user.name}' may not manage this node (not an administrator)"
            )
        reply: dict[str, Any] = {"ok": True, "result": management.call(method, arguments)}
        LOGGER.info("management: %s by %s", method, user.name)
    except ManagementError as error:
        reply = {"ok": False, "error": {"kind": error.kind, "message": error.message}}
    properties = commands.Basic.Properties(
        content_type="application/json", correlation_id=request.properties.correlation_id
    )
    return Content.from_properties(properties, json.dumps(reply).encode())


def parse_request(body: bytes) -> tuple[str, dict[str, Any]]:
    """(method, arguments) from a request body, with a usage error naming what is wrong."""
    try:
        request = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManagementError("usage", f"the request is not JSON: {exc}") from None
    if not isinstance(request, dict) or not isinstance(request.get("method"), str):
        raise ManagementError("usage", 'a request is a JSON object with a "method" string')
    arguments = request.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ManagementError("usage", '"arguments" must be a JSON object')
    return request["method"], arguments
