"""Sender-selected distribution: RabbitMQ's CC and BCC headers, over a plain headers mapping.

A publisher lists extra routing keys in the CC and BCC headers (arrays of strings); the
message is routed with its routing key and every one of them, through the same exchange, and
reaches each destination once. BCC is removed from the message before delivery, so consumers
never see who else got it; CC stays. Dead-lettered copies are not routed by them again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CC_HEADER = "CC"
BCC_HEADER = "BCC"

#: The two headers as they start an entry of an encoded table (a shortstr key): a cheap test on
#: the raw table, so that messages without them are never decoded for this.
ENCODED_KEYS = (b"\x02CC", b"\x03BCC")


def extra_routing_keys(headers: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The routing keys CC and BCC add (CC's first), as RabbitMQ takes them: array elements
    that are not strings are skipped; a header that is not an array is a ValueError."""
    if not headers:
        return ()
    keys: list[str] = []
    for name in (CC_HEADER, BCC_HEADER):
        if name not in headers:
            continue
        values = headers[name]
        if not isinstance(values, list):
            raise ValueError(f"the {name} header must be an array of routing keys")
        for value in values:
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if isinstance(value, str):
                keys.append(value)
    return tuple(keys)
