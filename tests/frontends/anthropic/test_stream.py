"""Responses events and responses -> Anthropic's events and Message, block by block."""

from __future__ import annotations

from typing import Any

from app.errors import NotReadyError, UpstreamBusyError, UpstreamHTTPError
from app.frontends.anthropic.errors import error_envelope, stream_error_event
from app.frontends.anthropic.responses import to_message, usage
from app.frontends.anthropic.stream import MessageStream

CREATED = {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}


def feed(stream: MessageStream, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [out for event in events for out in stream.feed(event)]


def test_start_and_a_text_part_sent_whole_at_its_end() -> None:
    stream = MessageStream("claude-x")
    out = feed(
        stream,
        [
            CREATED,
            {"type": "response.output_item.added", "item": {"id": "m", "type": "message"}},
            {"type": "response.output_text.done", "item_id": "m", "content_index": 0, "text": "Hi"},
            {"type": "response.content_part.done", "item_id": "m", "content_index": 0, "part": {}},
        ],
    )
    assert out[0]["type"] == "message_start"
    assert out[0]["message"]["id"] == "msg_1"
    assert out[0]["message"]["model"] == "claude-x"
    assert out[1] == {"type": "ping"}
    assert out[2:] == [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": "", "citations": None},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
    ]


def test_encrypted_reasoning_is_the_signature_and_a_call_without_deltas_gets_its_arguments() -> (
    None
):
    stream = MessageStream("claude-x")
    reasoning = {"id": "rs", "type": "reasoning", "summary": [], "encrypted_content": "gAAAAx"}
    call = {"id": "fc", "type": "function_call", "call_id": "call_1", "name": "run"}
    out = feed(
        stream,
        [
            CREATED,
            {"type": "response.output_item.added", "item": reasoning},
            {"type": "response.reasoning_summary_text.delta", "item_id": "rs", "delta": "so"},
            {"type": "response.output_item.done", "item": reasoning},
            {"type": "response.output_item.added", "item": call},
            {"type": "response.output_item.done", "item": {**call, "arguments": '{"a":1}'}},
        ],
    )[2:]
    deltas = [event["delta"] for event in out if event["type"] == "content_block_delta"]
    assert deltas == [
        {"type": "thinking_delta", "thinking": "so"},
        {"type": "signature_delta", "signature": "gAAAAx"},
        {"type": "input_json_delta", "partial_json": '{"a":1}'},
    ]
    starts = [event["content_block"] for event in out if event["type"] == "content_block_start"]
    assert starts[1] == {"type": "tool_use", "id": "call_1", "name": "run", "input": {}}
    assert [event["index"] for event in out if event["type"] == "content_block_stop"] == [0, 1]


def test_an_mcp_call_becomes_its_use_and_result_blocks() -> None:
    stream = MessageStream("claude-x")
    call = {
        "id": "mcp_1",
        "type": "mcp_call",
        "name": "sum",
        "server_label": "calc",
        "arguments": '{"a": 1}',
        "output": "3",
    }
    out = feed(stream, [CREATED, {"type": "response.output_item.done", "item": call}])[2:]
    assert [event["type"] for event in out] == [
        "content_block_start",
        "content_block_stop",
        "content_block_start",
        "content_block_stop",
    ]
    assert out[0]["content_block"]["type"] == "mcp_tool_use"
    assert out[0]["content_block"]["input"] == {"a": 1}
    assert out[2]["content_block"]["tool_use_id"] == "mcp_1"
    assert out[2]["index"] == 1


def test_the_end_closes_open_blocks_and_says_why() -> None:
    stream = MessageStream("claude-x")
    final = {
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "usage": {
            "input_tokens": 7,
            "output_tokens": 3,
            "input_tokens_details": {"cached_tokens": 2},
        },
    }
    out = feed(
        stream,
        [
            CREATED,
            {
                "type": "response.output_text.delta",
                "item_id": "m",
                "content_index": 0,
                "delta": "a",
            },
            {"type": "response.incomplete", "response": final},
            {"type": "response.output_text.delta", "item_id": "m", "delta": "late"},
        ],
    )[2:]
    assert [event["type"] for event in out] == [
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert out[3]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert out[3]["usage"] == {
        "input_tokens": 5,
        "output_tokens": 3,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 2,
    }
    assert stream.finished


def test_a_failure_is_an_error_event_that_ends_the_stream() -> None:
    stream = MessageStream("claude-x")
    failed = {"status": "failed", "error": {"code": "server_error", "message": "it broke"}}
    out = feed(stream, [CREATED, {"type": "response.failed", "response": failed}, CREATED])[2:]
    assert out == [{"type": "error", "error": {"type": "api_error", "message": "it broke"}}]


def test_message_from_a_response() -> None:
    response = {
        "id": "resp_9",
        "status": "completed",
        "output": [
            {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "t"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "done END"}]},
            {"type": "web_search_call", "id": "ws"},
        ],
        "usage": {"input_tokens": 4, "output_tokens": 2},
    }
    message = to_message(response, "claude-x", ("END",))
    assert message["id"] == "msg_9"
    assert message["content"] == [
        {"type": "thinking", "thinking": "t", "signature": ""},
        {"type": "text", "text": "done END", "citations": None},
    ]
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "END")
    assert message["usage"] == usage(response["usage"])


def test_error_envelopes() -> None:
    status, body = error_envelope(NotReadyError("warming up"))
    assert (status, body["error"]["type"]) == (529, "overloaded_error")
    status, body = error_envelope(UpstreamBusyError("vllm", 256, 10.0))
    assert (status, body["error"]["type"]) == (529, "overloaded_error")
    assert "busy" in body["error"]["message"]
    assert stream_error_event({"code": "upstream_busy", "message": "busy"})["error"] == {
        "type": "overloaded_error",
        "message": "busy",
    }
    status, body = error_envelope(UpstreamHTTPError(401, {"error": {"message": "bad key"}}))
    assert (status, body) == (
        401,
        {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}},
    )
