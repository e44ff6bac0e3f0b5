"""The fanout exchange type: every binding matches, whatever the key."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from gateway.routing.bindings import BaseMatcher, count_down, count_up


class FanoutMatcher(BaseMatcher):
    """Every bound destination, whatever the key."""

    __slots__ = ("_all",)

    def __init__(self) -> None:
        super().__init__()
        self._all: dict[Hashable, int] = {}

    def _add(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        count_up(self._all, destination)

    def _remove(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        count_down(self._all, destination)

    def match(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set[Hashable]:
        return set(self._all)
