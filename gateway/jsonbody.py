"""JSON message bodies from other parties (management requests, federation adverts), bounded.

`json.loads` recurses once per nesting level, so a body of a hundred thousand `[` raises
RecursionError deep in the decoder instead of a decoding error; and a legitimate request is
never nested more than a few levels. Both become one ValueError the callers already answer.
"""

from __future__ import annotations

import json
from typing import Any

#: Deeper than any request or advert we send (field tables nested in arguments included).
MAX_DEPTH = 32


def load_json(body: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The decoded body; ValueError if it is not JSON or nests deeper than `max_depth`."""
    try:
        value = json.loads(body)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {max_depth} levels") from None
    # UnicodeDecodeError and JSONDecodeError are ValueErrors already.
    if _depth(value) > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    return value


def _depth(value: Any) -> int:
    """Nesting depth of decoded JSON (a scalar is 0), without recursion."""
    deepest = 0
    pending = [(value, 1)]
    while pending:
        item, level = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        pending.extend((child, level + 1) for child in children)
    return deepest
