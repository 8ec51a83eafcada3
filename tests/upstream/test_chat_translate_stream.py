"""chat.completion.chunk stream -> Responses stream events (ChatStreamTranslator)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.core.accumulator import ResponseAccumulator
from app.core.response import normalize_usage
from app.core.stream import ResponseLifecycle
from app.errors import UpstreamProtocolError
from app.protocol.json_types import JsonObject
from app.upstream.chat_response import ChatStreamTranslator, to_response
from tests.lifecycle import assert_lifecycle

REQUEST = {"model": "requested-model", "input": "hi", "stream": True}


def chunk(delta: JsonObject | None = None, finish: str | None = None, **extra: Any) -> JsonObject:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "served-model",
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}],
        **extra,
    }


def usage_chunk(usage: JsonObject) -> JsonObject:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "served-model",
        "choices": [],
        "usage": usage,
    }


def tool(
    index: int | None = None,
    *,
    id: str | None = None,
    name: str | None = None,
    arguments: Any = None,
) -> JsonObject:
    delta: JsonObject = {}
    if index is not None:
        delta["index"] = index
    if id is not None:
        delta.update(id=id, type="function")
    function: JsonObject = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    delta["function"] = function
    return delta


def translate(chunks: list[JsonObject]) -> list[JsonObject]:
    translator = ChatStreamTranslator(REQUEST)
    events: list[JsonObject] = []
    for item in chunks:
        events.extend(translator.feed(item))
    events.extend(translator.finish())
    assert translator.done
    return events


def types(events: list[JsonObject]) -> list[str]:
    return [e["type"] for e in events]


def without_ids(items: list[JsonObject]) -> list[JsonObject]:
    return [{k: v for k, v in item.items() if k != "id"} for item in items]


def fold(events: list[JsonObject]) -> tuple[ResponseAccumulator, list[JsonObject]]:
    """Through the core's accumulator and lifecycle, as the service runs an upstream stream."""
    accumulator = ResponseAccumulator()
    lifecycle = ResponseLifecycle()
    out = lifecycle.opening({"id": "resp_test", "output": [], "status": "in_progress"})
    for event in events:
        out.extend(lifecycle.stamp(e) for e in accumulator.feed(copy.deepcopy(event)))
        if accumulator.finished:
            break
    out.extend(lifecycle.stamp(e) for e in accumulator.finish())
    final = {"id": "resp_test", "status": accumulator.status, "output": accumulator.output}
    out.append(lifecycle.closing(final))
    return accumulator, out


def completion(
    message: JsonObject, finish_reason: str, usage: JsonObject | None = None
) -> JsonObject:
    body: JsonObject = {
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "served-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


USAGE = {
    "prompt_tokens": 12,
    "completion_tokens": 7,
    "total_tokens": 19,
    "completion_tokens_details": {"reasoning_tokens": 4},
}
MAPPED_USAGE = {
    "input_tokens": 12,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 7,
    "output_tokens_details": {"reasoning_tokens": 4},
    "total_tokens": 19,
}


# =========================================================================== text


def test_text_split_over_chunks() -> None:
    events = translate(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}),
            chunk({}, "stop"),
            usage_chunk(USAGE),
        ]
    )
    created, in_progress = events[0], events[1]
    assert created["type"] == "response.created"
    assert in_progress["type"] == "response.in_progress"
    for event in (created, in_progress):
        response = event["response"]
        assert response["status"] == "in_progress"
        assert response["output"] == []
        assert response["id"].startswith("resp_")
        assert response["model"] == "served-model"
        assert response["created_at"] == 1_700_000_000
    msg_id = events[2]["item"]["id"]
    assert msg_id.startswith("msg_")
    address = {"item_id": msg_id, "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    full = {**part, "text": "Hello"}
    done_item = {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [full],
    }
    assert events[2:-1] == [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**done_item, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **address, "part": part},
        {"type": "response.output_text.delta", **address, "delta": "Hel", "logprobs": []},
        {"type": "response.output_text.delta", **address, "delta": "lo", "logprobs": []},
        {"type": "response.output_text.done", **address, "text": "Hello", "logprobs": []},
        {"type": "response.content_part.done", **address, "part": full},
        {"type": "response.output_item.done", "output_index": 0, "item": done_item},
    ]
    terminal = events[-1]
    assert terminal["type"] == "response.completed"
    response = terminal["response"]
    assert response["id"] == created["response"]["id"]
    assert response["status"] == "completed"
    assert response["output"] == [done_item]
    assert response["usage"] == MAPPED_USAGE
    assert response["incomplete_details"] is None
    assert response["error"] is None
    assert all("sequence_number" not in e for e in events)


def test_empty_and_role_only_chunks_emit_nothing_after_the_start() -> None:
    translator = ChatStreamTranslator(REQUEST)
    assert types(translator.feed(chunk({"role": "assistant"}))) == [
        "response.created",
        "response.in_progress",
    ]
    assert translator.feed(chunk({"role": "assistant", "content": ""})) == []
    assert translator.feed({"id": "x", "object": "chat.completion.chunk", "choices": []}) == []
    assert translator.feed(chunk({"content": None, "tool_calls": []})) == []
    assert translator.feed(chunk({}, "stop")) == []
    events = translator.finish()
    assert types(events) == ["response.completed"]
    assert events[0]["response"]["output"] == []
    assert events[0]["response"]["usage"] is None


def test_model_falls_back_to_the_request() -> None:
    first = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "x"}}],
    }
    events = translate([first, chunk({}, "stop")])
    assert events[0]["response"]["model"] == "requested-model"


def test_only_the_first_choice_is_streamed() -> None:
    events = translate(
        [
            {"choices": [{"delta": {"content": "a"}}, {"index": 1, "delta": {"content": "b"}}]},
            {"choices": [{"delta": {}, "finish_reason": "stop"}]},
        ]
    )
    [item] = events[-1]["response"]["output"]
    assert item["content"][0]["text"] == "a"


def test_a_whole_message_instead_of_deltas() -> None:
    events = translate(
        [{"choices": [{"index": 0, "message": {"content": "all"}, "finish_reason": "stop"}]}]
    )
    [item] = events[-1]["response"]["output"]
    assert item["content"][0]["text"] == "all"
    repeated = {"choices": [{"index": 0, "message": {"content": "abc"}, "finish_reason": "stop"}]}
    events = translate([chunk({"content": "abc"}), repeated])
    [item] = events[-1]["response"]["output"]
    assert item["content"][0]["text"] == "abc"


def test_refusal_deltas() -> None:
    events = translate(
        [
            chunk({"content": "Well. "}),
            chunk({"refusal": "I can't"}),
            chunk({"refusal": " help."}, "stop"),
        ]
    )
    assert types(events)[2:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.content_part.added",
        "response.refusal.delta",
        "response.refusal.delta",
        "response.refusal.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    refusal_done = events[-4]
    assert refusal_done["refusal"] == "I can't help."
    assert refusal_done["content_index"] == 1
    assert events[-3]["part"] == {"type": "refusal", "refusal": "I can't help."}
    assert events[-1]["response"]["output"][0]["content"] == [
        {"type": "output_text", "text": "Well. ", "annotations": [], "logprobs": []},
        {"type": "refusal", "refusal": "I can't help."},
    ]


# =========================================================================== reasoning


def test_reasoning_content_then_content() -> None:
    events = translate(
        [
            chunk({"role": "assistant"}),
            chunk({"reasoning_content": "Let me "}),
            chunk({"reasoning_content": "think."}),
            chunk({"content": "42"}),
            chunk({}, "stop"),
        ]
    )
    rs_id = events[2]["item"]["id"]
    assert rs_id.startswith("rs_")
    rs_address = {"item_id": rs_id, "output_index": 0, "content_index": 0}
    rs_part = {"type": "reasoning_text", "text": ""}
    rs_done = {
        "id": rs_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Let me think."}],
        "status": "completed",
    }
    assert events[2:9] == [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**rs_done, "content": None, "status": "in_progress"},
        },
        {"type": "response.content_part.added", **rs_address, "part": rs_part},
        {"type": "response.reasoning_text.delta", **rs_address, "delta": "Let me "},
        {"type": "response.reasoning_text.delta", **rs_address, "delta": "think."},
        {"type": "response.reasoning_text.done", **rs_address, "text": "Let me think."},
        {
            "type": "response.content_part.done",
            **rs_address,
            "part": {**rs_part, "text": "Let me think."},
        },
        {"type": "response.output_item.done", "output_index": 0, "item": rs_done},
    ]
    assert types(events)[9:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert all(e["output_index"] == 1 for e in events[9:-1])
    assert [item["type"] for item in events[-1]["response"]["output"]] == ["reasoning", "message"]


def test_reasoning_field_and_duplicates() -> None:
    """Newer vLLM's ``reasoning``; some versions send the same text under both names."""
    events = translate(
        [
            chunk({"reasoning": "a", "reasoning_content": "a"}),
            chunk({"reasoning": "b"}),
            chunk({"content": "c"}, "stop"),
        ]
    )
    [rs, _msg] = events[-1]["response"]["output"]
    assert rs["content"] == [{"type": "reasoning_text", "text": "ab"}]


# =========================================================================== tool calls


def test_tool_call_name_and_arguments_over_several_chunks() -> None:
    events = translate(
        [
            chunk({"role": "assistant", "content": None}),
            chunk({"tool_calls": [tool(0, id="call_w", arguments="")]}),
            chunk({"tool_calls": [tool(0, name="get_weather")]}),
            chunk({"tool_calls": [tool(0, arguments='{"city": ')]}),
            chunk({"tool_calls": [tool(0, arguments='"Paris"}')]}),
            chunk({}, "tool_calls"),
        ]
    )
    fc_id = events[2]["item"]["id"]
    assert fc_id.startswith("fc_")
    address = {"item_id": fc_id, "output_index": 0}
    final = {
        "id": fc_id,
        "type": "function_call",
        "call_id": "call_w",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "status": "completed",
    }
    assert events[2:-1] == [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**final, "name": "", "arguments": "", "status": "in_progress"},
        },
        {"type": "response.function_call_arguments.delta", **address, "delta": '{"city": '},
        {"type": "response.function_call_arguments.delta", **address, "delta": '"Paris"}'},
        {
            "type": "response.function_call_arguments.done",
            **address,
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "response.output_item.done", "output_index": 0, "item": final},
    ]
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"] == [final]


def test_two_parallel_calls_keyed_by_index() -> None:
    events = translate(
        [
            chunk({"content": "Checking both."}),
            chunk({"tool_calls": [tool(0, id="call_a", name="get_weather", arguments="")]}),
            chunk({"tool_calls": [tool(1, id="call_b", name="get_time", arguments="")]}),
            chunk({"tool_calls": [tool(0, arguments='{"city":"Paris"}')]}),
            chunk({"tool_calls": [tool(1, arguments='{"tz":')]}),
            chunk({"tool_calls": [tool(1, arguments='"CET"}')]}),
            chunk({}, "tool_calls"),
        ]
    )
    assert types(events)[2:] == [
        "response.output_item.added",  # message 0
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",  # call 1
        "response.output_item.added",  # call 2
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert [(e["output_index"], e["delta"]) for e in deltas] == [
        (1, '{"city":"Paris"}'),
        (2, '{"tz":'),
        (2, '"CET"}'),
    ]
    output = events[-1]["response"]["output"]
    assert [(i["type"], i.get("call_id"), i.get("arguments")) for i in output] == [
        ("message", None, None),
        ("function_call", "call_a", '{"city":"Paris"}'),
        ("function_call", "call_b", '{"tz":"CET"}'),
    ]
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.done"] == [
        0,
        1,
        2,
    ]


def test_ollama_whole_call_in_one_chunk_with_object_arguments() -> None:
    events = translate(
        [
            chunk(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "call_x1",
                            "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                        },
                        {
                            "id": "call_x2",
                            "function": {"name": "get_time", "arguments": {}},
                        },
                    ],
                }
            ),
            chunk({"content": ""}, "stop"),
        ]
    )
    output = events[-1]["response"]["output"]
    assert without_ids(output) == [
        {
            "type": "function_call",
            "call_id": "call_x1",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
            "status": "completed",
        },
        {
            "type": "function_call",
            "call_id": "call_x2",
            "name": "get_time",
            "arguments": "{}",
            "status": "completed",
        },
    ]
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [e["arguments"] for e in done] == ['{"city":"Paris"}', "{}"]


def test_calls_without_index_continue_the_last_until_a_new_id() -> None:
    events = translate(
        [
            chunk({"tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"a":'}}]}),
            chunk({"tool_calls": [{"function": {"arguments": "1}"}}]}),
            chunk({"tool_calls": [{"id": "c1", "function": {"arguments": ""}}]}),
            chunk({"tool_calls": [{"id": "c2", "function": {"name": "g", "arguments": "{}"}}]}),
            chunk({}, "tool_calls"),
        ]
    )
    output = events[-1]["response"]["output"]
    assert [(i["call_id"], i["name"], i["arguments"]) for i in output] == [
        ("c1", "f", '{"a":1}'),
        ("c2", "g", "{}"),
    ]


def test_a_new_id_at_a_known_index_is_a_new_call() -> None:
    events = translate(
        [
            chunk({"tool_calls": [tool(0, id="c1", name="f", arguments="{}")]}),
            chunk({"tool_calls": [tool(0, id="c2", name="g", arguments='{"b":2}')]}),
            chunk({}, "tool_calls"),
        ]
    )
    output = events[-1]["response"]["output"]
    assert [(i["call_id"], i["name"], i["arguments"]) for i in output] == [
        ("c1", "f", "{}"),
        ("c2", "g", '{"b":2}'),
    ]


def test_a_call_without_id_gets_one_and_empty_arguments_become_an_object() -> None:
    events = translate([chunk({"tool_calls": [tool(0, name="ping")]}), chunk({}, "tool_calls")])
    [item] = events[-1]["response"]["output"]
    assert item["call_id"].startswith("call_")
    assert item["arguments"] == "{}"
    added = events[2]["item"]
    assert added["call_id"] == item["call_id"]


def test_text_after_a_call_closes_the_call() -> None:
    events = translate(
        [
            chunk({"tool_calls": [tool(0, id="c1", name="f", arguments="{}")]}),
            chunk({"content": "done"}),
            chunk({"tool_calls": [tool(0, arguments="ignored")]}),
            chunk({}, "stop"),
        ]
    )
    assert types(events)[2:7] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
    ]
    output = events[-1]["response"]["output"]
    assert [(i["type"], i.get("arguments")) for i in output] == [
        ("function_call", "{}"),
        ("message", None),
    ]


def test_legacy_function_call_delta() -> None:
    events = translate(
        [
            chunk({"function_call": {"name": "f", "arguments": '{"x"'}}),
            chunk({"function_call": {"arguments": ":1}"}}),
            chunk({}, "function_call"),
        ]
    )
    [item] = events[-1]["response"]["output"]
    assert (item["name"], item["arguments"], item["status"]) == ("f", '{"x":1}', "completed")


# =========================================================================== ends of a stream


def test_length_cut_off() -> None:
    events = translate([chunk({"content": "The answer"}), chunk({"content": " is"}, "length")])
    assert events[-2]["type"] == "response.output_item.done"
    assert events[-2]["item"]["status"] == "incomplete"
    terminal = events[-1]
    assert terminal["type"] == "response.incomplete"
    assert terminal["response"]["status"] == "incomplete"
    assert terminal["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert terminal["response"]["output"][0]["status"] == "incomplete"


def test_content_filter() -> None:
    events = translate([chunk({"content": "partial"}, "content_filter")])
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "content_filter"}


def test_usage_only_final_chunk() -> None:
    events = translate([chunk({"content": "x"}), chunk({}, "stop"), usage_chunk(USAGE)])
    assert events[-1]["response"]["usage"] == MAPPED_USAGE


def test_usage_on_the_finish_chunk_and_continuous_usage() -> None:
    early = {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}
    events = translate([chunk({"content": "x"}, usage=early), chunk({}, "stop", usage=USAGE)])
    assert events[-1]["response"]["usage"] == MAPPED_USAGE


@pytest.mark.parametrize(
    ("error_chunk", "expected"),
    [
        (
            {
                "error": {
                    "message": "CUDA out of memory",
                    "type": "InternalServerError",
                    "code": 500,
                }
            },
            {"type": "error", "code": "500", "message": "CUDA out of memory", "param": None},
        ),
        (
            {
                "object": "error",
                "message": "bad input",
                "type": "BadRequestError",
                "param": "x",
                "code": 400,
            },
            {"type": "error", "code": "400", "message": "bad input", "param": "x"},
        ),
        (
            {"error": "model unloaded"},
            {"type": "error", "code": "upstream_error", "message": "model unloaded", "param": None},
        ),
    ],
    ids=["openai", "vllm-flat", "ollama-text"],
)
def test_error_chunk_mid_stream(error_chunk: JsonObject, expected: JsonObject) -> None:
    translator = ChatStreamTranslator(REQUEST)
    translator.feed(chunk({"content": "Hel"}))
    assert translator.feed(error_chunk) == [expected]
    assert translator.done
    assert translator.feed(chunk({"content": "lo"}, "stop")) == []
    assert translator.finish() == []


def test_error_chunk_folds_to_a_failed_response() -> None:
    translator = ChatStreamTranslator(REQUEST)
    events = translator.feed(chunk({"content": "Hel"}))
    events += translator.feed({"error": {"message": "boom", "type": "x", "code": None}})
    accumulator, client = fold(events)
    assert accumulator.status == "failed"
    assert accumulator.error == {"code": "upstream_error", "message": "boom"}
    assert_lifecycle(client)


def test_missing_finish_reason_is_a_protocol_error() -> None:
    translator = ChatStreamTranslator(REQUEST)
    translator.feed(chunk({"content": "Hel"}))
    with pytest.raises(UpstreamProtocolError, match="before a finish_reason"):
        translator.finish()
    with pytest.raises(UpstreamProtocolError):
        ChatStreamTranslator(REQUEST).finish()


def test_finish_reason_in_the_last_chunk_without_done_is_fine() -> None:
    """Older llama.cpp: finish_reason on the last content chunk, then EOF without [DONE]."""
    translator = ChatStreamTranslator(REQUEST)
    translator.feed(chunk({"content": "Hi"}, "stop"))
    assert types(translator.finish())[-1] == "response.completed"


def test_done_marker_fed_as_an_event_finishes() -> None:
    translator = ChatStreamTranslator(REQUEST)
    translator.feed(chunk({"content": "Hi"}, "stop"))
    events = translator.feed({"type": "[DONE]"})
    assert types(events)[-1] == "response.completed"
    assert translator.done
    assert translator.finish() == []


# =========================================================================== the contract


SCENARIOS: dict[str, tuple[list[JsonObject], JsonObject]] = {
    "text": (
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}),
            chunk({}, "stop"),
            usage_chunk(USAGE),
        ],
        completion({"role": "assistant", "content": "Hello"}, "stop", USAGE),
    ),
    "reasoning-text-calls": (
        [
            chunk({"reasoning_content": "Think"}),
            chunk({"reasoning_content": "ing."}),
            chunk({"content": "Let me check."}),
            chunk({"tool_calls": [tool(0, id="call_a", name="get_weather", arguments='{"city":')]}),
            chunk({"tool_calls": [tool(1, id="call_b", name="get_time", arguments="")]}),
            chunk({"tool_calls": [tool(0, arguments='"Paris"}')]}),
            chunk({}, "tool_calls"),
            usage_chunk(USAGE),
        ],
        completion(
            {
                "role": "assistant",
                "reasoning_content": "Thinking.",
                "content": "Let me check.",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": ""},
                    },
                ],
            },
            "tool_calls",
            USAGE,
        ),
    ),
    "ollama-object-arguments": (
        [
            chunk(
                {
                    "tool_calls": [
                        {"id": "call_o", "function": {"name": "f", "arguments": {"a": [1, 2]}}}
                    ]
                }
            ),
            chunk({}, "stop"),
        ],
        completion(
            {
                "tool_calls": [
                    {"id": "call_o", "function": {"name": "f", "arguments": {"a": [1, 2]}}}
                ]
            },
            "stop",
        ),
    ),
    "length": (
        [
            chunk({"reasoning": "hm"}),
            chunk({"content": "The answer"}),
            chunk({"content": " is"}, "length"),
        ],
        completion({"reasoning": "hm", "content": "The answer is"}, "length"),
    ),
    "refusal": (
        [chunk({"refusal": "No."}), chunk({}, "stop")],
        completion({"content": None, "refusal": "No."}, "stop"),
    ),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_stream_folds_to_the_non_streaming_translation(name: str) -> None:
    chunks, body = SCENARIOS[name]
    events = translate(chunks)
    accumulator, client = fold(events)
    final = assert_lifecycle(client)
    expected = to_response(body, REQUEST)
    assert without_ids(accumulator.output) == without_ids(expected["output"])
    assert without_ids(final["output"]) == without_ids(expected["output"])
    assert accumulator.status == expected["status"]
    # The accumulator gives usage the gateway's shape (``cache_write_tokens`` defaulted).
    assert accumulator.usage == normalize_usage(expected["usage"])
    assert accumulator.incomplete_details == expected["incomplete_details"]
    terminal = events[-1]["response"]
    assert without_ids(terminal["output"]) == without_ids(expected["output"])
    assert terminal["status"] == expected["status"]
    assert terminal["usage"] == expected["usage"]
