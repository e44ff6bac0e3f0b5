"""What every exchange type shares: binding identity and the bookkeeping of a binding set.

A binding is identified, as in RabbitMQ, by (routing key, arguments, destination): binding the
same destination twice with different arguments makes two bindings, but `match` reports each
destination once. Destinations are opaque hashable values: the broker binds queue and exchange
objects, the planner and the simulator bind names.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

Arguments = Mapping[str, Any] | None
#: (routing key, arguments, destination), the destination as it was bound: typed Any, as
#: `graph.reach`'s results are, because the caller knows what it binds (no cast needed).
Binding = tuple[str, dict[str, Any], Any]
#: What tells bindings of one exchange to one destination apart (see `binding_identity`).
Identity = tuple[str, Hashable]


def freeze(value: Any) -> Hashable:
    """A hashable, order-insensitive image of a field value (tables and arrays included)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("__array__",) + tuple(freeze(v) for v in value)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return (type(value).__name__, value)


def binding_identity(key: str, arguments: Arguments) -> Identity:
    """The same for equal bindings, whatever the order of their arguments: identical bindings
    are one interest (federation mirrors and advertises each once)."""
    return (key, freeze(dict(arguments or {})))


class BaseMatcher:
    """Binding bookkeeping shared by all exchange types; subclasses index for `match`."""

    __slots__ = ("_bindings",)

    def __init__(self) -> None:
        self._bindings: dict[tuple[str, Hashable, Hashable], dict[str, Any]] = {}

    def bind(self, key: str, arguments: Arguments, destination: Hashable) -> bool:
        """Add a binding; False if this exact binding already exists."""
        args = dict(arguments or {})
        ident = (key, freeze(args), destination)
        if ident in self._bindings:
            return False
        self._add(key, args, destination)
        self._bindings[ident] = args
        return True

    def unbind(self, key: str, arguments: Arguments, destination: Hashable) -> bool:
        """Remove a binding; False if there was no such binding."""
        args = self._bindings.pop((key, freeze(dict(arguments or {})), destination), None)
        if args is None:
            return False
        self._remove(key, args, destination)
        return True

    def bindings(self) -> list[Binding]:
        """Every binding as (routing key, arguments, destination), in binding order."""
        return [(key, args, dest) for (key, _, dest), args in self._bindings.items()]

    def __len__(self) -> int:
        return len(self._bindings)

    def _add(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        raise NotImplementedError

    def _remove(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        raise NotImplementedError


def count_up(counts: dict[Hashable, int], destination: Hashable) -> None:
    """One more binding to `destination` in an index (several keys may lead to it)."""
    counts[destination] = counts.get(destination, 0) + 1


def count_down(counts: dict[Hashable, int], destination: Hashable) -> None:
    """One binding fewer; the destination leaves the index with its last one."""
    left = counts[destination] - 1
    if left:
        counts[destination] = left
    else:
        del counts[destination]
