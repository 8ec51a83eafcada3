"""Several named upstreams behind one gateway: routing by model, model-name rewrite, the union
of ``GET /v1/models``, ``/ready``, and ``/v1/chat/completions`` forwarded unchanged."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from app.core.ports import RawReply
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from app.upstream.router import UpstreamRoute, UpstreamRouter
from tests.api.upstreams import RecordedRequest, UpstreamLog, completed_response
from tests.fakes import FakeUpstream
from tests.helpers import serve_in_thread

CHAT_STREAM = [
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3:0.6b",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3:0.6b",'
    b'"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n',
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3:0.6b",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]


def completion(model: str, text: str) -> JsonObject:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


def upstream_app(
    name: str, models: list[str], *, healthy: bool = True
) -> tuple[Starlette, UpstreamLog]:
    """A server with both APIs: ``/v1/responses`` and ``/v1/chat/completions`` answer with
    text naming the server, so a test sees where a request went."""
    log = UpstreamLog()

    async def record(request: Request) -> bytes:
        raw = await request.body()
        log.requests.append(
            RecordedRequest(request.method, request.url.path, dict(request.headers), raw)
        )
        return raw

    async def responses(request: Request) -> Response:
        await record(request)
        return JSONResponse(completed_response(f"from {name}"))

    async def chat(request: Request) -> Response:
        body = json.loads(await record(request))
        if body.get("model") == "bad":
            return JSONResponse(
                {"object": "error", "message": "model bad is unknown", "code": 404},
                status_code=404,
            )
        if body.get("stream"):

            async def chunks() -> AsyncIterator[bytes]:
                for chunk in CHAT_STREAM:
                    yield chunk
                    await asyncio.sleep(0)

            return StreamingResponse(chunks(), media_type="text/event-stream")
        return JSONResponse(completion(str(body.get("model")), f"from {name}"))

    async def list_models(request: Request) -> Response:
        await record(request)
        data = [{"id": m, "object": "model", "owned_by": name} for m in models]
        return JSONResponse({"object": "list", "data": data})

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok" if healthy else "down", status_code=200 if healthy else 503)

    app = Starlette(
        routes=[
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ]
    )
    return app, log


@contextlib.contextmanager
def two_upstreams(*, chat_healthy: bool = True) -> Iterator[tuple[str, UpstreamLog, UpstreamLog]]:
    vllm_app, vllm_log = upstream_app("vllm", ["Qwen/Qwen3-8B", "shared"])
    ollama_app, ollama_log = upstream_app(
        "ollama", ["qwen3:0.6b", "llama3.2", "shared"], healthy=chat_healthy
    )
    with serve_in_thread(vllm_app) as vllm_url, serve_in_thread(ollama_app) as ollama_url:
        settings = Settings(
            upstreams=[
                {"name": "vllm", "url": vllm_url, "models": ["Qwen/*"], "default": True},
                {
                    "name": "ollama",
                    "url": f"{ollama_url}/v1",
                    "kind": "chat",
                    "models": ["llama3.2", "qwen3:*"],
                    "model_map": {"small": "qwen3:0.6b"},
                    # The client's key goes to this upstream (the chat passthrough test).
                    "forward_client_key": True,
                },
            ]
        )
        with serve_in_thread(create_app(settings)) as gateway:
            yield gateway, vllm_log, ollama_log


@pytest.fixture(scope="module")
def routed() -> Iterator[tuple[str, UpstreamLog, UpstreamLog]]:
    with two_upstreams() as servers:
        yield servers


def test_requests_are_routed_by_model(routed: tuple[str, UpstreamLog, UpstreamLog]) -> None:
    gateway, vllm_log, ollama_log = routed
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="sk-test")
    cases = {
        "Qwen/Qwen3-8B": "from vllm",  # pattern
        "qwen3:4b": "from ollama",  # pattern, chat kind
        "llama3.2": "from ollama",  # exact name
        "small": "from ollama",  # model_map key
        "unknown-model": "from vllm",  # the default
    }
    for model, expected in cases.items():
        response = client.responses.create(model=model, input="hi", store=False)
        assert response.output_text == expected, model
    sent = [r.json()["model"] for r in ollama_log.requests if r.path == "/v1/chat/completions"]
    # the rewrite: the client's "small" reached Ollama as qwen3:0.6b
    assert sent[-3:] == ["qwen3:4b", "llama3.2", "qwen3:0.6b"]
    assert [r.json()["model"] for r in vllm_log.posts()][-2:] == ["Qwen/Qwen3-8B", "unknown-model"]


def test_models_lists_the_union(routed: tuple[str, UpstreamLog, UpstreamLog]) -> None:
    gateway, _, _ = routed
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="sk-test")
    ids = [model.id for model in client.models.list()]
    assert ids == ["Qwen/Qwen3-8B", "shared", "qwen3:0.6b", "llama3.2", "small"]


def test_ready_names_every_upstream(routed: tuple[str, UpstreamLog, UpstreamLog]) -> None:
    gateway, _, _ = routed
    reply = httpx.get(f"{gateway}/ready")
    assert reply.status_code == 200
    assert reply.json()["upstreams"] == {"vllm": "ready", "ollama": "ready"}


def test_ready_fails_when_one_upstream_is_down() -> None:
    with two_upstreams(chat_healthy=False) as (gateway, _, _):
        reply = httpx.get(f"{gateway}/ready")
    assert reply.status_code == 503
    error = reply.json()["error"]
    assert error["code"] == "upstream_not_ready"
    assert "ollama" in error["message"] and "vllm" not in error["message"]


def test_chat_completions_are_forwarded_unchanged(
    routed: tuple[str, UpstreamLog, UpstreamLog],
) -> None:
    gateway, vllm_log, ollama_log = routed
    body = b'{"model": "llama3.2",  "messages": [{"role": "user", "content": "hi"}], "seed": 7}'
    reply = httpx.post(
        f"{gateway}/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json", "authorization": "Bearer sk-client"},
    )
    assert reply.status_code == 200
    assert reply.json() == completion("llama3.2", "from ollama")
    forwarded = ollama_log.requests[-1]
    assert forwarded.path == "/v1/chat/completions"
    assert forwarded.body == body  # byte for byte, unknown keys and spacing included
    assert forwarded.headers["authorization"] == "Bearer sk-client"
    # a responses-kind upstream serves chat completions too (vLLM, SGLang, OpenAI do)
    reply = httpx.post(
        f"{gateway}/v1/chat/completions",
        json={"model": "Qwen/Qwen3-8B", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert reply.json()["choices"][0]["message"]["content"] == "from vllm"
    assert vllm_log.requests[-1].path == "/v1/chat/completions"


def test_chat_completions_stream_and_rewrite(routed: tuple[str, UpstreamLog, UpstreamLog]) -> None:
    gateway, _, ollama_log = routed
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="sk-test")
    stream = client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    texts = [chunk.choices[0].delta.content for chunk in stream if chunk.choices]
    assert "".join(t or "" for t in texts) == "Hi"
    assert ollama_log.requests[-1].json()["model"] == "qwen3:0.6b"
    with httpx.stream(
        "POST",
        f"{gateway}/v1/chat/completions",
        json={"model": "llama3.2", "messages": [], "stream": True},
    ) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(reply.iter_bytes())
    assert raw == b"".join(CHAT_STREAM)


def test_chat_completions_errors(routed: tuple[str, UpstreamLog, UpstreamLog]) -> None:
    gateway, _, _ = routed
    # the upstream's own error comes back as it was sent
    reply = httpx.post(f"{gateway}/v1/chat/completions", json={"model": "bad", "messages": []})
    assert reply.status_code == 404
    assert reply.json() == {"object": "error", "message": "model bad is unknown", "code": 404}
    # the gateway's own checks
    reply = httpx.post(f"{gateway}/v1/chat/completions", content=b"{not json")
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "invalid_json"
    reply = httpx.post(f"{gateway}/v1/chat/completions", content=b"[1]")
    assert reply.status_code == 400


# ---------------------------------------------------------------------------- router unit


def router(**maps: Any) -> UpstreamRouter:
    return UpstreamRouter(
        [
            UpstreamRoute(name="a", upstream=FakeUpstream(), url="http://a", models=["m-*"]),
            UpstreamRoute(
                name="b",
                upstream=FakeUpstream(),
                url="http://b",
                models=["m-exact", "x?"],
                model_map={"alias": "real"},
            ),
        ]
    )


def test_exact_names_win_over_patterns_and_the_default_takes_the_rest() -> None:
    routes = router()
    assert routes.route_for("m-exact").name == "b"  # exact beats a's pattern m-*
    assert routes.route_for("m-other").name == "a"
    assert routes.route_for("xy").name == "b"
    assert routes.route_for("xyz").name == "a"  # ? is one character
    assert routes.route_for("alias").name == "b"
    assert routes.route_for(None).name == "a"
    assert routes.route_for(42).name == "a"


async def test_model_map_rewrites_only_the_upstream_copy() -> None:
    routes = router()
    b = routes.routes[1].upstream
    assert isinstance(b, FakeUpstream)
    body = {"model": "alias", "input": "hi"}
    await routes.create_response(body, {})
    assert b.requests == [{"model": "real", "input": "hi"}]
    assert body["model"] == "alias"


async def test_models_union_survives_one_failing_upstream() -> None:
    class Down(FakeUpstream):
        async def list_models(self, headers: Any) -> RawReply:
            return RawReply(502, "application/json", b'{"error": "down"}')

    class Up(FakeUpstream):
        async def list_models(self, headers: Any) -> RawReply:
            return RawReply(200, "application/json", b'{"object":"list","data":[{"id":"m1"}]}')

    routes = UpstreamRouter(
        [
            UpstreamRoute(name="a", upstream=Down(), url="http://a"),
            UpstreamRoute(name="b", upstream=Up(), url="http://b"),
        ]
    )
    reply = await routes.list_models({})
    assert json.loads(reply.body)["data"] == [{"id": "m1"}]
    only_down = UpstreamRouter(
        [
            UpstreamRoute(name="a", upstream=Down(), url="http://a"),
            UpstreamRoute(name="b", upstream=Down(), url="http://b"),
        ]
    )
    assert (await only_down.list_models({})).status_code == 502


# ---------------------------------------------------------------------------- disconnects


def endless_chat_upstream(log: UpstreamLog) -> Starlette:
    """A chat server that streams one chunk every 20 ms for 10 s unless the client leaves."""

    async def chat(request: Request) -> Response:
        log.requests.append(
            RecordedRequest(request.method, request.url.path, {}, await request.body())
        )

        async def chunks() -> AsyncIterator[bytes]:
            try:
                yield CHAT_STREAM[0]
                for _ in range(500):
                    if await request.is_disconnected():
                        log.disconnected.set()
                        return
                    yield CHAT_STREAM[1]
                    await asyncio.sleep(0.02)
                log.finished.set()
            except BaseException:  # CancelledError or GeneratorExit: the gateway went away
                log.disconnected.set()
                raise

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_client_leaving_mid_stream_stops_the_chat_upstream(path: str) -> None:
    """Passthrough and translated streams alike: the upstream sees the gateway go away."""
    log = UpstreamLog()
    with serve_in_thread(endless_chat_upstream(log)) as upstream:
        app = create_app(Settings(upstream_url=upstream, upstream_kind="chat"))
        with serve_in_thread(app) as gateway:
            body: JsonObject = {"model": "m", "stream": True}
            body |= {"input": "hi"} if path == "/v1/responses" else {"messages": []}
            with (
                httpx.Client(timeout=30) as client,
                client.stream("POST", f"{gateway}{path}", json=body) as reply,
            ):
                assert reply.status_code == 200
                deltas = 0
                for line in reply.iter_lines():
                    deltas += '"Hi"' in line
                    if deltas >= 3:
                        break
            assert log.disconnected.wait(5), "the upstream never saw the gateway go away"
            assert not log.finished.is_set()
