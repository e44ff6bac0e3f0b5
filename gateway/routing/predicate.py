"""One binding against one message, as a predicate: the shape a DataFrame join wants.

`binding_matches` asks the same matchers the broker routes with, so a join of bindings with
publishes reaches exactly the queues a node would. Each distinct binding gets a one-binding
matcher, kept in a small bounded cache: a join asks about the same bindings row after row.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from gateway.routing.bindings import Arguments, freeze
from gateway.routing.matchers import Matcher, matcher_for

#: Distinct bindings kept before the cache is cleared.
CACHE_MAX = 4096

_HIT = "hit"
_cache: dict[tuple[str, str, Hashable], Matcher | None] = {}


def binding_matches(
    kind: str,
    binding_key: str,
    binding_arguments: Arguments,
    routing_key: str,
    headers: Mapping[str, Any] | None = None,
) -> bool:
    """Whether a binding of an exchange of type `kind` takes a message with `routing_key` and
    `headers`.

    A binding the broker refuses to make (a headers binding with an unknown x-match) matches
    nothing, since it never exists. ValueError for an exchange type we do not implement.
    """
    ident = (kind, binding_key, freeze(dict(binding_arguments or {})))
    try:
        matcher = _cache[ident]
    except KeyError:
        matcher = _one_binding(kind, binding_key, binding_arguments)
        if len(_cache) >= CACHE_MAX:
            _cache.clear()
        _cache[ident] = matcher
    return matcher is not None and bool(matcher.match(routing_key, headers))


def _one_binding(kind: str, key: str, arguments: Arguments) -> Matcher | None:
    matcher = matcher_for(kind)
    try:
        matcher.bind(key, arguments, _HIT)
    except ValueError:
        return None
    return matcher
