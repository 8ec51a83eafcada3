"""The URL checks the settings make: an upstream's base URL."""

from __future__ import annotations

from urllib.parse import urlsplit


def check_http_url(value: str) -> str:
    """``value`` if it is an ``http://`` or ``https://`` URL with a host; else ValueError."""
    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"{value!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8000)"
        )
    return value


def strip_base_url(value: str) -> str:
    """A server's base URL without a trailing slash or ``/v1`` (both are common in configs)."""
    value = value.rstrip("/")
    if value.endswith("/v1"):
        value = value[: -len("/v1")]
    return value
