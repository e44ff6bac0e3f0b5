"""The topic exchange type: dot-separated words, `*` for one word and `#` for zero or more."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from gateway.routing.bindings import BaseMatcher, count_down, count_up


def topic_words(key: str) -> list[str]:
    """Split a topic key as RabbitMQ does: '' is no words, 'a..b' is ['a', '', 'b']."""
    return key.split(".") if key else []


class _Node:
    __slots__ = ("children", "destinations")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.destinations: dict[Hashable, int] = {}


class TopicMatcher(BaseMatcher):
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
        count_up(node.destinations, destination)

    def _remove(self, key: str, arguments: dict[str, Any], destination: Hashable) -> None:
        path = [self._root]
        words = topic_words(key)
        for word in words:
            path.append(path[-1].children[word])
        count_down(path[-1].destinations, destination)
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
