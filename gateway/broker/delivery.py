"""Handlers for the basic, confirm and tx classes and channel.flow: consuming, fetching,
acknowledging, publisher confirms and transactions."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from pamqp import commands

from gateway.broker.access import CONSUME, QUEUE
from gateway.broker.channel import Consumer, Transaction
from gateway.broker.confirms import Confirms
from gateway.broker.exchange import reach
from gateway.broker.names import describe, generated_consumer_tag
from gateway.broker.outbox import GetOk
from gateway.wire.errors import (
    access_refused,
    not_allowed,
    not_implemented,
    precondition_failed,
)

if TYPE_CHECKING:
    from gateway.broker.channel import Channel
    from gateway.broker.queue import Queue
    from gateway.broker.session import Handler, Session


def basic_qos(session: Session, channel: Channel, method: commands.Basic.Qos) -> None:
    """global=true limits the whole channel; global=false limits each consumer started after
    it (RabbitMQ's reading of the spec, which clients rely on)."""
    if method.global_:
        channel.prefetch_count = method.prefetch_count
        channel.prefetch_size = method.prefetch_size
    else:
        channel.consumer_prefetch_count = method.prefetch_count
        channel.consumer_prefetch_size = method.prefetch_size
    channel.send(commands.Basic.QosOk())
    channel.redispatch()


def _consumed(
    session: Session, channel: Channel, method: commands.Basic.Consume | commands.Basic.Get
) -> Queue:
    """The queue a consume or get reads: read permission first (403), then 404, 405."""
    name = session.queue_name(channel, method.queue, method)
    session.authorize(CONSUME, QUEUE, name, {}, method)
    return session.find_queue(channel, name, method)


def basic_consume(session: Session, channel: Channel, method: commands.Basic.Consume) -> None:
    queue = _consumed(session, channel, method)
    tag = method.consumer_tag or generated_consumer_tag()
    if tag in channel.consumers:
        raise not_allowed(f"attempt to reuse consumer tag '{tag}'", method)
    if queue.consumers and (method.exclusive or any(consumer.exclusive for consumer in queue.consumers)):
        raise access_refused(f"{describe('queue', queue.name, session.vhost.name)} in exclusive use", method)
    consumer = Consumer(tag, channel, queue, method.no_ack, method.exclusive, method.no_local)
    channel.consumers[tag] = consumer
    if not method.nowait:
        channel.send(commands.Basic.ConsumeOk(tag))
    queue.add_consumer(consumer)


def basic_cancel(session: Session, channel: Channel, method: commands.Basic.Cancel) -> None:
    # pamqp types the tag optional (Cancel() can be built without one); a decoded Cancel has a
    # string, possibly empty, and no consumer has the empty tag (basic_consume generates one).
    consumer = channel.consumers.pop(method.consumer_tag or "", None)
    if not method.nowait:
        channel.send(commands.Basic.CancelOk(method.consumer_tag))
    if consumer is not None:
        consumer.queue.remove_consumer(consumer)


def basic_get(session: Session, channel: Channel, method: commands.Basic.Get) -> None:
    queue = _consumed(session, channel, method)
    entry = queue.get(channel, method.no_ack)
    if entry is None:
        channel.send(commands.Basic.GetEmpty())
        return
    tag = channel.next_tag
    channel.next_tag = tag + 1
    if not method.no_ack:
        channel.unacked[tag] = entry
    message = entry.message
    get_ok = GetOk(
        channel.number,
        tag,
        entry.redelivered,
        message.exchange,
        message.routing_key,
        len(queue.ready),
        message.content,
    )
    channel.in_order(partial(session.outbox.send_get_ok, get_ok))


def basic_ack(session: Session, channel: Channel, method: commands.Basic.Ack) -> None:
    channel.settle(None, channel.take(method.delivery_tag, method.multiple, method))


def basic_nack(session: Session, channel: Channel, method: commands.Basic.Nack) -> None:
    channel.settle(method.requeue, channel.take(method.delivery_tag, method.multiple, method))


def basic_reject(session: Session, channel: Channel, method: commands.Basic.Reject) -> None:
    channel.settle(method.requeue, channel.take(method.delivery_tag or 0, False, method))


def basic_recover(session: Session, channel: Channel, method: commands.Basic.Recover) -> None:
    """Only requeue=true, as in RabbitMQ; redelivery to the same consumer is not offered."""
    if not method.requeue:
        raise not_implemented("requeue=false", method)
    channel.requeue_all()
    if isinstance(method, commands.Basic.Recover):
        channel.send(commands.Basic.RecoverOk())


def confirm_select(session: Session, channel: Channel, method: commands.Confirm.Select) -> None:
    if channel.tx is not None:
        raise precondition_failed("cannot switch from tx to confirm mode", method)
    if channel.confirms is None:
        channel.confirms = Confirms(channel.send)
    if not method.nowait:
        channel.send(commands.Confirm.SelectOk())


def tx_select(session: Session, channel: Channel, method: commands.Tx.Select) -> None:
    if channel.confirms is not None:
        raise precondition_failed("cannot switch from confirm to tx mode", method)
    if channel.tx is None:
        channel.tx = Transaction()
    channel.send(commands.Tx.SelectOk())


def tx_commit(session: Session, channel: Channel, method: commands.Tx.Commit) -> None:
    """Publish the buffered messages in order, then apply the buffered acks/nacks/rejects;
    Commit-Ok follows once what they wrote to the store is committed."""
    tx = _transaction(channel, method)
    # All or nothing: what can fail (an exchange deleted since the publish, 404; a headers
    # table a headers exchange cannot read, 502) fails the commit before any of it is applied
    # (the transaction stays open, as after any failed method). Routing is pure, so checking
    # it here and routing again below keeps one publish path.
    targets = [session.find_exchange(name, method) for name, _, _, _ in tx.publishes]
    for exchange, (_, routing_key, _, content) in zip(targets, tx.publishes, strict=True):
        reach(exchange, routing_key, content)
    channel.tx = Transaction()
    for exchange, (_, routing_key, mandatory, content) in zip(targets, tx.publishes, strict=True):
        session.publish(channel, exchange, routing_key, mandatory, content)
    for requeue, taken in tx.settlements:
        channel.apply(requeue, taken)
    # Commit-Ok promises durability, as RabbitMQ's does: wait for the store if it has writes.
    store = session.broker.store
    ticket = store.ticket() if store is not None and store.pending else 0
    if channel.commit_ok_after(ticket, session.broker.settled_ticket):
        session.broker.wait_for_durable(channel)


def tx_rollback(session: Session, channel: Channel, method: commands.Tx.Rollback) -> None:
    """Drop the buffered publishes; deliveries settled in the transaction are unacked again."""
    tx = _transaction(channel, method)
    for _, taken in tx.settlements:
        channel.restore(taken)
    channel.tx = Transaction()
    channel.send(commands.Tx.RollbackOk())


def _transaction(channel: Channel, method: object) -> Transaction:
    if channel.tx is None:
        raise precondition_failed("channel is not transactional", method)
    return channel.tx


def channel_flow(session: Session, channel: Channel, method: commands.Channel.Flow) -> None:
    """active=false pauses deliveries on this channel until active=true."""
    channel.flowing = bool(method.active)
    channel.send(commands.Channel.FlowOk(channel.flowing))
    if channel.flowing:
        channel.redispatch()


def client_answer(session: Session, channel: Channel, method: object) -> None:
    """A client's Cancel-Ok or Flow-Ok answering one we sent: nothing is left to do."""


HANDLERS: dict[type, Handler] = {
    commands.Basic.Qos: basic_qos,
    commands.Basic.Consume: basic_consume,
    commands.Basic.Cancel: basic_cancel,
    commands.Basic.Get: basic_get,
    commands.Basic.Ack: basic_ack,
    commands.Basic.Nack: basic_nack,
    commands.Basic.Reject: basic_reject,
    commands.Basic.Recover: basic_recover,
    commands.Basic.RecoverAsync: basic_recover,
    commands.Confirm.Select: confirm_select,
    commands.Tx.Select: tx_select,
    commands.Tx.Commit: tx_commit,
    commands.Tx.Rollback: tx_rollback,
    commands.Channel.Flow: channel_flow,
    commands.Basic.CancelOk: client_answer,
    commands.Channel.FlowOk: client_answer,
}
