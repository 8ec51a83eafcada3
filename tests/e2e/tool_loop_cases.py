"""What the tool-loop scenarios share between their cassettes and their tests.

``cassettes/tool-loop/generate.py`` writes the scripted upstream recordings from these
constants, and ``tests/e2e/test_tool_loop.py`` sends the same client requests, so the request
bodies recorded in the cassettes are the ones the gateway sends for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CASSETTES = ROOT / "cassettes" / "tool-loop"

MODEL = "Qwen/Qwen3.5-35B-A3B-FP8"
COUNTER = "counter"
EVERYTHING = "everything"

# The client's prompts, one per scenario.
PROMPTS = {
    "multi-round": (
        "Use the counter tools: add 20 and 22 with sum, then pass the result to echo, "
        "and tell me what echo returned."
    ),
    "parallel": "Call sum with 20 and 22 and echo with 'hello' at the same time, then report both.",
    "failing-tool": "Call the fail tool with the message 'boom' and tell me what happened.",
    "timeout": "Call sleep with 5 seconds, then tell me whether it finished.",
    "round-cap": "Keep adding 1 to 1 with the sum tool until I tell you to stop.",
    "max-tool-calls": "Add 1 and 2 and add 3 and 4 with sum, in parallel, and report both.",
    "mixed-round": "Add 20 and 22 with the counter, and get the weather in Paris.",
    "approval-approve": "Add 20 and 22 with the counter's sum tool.",
    "approval-decline": "Add 20 and 22 with the counter's sum tool.",
    "continuation": "Add 20 and 22 with the counter's sum tool.",
    "continuation-2": "Now echo that number back with the echo tool.",
    "everything-echo": "Call the echo tool with the message 'hello from respgate'.",
    "mcp-headers": "Ask the counter server who I am with whoami.",
    "tool-choice-required": "Add 20 and 22 with the counter, then tell me the result.",
    "tool-choice-named": "Add 20 and 22 with the counter, then tell me the result.",
}

# The tools each scenario lets the counter server offer (``None``: all of them).
ALLOWED = {
    "multi-round": ["sum", "echo"],
    "parallel": ["sum", "echo"],
    "failing-tool": ["fail"],
    "timeout": ["sleep"],
    "round-cap": ["sum"],
    "max-tool-calls": ["sum"],
    "mixed-round": ["sum"],
    "approval-approve": ["sum"],
    "approval-decline": ["sum"],
    "continuation": ["sum", "echo"],
    "mcp-headers": ["whoami"],
    "tool-choice-required": ["sum", "echo"],
    "tool-choice-named": ["sum", "echo"],
}

# A forced tool_choice: the client's, and what the first round sends upstream for it. The
# rounds after the gateway ran the forced calls send "auto" (else vLLM, which decodes a forced
# choice with structured output, could only ever call tools again).
TOOL_CHOICES: dict[str, tuple[Any, Any]] = {
    "tool-choice-required": ("required", "required"),
    "tool-choice-named": (
        {"type": "mcp", "server_label": COUNTER, "name": "sum"},
        {"type": "function", "name": "mcp__counter__sum"},
    ),
}

DECLINE_REASON = "Not now, please."
DECLINED_TEXT = f"The user declined this tool call. Reason: {DECLINE_REASON}"
WEATHER_OUTPUT = '{"temperature_c": 18, "conditions": "sunny"}'
TIMEOUT_SECONDS = 0.5
# What the model reads for the failing and the timed-out call (the gateway's error texts).
FAIL_OUTPUT = "Error: Error executing tool fail: boom"
TIMEOUT_OUTPUT = f"Error: MCP call to sleep timed out after {TIMEOUT_SECONDS:g}s"
MAX_ROUNDS = 2

# The credentials a client gives an MCP tool: sent to the server, never upstream, never stored.
MCP_AUTHORIZATION = "tok-secret-123"
MCP_HEADERS = {"X-Test": "header-secret-456"}
WHOAMI_OUTPUT = json.dumps(
    {"authorization": f"Bearer {MCP_AUTHORIZATION}", "x-test": MCP_HEADERS["X-Test"]}
)

GET_WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string", "description": "City name"}},
        "required": ["location"],
        "additionalProperties": False,
    },
    "strict": True,
}


def counter_tool(
    url: str, scenario: str, require_approval: Any = "never", **fields: Any
) -> dict[str, Any]:
    """The client's ``mcp`` tool for the counter server in ``scenario``; ``fields`` adds
    more of its fields (``headers``, ``authorization``).

    ``require_approval=None`` leaves the field out (OpenAI's default, "always")."""
    tool: dict[str, Any] = {
        "type": "mcp",
        "server_label": COUNTER,
        "server_url": url,
        "allowed_tools": ALLOWED[scenario],
        **fields,
    }
    if require_approval is not None:
        tool["require_approval"] = require_approval
    return tool


def everything_tool(url: str) -> dict[str, Any]:
    return {
        "type": "mcp",
        "server_label": EVERYTHING,
        "server_url": url,
        "require_approval": "never",
    }
