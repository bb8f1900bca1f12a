"""JSON parsing of model-written text: any malformed or absurdly nested input is a ValueError.

``json.loads`` raises ``RecursionError`` on input nested about a thousand levels deep, and values
nested not quite that deep still break code that walks them recursively. Text written by a model
must never crash a rollout, so model-facing parsers call :func:`loads`: everything it does not
return is a ``ValueError`` (``json.JSONDecodeError`` is one).
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 32  # tool arguments of the benchmarks nest 4 levels at most


def depth(value: Any) -> int:
    """Nesting depth of a JSON value (a scalar is 0, ``[]`` is 1), computed without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            level += 1
            deepest = max(deepest, level)
            stack.extend((child, level) for child in
                         (item.values() if isinstance(item, dict) else item))
    return deepest


def loads(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` that raises ValueError for bad JSON and for nesting beyond ``max_depth``."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None
    if depth(value) > max_depth:
        raise ValueError(f"JSON nested more than {max_depth} levels deep")
    return value
