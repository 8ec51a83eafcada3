from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import httpx
import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from app.recording import record as record_module
from app.recording.cassette import load_cassette, sse_data_events
from app.recording.record import create_record_app, upstream_target
from app.recording.replay import create_replay_app
from tests.helpers import free_port, serve_in_thread
from tests.recordings import fixture, shared

STREAMING = "text_only/responses/resp-two-turn-gpt-4o-streaming.yaml"
CONVERSATION = "text_only/conversation/conv-two-turn-gpt-4o-nonstreaming.yaml"


def test_records_json_turns_through_the_proxy(tmp_path: Path) -> None:
    original = load_cassette(fixture(CONVERSATION))
    out = tmp_path / "recorded.yaml"
    with (
        serve_in_thread(create_replay_app(original)) as upstream,
        serve_in_thread(create_record_app(upstream, out)) as proxy,
        httpx.Client(base_url=proxy, headers={"authorization": "Bearer sk-secret"}) as client,
    ):
        for done, turn in enumerate(original.turns, start=1):
            response = client.request(
                turn.request.method,
                turn.request.path,
                params=turn.request.query_params,
                json=turn.request.body,
            )
            assert response.status_code == turn.response.status_code
            assert response.json() == turn.response.body
            # Written after each turn, so an interrupted session keeps what it has.
            assert len(load_cassette(out).turns) == done
        forwarded = httpx.get(f"{upstream}/__replay/requests").json()

    recorded = load_cassette(out)
    assert [t.filename for t in recorded.turns] == [f"t{i + 1}" for i in range(len(original.turns))]
    for got, want in zip(recorded.turns, original.turns, strict=True):
        assert got.request.method == want.request.method
        assert got.request.path == want.request.path
        assert got.request.body == want.request.body
        assert got.response.status_code == want.response.status_code
        assert got.response.body == want.response.body
        assert got.response.sse is None
        assert got.response.headers == {"content-type": "application/json"}
        assert got.request.headers["authorization"] == "Bearer ***"
        assert got.request.headers["content-type"] == "application/json"
        assert set(got.request.headers) <= {
            "accept",
            "content-type",
            "user-agent",
            "openai-beta",
            "x-run-id",
            "authorization",
        }
    # The real key reached the upstream; it never reached the disk.
    assert all(r["headers"]["authorization"] == "Bearer sk-secret" for r in forwarded)
    assert "sk-secret" not in out.read_text()
    assert "host" not in yaml.safe_load(out.read_text())["turns"][0]["request"]["headers"]


def test_records_sse_turns_line_for_line(tmp_path: Path) -> None:
    original = load_cassette(shared(STREAMING))
    out = tmp_path / "stream.yaml"
    with (
        serve_in_thread(create_replay_app(original)) as upstream,
        serve_in_thread(create_record_app(upstream, out, upstream_api_key="sk-injected")) as proxy,
        httpx.Client(base_url=proxy) as client,
    ):
        for turn in original.turns:
            assert turn.response.sse is not None
            with client.stream("POST", "/v1/responses", json=turn.request.body) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                assert "content-length" not in response.headers
                data = b"".join(response.iter_bytes())
            assert data == "".join(turn.response.sse).encode()
        forwarded = httpx.get(f"{upstream}/__replay/requests").json()

    recorded = load_cassette(out)
    assert len(recorded.turns) == len(original.turns)
    for got, want in zip(recorded.turns, original.turns, strict=True):
        assert got.request.body == want.request.body
        assert got.response.sse == want.response.sse
        assert got.response.body is None
        assert got.response.headers == {"content-type": "text/event-stream; charset=utf-8"}
        assert got.request.headers["authorization"] == "Bearer ***"
        assert sse_data_events(got) == sse_data_events(want)
    # The configured key was sent upstream because the client sent none.
    assert [r["headers"]["authorization"] for r in forwarded] == ["Bearer sk-injected"] * 2
    assert "sk-injected" not in out.read_text()


def test_recording_replays_like_the_original(tmp_path: Path) -> None:
    original = load_cassette(fixture("text_only/responses/resp-single-gpt-4o-streaming.yaml"))
    out = tmp_path / "again.yaml"
    body = original.turns[0].request.body
    with (
        serve_in_thread(create_replay_app(original)) as upstream,
        serve_in_thread(create_record_app(upstream, out)) as proxy,
    ):
        with httpx.stream("POST", f"{proxy}/v1/responses", json=body) as response:
            first = b"".join(response.iter_bytes())
        extra = httpx.get(f"{proxy}/v1/models", params={"limit": "5"})
        assert extra.status_code == 200
    recorded = load_cassette(out)
    assert [(t.request.method, t.request.path) for t in recorded.turns] == [
        ("POST", "/v1/responses"),
        ("GET", "/v1/models"),
    ]
    assert recorded.turns[1].request.query_params == {"limit": "5"}
    assert recorded.turns[1].request.body is None
    with serve_in_thread(create_replay_app(recorded)) as replay:
        with httpx.stream("POST", f"{replay}/v1/responses", json=body) as response:
            second = b"".join(response.iter_bytes())
        assert httpx.get(f"{replay}/v1/models").json() == extra.json()
    assert first == second


def test_upstream_down_gives_502_envelope(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "none.yaml"
    with serve_in_thread(create_record_app(dead, out)) as proxy:
        response = httpx.post(f"{proxy}/v1/responses", json={"model": "m", "input": "hi"})
    assert response.status_code == 502
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "upstream_unreachable"
    assert error["param"] is None
    assert not out.exists(), "nothing was recorded"


def test_upstream_timeout_gives_504_envelope(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def slow(request: Request) -> StreamingResponse:
        await asyncio.sleep(5)
        return StreamingResponse(iter([b"{}"]))

    monkeypatch.setattr(
        record_module, "DEFAULT_TIMEOUT", aiohttp.ClientTimeout(total=None, sock_read=0.2)
    )
    out = tmp_path / "none.yaml"
    upstream_app = Starlette(routes=[Route("/v1/responses", slow, methods=["POST"])])
    with (
        serve_in_thread(upstream_app) as upstream,
        serve_in_thread(create_record_app(upstream, out)) as proxy,
    ):
        response = httpx.post(f"{proxy}/v1/responses", json={"model": "m", "input": "hi"})
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"
    assert not out.exists(), "nothing was recorded"


@pytest.mark.parametrize(
    ("base", "path", "query", "expected"),
    [
        ("http://h:8000", "/v1/responses", "", "http://h:8000/v1/responses"),
        ("http://h:8000/", "/v1/responses", "a=1", "http://h:8000/v1/responses?a=1"),
        ("https://api.openai.com/v1", "/v1/responses", "", "https://api.openai.com/v1/responses"),
        ("http://h/prefix", "/v1/models", "", "http://h/prefix/v1/models"),
    ],
)
def test_upstream_target(base: str, path: str, query: str, expected: str) -> None:
    assert upstream_target(base, path, query) == expected


def test_sse_is_relayed_before_the_upstream_finishes(tmp_path: Path) -> None:
    """The upstream holds its second event until the client has seen the first one."""
    gate = threading.Event()

    async def events(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield b'data: {"n":1}\n\n'
            for _ in range(1000):  # at most ~10 s, then the client's assertion fails
                if gate.is_set():
                    break
                await asyncio.sleep(0.01)
            yield b'data: {"n":2}\n\ndata: [DONE]\n\n'

        return StreamingResponse(body(), media_type="text/event-stream")

    upstream_app = Starlette(routes=[Route("/v1/responses", events, methods=["POST"])])
    out = tmp_path / "gate.yaml"
    with (
        serve_in_thread(upstream_app) as upstream,
        serve_in_thread(create_record_app(upstream, out)) as proxy,
        httpx.stream("POST", f"{proxy}/v1/responses", json={"stream": True}) as response,
    ):
        lines = response.iter_lines()
        assert next(lines) == 'data: {"n":1}'
        assert not gate.is_set()
        gate.set()
        assert list(lines) == ["", 'data: {"n":2}', "", "data: [DONE]", ""]
    (turn,) = load_cassette(out).turns
    assert turn.response.sse == [
        'data: {"n":1}\n',
        "\n",
        'data: {"n":2}\n',
        "\n",
        "data: [DONE]\n",
        "\n",
    ]
    assert turn.response.headers == {"content-type": "text/event-stream; charset=utf-8"}
    assert sse_data_events(turn) == [{"n": 1}, {"n": 2}]
