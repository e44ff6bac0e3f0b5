"""The nodes one `amq-gateway up` runs on this host: started, watched, restarted, stopped.

Theory of operation: each node has one task. It starts the node and waits for its ready line
(topology.processes), reports `started`, and only then tells `up` it is ready (Trio's
`task_status.started`), so a node that cannot start fails `up` at once with its log's end.
From then on the task waits for the process to end (on the process itself, no polling); when
it does, the exit and the end of the log are reported at once and, unless `--no-restart`, the
node is started again after a delay on the links' schedule (federation.timing.Backoff: 2 s,
doubling to 64 s, reset after a run that lasted at least 64 s). A restart that fails is
reported and tried again later, as a link retries its peer.

Resource handling: the tasks live in `up`'s nursery, so they end before `stop_all` stops the
processes that are left; a stopped node is therefore never mistaken for a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio

from federation.timing import Backoff
from topology import processes
from topology.model import Node, Topology
from topology.processes import NodeProcess, StartFailed

Say = Callable[[str], None]


class Supervisor:
    """The node processes of one `up`, by node name; `restart` False is `--no-restart`."""

    def __init__(self, var: Path, say: Say, restart: bool = True) -> None:
        self.var = var
        self.say = say
        self.restart = restart
        self.backoff = Backoff()
        self.running: dict[str, NodeProcess] = {}

    async def start_all(self, topology: Topology, nursery: trio.Nursery) -> None:
        """Start the topology's nodes on this host at once and return when every one is ready,
        leaving their supervising tasks in `nursery`; StartFailed (via the nursery's group)
        when one cannot start."""
        async with trio.open_nursery() as starting:
            for node in topology.nodes.values():
                if processes.is_local(node.host):
                    starting.start_soon(nursery.start, self.supervise, node)
                else:
                    self.say(
                        f"{node.name} on {node.endpoint} is not on this host: expecting it to be running"
                    )

    async def supervise(
        self, node: Node, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Start `node`, report it ready, then restart it whenever it ends (see the module)."""
        await self.start(node, "started")
        task_status.started()
        delay: float | None = None
        while True:
            running = self.running[node.name]
            since = trio.current_time()
            await running.process.wait()
            self.say(f"up: {running.exit_report()}")
            if not self.restart:
                self.say(f"up: {node.name} is not restarted (--no-restart)")
                return
            if trio.current_time() - since >= self.backoff.ceiling:
                delay = None
            while True:
                delay = self.backoff.next_delay(delay)
                self.say(f"up: restarting {node.name} in {delay:g} s")
                await trio.sleep(delay)
                try:
                    await self.start(node, "restarted")
                    break
                except StartFailed as failure:
                    self.say(f"up: could not restart {node.name}: {failure}")

    async def start(self, node: Node, verb: str) -> None:
        """Start one run of `node` and wait until it is ready; StartFailed (the process
        killed, if it still runs) when it is not."""
        started = await processes.start(node, self.var)
        self.running[node.name] = started
        try:
            address = await processes.wait_ready(started)
        except StartFailed:
            started.process.kill()
            raise
        self.say(
            f"{verb} {node.name} on {address} (pid {started.process.pid}; data and log in {self.var / node.name})"
        )

    async def stop_all(self) -> None:
        """Stop every node still running (shielded: `up` may be stopping because it was cancelled)."""
        with trio.CancelScope(shield=True):
            await processes.stop_all(self.running.values(), self.say)
