"""The exchange types this broker implements, by name: one matcher class each."""

from __future__ import annotations

from gateway.routing.direct import DirectMatcher
from gateway.routing.fanout import FanoutMatcher
from gateway.routing.headers import HeadersMatcher
from gateway.routing.topic import TopicMatcher

Matcher = DirectMatcher | FanoutMatcher | TopicMatcher | HeadersMatcher

_TYPES: dict[str, type[Matcher]] = {
    "direct": DirectMatcher,
    "fanout": FanoutMatcher,
    "topic": TopicMatcher,
    "headers": HeadersMatcher,
}

#: The exchange types, in the order error messages list them; gateway.names re-exports them.
EXCHANGE_TYPES: tuple[str, ...] = tuple(_TYPES)


def matcher_for(exchange_type: str) -> Matcher:
    """A new, empty matcher for an exchange type; ValueError for types we do not implement."""
    try:
        return _TYPES[exchange_type]()
    except KeyError:
        raise ValueError(f"unknown exchange type {exchange_type!r}") from None
