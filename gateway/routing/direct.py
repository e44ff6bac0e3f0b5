"""The direct exchange type: the routing key equals the binding key."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from gateway.routing.bindings import BaseMatcher, count_down, count_up


class DirectMatcher(BaseMatcher):
    """Exact routing-key equality: one dict lookup per message."""

    __slots__ = ("_by_key",)

    def __init__(self) -> None:
        super().__init__()
        self._by_key: dict[str, dict[Hashable, int]] = {}

    def _add(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        count_up(self._by_key.setdefault(key, {}), destination)

    def _remove(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        counts = self._by_key[key]
        count_down(counts, destination)
        if not counts:
            del self._by_key[key]

    def match(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set[Hashable]:
        counts = self._by_key.get(routing_key)
        return set(counts) if counts else set()
