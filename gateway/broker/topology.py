"""Handlers for the exchange and queue classes: declaring, binding, purging, deleting."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pamqp import commands

from gateway.broker.access import ACCESS, BIND, CREATE, DELETE, EXCHANGE, PURGE, QUEUE, UNBIND, flag
from gateway.broker.arguments import (
    EXCHANGE_EQUIVALENCE_KEYS,
    QUEUE_ARGUMENT_DEFAULTS,
    QUEUE_EQUIVALENCE_KEYS,
    check_equivalent_arguments,
    check_exchange_arguments,
    check_queue_type,
    inequivalent,
)
from gateway.broker.exchange import Exchange
from gateway.broker.names import describe, generated_queue_name
from gateway.names import EXCHANGE_TYPES, RESERVED_PREFIX
from gateway.wire.errors import access_refused, precondition_failed
from gateway.wire.frames import make_method

if TYPE_CHECKING:
    from gateway.broker.channel import Channel
    from gateway.broker.session import Handler, Session

DEFAULT_EXCHANGE_REFUSED = "operation not permitted on the default exchange"


def _not_default(name: str, method: Any) -> None:
    if name == "":
        raise access_refused(DEFAULT_EXCHANGE_REFUSED, method)


def _declared(method: Any, alternate_key: str, **properties: str) -> dict[str, str]:
    """A declare's ACL properties; `alternate` when its arguments name an exchange that messages
    will be sent to on the declarer's behalf (alternate-exchange, x-dead-letter-exchange)."""
    properties.update(durable=flag(method.durable), autodelete=flag(method.auto_delete), passive="false")
    alternate = (method.arguments or {}).get(alternate_key)
    if isinstance(alternate, bytes):
        alternate = alternate.decode("utf-8", "replace")
    if isinstance(alternate, str):
        properties["alternate"] = alternate
    return properties


def _binding(
    session: Session, source: str, key: str, destination_kind: str, destination: str
) -> dict[str, str]:
    """A bind's or unbind's ACL properties (see gateway.broker.access)."""
    return {"routingkey": key, f"{destination_kind}name": destination, **session.source_type(source)}


# -- exchange class -------------------------------------------------------------------------


def exchange_declare(session: Session, channel: Channel, method: commands.Exchange.Declare) -> None:
    vhost = session.vhost
    name = method.exchange
    _not_default(name, method)
    if method.passive:
        session.authorize(ACCESS, EXCHANGE, name, {"passive": "true"}, method)
        session.find_exchange(name, method)
    else:
        exchange_type = method.exchange_type
        if exchange_type not in EXCHANGE_TYPES:
            # A channel error, as in RabbitMQ since 2024 (rabbitmq-server #11214): a bad declare must not take the
            # connection's other channels down with it.
            raise precondition_failed(f"unknown exchange type '{exchange_type}'", method)
        properties = _declared(method, "alternate-exchange", type=exchange_type)
        session.authorize(CREATE, EXCHANGE, name, properties, method)
        arguments = dict(method.arguments or {})
        description = describe("exchange", name, vhost.name)
        existing = vhost.exchanges.get(name)
        if existing is None:
            if name.startswith(RESERVED_PREFIX):
                raise access_refused(
                    f"exchange name '{name}' contains reserved prefix '{RESERVED_PREFIX}*'", method
                )
            check_exchange_arguments(arguments, description)
            vhost.create_exchange(
                name, exchange_type, method.durable, method.auto_delete, method.internal, arguments
            )
        else:
            for field, received, current in (
                ("type", exchange_type, existing.type),
                ("durable", method.durable, existing.durable),
                ("auto_delete", method.auto_delete, existing.auto_delete),
                ("internal", method.internal, existing.internal),
            ):
                if received != current:
                    raise inequivalent(field, description, received, current)
            check_equivalent_arguments(arguments, existing.arguments, EXCHANGE_EQUIVALENCE_KEYS, description)
    if not method.nowait:
        durable = vhost.exchanges[name].durable
        _reply_when_durable(session, channel, commands.Exchange.DeclareOk(), durable)


def exchange_delete(session: Session, channel: Channel, method: commands.Exchange.Delete) -> None:
    vhost = session.vhost
    name = method.exchange
    _not_default(name, method)
    if name.startswith(RESERVED_PREFIX):
        raise access_refused(
            f"deletion of system {describe('exchange', name, vhost.name)} not allowed", method
        )
    session.authorize(DELETE, EXCHANGE, name, {}, method)
    exchange = vhost.exchanges.get(name)
    if exchange is not None:
        if method.if_unused and len(exchange.matcher):
            raise precondition_failed(f"{describe('exchange', name, vhost.name)} in use", method)
        vhost.delete_exchange(exchange)
    if not method.nowait:
        channel.send(commands.Exchange.DeleteOk())


def _exchanges_for_binding(session: Session, method: Any, action: str) -> tuple[Exchange, Exchange]:
    _not_default(method.source, method)
    _not_default(method.destination, method)
    properties = _binding(session, method.source, method.routing_key, EXCHANGE, method.destination)
    session.authorize(action, EXCHANGE, method.source, properties, method)
    return session.find_exchange(method.source, method), session.find_exchange(method.destination, method)


def exchange_bind(session: Session, channel: Channel, method: commands.Exchange.Bind) -> None:
    source, destination = _exchanges_for_binding(session, method, BIND)
    _bind(session, source, destination, method.routing_key, method)
    if not method.nowait:
        channel.send(commands.Exchange.BindOk())


def exchange_unbind(session: Session, channel: Channel, method: commands.Exchange.Unbind) -> None:
    """Idempotent as in RabbitMQ: a missing source or destination leaves nothing to unbind,
    so cleanup code that runs after a delete still gets Unbind-Ok."""
    _not_default(method.source, method)
    _not_default(method.destination, method)
    properties = _binding(session, method.source, method.routing_key, EXCHANGE, method.destination)
    session.authorize(UNBIND, EXCHANGE, method.source, properties, method)
    exchanges = session.vhost.exchanges
    source, destination = exchanges.get(method.source), exchanges.get(method.destination)
    if source is not None and destination is not None:
        session.vhost.unbind(source, destination, method.routing_key, dict(method.arguments or {}))
    if not method.nowait:
        channel.send(commands.Exchange.UnbindOk())


def _bind(session: Session, source: Exchange, destination: Any, key: str, method: Any) -> None:
    handlers = session.broker.exchange_handlers
    for exchange in (source, destination):
        if isinstance(exchange, Exchange) and exchange.name in handlers:
            raise access_refused(
                f"cannot bind to or from {describe('exchange', exchange.name, session.vhost.name)}:"
                " the node handles what is published there and routes it to no queue",
                method,
            )
    try:
        session.vhost.bind(source, destination, key, dict(method.arguments or {}))
    except ValueError as exc:
        raise precondition_failed(str(exc), method) from None


# -- queue class ----------------------------------------------------------------------------


def queue_declare(session: Session, channel: Channel, method: commands.Queue.Declare) -> None:
    vhost = session.vhost
    if method.passive:
        name = session.queue_name(channel, method.queue, method)
        session.authorize(ACCESS, QUEUE, name, {"passive": "true"}, method)
        queue = session.find_queue(channel, name, method)
    else:
        # A server-named queue is checked under the name it gets, as in RabbitMQ (amq.gen-...).
        name = method.queue or generated_queue_name()
        if method.queue.startswith(RESERVED_PREFIX):
            raise access_refused(f"queue name '{name}' contains reserved prefix '{RESERVED_PREFIX}*'", method)
        properties = _declared(method, "x-dead-letter-exchange", exclusive=flag(method.exclusive))
        session.authorize(CREATE, QUEUE, name, properties, method)
        arguments = dict(method.arguments or {})
        description = describe("queue", name, vhost.name)
        existing = vhost.queues.get(name)
        if existing is None:
            _check_queue_limit(session, name, method)
            options = vhost.queue_options(arguments, description, method.durable)
            check_queue_type(options, method.durable, method.exclusive, method.auto_delete, description)
            owner = session if method.exclusive else None
            queue = vhost.create_queue(name, method.durable, owner, method.auto_delete, arguments, options)
        else:
            queue = existing
            session.check_exclusive(queue, method)
            if queue.durable != method.durable:
                raise inequivalent("durable", description, method.durable, queue.durable)
            if queue.auto_delete != method.auto_delete:
                raise inequivalent("auto_delete", description, method.auto_delete, queue.auto_delete)
            if (queue.owner is not None) != method.exclusive:
                raise session.locked(queue, method)
            check_equivalent_arguments(
                arguments, queue.arguments, QUEUE_EQUIVALENCE_KEYS, description, QUEUE_ARGUMENT_DEFAULTS
            )
            queue.last_used = session.broker.clock()
    channel.last_queue = queue.name
    if not method.nowait:
        reply = make_method(
            commands.Queue.DeclareOk,
            queue=queue.name,
            message_count=len(queue.ready),
            consumer_count=len(queue.consumers),
        )
        _reply_when_durable(session, channel, reply, queue.store is not None)


def _check_queue_limit(session: Session, name: str, method: commands.Queue.Declare) -> None:
    """A new queue in a vhost at its max-queues limit: RabbitMQ's 406 and text."""
    vhost = session.vhost
    limit = session.broker.max_queues.get(vhost.name)
    if limit is not None and len(vhost.queues) >= limit:
        raise precondition_failed(
            f"cannot declare queue '{name}': queue limit in vhost '{vhost.name}' ({limit}) is reached", method
        )


def _reply_when_durable(session: Session, channel: Channel, reply: Any, durable: bool) -> None:
    """A durable exchange's or queue's Declare-Ok follows the commit of the store's buffered
    writes, which may hold its creation (ours or another channel's): a SIGKILL after the OK
    must not lose it."""
    store = session.broker.store
    ticket = store.ticket() if durable and store is not None and store.pending else 0
    if channel.send_when_durable(reply, ticket, session.broker.durable_ticket):
        session.broker.wait_for_durable(channel)


def queue_bind(session: Session, channel: Channel, method: commands.Queue.Bind) -> None:
    queue, exchange = _queue_binding(session, channel, method, BIND)
    _bind(session, exchange, queue, _binding_key(channel, method), method)
    if not method.nowait:
        channel.send(commands.Queue.BindOk())


def queue_unbind(session: Session, channel: Channel, method: commands.Queue.Unbind) -> None:
    """Idempotent as in RabbitMQ: a missing queue or exchange leaves nothing to unbind (another
    connection's exclusive queue is still 405)."""
    _not_default(method.exchange, method)
    vhost = session.vhost
    name = session.queue_name(channel, method.queue, method)
    key = _binding_key(channel, method)
    session.authorize(
        UNBIND, EXCHANGE, method.exchange, _binding(session, method.exchange, key, QUEUE, name), method
    )
    queue = vhost.queues.get(name)
    exchange = vhost.exchanges.get(method.exchange)
    if queue is not None:
        session.check_exclusive(queue, method)
        if exchange is not None:
            vhost.unbind(exchange, queue, key, dict(method.arguments or {}))
    channel.send(commands.Queue.UnbindOk())


def _queue_binding(session: Session, channel: Channel, method: Any, action: str) -> tuple[Any, Exchange]:
    _not_default(method.exchange, method)
    name = session.queue_name(channel, method.queue, method)
    properties = _binding(session, method.exchange, _binding_key(channel, method), QUEUE, name)
    session.authorize(action, EXCHANGE, method.exchange, properties, method)
    queue = session.find_queue(channel, name, method)
    return queue, session.find_exchange(method.exchange, method)


def _binding_key(channel: Channel, method: Any) -> str:
    """Queue '' with key '' binds with the last declared queue's name as key (spec shortcut)."""
    if not method.queue and not method.routing_key:
        return channel.last_queue
    return method.routing_key


def queue_purge(session: Session, channel: Channel, method: commands.Queue.Purge) -> None:
    name = session.queue_name(channel, method.queue, method)
    session.authorize(PURGE, QUEUE, name, {}, method)
    count = session.find_queue(channel, name, method).purge()
    if not method.nowait:
        channel.send(commands.Queue.PurgeOk(count))


def queue_delete(session: Session, channel: Channel, method: commands.Queue.Delete) -> None:
    vhost = session.vhost
    name = session.queue_name(channel, method.queue, method)
    session.authorize(DELETE, QUEUE, name, {}, method)
    queue = vhost.queues.get(name)
    if queue is not None:
        session.check_exclusive(queue, method)
        if method.if_unused and queue.consumers:
            raise precondition_failed(f"{describe('queue', name, vhost.name)} in use", method)
        if method.if_empty and queue.ready:
            raise precondition_failed(f"{describe('queue', name, vhost.name)} not empty", method)
    # Delete-Ok goes before the Basic.Cancel notifications to the queue's consumers, in
    # RabbitMQ's order: clients waiting for Delete-Ok must not see a cancel first.
    if not method.nowait:
        channel.send(commands.Queue.DeleteOk(len(queue.ready) if queue is not None else 0))
    if queue is not None:
        vhost.delete_queue(queue)


HANDLERS: dict[type, Handler] = {
    commands.Exchange.Declare: exchange_declare,
    commands.Exchange.Delete: exchange_delete,
    commands.Exchange.Bind: exchange_bind,
    commands.Exchange.Unbind: exchange_unbind,
    commands.Queue.Declare: queue_declare,
    commands.Queue.Bind: queue_bind,
    commands.Queue.Unbind: queue_unbind,
    commands.Queue.Purge: queue_purge,
    commands.Queue.Delete: queue_delete,
}
