"""OpenAI's attribute ``filters`` for vector store search and the file_search tool.

A comparison filter is ``{"type": "eq"|"ne"|"gt"|"gte"|"lt"|"lte"|"in"|"nin", "key", "value"}``
and a compound filter ``{"type": "and"|"or", "filters": [...]}`` (nested freely). Numbers
compare numerically, strings lexicographically, booleans only for (in)equality; a comparison
of different kinds is false. An attribute that is missing matches only ``ne`` and ``nin``.
"""

from __future__ import annotations

import math
from typing import Any

from app.files.params import ParamError, json_type, missing, reject_unknown, show
from app.protocol.json_types import JsonObject

__all__ = [
    "COMPARISON_TYPES",
    "COMPOUND_TYPES",
    "FilterError",
    "matches",
    "validate_filter",
]

COMPARISON_TYPES = frozenset({"eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"})
COMPOUND_TYPES = frozenset({"and", "or"})
_ORDERING = frozenset({"gt", "gte", "lt", "lte"})
_MAX_DEPTH = 16
_MISSING = object()


class FilterError(ParamError):
    """A filter OpenAI would reject; ``param`` names the bad field (``filters.filters[1].key``)."""


def validate_filter(value: Any, *, param: str = "filters") -> JsonObject:
    """A well-formed copy of ``value``; raises ``FilterError`` naming the bad field."""
    return _validate(value, param, 0)


def matches(filter: JsonObject, attributes: dict[str, Any]) -> bool:
    """Whether a file's ``attributes`` pass ``filter`` (a ``validate_filter`` result)."""
    kind = filter["type"]
    if kind == "and":
        return all(matches(child, attributes) for child in filter["filters"])
    if kind == "or":
        return any(matches(child, attributes) for child in filter["filters"])
    actual = attributes.get(filter["key"], _MISSING)
    expected = filter["value"]
    if kind == "ne":
        return actual is _MISSING or not _equal(actual, expected)
    if kind == "nin":
        return actual is _MISSING or not any(_equal(actual, item) for item in expected)
    if actual is _MISSING:
        return False
    if kind == "eq":
        return _equal(actual, expected)
    if kind == "in":
        return any(_equal(actual, item) for item in expected)
    return _ordered(kind, actual, expected)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(actual: Any, expected: Any) -> bool:
    if isinstance(actual, bool) or isinstance(expected, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual == expected
    if _is_number(actual) and _is_number(expected):
        return bool(actual == expected)
    if isinstance(actual, str) and isinstance(expected, str):
        return actual == expected
    return False


def _ordered(kind: str, actual: Any, expected: Any) -> bool:
    if _is_number(actual) and _is_number(expected):
        pass
    elif not (isinstance(actual, str) and isinstance(expected, str)):
        return False
    if kind == "gt":
        return bool(actual > expected)
    if kind == "gte":
        return bool(actual >= expected)
    if kind == "lt":
        return bool(actual < expected)
    return bool(actual <= expected)


# ----------------------------------------------------------------------------- validation


def _validate(value: Any, param: str, depth: int) -> JsonObject:
    if depth > _MAX_DEPTH:
        raise FilterError(f"Invalid '{param}': filters nest deeper than {_MAX_DEPTH}.", param=param)
    if not isinstance(value, dict):
        raise FilterError(
            f"Invalid type for '{param}': expected an object, but got {json_type(value)} instead.",
            param=param,
        )
    kind = value.get("type")
    if kind is None:
        raise missing(FilterError, f"{param}.type")
    if kind in COMPOUND_TYPES:
        return _validate_compound(value, kind, param, depth)
    if kind in COMPARISON_TYPES:
        return _validate_comparison(value, kind, param)
    supported = ", ".join(f"'{name}'" for name in (*sorted(COMPARISON_TYPES), "and", "or"))
    raise FilterError(
        f"Invalid value for '{param}.type': {show(kind)}. Supported values are: {supported}.",
        param=f"{param}.type",
    )


def _validate_compound(value: JsonObject, kind: str, param: str, depth: int) -> JsonObject:
    reject_unknown(FilterError, value, ("type", "filters"), param)
    children = value.get("filters", _MISSING)
    if children is _MISSING:
        raise missing(FilterError, f"{param}.filters")
    if not isinstance(children, list):
        raise FilterError(
            f"Invalid type for '{param}.filters': expected an array, but got "
            f"{json_type(children)} instead.",
            param=f"{param}.filters",
        )
    return {
        "type": kind,
        "filters": [
            _validate(child, f"{param}.filters[{index}]", depth + 1)
            for index, child in enumerate(children)
        ],
    }


def _validate_comparison(value: JsonObject, kind: str, param: str) -> JsonObject:
    reject_unknown(FilterError, value, ("type", "key", "value"), param)
    key = value.get("key", _MISSING)
    if key is _MISSING:
        raise missing(FilterError, f"{param}.key")
    if not isinstance(key, str) or not key:
        raise FilterError(
            f"Invalid type for '{param}.key': expected a non-empty string, but got "
            f"{json_type(key)} instead.",
            param=f"{param}.key",
        )
    expected = value.get("value", _MISSING)
    if expected is _MISSING:
        raise missing(FilterError, f"{param}.value")
    where = f"{param}.value"
    if kind in ("in", "nin"):
        if not isinstance(expected, list):
            raise FilterError(
                f"Invalid type for '{where}': '{kind}' expects an array, but got "
                f"{json_type(expected)} instead.",
                param=where,
            )
        for index, item in enumerate(expected):
            _check_scalar(item, f"{where}[{index}]")
        return {"type": kind, "key": key, "value": list(expected)}
    _check_scalar(expected, where)
    if kind in _ORDERING and isinstance(expected, bool):
        raise FilterError(
            f"Invalid type for '{where}': '{kind}' compares numbers or strings, but got a boolean.",
            param=where,
        )
    return {"type": kind, "key": key, "value": expected}


def _check_scalar(value: Any, param: str) -> None:
    if isinstance(value, str | bool):
        return
    if _is_number(value):
        if isinstance(value, float) and not math.isfinite(value):
            raise FilterError(f"Invalid '{param}': numbers must be finite.", param=param)
        return
    raise FilterError(
        f"Invalid type for '{param}': expected a string, number or boolean, but got "
        f"{json_type(value)} instead.",
        param=param,
    )
