"""The durable-store interface the model writes through, and reads paged bodies back from
(implemented by gateway.store).

Writes are buffered by the store and committed in groups; `ticket()` names the batch the next
commit will include, so the model can hold publisher confirms until `Broker.on_durable`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gateway.wire.content import Content


class StoreWriter(Protocol):
    def put_vhost(self, name: str) -> None: ...

    def put_exchange(
        self, vhost: str, name: str, type: str, auto_delete: bool, internal: bool, arguments: dict[str, Any]
    ) -> None: ...

    def delete_exchange(self, vhost: str, name: str) -> None: ...

    def put_queue(self, vhost: str, name: str, auto_delete: bool, arguments: dict[str, Any]) -> None: ...

    def delete_queue(self, vhost: str, name: str) -> None: ...

    def put_binding(
        self,
        vhost: str,
        source: str,
        destination_kind: str,
        destination: str,
        routing_key: str,
        arguments: dict[str, Any],
    ) -> None: ...

    def delete_binding(
        self,
        vhost: str,
        source: str,
        destination_kind: str,
        destination: str,
        routing_key: str,
        arguments: dict[str, Any],
    ) -> None: ...

    def add_message(
        self,
        vhost: str,
        queue: str,
        message_id: int,
        exchange: str,
        routing_key: str,
        content: Content,
        routed_at: float,
    ) -> None: ...

    def remove_message(self, vhost: str, queue: str, message_id: int) -> None: ...

    def mark_delivered(self, vhost: str, queue: str, message_id: int) -> None: ...

    def read_bodies(self, message_ids: Sequence[int]) -> dict[int, bytes]:
        """Stored bodies, for messages whose body is not in memory (gateway.broker.paging)."""
        ...

    def ticket(self) -> int: ...

    @property
    def pending(self) -> bool:
        """Whether writes are buffered that a commit has still to make durable."""
        ...
