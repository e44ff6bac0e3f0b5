"""Exchange matching: which destinations a routing key (and headers) reach.

Pure and I/O-free so that the broker, the federation and the Spark simulator share one
definition of AMQP routing. Destinations are opaque hashable values: the broker binds queue
and exchange objects, the simulator binds names.

A binding is identified, as in RabbitMQ, by (routing key, arguments, destination): binding the
same destination twice with different arguments makes two bindings, but `match` reports each
destination once.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

Arguments = Mapping[str, Any] | None
Binding = tuple[str, dict[str, Any], Hashable]


def freeze(value: Any) -> Hashable:
    """A hashable, order-insensitive image of a field value (tables and arrays included)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("__array__",) + tuple(freeze(v) for v in value)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return (type(value).__name__, value)


class _Matcher:
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


def _count_up(counts: dict[Hashable, int], destination: Hashable) -> None:
    counts[destination] = counts.get(destination, 0) + 1


def _count_down(counts: dict[Hashable, int], destination: Hashable) -> None:
    left = counts[destination] - 1
    if left:
        counts[destination] = left
    else:
        del counts[destination]


class DirectMatcher(_Matcher):
    """Exact routing-key equality: one dict lookup per message."""

    __slots__ = ("_by_key",)

    def __init__(self) -> None:
        super().__init__()
        self._by_key: dict[str, dict[Hashable, int]] = {}

    def _add(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        _count_up(self._by_key.setdefault(key, {}), destination)

    def _remove(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        counts = self._by_key[key]
        _count_down(counts, destination)
        if not counts:
            del self._by_key[key]

    def match(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set[Hashable]:
        counts = self._by_key.get(routing_key)
        return set(counts) if counts else set()


class FanoutMatcher(_Matcher):
    """Every bound destination, whatever the key."""

    __slots__ = ("_all",)

    def __init__(self) -> None:
        super().__init__()
        self._all: dict[Hashable, int] = {}

    def _add(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        _count_up(self._all, destination)

    def _remove(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        _count_down(self._all, destination)

    def match(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set[Hashable]:
        return set(self._all)


def topic_words(key: str) -> list[str]:
    """Split a topic key as RabbitMQ does: '' is no words, 'a..b' is ['a', '', 'b']."""
    return key.split(".") if key else []


class _Node:
    __slots__ = ("children", "destinations")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.destinations: dict[Hashable, int] = {}


class TopicMatcher(_Matcher):
    """A trie over binding-key words; `*` is one word, `#` is zero or more.

    Matching walks the trie once per message; a `#` node is tried at every remaining
    position, and (node, position) pairs are visited once, so keys like '#.#.#' stay linear.
    """

    __slots__ = ("_root",)

    def __init__(self) -> None:
        super().__init__()
        self._root = _Node()

    def _add(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        node = self._root
        for word in topic_words(key):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node()
            node = child
        _count_up(node.destinations, destination)

    def _remove(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        path = [self._root]
        words = topic_words(key)
        for word in words:
            path.append(path[-1].children[word])
        _count_down(path[-1].destinations, destination)
        for depth in range(len(words), 0, -1):
            node = path[depth]
            if node.children or node.destinations:
                break
            del path[depth - 1].children[words[depth - 1]]

    def match(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set[Hashable]:
        words = topic_words(routing_key)
        last = len(words)
        found: set[Hashable] = set()
        seen: set[tuple[int, int]] = set()
        stack = [(self._root, 0)]
        while stack:
            node, position = stack.pop()
            mark = (id(node), position)
            if mark in seen:
                continue
            seen.add(mark)
            children = node.children
            if position == last:
                found.update(node.destinations)
            else:
                child = children.get(words[position])
                if child is not None:
                    stack.append((child, position + 1))
                child = children.get("*")
                if child is not None:
                    stack.append((child, position + 1))
            hash_node = children.get("#")
            if hash_node is not None:
                stack.extend((hash_node, rest) for rest in range(position, last + 1))
        return found


_X_MATCH_MODES = {
    "all": (True, False),
    "any": (False, False),
    "all-with-x": (True, True),
    "any-with-x": (False, True),
}


class HeadersMatcher(_Matcher):
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
        _parse_x_match(arguments or {})
        return super().bind(key, arguments, destination)

    def _add(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        require_all, with_x = _parse_x_match(arguments)
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


def _parse_x_match(arguments: Mapping[str, Any]) -> tuple[bool, bool]:
    """(all required, x- keys compared) for a headers binding's arguments."""
    mode = arguments.get("x-match", "all")
    if isinstance(mode, bytes):
        mode = mode.decode("utf-8", "replace")
    if not isinstance(mode, str) or mode not in _X_MATCH_MODES:
        raise ValueError(
            f"Invalid x-match field value {mode!r}; expected all, any, all-with-x, or any-with-x"
        )
    return _X_MATCH_MODES[mode]


Matcher = DirectMatcher | FanoutMatcher | TopicMatcher | HeadersMatcher

_TYPES: dict[str, type[Matcher]] = {
    "direct": DirectMatcher,
    "fanout": FanoutMatcher,
    "topic": TopicMatcher,
    "headers": HeadersMatcher,
}

EXCHANGE_TYPES = frozenset(_TYPES)


def matcher_for(exchange_type: str) -> Matcher:
    """A new, empty matcher for an exchange type; ValueError for types we do not implement."""
    try:
        return _TYPES[exchange_type]()
    except KeyError:
        raise ValueError(f"unknown exchange type {exchange_type!r}") from None
