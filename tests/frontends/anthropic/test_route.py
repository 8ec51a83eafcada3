"""``/v1/messages`` over HTTP: Claude Code's query and headers, credentials, raw SSE, and every
error in Anthropic's envelope."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from app.errors import UpstreamProtocolError
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.fakes import FakeUpstream, ScriptedUpstream, message, round_events
from tests.helpers import in_process

BODY = {"model": "claude-x", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]}


class Recording(ScriptedUpstream):
    def __init__(self, rounds: list[list[JsonObject]]) -> None:
        super().__init__(rounds)
        self.headers: list[dict[str, str]] = []

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        self.headers.append(dict(headers))
        return await super().create_response(body, headers)


def sse(text: str) -> list[tuple[str, Any]]:
    frames = []
    for frame in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if "event" in lines:
            frames.append((lines["event"], json.loads(lines["data"])))
    return frames


def test_claude_codes_query_headers_and_bearer_credential() -> None:
    upstream = Recording([[message("yo")]])
    with in_process(create_app(Settings(), upstream=upstream)) as client:
        reply = client.post(
            "/v1/messages?beta=true",
            json=BODY,
            headers={
                "authorization": "Bearer sk-real",
                "anthropic-version": "2023-06-01",
                "anthropic-beta": "claude-code-20250219,some-future-beta",
            },
        )
    assert reply.status_code == 200, reply.text
    assert reply.json()["content"][0]["text"] == "yo"
    assert upstream.headers[0]["authorization"] == "Bearer sk-real"


def test_stream_frames_are_anthropics() -> None:
    upstream = ScriptedUpstream([[message("Hello")]])
    with (
        in_process(create_app(Settings(), upstream=upstream)) as client,
        client.stream("POST", "/v1/messages", json={**BODY, "stream": True}) as reply,
    ):
        text = "".join(reply.iter_text())
    assert reply.headers["content-type"].startswith("text/event-stream")
    frames = sse(text)
    assert [name for name, _ in frames] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(name == data["type"] for name, data in frames)
    assert "[DONE]" not in text
    assert frames[-2][1]["delta"]["stop_reason"] == "end_turn"


def test_a_failure_mid_stream_is_an_error_event() -> None:
    events = round_events([message("Hello")])[:3]
    upstream = FakeUpstream(events=events, fail_after=UpstreamProtocolError("cut off"))
    with (
        in_process(create_app(Settings(), upstream=upstream)) as client,
        client.stream("POST", "/v1/messages", json={**BODY, "stream": True}) as reply,
    ):
        frames = sse("".join(reply.iter_text()))
    assert reply.status_code == 200
    name, data = frames[-1]
    assert name == "error"
    assert data["error"]["type"] == "api_error"
    assert "cut off" in data["error"]["message"]


def test_errors_are_in_anthropics_envelope() -> None:
    with in_process(create_app(Settings(), upstream=ScriptedUpstream([]))) as client:
        not_json = client.post("/v1/messages", content=b"{nope", headers={"content-type": "x"})
        no_tokens = client.post("/v1/messages", json={**BODY, "max_tokens": None})
        bad_count = client.post("/v1/messages/count_tokens", json={"model": "m"})
        counted = client.post("/v1/messages/count_tokens", json=BODY)
    for reply in (not_json, no_tokens, bad_count):
        assert reply.status_code == 400
        assert reply.json()["type"] == "error"
        assert reply.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in no_tokens.json()["error"]["message"]
    assert counted.status_code == 200
    assert counted.json()["input_tokens"] > 0


def test_unknown_paths_and_methods_under_messages_are_in_anthropics_envelope() -> None:
    with in_process(create_app(Settings(), upstream=ScriptedUpstream([]))) as client:
        unknown = client.post("/v1/messages/batches", json=BODY)
        wrong_method = client.get("/v1/messages")
        elsewhere = client.get("/v1/nothing-here")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "not_found_error"
    assert wrong_method.status_code == 405
    assert wrong_method.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "Method GET is not allowed on this path",
        },
    }
    assert elsewhere.json()["error"]["code"] == "not_found"


def test_a_failed_response_is_an_api_error() -> None:
    failed = {"status": "failed", "output": [], "error": {"code": "server_error", "message": "oom"}}
    with in_process(create_app(Settings(), upstream=FakeUpstream(body=failed))) as client:
        reply = client.post("/v1/messages", json=BODY)
    assert reply.status_code == 500
    assert reply.json() == {"type": "error", "error": {"type": "api_error", "message": "oom"}}
