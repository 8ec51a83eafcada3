"""The web search executor alone: its arguments, its run, the results text the model reads."""

from __future__ import annotations

import pytest

from app.core.tools import GatewayCall
from app.tools.web_search.arguments import SearchRequest, parse_arguments
from app.tools.web_search.executor import (
    PRESENTATION,
    WebSearchExecutor,
    WebSearchOptions,
    format_results,
)
from app.tools.web_search.provider import WebSearchToolProvider
from app.tools.web_search.results import SearchError, SearchResult
from tests.tools.web_search.fakes import GOODNESS, WIKI, FakeSearch


def test_arguments() -> None:
    assert parse_arguments('{"query": " potato "}') == SearchRequest(["potato"], False)
    assert parse_arguments('{"queries": ["a", "b", "a", ""]}') == SearchRequest(["a", "b"], True)
    assert parse_arguments('{"query": "a", "queries": ["b", "a"]}') == SearchRequest(
        ["a", "b"], True
    )
    assert parse_arguments('{"queries": "a"}') == SearchRequest(["a"], True)
    assert parse_arguments("potato prices") == SearchRequest(["potato prices"], False)
    assert parse_arguments('"potato"') == SearchRequest(["potato"], False)
    with pytest.raises(ValueError):
        parse_arguments('{"query": ""}')
    assert SearchRequest(["a", "b"], True).action() == {
        "type": "search",
        "query": "a",
        "queries": ["a", "b"],
    }


async def test_the_executor_alone() -> None:
    executor = WebSearchExecutor(FakeSearch(), WebSearchOptions(include_sources=True))
    assert executor.presentation is PRESENTATION
    call = GatewayCall(item_id="", call_id="c", name="web_search", arguments="", output_index=0)
    assert executor.open_item(call)["action"] == {"type": "search"}
    assert executor.approval_item(call) is None
    call.item_id = "ws_1"
    call.arguments = '{"query": "potato"}'
    assert executor.open_item(call) == {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "in_progress",
        "action": {"type": "search", "query": "potato"},
    }
    result = await executor.run(call, timeout=5)
    assert result.ok and result.item["status"] == "completed"
    assert result.preview == "2 results for potato"
    assert executor.found == [WIKI, GOODNESS]
    cut = executor.error_result(call, "stopped", status="incomplete")
    assert cut.item["status"] == "incomplete" and cut.model_output == "Error: stopped"
    unknown = WebSearchToolProvider(FakeSearch()).unknown_executor("web_search__other")
    failed = await unknown.run(call, timeout=5)
    assert not failed.ok and "not available" in failed.model_output


def test_results_text_for_the_model() -> None:
    page = SearchResult("P", "https://p.example/", "s " * 400, page_text="Full text.")
    text = format_results(
        [("a", [page]), ("b", []), ("c", SearchError("boom")), ("d", [page])],
        context_size="low",
        dropped=2,
    )
    assert text.startswith('Results for "a":\n\n[1] P\nURL: https://p.example/\n')
    assert "Page text:\nFull text." in text
    assert len(text.split("\n")[4]) <= 300  # the snippet, cut for a low context size
    assert 'No results for "b".' in text
    assert 'The search for "c" failed: boom' in text
    assert 'The results for "d" are the ones listed above.' in text
    assert "(Only the first 5 queries were run; 2 skipped.)" in text
    assert format_results([("x", [])], context_size="medium") == 'No results for "x".'
