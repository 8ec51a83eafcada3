"""The web_search tool through the real loop (ResponsesService + GatewayToolKit), with a
scripted upstream and either a local SearXNG-format server or a hand-written search fake."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.core.loop import LoopLimits
from app.core.service import ResponsesService
from app.core.tenancy import DEFAULT_TENANT
from app.errors import InvalidRequestError
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.protocol.requests import ParsedRequest
from app.settings import Settings
from app.tools.hosted import HostedToolPolicy, HostedTools
from app.tools.mcp.provider import McpToolProvider
from app.tools.toolkit import GatewayToolKit, NameTable
from app.tools.web_search.provider import WebSearchToolProvider, lower_web_search_items
from app.tools.web_search.results import SearchError, SearchLimits
from app.tools.web_search.searxng import SearxngSearchProvider
from tests.fakes import MemoryResponseStore, ScriptedUpstream, function_call, message
from tests.helpers import serve_in_thread
from tests.lifecycle import assert_lifecycle
from tests.search_servers import SearchServer, serve_search
from tests.tools.web_search.fakes import GOODNESS, TOMATO, WIKI, FakeSearch


def make_service(
    rounds: list[list[JsonObject]],
    search: Any,
    hosted: HostedToolPolicy = "drop",
    **limits: Any,
) -> tuple[ResponsesService, ScriptedUpstream, MemoryResponseStore]:
    upstream = ScriptedUpstream(rounds)
    store = MemoryResponseStore()
    kit = GatewayToolKit(
        [McpToolProvider(), WebSearchToolProvider(search, max_results=3)],
        hosted=HostedTools(hosted),
    )
    service = ResponsesService(upstream, store, toolkit=kit, limits=LoopLimits(**limits))
    return service, upstream, store


async def run_stream(service: ResponsesService, body: JsonObject) -> list[JsonObject]:
    return [
        e
        async for e in await service.open_stream(
            ParsedRequest.from_body({**body, "stream": True}, tenant=DEFAULT_TENANT), {}
        )
    ]


async def respond(service: ResponsesService, body: JsonObject, stream: bool) -> JsonObject:
    if stream:
        return assert_lifecycle(await run_stream(service, body))
    return await service.create(ParsedRequest.from_body(body, tenant=DEFAULT_TENANT), {})


def body(**extra: Any) -> JsonObject:
    return {"model": "m", "input": "tell me about potatoes", "tools": [{"type": "web_search"}]} | (
        extra
    )


def search_call(arguments: JsonObject | str, call_id: str = "call_ws") -> JsonObject:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return function_call("web_search", text, call_id=call_id)


WS_EVENTS = [
    "response.output_item.added",
    "response.web_search_call.in_progress",
    "response.web_search_call.searching",
    "response.web_search_call.completed",
    "response.output_item.done",
]


def ws_events(events: list[JsonObject]) -> list[str]:
    """The types of the events about web_search_call items."""
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


# ----------------------------------------------------------------------------- the loop


async def test_a_search_streams_its_own_lifecycle_and_the_model_reads_numbered_results() -> None:
    search = FakeSearch()
    rounds = [[search_call({"query": "potato"})], [message("Potatoes are tubers.")]]
    service, upstream, _ = make_service(rounds, search)
    events = await run_stream(service, body())
    final = assert_lifecycle(events)
    assert ws_events(events) == WS_EVENTS
    types = [e["type"] for e in events]
    assert not [t for t in types if "function_call" in t or "web_search_call_arguments" in t]
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["type"] == "web_search_call"
    assert added["item"]["status"] == "in_progress"
    call, answer = final["output"]
    assert call["id"].startswith("ws_") and call["type"] == "web_search_call"
    assert call["status"] == "completed"
    assert call["action"] == {"type": "search", "query": "potato"}  # no sources unless asked
    assert answer["content"][0]["text"] == "Potatoes are tubers."
    tool = upstream.requests[0]["tools"][0]
    assert tool["type"] == "function" and tool["name"] == "web_search"
    assert tool["parameters"]["properties"]["queries"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "Several related searches to run at once (instead of `query`).",
    }
    assert "current information" in tool["description"]
    fed = upstream.requests[1]["input"][-2:]
    assert [i["type"] for i in fed] == ["function_call", "function_call_output"]
    assert fed[1]["call_id"] == "call_ws"
    assert fed[1]["output"] == (
        'Results for "potato":\n\n'
        "[1] Potato - Wikipedia\nURL: https://en.wikipedia.org/wiki/Potato\n"
        "The potato is a starchy tuberous vegetable native to the Americas.\n\n"
        "[2] Potato Nutrition Facts\nURL: https://potatogoodness.com/nutrition/\n"
        "Published: 2025-03-01\nA medium potato has 110 calories.\n\n"
        "Cite the results you use as markdown links: [title](URL)."
    )
    assert search.calls == [
        {
            "query": "potato",
            "max_results": 3,
            "allowed_domains": None,
            "user_location": None,
            "context_size": "medium",
        }
    ]
    assert await service.get(final["id"], tenant=DEFAULT_TENANT) == final


@pytest.mark.parametrize("stream", [True, False])
async def test_sources_only_when_the_request_includes_them(stream: bool) -> None:
    rounds = [[search_call({"query": "potato"})], [message("ok")]]
    service, _, _ = make_service(rounds, FakeSearch())
    final = await respond(service, body(include=["web_search_call.action.sources"]), stream)
    assert final["output"][0]["action"] == {
        "type": "search",
        "query": "potato",
        "sources": [
            {"type": "url", "url": "https://en.wikipedia.org/wiki/Potato"},
            {"type": "url", "url": "https://potatogoodness.com/nutrition/"},
        ],
    }


async def test_batched_queries_run_together_and_their_sources_are_merged() -> None:
    search = FakeSearch({"potato": [WIKI, GOODNESS], "tomato": [TOMATO, WIKI]})
    rounds = [
        [search_call({"queries": ["potato", "tomato", "potato"]})],
        [message("Both are nightshades.")],
    ]
    service, upstream, _ = make_service(rounds, search)
    final = await service.create(
        ParsedRequest.from_body(
            body(include=["web_search_call.action.sources"]), tenant=DEFAULT_TENANT
        ),
        {},
    )
    action = final["output"][0]["action"]
    assert action["query"] == "potato" and action["queries"] == ["potato", "tomato"]
    assert [s["url"] for s in action["sources"]] == [WIKI.url, GOODNESS.url, TOMATO.url]
    text = upstream.requests[1]["input"][-1]["output"]
    assert 'Results for "potato":' in text and 'Results for "tomato":' in text
    assert "[3] Tomatoes: Nutrition Facts" in text
    assert text.count(WIKI.url) == 1  # listed once, under the first query
    assert [c["query"] for c in search.calls] == ["potato", "tomato"]


async def test_parallel_searches_in_one_round_each_get_their_item() -> None:
    search = FakeSearch({"potato": [WIKI], "tomato": [TOMATO]})
    rounds = [
        [
            search_call({"query": "potato"}, call_id="c1"),
            search_call({"query": "tomato"}, call_id="c2"),
        ],
        [message("done")],
    ]
    service, upstream, _ = make_service(rounds, search)
    events = await run_stream(service, body())
    final = assert_lifecycle(events)
    assert [i["action"]["query"] for i in final["output"][:2]] == ["potato", "tomato"]
    outputs = [i for i in upstream.requests[1]["input"] if i["type"] == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["c1", "c2"]
    assert WIKI.url in outputs[0]["output"] and TOMATO.url in outputs[1]["output"]


async def test_a_failing_search_is_told_to_the_model_and_the_loop_goes_on() -> None:
    search = FakeSearch({"potato": SearchError("Brave Search answered HTTP 429: Too many")})
    rounds = [[search_call({"query": "potato"})], [message("The search failed, sorry.")]]
    service, upstream, _ = make_service(rounds, search)
    events = await run_stream(service, body(include=["web_search_call.action.sources"]))
    final = assert_lifecycle(events)
    assert final["status"] == "completed"
    assert ws_events(events) == WS_EVENTS  # OpenAI has no failed event: completed, then done
    call = final["output"][0]
    assert call["status"] == "failed"
    assert call["action"] == {"type": "search", "query": "potato", "sources": []}
    fed = upstream.requests[1]["input"][-1]["output"]
    assert fed == "Error: the web search failed: Brave Search answered HTTP 429: Too many"
    assert final["output"][1]["content"][0]["text"] == "The search failed, sorry."


async def test_when_some_queries_fail_the_others_still_answer() -> None:
    search = FakeSearch({"potato": [WIKI], "tomato": SearchError("Tavily did not answer")})
    rounds = [[search_call({"queries": ["potato", "tomato"]})], [message("ok")]]
    service, upstream, _ = make_service(rounds, search)
    final = await service.create(ParsedRequest.from_body(body(), tenant=DEFAULT_TENANT), {})
    assert final["output"][0]["status"] == "completed"
    text = upstream.requests[1]["input"][-1]["output"]
    assert WIKI.url in text and 'The search for "tomato" failed: Tavily did not answer' in text


async def test_a_search_that_takes_too_long_is_an_error_for_the_model() -> None:
    rounds = [[search_call({"query": "potato"})], [message("too slow")]]
    service, upstream, _ = make_service(rounds, FakeSearch(delay=5), call_timeout=0.05)
    final = await service.create(ParsedRequest.from_body(body(), tenant=DEFAULT_TENANT), {})
    assert final["status"] == "completed"
    assert final["output"][0]["status"] == "failed"
    assert upstream.requests[1]["input"][-1]["output"] == (
        "Error: the web search timed out after 0.05 s"
    )


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ("{}", "Error: invalid web_search arguments: give a non-empty 'query' (or 'queries')"),
        ("[1, 2]", "Error: invalid web_search arguments: the arguments must be a JSON object"),
    ],
)
async def test_unusable_arguments_are_an_error_for_the_model(arguments: str, error: str) -> None:
    rounds = [[search_call(arguments)], [message("oops")]]
    service, upstream, _ = make_service(rounds, FakeSearch())
    final = await service.create(ParsedRequest.from_body(body(), tenant=DEFAULT_TENANT), {})
    assert final["output"][0]["status"] == "failed"
    assert final["output"][0]["action"] == {"type": "search", "query": ""}
    assert upstream.requests[1]["input"][-1]["output"].startswith(error)


async def test_the_tools_options_reach_the_search_and_the_model() -> None:
    search = FakeSearch()
    tool = {
        "type": "web_search",
        "filters": {"allowed_domains": ["https://en.wikipedia.org/", "potatogoodness.com"]},
        "user_location": {"type": "approximate", "country": "GB", "city": "London"},
        "search_context_size": "low",
    }
    rounds = [[search_call({"query": "potato"})], [message("ok")]]
    service, upstream, _ = make_service(rounds, search)
    await service.create(ParsedRequest.from_body(body(tools=[tool]), tenant=DEFAULT_TENANT), {})
    assert search.calls[0] == {
        "query": "potato",
        "max_results": 3,
        "allowed_domains": ["en.wikipedia.org", "potatogoodness.com"],
        "user_location": {"type": "approximate", "country": "GB", "city": "London"},
        "context_size": "low",
    }
    description = upstream.requests[0]["tools"][0]["description"]
    assert description.endswith("Results come only from: en.wikipedia.org, potatogoodness.com")


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "web_search", "filters": "wiki"}, "tools[1].filters"),
        (
            {"type": "web_search", "filters": {"allowed_domains": "wikipedia.org"}},
            "tools[1].filters.allowed_domains",
        ),
        ({"type": "web_search", "search_context_size": "huge"}, "tools[1].search_context_size"),
        ({"type": "web_search_preview", "user_location": "Paris"}, "tools[1].user_location"),
    ],
)
async def test_invalid_tool_fields_are_a_400_naming_them(tool: JsonObject, param: str) -> None:
    service, _, _ = make_service([], FakeSearch())
    tools = [{"type": "function", "name": "f"}, tool]
    with pytest.raises(InvalidRequestError) as raised:
        await service.create(ParsedRequest.from_body(body(tools=tools), tenant=DEFAULT_TENANT), {})
    assert raised.value.param == param


async def test_without_a_provider_a_rejected_web_search_tool_is_a_400() -> None:
    service, upstream, _ = make_service([], None, hosted="reject")
    with pytest.raises(InvalidRequestError) as raised:
        await service.create(
            ParsedRequest.from_body(
                body(tools=[{"type": "function", "name": "f"}, {"type": "web_search"}]),
                tenant=DEFAULT_TENANT,
            ),
            {},
        )
    assert raised.value.param == "tools[1]"
    assert "Web search is not configured" in raised.value.message
    assert upstream.requests == []


def test_without_a_provider_a_rejected_tool_is_a_400_envelope() -> None:
    app = create_app(Settings(hosted_tools="reject"), upstream=ScriptedUpstream([]))
    with serve_in_thread(app) as gateway:
        for tool_type in ("web_search", "web_search_preview", "web_search_2025_08_26"):
            reply = httpx.post(
                f"{gateway}/v1/responses",
                json={"model": "m", "input": "hi", "tools": [{"type": tool_type}]},
                timeout=30,
            )
            assert reply.status_code == 400, reply.text
            error = reply.json()["error"]
            assert error["type"] == "invalid_request_error"
            assert error["param"] == "tools[0]"
            assert "Web search is not configured" in error["message"]


async def test_a_client_function_named_web_search_keeps_its_name() -> None:
    tools = [
        {"type": "function", "name": "web_search", "parameters": {"type": "object"}},
        {"type": "web_search_preview"},
    ]
    rounds = [
        [search_call({"query": "potato"}, call_id="mine")],  # the client's own function
    ]
    service, upstream, _ = make_service(rounds, FakeSearch())
    final = await service.create(
        ParsedRequest.from_body(body(tools=tools), tenant=DEFAULT_TENANT), {}
    )
    names = [t["name"] for t in upstream.requests[0]["tools"]]
    assert names == ["web_search", "web_search_2"]
    assert [i["type"] for i in final["output"]] == ["function_call"]
    assert final["output"][0]["call_id"] == "mine"


async def test_tool_choice_of_the_web_search_type_names_its_function() -> None:
    rounds = [[search_call({"query": "potato"})], [message("ok")]]
    service, upstream, _ = make_service(rounds, FakeSearch())
    await service.create(
        ParsedRequest.from_body(
            body(
                tools=[{"type": "web_search_preview"}, {"type": "function", "name": "f"}],
                tool_choice={"type": "web_search_preview"},
            ),
            tenant=DEFAULT_TENANT,
        ),
        {},
    )
    assert upstream.requests[0]["tool_choice"] == {"type": "function", "name": "web_search"}
    assert upstream.requests[1]["tool_choice"] == "auto"


async def test_a_continuation_shows_the_model_its_earlier_search() -> None:
    rounds = [[search_call({"queries": ["potato"]})], [message("Potatoes are tubers.")]]
    service, upstream, _ = make_service(rounds, FakeSearch())
    first = await service.create(
        ParsedRequest.from_body(
            body(include=["web_search_call.action.sources"]), tenant=DEFAULT_TENANT
        ),
        {},
    )
    upstream.rounds.append([message("Yes.")])
    await service.create(
        ParsedRequest.from_body(
            {"model": "m", "previous_response_id": first["id"], "input": "really?"},
            tenant=DEFAULT_TENANT,
        ),
        {},
    )
    sent = upstream.requests[-1]
    assert "tools" not in sent
    kinds = [i["type"] for i in sent["input"]]
    assert kinds == ["message", "function_call", "function_call_output", "message", "message"]
    call, output = sent["input"][1:3]
    assert call["name"] == "web_search" and call["call_id"] == output["call_id"]
    assert json.loads(call["arguments"]) == {"query": "potato", "queries": ["potato"]}
    assert output["output"] == (
        "(The results of this search are not kept in the conversation.) Sources:\n"
        "[1] https://en.wikipedia.org/wiki/Potato\n[2] https://potatogoodness.com/nutrition/"
    )


@pytest.mark.parametrize("stream", [True, False])
async def test_an_answer_citing_the_results_gets_url_citations(stream: bool) -> None:
    text = f"See [Potato - Wikipedia]({WIKI.url}) and {GOODNESS.url}."
    rounds = [[search_call({"query": "potato"})], [message(text)]]
    service, _, _ = make_service(rounds, FakeSearch())
    if stream:
        events = await run_stream(service, body())
        final = assert_lifecycle(events)
        added = [e for e in events if e["type"] == "response.output_text.annotation.added"]
        assert [e["annotation_index"] for e in added] == [0, 1]
    else:
        final = await service.create(ParsedRequest.from_body(body(), tenant=DEFAULT_TENANT), {})
    annotations = final["output"][-1]["content"][0]["annotations"]
    link = f"[Potato - Wikipedia]({WIKI.url})"
    assert annotations == [
        {
            "type": "url_citation",
            "start_index": 4,
            "end_index": 4 + len(link),
            "url": WIKI.url,
            "title": "Potato - Wikipedia",
        },
        {
            "type": "url_citation",
            "start_index": text.index(GOODNESS.url),
            "end_index": text.index(GOODNESS.url) + len(GOODNESS.url),
            "url": GOODNESS.url,
            "title": "Potato Nutrition Facts",
        },
    ]
    assert await service.get(final["id"], tenant=DEFAULT_TENANT) == final


# ----------------------------------------------------------------------------- a real backend


@pytest.fixture(scope="module")
def searxng() -> Iterator[SearchServer]:
    with serve_search("searxng") as server:
        yield server


async def test_with_a_searxng_backend(searxng: SearchServer) -> None:
    searxng.reset()
    provider = SearxngSearchProvider(base_url=searxng.base_url, limits=SearchLimits())
    tool = {"type": "web_search", "filters": {"allowed_domains": ["wikipedia.org"]}}
    rounds = [[search_call({"query": "potato"})], [message("ok")]]
    try:
        service, upstream, _ = make_service(rounds, provider)
        final = await service.create(
            ParsedRequest.from_body(
                body(tools=[tool], include=["web_search_call.action.sources"]),
                tenant=DEFAULT_TENANT,
            ),
            {},
        )
    finally:
        await provider.aclose()
    assert final["output"][0]["action"]["sources"] == [
        {"type": "url", "url": "https://en.wikipedia.org/wiki/Potato"}
    ]
    assert [r.params["q"] for r in searxng.requests] == ["potato site:wikipedia.org"]
    assert "[1] Potato - Wikipedia" in upstream.requests[1]["input"][-1]["output"]


async def test_a_searxng_backend_that_fails(searxng: SearchServer) -> None:
    searxng.reset()
    searxng.mode = "error"
    provider = SearxngSearchProvider(base_url=searxng.base_url)
    rounds = [[search_call({"query": "potato"})], [message("sorry")]]
    try:
        service, upstream, _ = make_service(rounds, provider)
        final = await service.create(ParsedRequest.from_body(body(), tenant=DEFAULT_TENANT), {})
    finally:
        await provider.aclose()
    assert final["output"][0]["status"] == "failed"
    assert upstream.requests[1]["input"][-1]["output"] == (
        "Error: the web search failed: SearXNG answered HTTP 500: Internal Server Error"
    )


# ----------------------------------------------------------------------------- lowering


def test_lowering_history_items() -> None:
    items: list[JsonObject] = [
        {"type": "message", "role": "user", "content": "hi"},
        {
            "id": "ws_1",
            "type": "web_search_call",
            "status": "failed",
            "action": {"type": "search", "query": "q"},
        },
        {
            "id": "ws_2",
            "type": "web_search_call",
            "status": "completed",
            "action": {"type": "open_page", "url": "https://a.example/"},
        },
    ]
    lowered = lower_web_search_items(items, "web_search")
    assert [i["type"] for i in lowered] == [
        "message",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
    ]
    assert lowered[2]["output"] == "Error: this web search did not complete."
    assert json.loads(lowered[3]["arguments"]) == {"url": "https://a.example/"}
    provider = WebSearchToolProvider(None)
    names = NameTable(["web_search"])
    assert provider.lower(items, names)[1]["name"] == "web_search_2"
    assert provider.lower(items[:1], NameTable()) == items[:1]
