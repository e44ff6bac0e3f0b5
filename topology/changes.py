"""A plan: the changes that make live nodes match a topology file, what apply leaves alone,
and the order apply sends the requests in. topology.plan computes one; topology.apply runs it;
both the plan's text and the order live here so they are defined once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from federation.requests import Request
from topology.model import Topology

#: update: changed in place (a user's tags, a permission's patterns); change: deleted and created.
Action = Literal["create", "update", "change", "delete"]

#: Dependency order: creates run in this order, deletes in the reverse one. Who may do what
#: comes first: a permission needs its vhost and user.
KINDS = (
    "vhost",
    "user",
    "permission",
    "topic permission",
    "exchange",
    "queue",
    "binding",
    "link",
    "route",
    "federation",
)
#: The management methods' object names (`exchanges.add` is about an exchange).
METHOD_KINDS = {
    "vhosts": "vhost",
    "users": "user",
    "permissions": "permission",
    "topic_permissions": "topic permission",
    "exchanges": "exchange",
    "queues": "queue",
    "bindings": "binding",
    "links": "link",
    "routes": "route",
    "federations": "federation",
}
SIGNS = {"create": "+", "update": "~", "change": "~", "delete": "-"}
#: What each kind of request did, for apply's lines, by the method's verb.
DONE = {"add": "created", "delete": "deleted", "clear": "deleted", "set": "set", "tags": "set the tags of"}
#: Why a changed object is not changed in place.
REPLACED = "delete and create: it cannot be changed in place"


@dataclass
class Change:
    """One object to create, change (delete and create again) or delete on one node, and the
    requests that do it, in order."""

    action: Action
    node: str
    kind: str
    name: str
    #: create/delete: the object's attributes ("topic", "durable"); change: "attr: old -> new".
    detail: list[str] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)

    def lines(self) -> list[str]:
        sign = SIGNS[self.action]
        if self.action == "change":
            return [f"  {sign} {self.kind} {self.name} ({REPLACED})", *(f"      {d}" for d in self.detail)]
        if self.action == "update":
            return [
                f"  {sign} {self.kind} {self.name} (changed in place)",
                *(f"      {d}" for d in self.detail),
            ]
        attributes = f" ({', '.join(self.detail)})" if self.detail else ""
        return [f"  {sign} {self.kind} {self.name}{attributes}"]


@dataclass
class Drift:
    """A difference apply leaves alone: an error (the node cannot be made to match without
    --prune, or at all) or a warning (an object the file does not declare, kept)."""

    severity: Literal["error", "warning"]
    node: str
    kind: str
    name: str
    message: str
    detail: list[str] = field(default_factory=list)
    #: An error that apply --prune makes (by deleting and creating the object again).
    needs_prune: bool = False

    def lines(self) -> list[str]:
        if self.severity == "warning":  # an extra object: its attributes, on its line
            attributes = f" ({', '.join(self.detail)})" if self.detail else ""
            return [f"  ? {self.kind} {self.name}{attributes}: {self.message}"]
        return [f"  ! {self.kind} {self.name}: {self.message}", *(f"      {d}" for d in self.detail)]


@dataclass
class Plan:
    """What apply would do to make the live nodes match `topology`."""

    topology: Topology
    prune: bool
    changes: list[Change] = field(default_factory=list)
    drift: list[Drift] = field(default_factory=list)
    #: Nodes that could not be read, with why: nothing is planned for them.
    unreachable: dict[str, str] = field(default_factory=dict)
    #: Seconds apply waits for each connection and answer (0: no limit).
    timeout: float = 10.0
    #: Per node, far ends matched by address because a name was not known (topology.far_ends).
    notes: dict[str, list[str]] = field(default_factory=dict)
    #: The name a node reports, where it is not the file's: links and listings show that one.
    reported: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Whether every node was read (apply refuses an incomplete plan)."""
        return not self.unreachable

    @property
    def errors(self) -> list[Drift]:
        """Differences apply cannot make (without --prune, or at all)."""
        return [drift for drift in self.drift if drift.severity == "error"]

    @property
    def kept(self) -> list[Drift]:
        """Objects the file does not declare, kept because --prune was not given."""
        return [drift for drift in self.drift if drift.severity == "warning"]

    def count(self, action: Action) -> int:
        """How many changes of this action; "change" counts those made in place too."""
        actions = ("change", "update") if action == "change" else (action,)
        return sum(change.action in actions for change in self.changes)

    def summary(self) -> str:
        """The last line: the counts, or that nothing differs."""
        if not self.changes and not self.drift and self.complete:
            return f"No changes. The live nodes match {self.topology.path or self.topology.name}."
        return (
            f"Plan: {self.count('create')} to create, {self.count('change')} to change, "
            f"{self.count('delete')} to delete."
        )

    def lines(self) -> list[str]:
        """The plan as terraform prints one: per node (in the file's order) its changes in
        dependency order, then what apply leaves alone, then a summary line."""
        lines: list[str] = []
        for name, node in self.topology.nodes.items():
            reported = f", reports name '{self.reported[name]}'" if name in self.reported else ""
            where = f"Node {name} ({node.endpoint}{reported})"
            if name in self.unreachable:
                lines += [f"{where}: not read: {self.unreachable[name]}", ""]
                continue
            block = [line for change in self.changes if change.node == name for line in change.lines()]
            block += [line for drift in self.drift if drift.node == name for line in drift.lines()]
            block += [f"  * {note}" for note in self.notes.get(name, [])]
            if block:
                lines += [f"{where}:", *block, ""]
        if self.unreachable:
            lines.append(
                f"{len(self.unreachable)} node(s) could not be read: nothing is planned for them, and "
                "apply refuses to run until every node answers."
            )
        replaced = sum(drift.needs_prune for drift in self.errors)
        if replaced:
            lines.append(
                f"{replaced} difference(s) (!) need --prune: apply --prune deletes and creates them."
            )
        if len(self.errors) > replaced:
            lines.append(f"{len(self.errors) - replaced} difference(s) (!) apply cannot make: see each line.")
        if self.kept:
            lines.append(
                f"{len(self.kept)} object(s) (?) not in the file are kept: apply --prune deletes them."
            )
        return [*lines, self.summary()]


def request_kind(method: str) -> str:
    """The kind of object a management method is about (`routes.add` -> route)."""
    return METHOD_KINDS[method.partition(".")[0]]


def deletes(method: str) -> bool:
    """Whether a management method removes something (its phase in ordered_requests)."""
    return method.endswith((".delete", ".clear"))


def done(method: str) -> str:
    """What a request did, as apply says it: created, deleted, set..."""
    return DONE[method.rpartition(".")[2]]


def ordered_requests(changes: list[Change]) -> list[tuple[int, Request]]:
    """Every request of the plan in the order apply sends them, each with its change's index:
    first every delete, federations first and exchanges last, then every create, exchanges
    first and federations last (a replaced object's delete and create land in their phases)."""

    def phase(item: tuple[int, Request]) -> tuple[int, int]:
        method = item[1][0]
        order = KINDS.index(request_kind(method))
        return (0, -order) if deletes(method) else (1, order)

    numbered = [(index, request) for index, change in enumerate(changes) for request in change.requests]
    return sorted(numbered, key=phase)
