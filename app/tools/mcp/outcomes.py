"""What an MCP server answers: ``McpToolInfo`` (one listed tool) and ``McpCallOutcome`` (one
call's text output or its OpenAI ``McpToolCallError`` object), made from the SDK's types."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import mcp_types

from app.protocol.json_types import JsonObject


@dataclass(frozen=True, slots=True)
class McpToolInfo:
    """One tool as the server listed it."""

    name: str
    description: str | None
    input_schema: JsonObject
    annotations: JsonObject | None

    @classmethod
    def from_tool(cls, tool: mcp_types.Tool) -> McpToolInfo:
        annotations = (
            tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
            if tool.annotations is not None
            else None
        )
        return cls(
            name=tool.name,
            description=tool.description,
            input_schema=copy.deepcopy(tool.input_schema),
            annotations=annotations,
        )

    def to_item_tool(self) -> JsonObject:
        """This tool as an entry of OpenAI's ``mcp_list_tools`` item (schema verbatim)."""
        return {
            "name": self.name,
            "input_schema": copy.deepcopy(self.input_schema),
            "description": self.description,
            "annotations": copy.deepcopy(self.annotations),
        }


@dataclass(frozen=True, slots=True)
class McpCallOutcome:
    """The result of one tool call: exactly one of ``output`` and ``error`` is set."""

    output: str | None
    error: JsonObject | None

    @classmethod
    def success(cls, output: str) -> McpCallOutcome:
        return cls(output=output, error=None)

    @classmethod
    def failure(cls, error: JsonObject) -> McpCallOutcome:
        return cls(output=None, error=error)


def _dump(model: Any) -> JsonObject:
    dumped: JsonObject = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def _to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def outcome_from_result(result: mcp_types.CallToolResult) -> McpCallOutcome:
    """A ``CallToolResult`` as the text output the model sees, or an execution error."""
    if result.is_error:
        return McpCallOutcome.failure(
            {
                "type": "mcp_tool_execution_error",
                "content": [_dump(block) for block in result.content],
            }
        )
    if not result.content and result.structured_content is not None:
        return McpCallOutcome.success(_to_json(result.structured_content))
    lines = [
        block.text if isinstance(block, mcp_types.TextContent) else _to_json(_dump(block))
        for block in result.content
    ]
    return McpCallOutcome.success("\n".join(lines))
