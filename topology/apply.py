"""Run a plan: send its management requests to the nodes, in dependency order.

Every delete first (federations, routes, links, bindings, queues, exchanges: what hangs on an
object goes before it), then every create (exchanges, queues, bindings, links, routes,
federations: what an object needs comes before it); a changed object's delete and create each
land in their phase. The first request a node refuses stops the run, with the node's own
message: what ran before it stays done, and the next plan shows what is left. One connection
per node, opened when first needed, with the node's credentials from the file.

An incomplete plan (a node could not be read) is refused before anything is sent. A plan that
leaves error-level drift (what cannot be made without --prune) is applied, then reported as
not ok: the nodes still differ from the file.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

from federation.management_client import Client, ClientFactory, ManagementClient, ManagementFailed
from topology.changes import Plan, deletes, done, ordered_requests, request_kind

Say = Callable[[str], None]


@dataclass(frozen=True)
class ApplyResult:
    """`ok`: every change made and nothing left that apply cannot make; `failure`: why not (one
    line per problem); `applied`: how many changes were made completely."""

    ok: bool
    failure: str = ""
    applied: int = 0


async def apply_plan(plan: Plan, say: Say, connect: ClientFactory = ManagementClient.connect) -> ApplyResult:
    """Make the plan's changes; `say` gets one line per request done (`hub-eu: created
    exchange fed.topic`), or the plan's `No changes.` line when there is nothing to do.
    `connect` is replaced by fake nodes in tests."""
    if not plan.complete:
        names = ", ".join(f"{name} ({why})" for name, why in plan.unreachable.items())
        return ApplyResult(False, f"nothing applied: cannot read {names}")
    if not plan.changes and not plan.drift:
        say(plan.summary())
        return ApplyResult(True, "", 0)
    remaining = [len(change.requests) for change in plan.changes]
    applied = 0
    async with AsyncExitStack() as stack:
        clients: dict[str, Client] = {}

        async def client(node: str) -> Client:
            if node not in clients:
                address = plan.topology.nodes[node].address
                clients[node] = await stack.enter_async_context(connect(address, plan.timeout))
            return clients[node]

        for index, (method, arguments) in ordered_requests(plan.changes):
            change = plan.changes[index]
            deleting = deletes(method)
            what = f"{request_kind(method)} {change.name}"
            try:
                await (await client(change.node)).call(method, arguments)
            except ManagementFailed as failure:
                doing = "deleting" if deleting else "creating" if method.endswith(".add") else "changing"
                return ApplyResult(False, f"{change.node}: {doing} {what}: Failed: {failure}", applied)
            again = " (to create it again)" if deleting and change.action == "change" else ""
            say(f"{change.node}: {done(method)} {what}{again}")
            remaining[index] -= 1
            if remaining[index] == 0:
                applied += 1
    if plan.errors:
        for drift in plan.errors:
            first, *detail = drift.lines()
            say(f"{drift.node}: {first.strip()}")
            for line in detail:
                say(line)
        hint = ": apply --prune makes them" if all(drift.needs_prune for drift in plan.errors) else ""
        return ApplyResult(False, f"{len(plan.errors)} difference(s) (!) left as they are{hint}", applied)
    return ApplyResult(True, "", applied)
