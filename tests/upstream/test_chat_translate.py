"""Responses request -> chat-completions request, and chat.completion -> Response."""

from __future__ import annotations

from typing import Any

import pytest

from app.errors import InvalidRequestError, UpstreamHTTPError, UpstreamProtocolError
from app.protocol.json_types import JsonObject
from app.upstream.chat_request import ChatOptions, to_chat_request
from app.upstream.chat_response import to_response

DEFAULT = ChatOptions()


def chat(body: JsonObject, options: ChatOptions = DEFAULT, *, stream: bool = False) -> JsonObject:
    return to_chat_request(body, options, stream=stream)


def messages_of(body: JsonObject, options: ChatOptions = DEFAULT) -> list[JsonObject]:
    result: list[JsonObject] = chat({"model": "m", **body}, options)["messages"]
    return result


def user(text: str) -> JsonObject:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def assistant(text: str) -> JsonObject:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call(name: str, arguments: str, call_id: str) -> JsonObject:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def reasoning(text: str) -> JsonObject:
    return {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


# =========================================================================== request: basics


def test_string_input_with_instructions_and_sampling() -> None:
    body = {
        "model": "qwen3",
        "instructions": "Be brief.",
        "input": "Hi",
        "temperature": 0.2,
        "top_p": 0.9,
        "max_output_tokens": 64,
        "parallel_tool_calls": False,  # no tools: not sent (strict servers reject it)
    }
    assert chat(body) == {
        "model": "qwen3",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        "max_tokens": 64,
        "temperature": 0.2,
        "top_p": 0.9,
        "stream": False,
    }


def test_stream_flags_follow_options() -> None:
    body = {"model": "m", "input": "Hi"}
    streamed = chat(body, stream=True)
    assert streamed["stream"] is True
    assert streamed["stream_options"] == {"include_usage": True}
    quiet = chat(body, ChatOptions(stream_usage=False), stream=True)
    assert quiet["stream"] is True
    assert "stream_options" not in quiet
    assert "stream_options" not in chat(body)


def test_stateful_and_unknown_fields_never_go_upstream() -> None:
    body = {
        "model": "m",
        "input": "Hi",
        "store": True,
        "metadata": {"a": "b"},
        "include": ["reasoning.encrypted_content"],
        "previous_response_id": "resp_1",
        "conversation": "conv_1",
        "truncation": "auto",
        "service_tier": "auto",
        "background": False,
        "prompt_cache_key": "k",
        "max_tool_calls": 3,
        "text": {"format": {"type": "text"}, "verbosity": "low"},
        "something_new": 1,
    }
    assert set(chat(body)) == {"model", "messages", "stream"}


def test_vendor_sampling_extras_pass_through() -> None:
    extras = {
        "top_k": 20,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.1,
        "seed": 7,
        "stop": ["</s>"],
        "logit_bias": {"42": -100},
        "chat_template_kwargs": {"enable_thinking": False},
    }
    out = chat({"model": "m", "input": "Hi", **extras, "top_logprobs": None})
    for key, value in extras.items():
        assert out[key] == value
    assert "top_logprobs" not in out


def test_reasoning_effort_and_user() -> None:
    body = {"model": "m", "input": "Hi", "reasoning": {"effort": "low", "summary": "auto"}}
    assert chat(body)["reasoning_effort"] == "low"
    assert "reasoning_effort" not in chat(body, ChatOptions(send_reasoning_effort=False))
    assert "reasoning_effort" not in chat({**body, "reasoning": {"summary": "auto"}})
    assert chat({**body, "user": "u1", "safety_identifier": "s1"})["user"] == "u1"
    assert chat({**body, "safety_identifier": "s1"})["user"] == "s1"
    assert "user" not in chat(body)


# =========================================================================== request: messages


def test_roles_and_text_parts() -> None:
    items = [
        {"role": "developer", "content": "Rules."},  # no type: still a message
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "S"}]},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "Hello ", "annotations": []},
                {"type": "refusal", "refusal": "no."},
            ],
        },
    ]
    assert messages_of({"input": items}) == [
        {"role": "system", "content": "Rules."},
        {"role": "system", "content": "S"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "Hello no."},
    ]


def test_instructions_come_before_input_messages() -> None:
    msgs = messages_of({"instructions": "I", "input": [user("u")]})
    assert msgs == [{"role": "system", "content": "I"}, {"role": "user", "content": "u"}]


def test_images_make_a_parts_list() -> None:
    item = {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
            {"type": "input_image", "image_url": "https://x.test/a.png"},
        ],
    }
    assert messages_of({"input": [item]}) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"},
                },
                {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
            ],
        }
    ]


@pytest.mark.parametrize(
    "part",
    [
        {"type": "input_image", "file_id": "file_1", "detail": "auto"},
        {"type": "input_file", "file_id": "file_1"},
        {"type": "input_file", "file_data": "data:application/pdf;base64,AA", "filename": "a"},
    ],
    ids=["image-file-id", "file-id", "file-data"],
)
def test_files_are_refused(part: JsonObject) -> None:
    item = {"type": "message", "role": "user", "content": [part]}
    with pytest.raises(InvalidRequestError) as info:
        chat({"model": "m", "input": [item]})
    assert info.value.status_code == 400
    assert info.value.param == "input"
    assert "chat-completions upstream cannot take" in info.value.message


def test_function_calls_merge_into_the_preceding_assistant_text() -> None:
    items = [
        user("weather?"),
        assistant("Let me check."),
        call("get_weather", '{"city":"Paris"}', "call_1"),
        call("get_time", '{"tz":"CET"}', "call_2"),
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": "noon"},
        assistant("Sunny at noon."),
    ]
    assert messages_of({"input": items}) == [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": '{"tz":"CET"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
        {"role": "assistant", "content": "Sunny at noon."},
    ]


def test_calls_after_tool_results_start_a_new_assistant_message() -> None:
    items = [
        user("go"),
        call("a", "{}", "call_1"),
        {"type": "function_call_output", "call_id": "call_1", "output": "1"},
        call("b", "", "call_2"),
    ]
    msgs = messages_of({"input": items})
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "a", "arguments": "{}"}}
        ],
    }
    assert msgs[3]["tool_calls"][0]["function"] == {"name": "b", "arguments": "{}"}


def test_function_call_output_forms() -> None:
    items = [
        call("f", "{}", "c1"),
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [
                {"type": "input_text", "text": "line 1"},
                {"type": "input_image", "image_url": "https://x.test/i.png"},
                {"type": "input_text", "text": "line 2"},
            ],
        },
        call("f", '{"x":1}', "c2"),
        {"type": "function_call_output", "call_id": "c2", "output": {"ok": True}},
    ]
    msgs = messages_of({"input": items})
    assert msgs[1] == {"role": "tool", "tool_call_id": "c1", "content": "line 1\nline 2"}
    assert msgs[3] == {"role": "tool", "tool_call_id": "c2", "content": '{"ok":true}'}


def test_object_arguments_in_history_become_json_text() -> None:
    item = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": {"a": 1}}
    msgs = messages_of({"input": [item]})
    assert msgs[0]["tool_calls"][0]["function"]["arguments"] == '{"a":1}'


def test_items_a_chat_server_cannot_express_are_dropped() -> None:
    items = [
        user("hi"),
        {"type": "item_reference", "id": "msg_1"},
        {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "s", "tools": []},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "custom_tool_call", "call_id": "c", "name": "x", "input": "y"},
        {"type": "message", "role": "critic", "content": "?"},
        "not an item",
        assistant("hello"),
    ]
    assert messages_of({"input": items}) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]


# =========================================================================== request: reasoning


def reasoning_history() -> list[JsonObject]:
    return [
        user("q1"),
        reasoning("think 1"),
        assistant("a1"),
        user("q2"),
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "sum A"}],
            "content": None,
        },
        {"type": "reasoning", "summary": [], "encrypted_content": "opaque"},
        call("f", "{}", "c1"),
        {"type": "function_call_output", "call_id": "c1", "output": "r"},
        reasoning("think 3"),
        assistant("a2"),
        call("g", "{}", "c2"),
    ]


def test_reasoning_history_is_dropped_by_default() -> None:
    msgs = messages_of({"input": reasoning_history()})
    assert all("reasoning_content" not in m and "reasoning" not in m for m in msgs)
    assert [m["role"] for m in msgs] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_history_goes_on_the_next_assistant_message(field: Any) -> None:
    msgs = messages_of({"input": reasoning_history()}, ChatOptions(reasoning_history=field))
    assistants = [m for m in msgs if m["role"] == "assistant"]
    assert [m.get(field) for m in assistants] == ["think 1", "sum A", "think 3"]
    assert assistants[1]["tool_calls"][0]["id"] == "c1"
    # The call after "a2" merged into its message, which carries that turn's reasoning.
    assert assistants[2]["content"] == "a2"
    assert [c["id"] for c in assistants[2]["tool_calls"]] == ["c2"]
    other = "reasoning" if field == "reasoning_content" else "reasoning_content"
    assert all(other not in m for m in msgs)


def test_reasoning_between_text_and_call_joins_the_same_turn() -> None:
    items = [user("q"), assistant("a"), reasoning("then call"), call("f", "{}", "c1")]
    msgs = messages_of({"input": items}, ChatOptions(reasoning_history="reasoning_content"))
    assert msgs[1] == {
        "role": "assistant",
        "content": "a",
        "reasoning_content": "then call",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }


# =========================================================================== request: tools


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}
TIME = {"type": "function", "name": "get_time", "parameters": None, "strict": None}


def test_function_tools() -> None:
    out = chat({"model": "m", "input": "x", "tools": [WEATHER, TIME], "parallel_tool_calls": False})
    assert out["parallel_tool_calls"] is False
    assert out["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": WEATHER["parameters"],
                "strict": True,
            },
        },
        {"type": "function", "function": {"name": "get_time"}},
    ]
    assert "tool_choice" not in out


@pytest.mark.parametrize("kind", ["web_search", "mcp", "file_search", "custom", "shell"])
def test_other_tool_types_are_refused(kind: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        chat({"model": "m", "input": "x", "tools": [WEATHER, {"type": kind}]})
    assert info.value.status_code == 400
    assert info.value.param == "tools"
    assert repr(kind) in info.value.message


@pytest.mark.parametrize("mode", ["auto", "none", "required"])
def test_tool_choice_modes(mode: str) -> None:
    out = chat({"model": "m", "input": "x", "tools": [WEATHER], "tool_choice": mode})
    assert out["tool_choice"] == mode


def test_tool_choice_named_function() -> None:
    choice = {"type": "function", "name": "get_time"}
    out = chat({"model": "m", "input": "x", "tools": [WEATHER, TIME], "tool_choice": choice})
    assert out["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}
    assert len(out["tools"]) == 2


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_tool_choice_allowed_tools_filters_the_tools(mode: str) -> None:
    choice = {
        "type": "allowed_tools",
        "mode": mode,
        "tools": [{"type": "function", "name": "get_time"}],
    }
    out = chat({"model": "m", "input": "x", "tools": [WEATHER, TIME], "tool_choice": choice})
    assert out["tool_choice"] == mode
    assert [t["function"]["name"] for t in out["tools"]] == ["get_time"]


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "web_search"},
        {"type": "mcp", "server_label": "s"},
        {"type": "custom", "name": "x"},
        {"type": "allowed_tools", "mode": "none", "tools": []},
        {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "mcp", "server_label": "s"}]},
        {"type": "function"},
        "sometimes",
        3,
    ],
)
def test_other_tool_choices_are_refused(choice: Any) -> None:
    with pytest.raises(InvalidRequestError) as info:
        chat({"model": "m", "input": "x", "tools": [WEATHER], "tool_choice": choice})
    assert info.value.status_code == 400
    assert info.value.param == "tool_choice"


def test_tool_choice_without_tools() -> None:
    for mode in ("auto", "none"):
        out = chat({"model": "m", "input": "x", "tool_choice": mode})
        assert "tool_choice" not in out and "tools" not in out
    with pytest.raises(InvalidRequestError) as info:
        chat({"model": "m", "input": "x", "tool_choice": "required"})
    assert info.value.param == "tool_choice"
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "zz"}],
    }
    with pytest.raises(InvalidRequestError):
        chat({"model": "m", "input": "x", "tools": [WEATHER], "tool_choice": choice})


# =========================================================================== request: text.format


def test_text_format_json_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    fmt = {
        "type": "json_schema",
        "name": "thing",
        "schema": schema,
        "strict": True,
        "description": "A thing",
    }
    out = chat({"model": "m", "input": "x", "text": {"format": fmt}})
    assert out["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "thing",
            "description": "A thing",
            "schema": schema,
            "strict": True,
        },
    }
    bare = chat(
        {
            "model": "m",
            "input": "x",
            "text": {"format": {"type": "json_schema", "name": "t", "schema": schema}},
        }
    )
    assert bare["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "t", "schema": schema},
    }


def test_text_format_json_object_and_text() -> None:
    out = chat({"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}})
    assert out["response_format"] == {"type": "json_object"}
    assert "response_format" not in chat(
        {"model": "m", "input": "x", "text": {"format": {"type": "text"}}}
    )
    assert "response_format" not in chat({"model": "m", "input": "x", "text": {"verbosity": "low"}})


def test_unknown_text_format_is_refused() -> None:
    with pytest.raises(InvalidRequestError) as info:
        chat({"model": "m", "input": "x", "text": {"format": {"type": "grammar"}}})
    assert info.value.param == "text.format"


# =========================================================================== response


REQUEST = {"model": "requested-model", "input": "hi"}


def completion(message: JsonObject, finish_reason: str | None = "stop", **extra: Any) -> JsonObject:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "served-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        **extra,
    }


def test_text_answer() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
    response = to_response(
        completion({"role": "assistant", "content": "Hello!"}, usage=usage), REQUEST
    )
    assert response["id"].startswith("resp_")
    assert response["object"] == "response"
    assert response["created_at"] == 1_700_000_000
    assert response["status"] == "completed"
    assert response["model"] == "served-model"
    assert response["error"] is None
    assert response["incomplete_details"] is None
    [item] = response["output"]
    assert item["id"].startswith("msg_")
    assert {k: v for k, v in item.items() if k != "id"} == {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hello!", "annotations": [], "logprobs": []}],
    }
    assert response["usage"] == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 13,
    }


def test_usage_details_and_missing_total() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 30},
    }
    response = to_response(completion({"content": "x"}, usage=usage), REQUEST)
    assert response["usage"] == {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 64},
        "output_tokens": 40,
        "output_tokens_details": {"reasoning_tokens": 30},
        "total_tokens": 140,
    }
    vllm = {**usage, "total_tokens": 140, "prompt_tokens_details": None}
    assert to_response(completion({"content": "x"}, usage=vllm), REQUEST)["usage"][
        "input_tokens_details"
    ] == {"cached_tokens": 0}


def test_no_usage_no_model_no_created() -> None:
    body = completion({"content": "x"})
    del body["model"], body["created"]
    response = to_response(body, REQUEST)
    assert response["usage"] is None
    assert response["model"] == "requested-model"
    assert isinstance(response["created_at"], int) and response["created_at"] > 1_700_000_000


def test_parallel_tool_calls() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": ""}},
        ],
    }
    response = to_response(completion(message, "tool_calls"), REQUEST)
    assert response["status"] == "completed"
    output = response["output"]
    assert [item["type"] for item in output] == ["function_call", "function_call"]
    assert all(item["id"].startswith("fc_") for item in output)
    assert [{k: v for k, v in item.items() if k != "id"} for item in output] == [
        {
            "type": "function_call",
            "call_id": "call_a",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
            "status": "completed",
        },
        {
            "type": "function_call",
            "call_id": "call_b",
            "name": "get_time",
            "arguments": "{}",
            "status": "completed",
        },
    ]


def test_ollama_object_arguments_and_missing_call_id() -> None:
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris", "n": 2}}}
        ],
    }
    [item] = to_response(completion(message, "stop"), REQUEST)["output"]
    assert item["arguments"] == '{"city":"Paris","n":2}'
    assert item["call_id"].startswith("call_")
    assert item["name"] == "get_weather"


def test_reasoning_text_and_call_in_order() -> None:
    message = {
        "role": "assistant",
        "reasoning_content": "Need the weather.",
        "content": "Checking.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    output = to_response(completion(message, "tool_calls"), REQUEST)["output"]
    assert [item["type"] for item in output] == ["reasoning", "message", "function_call"]
    rs = output[0]
    assert rs["id"].startswith("rs_")
    assert {k: v for k, v in rs.items() if k != "id"} == {
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Need the weather."}],
        "status": "completed",
    }


def test_reasoning_field_and_no_duplicate() -> None:
    message = {"content": "x", "reasoning": "newer vLLM"}
    output = to_response(completion(message), REQUEST)["output"]
    assert output[0]["content"][0]["text"] == "newer vLLM"
    both = {"content": "x", "reasoning_content": "same", "reasoning": "same"}
    output = to_response(completion(both), REQUEST)["output"]
    assert [item["type"] for item in output] == ["reasoning", "message"]
    empty = {"content": "x", "reasoning_content": "", "reasoning": None}
    assert [i["type"] for i in to_response(completion(empty), REQUEST)["output"]] == ["message"]


def test_content_as_parts_and_refusal() -> None:
    message = {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    [item] = to_response(completion(message), REQUEST)["output"]
    assert item["content"][0]["text"] == "ab"
    [item] = to_response(completion({"content": None, "refusal": "I can't."}), REQUEST)["output"]
    assert item["content"] == [{"type": "refusal", "refusal": "I can't."}]


def test_length_cut_off_is_incomplete() -> None:
    response = to_response(completion({"content": "The answer is"}, "length"), REQUEST)
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"


def test_reasoning_cut_off_keeps_the_reasoning_complete() -> None:
    response = to_response(
        completion({"reasoning_content": "hmm", "content": None}, "length"), REQUEST
    )
    assert response["status"] == "incomplete"
    assert response["output"][0]["status"] == "completed"


def test_content_filter_is_incomplete() -> None:
    response = to_response(completion({"content": "partial"}, "content_filter"), REQUEST)
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "content_filter"}
    assert response["output"][0]["status"] == "incomplete"


@pytest.mark.parametrize("reason", ["stop", "tool_calls", "function_call", None])
def test_finish_reasons_that_complete(reason: str | None) -> None:
    response = to_response(completion({"content": "x"}, reason), REQUEST)
    assert response["status"] == "completed"
    assert response["incomplete_details"] is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"error": {"message": "model not loaded", "type": "server_error", "code": 503}},
            {"message": "model not loaded", "type": "server_error", "param": None, "code": "503"},
        ),
        (
            {"object": "error", "message": "bad", "type": "BadRequestError", "code": 400},
            {"message": "bad", "type": "BadRequestError", "param": None, "code": "400"},
        ),
        (
            {"error": "llama.cpp says no"},
            {"message": "llama.cpp says no", "type": "upstream_error", "param": None, "code": None},
        ),
    ],
    ids=["openai", "vllm-flat", "text"],
)
def test_error_body_with_http_200_raises(body: JsonObject, expected: JsonObject) -> None:
    with pytest.raises(UpstreamHTTPError) as info:
        to_response(body, REQUEST)
    assert info.value.status_code == 502
    assert info.value.to_error() == expected


def test_choice_without_index_and_other_choices() -> None:
    body = completion({"content": "first"})
    body["choices"] = [
        {"message": {"content": "first"}, "finish_reason": "stop"},
        {"index": 1, "message": {"content": "second"}, "finish_reason": "stop"},
    ]
    [item] = to_response(body, REQUEST)["output"]
    assert item["content"][0]["text"] == "first"


def test_no_choices_is_a_protocol_error() -> None:
    with pytest.raises(UpstreamProtocolError):
        to_response({"object": "chat.completion", "choices": []}, REQUEST)
