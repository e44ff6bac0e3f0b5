"""The headers exchange type: binding arguments against message headers (x-match)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from gateway.routing.bindings import Arguments, BaseMatcher, freeze

_X_MATCH_MODES = {
    "all": (True, False),
    "any": (False, False),
    "all-with-x": (True, True),
    "any-with-x": (False, True),
}


class HeadersMatcher(BaseMatcher):
    """Match message headers against binding arguments (x-match all/any[-with-x]).

    A missing x-match means all. Keys starting with 'x-' are compared only in the -with-x
    modes. A binding value of void (None) matches any value of a present header, as in
    RabbitMQ. `bind` raises ValueError for an unknown x-match value.
    """

    __slots__ = ("_rules",)

    def __init__(self) -> None:
        super().__init__()
        self._rules: dict[
            tuple[str, Hashable, Hashable], tuple[bool, tuple[tuple[str, Any], ...], Hashable]
        ] = {}

    def bind(self, key: str, arguments: Arguments, destination: Hashable) -> bool:
        parse_x_match(arguments or {})
        return super().bind(key, arguments, destination)

    def _add(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        require_all, with_x = parse_x_match(arguments)
        pairs = tuple(
            (name, value)
            for name, value in arguments.items()
            if name != "x-match" and (with_x or not name.startswith("x-"))
        )
        self._rules[(key, freeze(arguments), destination)] = (require_all, pairs, destination)

    def _remove(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        del self._rules[(key, freeze(arguments), destination)]

    def match(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set[Hashable]:
        headers = headers or {}
        found: set[Hashable] = set()
        for require_all, pairs, destination in self._rules.values():
            if destination in found:
                continue
            if require_all:
                if all(_header_matches(headers, name, value) for name, value in pairs):
                    found.add(destination)
            elif any(_header_matches(headers, name, value) for name, value in pairs):
                found.add(destination)
        return found


_MISSING = object()


def _header_matches(headers: Mapping[str, Any], name: str, expected: Any) -> bool:
    actual = headers.get(name, _MISSING)
    if actual is _MISSING:
        return False
    if expected is None:
        return True
    return type(actual) is type(expected) and actual == expected


def parse_x_match(arguments: Mapping[str, Any]) -> tuple[bool, bool]:
    """(all required, x- keys compared) for a headers binding's arguments; ValueError for an
    x-match the broker refuses."""
    mode = arguments.get("x-match", "all")
    if isinstance(mode, bytes):
        mode = mode.decode("utf-8", "replace")
    if not isinstance(mode, str) or mode not in _X_MATCH_MODES:
        raise ValueError(
            f"Invalid x-match field value {mode!r}; expected all, any, all-with-x, or any-with-x"
        )
    return _X_MATCH_MODES[mode]
