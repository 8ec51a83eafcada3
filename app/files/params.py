"""Checking request parameters the OpenAI way: the error names the field, the messages are
OpenAI's ("Missing required parameter: 'x'.", "Unknown parameter: 'x.y'.", "... but got a
string instead."). Shared by ``chunking_strategy`` and ``filters``."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, TypeVar


class ParamError(ValueError):
    """A parameter OpenAI would reject; ``param`` names the bad field."""

    def __init__(self, message: str, *, param: str) -> None:
        super().__init__(message)
        self.param = param


ErrorT = TypeVar("ErrorT", bound=ParamError)


def missing(error: type[ErrorT], param: str) -> ErrorT:
    return error(f"Missing required parameter: '{param}'.", param=param)


def reject_unknown(
    error: type[ParamError], value: Mapping[str, Any], known: Collection[str], param: str
) -> None:
    for key in value:
        if key not in known:
            raise error(f"Unknown parameter: '{param}.{key}'.", param=f"{param}.{key}")


def show(value: Any) -> str:
    """``value`` as a message quotes it."""
    return f"'{value}'" if isinstance(value, str) else repr(value)


def json_type(value: Any, *, integers: bool = False) -> str:
    """What JSON type ``value`` is, as in "but got a string instead"; ``integers`` tells
    integers from decimals (where only an integer will do)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        if not integers:
            return "a number"
        return "an integer" if isinstance(value, int) else "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
