"""How deep a parsed JSON document nests, measured without recursion.

A body nested a few hundred levels deep parses (orjson goes to 1,024 levels) but breaks what
handles it afterwards (orjson serialises at most 254 levels; Python's recursion limit is about
1,000 frames), so ``app.api.body`` refuses it right after parsing, before anything else reads
it. One pass over the containers, depth first (a too-deep branch is found early); strings and
numbers cost one type check each, so a body of long texts costs next to nothing (about 20 µs for
Codex CLI's first request, against 36 µs for orjson to parse it).
"""

from __future__ import annotations

from typing import Any


def exceeds_depth(document: Any, limit: int) -> bool:
    """Whether ``document`` (orjson's output: dicts, lists, scalars) nests more than ``limit``
    containers deep (``{}`` and ``[]`` are one level each; a scalar is none)."""
    if type(document) is not dict and type(document) is not list:
        return False
    stack: list[tuple[Any, int]] = [(document, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        container, depth = pop()
        if depth > limit:
            return True
        values = container.values() if type(container) is dict else container
        for value in values:
            if type(value) is dict or type(value) is list:
                push((value, depth + 1))
    return False
