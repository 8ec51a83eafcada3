"""A ``web_search`` call's arguments: a ``query`` or several ``queries`` (Qwen3.5 batches
related queries in one call; gpt-oss sends one ``query``; some models send the bare query)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from app.protocol.json_types import JsonObject


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """The queries of one call; ``batched`` when the model passed ``queries``."""

    queries: list[str]
    batched: bool

    def action(self) -> JsonObject:
        action: JsonObject = {"type": "search", "query": self.queries[0] if self.queries else ""}
        if self.batched:
            action["queries"] = list(self.queries)
        return action


def parse_arguments(arguments: str) -> SearchRequest:
    """The call's queries (``query`` first, then ``queries``, duplicates dropped); raises
    ``ValueError`` when there is none."""
    try:
        value = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        # A model that sent the bare query instead of JSON.
        value = {"query": arguments.strip()}
    if isinstance(value, str):
        value = {"query": value}
    if not isinstance(value, dict):
        raise ValueError("the arguments must be a JSON object with 'query' or 'queries'")
    found: list[str] = []
    single = value.get("query")
    if isinstance(single, str) and single.strip():
        found.append(single.strip())
    many = value.get("queries")
    batched = isinstance(many, list)
    if isinstance(many, str):
        many = [many]
        batched = True
    for entry in many if isinstance(many, list) else []:
        if isinstance(entry, str) and entry.strip() and entry.strip() not in found:
            found.append(entry.strip())
    if not found:
        raise ValueError("give a non-empty 'query' (or 'queries')")
    return SearchRequest(found, batched)


def lenient(arguments: str) -> SearchRequest:
    """The call's queries, none when the arguments are unusable."""
    try:
        return parse_arguments(arguments)
    except ValueError:
        return SearchRequest([], False)
