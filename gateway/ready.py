"""The line a node logs once it listens, and how `amq-gateway up` finds it in that node's log.

`up` waits for its own child's ready line rather than for a node to answer on the port: a
node of another `up` on the same port answers too, while the child died with "Address
already in use". One format here for the node that writes it and the supervisor that reads it.
"""

from __future__ import annotations

import re

#: The logging format of the ready line (node name, then host:port), logged once per listener.
READY = "node %r ready: AMQP 0-9-1 listening on %s"
#: The same for a TLS listener (logged before the plain ones, which tools wait for).
TLS_READY = "node %r ready: AMQP 0-9-1 over TLS listening on %s"


def ready_address(log: str, name: str) -> str | None:
    """The host:port of the first (plain) ready line node `name` logged in `log`, None if none
    yet; a TLS ready line does not match."""
    match = re.search(re.escape(READY % (name, "")) + r"(\S+)", log)
    return match.group(1) if match else None
