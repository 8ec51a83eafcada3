"""Messages request -> Responses request: each field and block kind, and the 400s."""

from __future__ import annotations

from typing import Any

import pytest

from app.errors import InvalidRequestError
from app.frontends.anthropic.requests import to_responses

TOOL = {"name": "run", "input_schema": {"type": "object", "properties": {}}}


def body(**fields: Any) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
        **fields,
    }


def test_the_plain_fields() -> None:
    request = to_responses(
        body(
            system="Be kind.",
            temperature=0.2,
            top_p=0.9,
            top_k=5,
            stop_sequences=["END"],
            stream=True,
            metadata={"user_id": "u"},
            cache_control={"type": "ephemeral"},
            context_management={"edits": []},
        )
    )
    assert request.stream is True
    assert request.stop_sequences == ("END",)
    assert request.body == {
        "model": "claude-x",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
        ],
        "instructions": "Be kind.",
        "max_output_tokens": 64,
        "store": False,
        "stream": True,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 5,
        "stop": ["END"],
    }


def test_system_blocks_and_system_role_messages() -> None:
    request = to_responses(
        body(
            system=[{"type": "text", "text": "One."}, {"type": "text", "text": "Two."}],
            messages=[
                {"role": "system", "content": [{"type": "text", "text": "Mid."}]},
                {"role": "user", "content": "hi"},
            ],
        )
    )
    assert request.body["instructions"] == "One.\n\nTwo."
    assert request.body["input"][0] == {
        "type": "message",
        "role": "system",
        "content": [{"type": "input_text", "text": "Mid."}],
    }


def test_images_base64_and_url() -> None:
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
        {"type": "text", "text": "What is this?", "cache_control": {"type": "ephemeral"}},
    ]
    request = to_responses(body(messages=[{"role": "user", "content": content}]))
    assert request.body["input"][0]["content"] == [
        {"type": "input_image", "image_url": "data:image/png;base64,AAA"},
        {"type": "input_image", "image_url": "https://x/y.png"},
        {"type": "input_text", "text": "What is this?"},
    ]


def test_assistant_turn_with_thinking_text_and_tool_use_then_results() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "xx"},
                {"type": "thinking", "thinking": "", "signature": ""},
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
                {"type": "text", "text": "Running."},
                {"type": "tool_use", "id": "toolu_1", "name": "run", "input": {"a": 1}},
                {"type": "tool_use", "id": "toolu_2", "name": "run", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "is_error": True,
                    "content": [{"type": "text", "text": "boom"}],
                },
                {"type": "text", "text": "continue"},
            ],
        },
    ]
    items = to_responses(body(messages=messages)).body["input"]
    assert items[1:] == [
        {
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "hmm"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Running."}],
        },
        {"type": "function_call", "call_id": "toolu_1", "name": "run", "arguments": '{"a":1}'},
        {"type": "function_call", "call_id": "toolu_2", "name": "run", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "ok"},
        {"type": "function_call_output", "call_id": "toolu_2", "output": "Error: boom"},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "continue"}],
        },
    ]


def test_tool_result_with_tool_references_and_an_image() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://x/i.png"}}
    result = {
        "type": "tool_result",
        "tool_use_id": "t",
        "content": [{"type": "tool_reference", "tool_name": "Read"}, image],
    }
    (_, output) = to_responses(
        body(messages=[{"role": "user", "content": "a"}, {"role": "user", "content": [result]}])
    ).body["input"]
    assert output["output"] == [
        {"type": "input_text", "text": "Tool loaded: Read"},
        {"type": "input_image", "image_url": "https://x/i.png"},
    ]


def test_tools_and_tool_choice() -> None:
    deferred = {**TOOL, "name": "later", "defer_loading": True, "description": "Later."}
    request = to_responses(
        body(
            tools=[
                TOOL,
                deferred,
                {"type": "web_search_20250305", "name": "web_search"},
                {"type": "tool_search_tool_regex_20251119", "name": "tool_search"},
            ],
            tool_choice={"type": "tool", "name": "run", "disable_parallel_tool_use": True},
        )
    )
    assert request.body["tools"] == [
        {"type": "function", "name": "run", "parameters": TOOL["input_schema"]},
        {
            "type": "function",
            "name": "later",
            "parameters": TOOL["input_schema"],
            "description": "Later.",
        },
        {"type": "web_search"},
    ]
    assert request.body["tool_choice"] == {"type": "function", "name": "run"}
    assert request.body["parallel_tool_calls"] is False


def test_a_deferred_tool_is_offered_once_a_tool_search_found_it() -> None:
    deferred = {**TOOL, "name": "later", "defer_loading": True}
    search = {"name": "ToolSearch", "input_schema": TOOL["input_schema"]}
    found = {
        "type": "tool_result",
        "tool_use_id": "toolu_s",
        "content": [{"type": "tool_reference", "tool_name": "later"}],
    }
    messages: list[Any] = [
        {"role": "user", "content": "find a tool"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_s", "name": "ToolSearch", "input": {}}],
        },
    ]
    before = to_responses(body(messages=messages, tools=[search, deferred])).body["tools"]
    assert [tool["name"] for tool in before] == ["ToolSearch"]
    messages.append({"role": "user", "content": [found]})
    after = to_responses(body(messages=messages, tools=[search, deferred])).body["tools"]
    assert [tool["name"] for tool in after] == ["ToolSearch", "later"]


@pytest.mark.parametrize(
    ("choice", "expected"), [("auto", "auto"), ("any", "required"), ("none", "none")]
)
def test_tool_choice_modes(choice: str, expected: str) -> None:
    request = to_responses(body(tools=[TOOL], tool_choice={"type": choice}))
    assert request.body["tool_choice"] == expected


@pytest.mark.parametrize(
    ("fields", "reasoning"),
    [
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, {"effort": "low"}),
        ({"thinking": {"type": "enabled", "budget_tokens": 10000}}, {"effort": "medium"}),
        ({"thinking": {"type": "enabled", "budget_tokens": 32000}}, {"effort": "high"}),
        ({"thinking": {"type": "adaptive"}}, None),
        ({"thinking": {"type": "disabled"}}, None),
        (
            {"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}},
            {"effort": "high"},
        ),
        ({"output_config": {"effort": "medium"}}, {"effort": "medium"}),
    ],
)
def test_thinking_and_effort(fields: dict[str, Any], reasoning: Any) -> None:
    assert to_responses(body(**fields)).body.get("reasoning") == reasoning


def test_mcp_servers_become_mcp_tools() -> None:
    servers = [
        {
            "type": "url",
            "name": "docs",
            "url": "https://mcp.example/sse",
            "authorization_token": "tok",
            "tool_configuration": {"allowed_tools": ["search"]},
        },
        {
            "type": "url",
            "name": "off",
            "url": "https://x",
            "tool_configuration": {"enabled": False},
        },
    ]
    assert to_responses(body(mcp_servers=servers)).body["tools"] == [
        {
            "type": "mcp",
            "server_label": "docs",
            "server_url": "https://mcp.example/sse",
            "require_approval": "never",
            "authorization": "tok",
            "allowed_tools": ["search"],
        }
    ]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"model": None}, "model"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": None}, "max_tokens"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": [{"text": "x"}]}]}, "messages[0].content[0]"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            "messages[0].content[0].source.type",
        ),
        ({"system": 3}, "system"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
        ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
        ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools[0].type"),
        ({"tools": [{"name": "x"}]}, "tools[0]"),
        ({"stop_sequences": "END"}, "stop_sequences"),
        ({"temperature": "hot"}, "temperature"),
        ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
    ],
)
def test_bad_requests_name_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        to_responses(body(**fields))
    assert caught.value.param == param
    assert caught.value.status_code == 400


@pytest.mark.parametrize(
    ("value", "says"),
    [(None, "Field required"), ("x", "not 'x'"), (True, "not True"), (0, "not 0")],
)
def test_max_tokens_says_whether_it_is_missing_or_malformed(value: Any, says: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        to_responses(body(max_tokens=value))
    assert says in caught.value.message


def test_documents() -> None:
    content = [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "abc"}},
        {
            "type": "document",
            "title": "spec.pdf",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
        },
        {"type": "document", "source": {"type": "url", "url": "https://x/d.pdf"}},
    ]
    request = to_responses(body(messages=[{"role": "user", "content": content}]))
    assert request.body["input"][0]["content"] == [
        {"type": "input_text", "text": "abc"},
        {
            "type": "input_file",
            "filename": "spec.pdf",
            "file_data": "data:application/pdf;base64,JVBE",
        },
        {"type": "input_file", "file_url": "https://x/d.pdf"},
    ]
