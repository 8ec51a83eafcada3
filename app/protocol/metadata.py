"""OpenAI's ``metadata`` limits: at most 16 pairs, keys up to 64 and values up to 512 characters,
strings only. Shared by every endpoint that takes ``metadata`` (responses, conversations)."""

from __future__ import annotations

from typing import Any

from app.errors import InvalidRequestError

MAX_PAIRS = 16
MAX_KEY_LENGTH = 64
MAX_VALUE_LENGTH = 512

_JSON_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a decimal"),
    (str, "a string"),
    (list, "an array"),
    (dict, "an object"),
)


def json_type_name(value: Any) -> str:
    """How OpenAI names a JSON value's type in its errors ("an integer", "an array" ...)."""
    if value is None:
        return "null"
    for kind, name in _JSON_TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def check_metadata(metadata: Any, param: str) -> dict[str, str]:
    """``metadata`` as a ``dict[str, str]`` (``None`` is empty), or a 400 naming ``param``.

    A value at fault is named precisely (``metadata.topic``); a count or key problem names the
    object itself.
    """
    checked: dict[str, str] = check_pairs(metadata, param, (str,), "a string")
    return checked


def check_pairs(
    value: Any, param: str, value_types: tuple[type, ...], expected: str
) -> dict[str, Any]:
    """OpenAI's key-value objects (``metadata``, vector store file ``attributes``): at most 16
    keys of up to 64 characters, values of ``value_types`` (strings up to 512 characters), or
    a 400 naming ``param`` (or the key at fault: ``metadata.topic``). ``None`` is empty."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRequestError(
            f"Invalid type for '{param}': expected an object, but got "
            f"{json_type_name(value)} instead.",
            param=param,
            code="invalid_type",
        )
    if len(value) > MAX_PAIRS:
        raise InvalidRequestError(
            f"Invalid '{param}': too many properties. Expected an object with at most "
            f"{MAX_PAIRS} properties, but got an object with {len(value)} properties instead.",
            param=param,
            code="object_above_max_properties",
        )
    for key, item in value.items():
        if len(key) > MAX_KEY_LENGTH:
            raise InvalidRequestError(
                f"Invalid '{param}': key '{key}' is too long. Expected a key with maximum "
                f"length {MAX_KEY_LENGTH}, but got a key with length {len(key)} instead.",
                param=param,
                code="string_above_max_length",
            )
        where = f"{param}.{key}"
        if not isinstance(item, value_types):
            raise InvalidRequestError(
                f"Invalid type for '{where}': expected {expected}, but got "
                f"{json_type_name(item)} instead.",
                param=where,
                code="invalid_type",
            )
        if isinstance(item, str) and len(item) > MAX_VALUE_LENGTH:
            raise InvalidRequestError(
                f"Invalid '{where}': string too long. Expected a string with maximum length "
                f"{MAX_VALUE_LENGTH}, but got a string with length {len(item)} instead.",
                param=where,
                code="string_above_max_length",
            )
    return dict(value)
