"""Method class -> handler, for Session.handle_method."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.broker import delivery, topology

if TYPE_CHECKING:
    from gateway.broker.session import Handler

HANDLERS: dict[type, Handler] = {**topology.HANDLERS, **delivery.HANDLERS}
