"""Credentials in URLs, redacted wherever a URL is shown, logged or stored (standard library
only, so every layer uses it: the kernel when it echoes and stores a request's tools, the MCP
kind in its messages and logs).

``redact_url`` replaces a URL's user information (``https://user:pass@host/``) with ``***``
and the value of every query (or fragment) parameter whose name looks secret (``token``,
``access_token``, ``key``, ``api_key``, ``apikey``, ``secret``, ``password``, ``sig``,
``signature``, ``credential``, ``auth`` ... in any case, with ``-`` or ``_``) with ``***``;
everything else is kept as written. ``redact_text`` does it for every http(s) URL in a text.

``redact_logs(*loggers)`` adds a filter to the named loggers of libraries that log the URLs
the gateway hands them (httpx2 logs every request's URL at INFO): their records, and the
tracebacks they carry, are redacted before any handler sees them.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import SplitResult, unquote_plus, urlsplit, urlunsplit

REDACTED = "***"

_SECRET_NAMES = frozenset(
    {"sig", "pwd", "pass", "auth", "authorization", "bearer", "jwt", "session", "sessionid"}
)
_SECRET_SUFFIXES = (
    "token",
    "key",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "signature",
    "credential",
    "credentials",
)
_URL = re.compile(r"https?://[^\s'\"<>`]+", re.IGNORECASE)


def secret_name(name: str) -> bool:
    """Whether a query parameter called ``name`` looks like it carries a credential."""
    key = re.sub(r"[^a-z0-9]", "", unquote_plus(name).lower())
    return key in _SECRET_NAMES or key.endswith(_SECRET_SUFFIXES)


def _redact_pairs(text: str) -> str:
    pairs = []
    for pair in text.split("&"):
        name, equals, value = pair.partition("=")
        if equals and value and secret_name(name):
            pair = f"{name}={REDACTED}"
        pairs.append(pair)
    return "&".join(pairs)


def redact_url(url: str) -> str:
    """``url`` without the credentials it carries (see the module docstring)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _redact_unparsed(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    redacted = SplitResult(
        parts.scheme,
        netloc,
        parts.path,
        _redact_pairs(parts.query) if parts.query else "",
        _redact_pairs(parts.fragment) if "=" in parts.fragment else parts.fragment,
    )
    if redacted == parts:
        return url
    return urlunsplit(redacted)


def _redact_unparsed(url: str) -> str:
    """A URL ``urlsplit`` refuses (a bad port, a bracket left open): user information and
    query parameters found by text."""
    scheme, sep, rest = url.partition("://")
    if sep:
        authority_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
        authority = rest[:authority_end]
        if "@" in authority:
            rest = f"{REDACTED}@{authority.rpartition('@')[2]}{rest[authority_end:]}"
        url = f"{scheme}{sep}{rest}"
    head, question, query = url.partition("?")
    return f"{head}{question}{_redact_pairs(query)}" if question else url


def redact_text(text: str) -> str:
    """``text`` with every http(s) URL in it redacted."""
    if "://" not in text:
        return text
    return _URL.sub(lambda match: redact_url(match.group(0)), text)


class RedactingFilter(logging.Filter):
    """Redacts the URLs in a record's message and traceback (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit: left to the handler
            return True
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            trace = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact_text(trace)
        return True


_FILTER = RedactingFilter()


def redact_logs(*names: str) -> None:
    """Add the redacting filter to each named logger (once)."""
    for name in names:
        log = logging.getLogger(name)
        if _FILTER not in log.filters:
            log.addFilter(_FILTER)
