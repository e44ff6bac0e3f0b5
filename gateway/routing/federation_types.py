"""OpenAMQ's federation types as a table, and the decision each makes about a publish.

A federation attaches a child's exchange to the same exchange on a parent. What the child
does depends on the type (docs/federation.md, "Federation types"): whether it subscribes (mirrors
its bindings to the parent and routes what the parent sends back), whether it forwards local
publishes to the parent (all of them, or only those no local queue took), and whether a
forwarded publish is also routed to local queues. federation.attachment runs these rules on
a node, topology.flow in the planner's model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: The types, in the order the documentation lists them.
TYPES = ("subscriber", "publisher", "locator", "fanout", "service")
#: The OpenAMQ manual's other name for fanout.
ALIASES = {"data": "fanout"}

Forwards = Literal["all", "unrouted"] | None


@dataclass(frozen=True, slots=True)
class Decision:
    """What a child does with one publish on its federated exchange."""

    #: Send it to the parent.
    forward: bool
    #: Deliver it to the local queues it reached.
    route_locally: bool


#: Not forwarded, routed here as on any exchange.
LOCAL_ONLY = Decision(False, True)
_FORWARD_AND_ROUTE = Decision(True, True)
_FORWARD_ONLY = Decision(True, False)


@dataclass(frozen=True, slots=True)
class Behaviour:
    """What a type does: mirror bindings and pull, forward publishes ("all", "unrouted" or
    None), and route local publishes to local queues."""

    subscribes: bool
    forwards: Forwards
    routes_locally: bool

    def decide(self, from_parent: bool, routed_here: bool) -> Decision:
        """The decision about a publish that did (`routed_here`) or did not reach a local
        queue. What came from the parent is never forwarded back, so nothing loops between a
        child and its parent."""
        forwards = self.forwards
        if forwards is None or from_parent or (forwards == "unrouted" and routed_here):
            return LOCAL_ONLY
        return _FORWARD_AND_ROUTE if self.routes_locally else _FORWARD_ONLY


BEHAVIOURS: dict[str, Behaviour] = {
    "subscriber": Behaviour(True, None, True),
    "publisher": Behaviour(False, "all", True),
    "locator": Behaviour(False, "unrouted", True),
    # Forwarded publishes come back from the parent like everyone else's: not routed twice.
    "fanout": Behaviour(True, "all", False),
    "service": Behaviour(True, "unrouted", True),
}


def default_type(exchange_type: str) -> str:
    """OpenAMQ's default: service for a direct exchange, fanout for the others."""
    return "service" if exchange_type == "direct" else "fanout"


def resolve_type(name: str | None, exchange_type: str) -> str:
    """The federation type to use: the one asked for (aliases resolved), else the exchange
    type's default. ValueError, as a sentence, for an unknown one."""
    if name is None:
        return default_type(exchange_type)
    name = ALIASES.get(name, name)
    if name not in BEHAVIOURS:
        raise ValueError(f"unknown federation type '{name}' (one of: {', '.join(TYPES)})")
    return name
