"""Listed tools and call results as the gateway keeps them (no server needed)."""

from __future__ import annotations

import json

import mcp_types

from app.tools.mcp.outcomes import McpCallOutcome, McpToolInfo, outcome_from_result


def test_tool_info_keeps_annotations_as_sent() -> None:
    tool = mcp_types.Tool.model_validate(
        {
            "name": "search",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": True, "title": None, "openWorldHint": False},
        }
    )
    info = McpToolInfo.from_tool(tool)
    assert info.annotations == {"readOnlyHint": True, "openWorldHint": False}
    assert info.description is None
    assert info.to_item_tool()["annotations"] == {"readOnlyHint": True, "openWorldHint": False}


def test_outcome_from_result_joins_blocks() -> None:
    result = mcp_types.CallToolResult.model_validate(
        {
            "content": [
                {"type": "text", "text": "first"},
                {"type": "image", "data": "aGk=", "mimeType": "image/png"},
                {"type": "text", "text": "last"},
            ]
        }
    )
    outcome = outcome_from_result(result)
    assert outcome.error is None
    assert outcome.output is not None
    first, image, last = outcome.output.split("\n")
    assert (first, last) == ("first", "last")
    assert json.loads(image) == {"type": "image", "data": "aGk=", "mimeType": "image/png"}


def test_outcome_from_result_structured_only_and_empty() -> None:
    structured = mcp_types.CallToolResult.model_validate(
        {"content": [], "structuredContent": {"temperature": 21.5, "unit": "C"}}
    )
    output = outcome_from_result(structured).output
    assert output is not None
    assert json.loads(output) == {"temperature": 21.5, "unit": "C"}
    empty = mcp_types.CallToolResult.model_validate({"content": []})
    assert outcome_from_result(empty) == McpCallOutcome(output="", error=None)


def test_outcome_from_result_error_keeps_blocks() -> None:
    result = mcp_types.CallToolResult.model_validate(
        {
            "isError": True,
            "content": [
                {"type": "text", "text": "it broke"},
                {"type": "resource_link", "uri": "file:///log", "name": "log"},
            ],
        }
    )
    assert outcome_from_result(result) == McpCallOutcome(
        output=None,
        error={
            "type": "mcp_tool_execution_error",
            "content": [
                {"type": "text", "text": "it broke"},
                {"type": "resource_link", "uri": "file:///log", "name": "log"},
            ],
        },
    )
