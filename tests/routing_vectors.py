"""The shared routing cases (tests/vectors/routing.json), read into plain values.

Every implementation of routing runs them: the broker model, gateway.routing's plain-data walk
and pairwise predicate, the planner's flow model (and later the Spark jobs). A `match` case is
one exchange named `EXCHANGE`; `as_graph` turns it into a graph case, so a runner that can route
a graph runs both kinds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VECTORS = Path(__file__).resolve().parent / "vectors" / "routing.json"
#: The exchange a match case declares.
EXCHANGE = "x"


@dataclass(frozen=True)
class BindingCase:
    """A binding from exchange `source` to a queue (`to` "queue") or an exchange ("exchange")."""

    source: str
    destination: str
    to: str = "queue"
    key: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    #: The broker refuses to make it (406): it matches nothing.
    refused: bool = False


@dataclass(frozen=True)
class GraphCase:
    name: str
    #: (name, type, alternate exchange or None), in declaration order.
    exchanges: tuple[tuple[str, str, str | None], ...]
    queues: tuple[str, ...]
    bindings: tuple[BindingCase, ...]
    exchange: str
    routing_key: str
    headers: dict[str, Any] | None
    expected: frozenset[str]

    @property
    def plain_bindings_only(self) -> bool:
        """Only queue bindings and no alternates: what the planner's model can declare."""
        return all(b.to == "queue" for b in self.bindings) and all(ae is None for *_, ae in self.exchanges)


@dataclass(frozen=True)
class MatchCase:
    name: str
    kind: str
    bindings: tuple[BindingCase, ...]
    routing_key: str
    headers: dict[str, Any] | None
    expected: frozenset[str]

    @property
    def queues(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(b.destination for b in self.bindings))


def _load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(VECTORS.read_text())
    return data


def match_cases() -> list[MatchCase]:
    return [
        MatchCase(
            case["name"],
            case["kind"],
            tuple(
                BindingCase(
                    EXCHANGE,
                    b["queue"],
                    key=b.get("key", ""),
                    arguments=b.get("arguments", {}),
                    refused=b.get("refused", False),
                )
                for b in case["bindings"]
            ),
            case["routing_key"],
            case.get("headers"),
            frozenset(case["expected"]),
        )
        for case in _load()["match"]
    ]


def graph_cases() -> list[GraphCase]:
    return [
        GraphCase(
            case["name"],
            tuple((x["name"], x["kind"], x.get("alternate")) for x in case["exchanges"]),
            tuple(case["queues"]),
            tuple(
                BindingCase(
                    b["source"],
                    b["destination"],
                    to=b["to"],
                    key=b.get("key", ""),
                    arguments=b.get("arguments", {}),
                    refused=b.get("refused", False),
                )
                for b in case["bindings"]
            ),
            case["exchange"],
            case["routing_key"],
            case.get("headers"),
            frozenset(case["expected"]),
        )
        for case in _load()["graph"]
    ]


def as_graph(case: MatchCase) -> GraphCase:
    """A match case as a graph of one exchange, `EXCHANGE`."""
    return GraphCase(
        case.name,
        ((EXCHANGE, case.kind, None),),
        case.queues,
        case.bindings,
        EXCHANGE,
        case.routing_key,
        case.headers,
        case.expected,
    )


def all_cases() -> list[GraphCase]:
    """Every case, match cases as graphs of one exchange."""
    return [as_graph(case) for case in match_cases()] + graph_cases()


def case_id(case: MatchCase | GraphCase) -> str:
    return case.name
