"""Management operations on a node, as plain functions: what amq-config and amq-route call.

Each operation takes keyword arguments and returns JSON-able data, or raises ManagementError.
Changes to exchanges, queues and bindings go through the same model code as AMQP methods (an
internal session runs the equivalent Exchange.Declare, Queue.Bind...), so management and
clients get the same validation and the same error texts. The AMQP request/reply adapter is
gateway.management_amqp; federation adds the links and routes operations.
"""

from __future__ import annotations

import datetime
import decimal
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pamqp import base, commands

from gateway.broker import Broker
from gateway.broker.exchange import Exchange
from gateway.broker.names import describe
from gateway.broker.outbox import NullOutbox
from gateway.names import DEFAULT_VHOST
from gateway.wire.errors import REPLY_NAMES, AMQPError
from gateway.wire.frames import make_method

if TYPE_CHECKING:
    from gateway.security.access import AclCheck

Operation = Callable[..., Any]
#: The ACL's `schemapackage` of every management method (its `schemaclass` is the method's
#: prefix: `links` for links.add), as QMF methods have theirs.
METHOD_PACKAGE = "amq-gateway"
M = TypeVar("M", bound=base.Frame)


class ManagementError(Exception):
    """A refused management request: `kind` is a short word the CLIs print before the message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind} - {message}")
        self.kind = kind
        self.message = message


class Management:
    """The operations of one node, by name (`call`) for the adapters."""

    def __init__(
        self,
        broker: Broker,
        node_name: str,
        resources: Callable[[], dict[str, Any]] = dict,
        acl: Callable[[], AclCheck | None] = lambda: None,
    ) -> None:
        """`resources`: the node's resource readings and alarms (memory, disk), for node.info;
        `acl`: the node's current ACL rules (None: no ACL file), read at each decision."""
        self.broker = broker
        self.node_name = node_name
        #: Unix time the node's counters began (docs/federation.md, "Counters"): its start.
        self.started = time.time()
        self.resources = resources
        self.acl = acl
        #: The user of the request being answered (None: the node's own work, unchecked).
        self._requester: str | None = None
        self.operations: dict[str, Operation] = {
            "node.info": self.node_info,
            "exchanges.list": self.list_exchanges,
            "exchanges.add": self.add_exchange,
            "exchanges.delete": self.delete_exchange,
            "queues.list": self.list_queues,
            "queues.add": self.add_queue,
            "queues.delete": self.delete_queue,
            "bindings.list": self.list_bindings,
            "bindings.add": self.add_binding,
            "bindings.delete": self.delete_binding,
        }

    def call(self, method: str, arguments: dict[str, Any], user: str | None = None) -> Any:
        """Run one operation for `user` (the ACL's `access method name=<method>` first, and
        what the operation checks with `authorize`); unknown names and bad arguments are
        ManagementErrors too."""
        operation = self.operations.get(method)
        if operation is None:
            raise ManagementError("usage", f"unknown management method '{method}'")
        self._requester = user
        try:
            schema = {"schemapackage": METHOD_PACKAGE, "schemaclass": method.partition(".")[0]}
            self.authorize("access", "method", method, schema)
            return operation(**arguments)
        except TypeError as exc:
            raise ManagementError("usage", f"bad arguments for '{method}': {exc}") from None
        finally:
            self._requester = None

    def authorize(
        self, action: str, obj: str, name: str, properties: Mapping[str, str] | None = None
    ) -> None:
        """Ask the node's ACL file about what the current request is about to do; refused:
        ManagementError("access"). Outside a request (the node's own work: restoring stored
        links, its config's federations) and without an ACL file there is nothing to ask."""
        rules = self.acl()
        user = self._requester
        if rules is not None and user is not None and not rules.allows(user, action, obj, name, properties):
            raise ManagementError("access", f"the ACL file refuses user '{user}' {action} {obj} '{name}'")

    # -- reading ----------------------------------------------------------------------------

    def node_info(self) -> dict[str, Any]:
        sessions = self.broker.sessions.values()
        return {
            "name": self.node_name,
            "started": self.started,
            "vhosts": sorted(self.broker.vhosts),
            "connections": len(sessions),
            "blocked_connections": sum(1 for session in sessions if session.hold is not None),
            **self.resources(),
        }

    def list_exchanges(self, vhost: str = DEFAULT_VHOST) -> list[dict[str, Any]]:
        return [
            {
                "name": exchange.name,
                "type": exchange.type,
                "durable": exchange.durable,
                "auto_delete": exchange.auto_delete,
                "internal": exchange.internal,
                "alternate_exchange": exchange.alternate,
                "arguments": jsonable(exchange.arguments),
                "bindings": len(exchange.matcher),
                # Since the node started (docs/federation.md, "Counters").
                "published": exchange.published,
                "routed": exchange.routed,
                "unroutable": exchange.unroutable,
                "dropped_looping": exchange.dropped_looping,
                **_interest(exchange),
            }
            for exchange in self._vhost(vhost).exchanges.values()
        ]

    def list_queues(self, vhost: str = DEFAULT_VHOST) -> list[dict[str, Any]]:
        return [
            {
                "name": queue.name,
                "durable": queue.durable,
                "auto_delete": queue.auto_delete,
                "exclusive": queue.owner is not None,
                "type": queue.options.queue_type,
                "messages": len(queue.ready),
                "bytes": queue.ready_bytes,
                "bytes_on_disk": queue.paged_bytes(),
                "capacity": queue.options.capacity,
                "flow_resume_capacity": queue.options.flow_resume_capacity,
                "overfull": queue.flow is not None and queue.flow.hold is not None,
                # Since the queue was created or the node started (docs/federation.md, "Counters").
                "enqueued": queue.enqueued,
                "delivered": queue.delivered,
                "acknowledged": queue.acknowledged,
                "dead_lettered": queue.dead_lettered,
                "dropped": queue.dropped,
                "consumers": len(queue.consumers),
                "bindings": len(queue.sources),
                "arguments": jsonable(queue.arguments),
            }
            for queue in self._vhost(vhost).queues.values()
        ]

    def list_bindings(self, vhost: str = DEFAULT_VHOST) -> list[dict[str, Any]]:
        records = []
        for exchange in self._vhost(vhost).exchanges.values():
            for key, arguments, destination in exchange.matcher.bindings():
                records.append(
                    {
                        "exchange": exchange.name,
                        "destination_kind": "exchange" if isinstance(destination, Exchange) else "queue",
                        "destination": destination.name,
                        "routing_key": key,
                        "arguments": jsonable(arguments),
                    }
                )
        return records

    # -- changing (through the model's own AMQP code paths) ----------------------------------

    def add_exchange(
        self,
        name: str,
        type: str,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        alternate_exchange: str | None = None,
        arguments: dict[str, Any] | None = None,
        vhost: str = DEFAULT_VHOST,
    ) -> None:
        table = dict(arguments or {})
        if alternate_exchange:
            table["alternate-exchange"] = alternate_exchange
        self._run(
            vhost,
            _method(
                commands.Exchange.Declare,
                exchange=name,
                exchange_type=type,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                arguments=table,
            ),
        )

    def delete_exchange(self, name: str, if_unused: bool = False, vhost: str = DEFAULT_VHOST) -> None:
        self._require_exchange(vhost, name)
        self._run(vhost, _method(commands.Exchange.Delete, exchange=name, if_unused=if_unused))

    def add_queue(
        self,
        name: str,
        durable: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        vhost: str = DEFAULT_VHOST,
    ) -> None:
        self._run(
            vhost,
            _method(
                commands.Queue.Declare,
                queue=name,
                durable=durable,
                auto_delete=auto_delete,
                arguments=dict(arguments or {}),
            ),
        )

    def delete_queue(
        self, name: str, if_unused: bool = False, if_empty: bool = False, vhost: str = DEFAULT_VHOST
    ) -> int:
        self._require_queue(vhost, name)
        queue = self._vhost(vhost).queues[name]
        count = len(queue.ready)
        self._run(vhost, _method(commands.Queue.Delete, queue=name, if_unused=if_unused, if_empty=if_empty))
        return count

    def add_binding(
        self,
        exchange: str,
        queue: str,
        routing_key: str = "",
        arguments: dict[str, Any] | None = None,
        vhost: str = DEFAULT_VHOST,
    ) -> None:
        self._run(
            vhost,
            _method(
                commands.Queue.Bind,
                queue=queue,
                exchange=exchange,
                routing_key=routing_key,
                arguments=dict(arguments or {}),
            ),
        )

    def delete_binding(
        self,
        exchange: str,
        queue: str,
        routing_key: str = "",
        arguments: dict[str, Any] | None = None,
        vhost: str = DEFAULT_VHOST,
    ) -> None:
        """Queue.Unbind, which is idempotent on the wire (RabbitMQ's rule); an operator naming
        a queue or exchange that does not exist is told so (NOT_FOUND), as before."""
        host = self._vhost(vhost)
        for kind, name, existing in (("queue", queue, host.queues), ("exchange", exchange, host.exchanges)):
            if name not in existing:
                raise ManagementError("NOT_FOUND", f"no {describe(kind, name, vhost)}")
        self._run(
            vhost,
            _method(
                commands.Queue.Unbind,
                queue=queue,
                exchange=exchange,
                routing_key=routing_key,
                arguments=dict(arguments or {}),
            ),
        )

    # -- helpers ----------------------------------------------------------------------------

    def _vhost(self, name: str) -> Any:
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise ManagementError("NOT_FOUND", f"no vhost '{name}'")
        return vhost

    def _require_exchange(self, vhost: str, name: str) -> None:
        # AMQP deletes of missing objects succeed silently; an operator asking wants to know.
        if name not in self._vhost(vhost).exchanges:
            raise ManagementError("NOT_FOUND", f"no exchange '{name}' in vhost '{vhost}'")

    def _require_queue(self, vhost: str, name: str) -> None:
        if name not in self._vhost(vhost).queues:
            raise ManagementError("NOT_FOUND", f"no queue '{name}' in vhost '{vhost}'")

    def _run(self, vhost: str, method: base.Frame) -> None:
        """Run one AMQP method on a short-lived internal session; AMQP errors become ours."""
        self._vhost(vhost)
        session = self.broker.connect(NullOutbox(), "management", vhost, {})
        try:
            session.open_channel(1)
            session.handle_method(1, method)
        except AMQPError as error:
            kind = REPLY_NAMES.get(error.reply_code, str(error.reply_code))
            raise ManagementError(kind, error.reply_text.removeprefix(f"{kind} - ")) from None
        finally:
            session.disconnect()


def _method(method_class: type[M], **fields: Any) -> M:
    """The AMQP method a request stands for; a name no AMQP client could send (over 255
    bytes, not UTF-8) is refused here, since the wire could never carry it back."""
    try:
        return make_method(method_class, **fields)
    except ValueError as exc:
        raise ManagementError("SYNTAX_ERROR", str(exc)) from None


def jsonable(value: Any) -> Any:
    """AMQP field values as JSON: bytes as text, decimals as strings, times as ISO 8601."""
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return value


def _interest(exchange: Exchange) -> dict[str, int]:
    """Other nodes' bindings a federated exchange forwards for, and their paths' hops."""
    bindings, hops = exchange.federation.interest() if exchange.federation is not None else (0, 0)
    return {"interest": bindings, "interest_hops": hops}
