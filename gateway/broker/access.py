"""The access port: the one place the model asks whether a session may do what it is about to.

Before a method changes anything, the model describes it in the Qpid ACL's vocabulary and asks
the session's `Access`; a refusal text comes back (None: allowed) and the model raises it as
403 ACCESS_REFUSED on the channel, so nothing changes and the connection goes on. What the
answer depends on (RabbitMQ's configure/write/read patterns, topic permissions, the ACL file)
is gateway.security.access's; the model knows none of it, and never imports gateway.security.

The vocabulary (issue 26's shared contract):

- action: consume, publish, create, access, bind, unbind, delete, purge (and update, which no
  AMQP 0-9-1 method needs);
- object: queue or exchange;
- name: the queue's or exchange's name ("" is the default exchange);
- properties: Qpid's names, lower case, booleans as "true"/"false":
  create exchange: type, durable, autodelete, alternate (alternate-exchange), passive;
  create queue: durable, exclusive, autodelete, alternate (x-dead-letter-exchange), passive;
  access queue|exchange (a passive declare): passive;
  bind/unbind exchange (the source is `name`): routingkey, and queuename for a queue
  destination or exchangename for an exchange one; also `type`, the source's type when it
  exists, which topic permissions need (Qpid's ACL has no rule on it).
  publish (`Access.publish`): routingkey.

Publishing is asked through `publish` rather than `check`: it is the one check per message,
so it takes its arguments as they are (no properties mapping built per message) and an
implementation caches its answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

CONSUME = "consume"
PUBLISH = "publish"
CREATE = "create"
ACCESS = "access"
BIND = "bind"
UNBIND = "unbind"
DELETE = "delete"
PURGE = "purge"
UPDATE = "update"
QUEUE = "queue"
EXCHANGE = "exchange"


class Access(Protocol):
    """What one session may do; asked before the model changes anything."""

    def check(self, action: str, obj: str, name: str, properties: Mapping[str, str]) -> str | None:
        """None if the session may; else why not, as the text of a 403 (without its name)."""
        ...

    def publish(self, exchange: str, exchange_type: str, routing_key: str) -> str | None:
        """`check(PUBLISH, EXCHANGE, exchange, {"routingkey": routing_key})`, per message;
        `exchange_type` is "" when no such exchange exists."""
        ...


class Unrestricted:
    """The node's own sessions (management, federation's routes) may do anything: they act on
    an administrator's request or a route an administrator configured."""

    def check(self, action: str, obj: str, name: str, properties: Mapping[str, str]) -> str | None:
        return None

    def publish(self, exchange: str, exchange_type: str, routing_key: str) -> str | None:
        return None


UNRESTRICTED = Unrestricted()


def flag(value: bool) -> str:
    """A boolean as the ACL's properties spell it."""
    return "true" if value else "false"
