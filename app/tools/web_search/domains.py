"""Domain filters (``filters.allowed_domains`` of OpenAI's tool) and location hints, as the
backends take them: normalized host names, the subdomain rule, ``site:`` query terms, the
country of ``user_location``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from app.protocol.json_types import JsonObject


def normalize_domains(domains: Iterable[str] | None) -> list[str]:
    """``allowed_domains`` as bare lower-case host names (a scheme, path or port is dropped)."""
    out: list[str] = []
    for raw in domains or []:
        text = str(raw).strip().lower()
        if "://" in text:
            text = urlsplit(text).hostname or ""
        text = text.split("/", 1)[0].split(":", 1)[0].strip(".")
        text = text.removeprefix("*.")
        if text and text not in out:
            out.append(text)
    return out


def host_of(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return ""


def domain_allowed(url: str, domains: Sequence[str]) -> bool:
    """Whether ``url`` is on one of ``domains`` or a subdomain of one (no domains: any)."""
    if not domains:
        return True
    host = host_of(url)
    return any(host == d or host.endswith("." + d) for d in domains)


def site_terms(domains: Sequence[str]) -> str:
    """``site:`` operators for a query (several joined with ``OR``)."""
    if not domains:
        return ""
    if len(domains) == 1:
        return f"site:{domains[0]}"
    return "(" + " OR ".join(f"site:{d}" for d in domains) + ")"


def with_sites(query: str, domains: Sequence[str]) -> str:
    terms = site_terms(domains)
    return f"{query} {terms}" if terms else query


def country_of(user_location: JsonObject | None) -> str | None:
    """The two-letter country code of OpenAI's ``user_location``, if it has one."""
    if not isinstance(user_location, dict):
        return None
    country = user_location.get("country")
    if isinstance(country, str) and len(country) == 2 and country.isalpha():
        return country.upper()
    return None
