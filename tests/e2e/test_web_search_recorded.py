"""The shared ``web_search/*`` recordings: gpt-oss and Qwen3.5 through a gateway that searched.

Each recording holds what a client saw from a gateway (agentic-api) that ran the model's web
searches itself. The model's side of it is rebuilt as upstream rounds (its reasoning, then a
``function_call`` to ``web_search`` with the recorded query, then its answer) and replayed by
the replay server, while a local SearXNG-format server answers the query with the recorded
sources. The client (the official ``openai`` SDK) must see the recording's output: the same
items in the same order, the same ``web_search_call`` action (query, queries, source URLs) and
the same message text, and, where the recording streamed, the same events for the search.

Where the recording cannot be matched exactly:

- The recordings always carry ``action.sources``; OpenAI (and this gateway) return them only
  when the request's ``include`` asks for ``web_search_call.action.sources``, so the replayed
  requests add that. The recorded sources are ``{"title", "url"}``; OpenAI's are
  ``{"type": "url", "url"}`` (``ActionSearchSource``), which the gateway follows: the URLs are
  compared.
- ``queries``: Qwen3.5 passed its query in ``queries`` (the recorded action has both
  ``query`` and ``queries``), gpt-oss passed ``query`` alone (no ``queries``); the rebuilt calls
  do the same, and the gateway reports ``queries`` only when the model batched.
- The streaming gpt-oss recording comes from an older gateway that streamed only the search's
  events (``data:`` lines without ``event:``, no ``response.created``, no reasoning or message
  events, the bare final Response and ``data: [DONE]``). The gateway's stream is a complete
  lifecycle; its events for the ``web_search_call`` item must be the recorded ones, in order.
- Each recording is also replayed in the other mode (streaming for a JSON recording and the
  other way round), where the output must still match; the search's events are then checked
  against OpenAI's sequence (added, in_progress, searching, completed, done).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.recording.cassette import (
    load_cassette,
    sse_data_events,
)
from app.recording.replay import create_replay_app
from app.settings import Settings
from tests.fakes import scripted_cassette
from tests.helpers import in_process, openai_client, serve_in_thread
from tests.lifecycle import assert_lifecycle
from tests.search_servers import doc, serve_search

RECORDINGS = [
    "web_search/gpt_oss_web_search_nonstreaming.yaml",
    "web_search/gpt_oss_web_search_streaming.yaml",
    "web_search/web-search-gateway-Qwen-Qwen3.5-35B-A3B-FP8-nonstreaming.yaml",
]

INCLUDE_SOURCES = "web_search_call.action.sources"

OPENAI_SEARCH_EVENTS = [
    "response.output_item.added",
    "response.web_search_call.in_progress",
    "response.web_search_call.searching",
    "response.web_search_call.completed",
    "response.output_item.done",
]


def recorded_exchange(path: Path) -> tuple[JsonObject, JsonObject, list[str]]:
    """The client's request, the final response it received, and the stream's event types
    (the older gateway's stream ends with the bare Response, which has no ``type``)."""
    turn = load_cassette(path).turns[0]
    request = dict(turn.request.body or {})
    if turn.response.sse is None:
        return request, dict(turn.response.body or {}), []
    events = sse_data_events(turn)
    final = events[-1].get("response", events[-1])
    return request, final, [e["type"] for e in events if "type" in e]


def search_arguments(action: JsonObject) -> str:
    """The model's arguments behind a recorded search: ``queries`` when it batched."""
    if isinstance(action.get("queries"), list):
        return json.dumps({"queries": action["queries"]})
    return json.dumps({"query": action["query"]})


def upstream_rounds(output: list[JsonObject]) -> list[list[JsonObject]]:
    """The model's rounds behind a gateway's output: every run of searches ends a round."""
    rounds: list[list[JsonObject]] = [[]]
    for item in output:
        if item["type"] == "web_search_call":
            rounds[-1].append(
                {
                    "id": f"fc_{item['id']}",
                    "type": "function_call",
                    "call_id": f"call_{item['id']}",
                    "name": "web_search",
                    "arguments": search_arguments(item["action"]),
                    "status": "completed",
                }
            )
            continue
        if rounds[-1] and rounds[-1][-1]["type"] == "function_call":
            rounds.append([])
        rounds[-1].append(item)
    return rounds


def recorded_sources(output: list[JsonObject]) -> list[JsonObject]:
    return [
        s for item in output if item["type"] == "web_search_call" for s in item["action"]["sources"]
    ]


def view(item: JsonObject) -> JsonObject:
    """What must match between the recording and the gateway (ids, formatting aside)."""
    kind = item["type"]
    if kind == "web_search_call":
        action = item["action"]
        shown = {
            "type": action["type"],
            "query": action.get("query"),
            "sources": [s["url"] for s in action.get("sources") or []],
        }
        if action.get("queries") is not None:
            shown["queries"] = action["queries"]
        return {"type": kind, "status": item["status"], "action": shown}
    if kind == "message":
        return {"type": kind, "text": "".join(p.get("text", "") for p in item["content"])}
    if kind == "reasoning":
        content = item.get("content") or []
        return {"type": kind, "text": "".join(p.get("text", "") for p in content)}
    return {"type": kind}


def search_events(events: list[JsonObject]) -> list[str]:
    """The types of the events about ``web_search_call`` items, in order."""
    ids = {
        e["item"]["id"]
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "web_search_call"
    }
    return [
        e["type"]
        for e in events
        if e.get("item_id") in ids or (e.get("item") or {}).get("id") in ids
    ]


@pytest.mark.parametrize("mode", ["as recorded", "other mode"])
@pytest.mark.parametrize("name", RECORDINGS, ids=lambda n: Path(n).stem)
def test_recorded_web_search_exchange_is_reproduced(
    shared_cassettes: Path, name: str, mode: str
) -> None:
    request, recorded, recorded_types = recorded_exchange(shared_cassettes / name)
    stream = bool(request.get("stream")) == (mode == "as recorded")
    rounds = upstream_rounds(recorded["output"])
    sources = recorded_sources(recorded["output"])
    [query] = {item["action"]["query"] for item in recorded["output"] if "action" in item}
    corpus = tuple(
        doc(s["title"], s["url"], f"What {s['title']} says about {query}.", *query.split())
        for s in sources
    )
    with (
        serve_search("searxng", documents=corpus) as search,
        serve_in_thread(create_replay_app(scripted_cassette(rounds, stream=stream))) as replay_url,
    ):
        settings = Settings(
            upstream_url=replay_url,
            web_search_provider="searxng",
            web_search_base_url=search.base_url,
            web_search_max_results=len(sources),
        )
        with in_process(create_app(settings)) as http:
            client = openai_client(http)
            kwargs = {k: v for k, v in request.items() if k != "stream"}
            kwargs["include"] = [INCLUDE_SOURCES]
            events: list[JsonObject] = []
            if stream:
                with client.responses.stream(**kwargs) as events_stream:
                    events = [
                        event.model_dump(mode="json", warnings=False) for event in events_stream
                    ]
                    final = events_stream.get_final_response().model_dump(
                        mode="json", warnings=False
                    )
            else:
                final = client.responses.create(**kwargs).model_dump(mode="json", warnings=False)
            stored = client.responses.retrieve(final["id"]).model_dump(mode="json", warnings=False)
        sent = httpx.get(f"{replay_url}/__replay/requests").json()
        searched = [r.params["q"] for r in search.requests]

    expected = [view(item) for item in recorded["output"]]
    assert [view(item) for item in final["output"]] == expected
    assert [view(item) for item in stored["output"]] == expected
    assert final["status"] == recorded["status"] == "completed"
    for item in final["output"]:
        if item["type"] == "web_search_call":
            assert item["id"].startswith("ws_")
            assert all(s["type"] == "url" for s in item["action"]["sources"])
    assert searched == [query]
    # What the model was given: the web_search function, then the results as numbered text.
    assert len(sent) == len(rounds) == 2
    assert [t["name"] for t in sent[0]["body"]["tools"]] == ["web_search"]
    fed = sent[1]["body"]["input"][-1]
    assert fed["type"] == "function_call_output"
    assert fed["output"].startswith(f'Results for "{query}":\n\n[1] {sources[0]["title"]}\n')
    assert f"[{len(sources)}] {sources[-1]['title']}\nURL: {sources[-1]['url']}" in fed["output"]
    if stream:
        assert_lifecycle(events)
        got = search_events(events)
        assert got == (recorded_types or OPENAI_SEARCH_EVENTS)
        assert got == OPENAI_SEARCH_EVENTS
