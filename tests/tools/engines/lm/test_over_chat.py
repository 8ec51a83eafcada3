"""The ``lm`` engine through the gateway's router to a real ``chat`` upstream: a scripted
chat-completions server on a real port is the simulating model. The tool's output schema reaches
the server as ``response_format`` (``json_schema``; ``json_object`` without one), the prompt as
chat messages, and the model's reasoning stays out of the result."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.protocol.json_types import JsonObject
from app.tools.engines.lm import SYSTEM_INSTRUCTION, create_lm_engine
from app.upstream.kinds import UpstreamSpec, create_upstream
from app.upstream.router import UpstreamRoute, UpstreamRouter
from tests.helpers import serve_in_thread
from tests.tools.engines.lm.helpers import CREATE_CUSTOMER, GET_CUSTOMER, SimulatorUpstream, call

MODEL = "qwen3:8b"


@dataclass
class ScriptedChatModel:
    """``POST /v1/chat/completions`` answered from ``answers`` (the message content), with a
    reasoning field as Ollama, vLLM and llama.cpp send one; every request body recorded."""

    answers: list[str]
    received: list[JsonObject] = field(default_factory=list)

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            body: JsonObject = json.loads(await request.body())
            self.received.append(body)
            message = {
                "role": "assistant",
                "content": self.answers.pop(0),
                "reasoning_content": "Let me invent a customer. {not json",
            }
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            return JSONResponse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model"),
                    "choices": [choice],
                    "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49},
                }
            )

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


async def test_the_output_schema_reaches_response_format() -> None:
    server = ScriptedChatModel(['{"id": 12, "name": "Ada"}', '{"id": 12, "name": "Ada"}'])
    other = SimulatorUpstream()  # the default route: never asked
    with serve_in_thread(server.app()) as url:
        chat = create_upstream("chat", UpstreamSpec(url=url), {})
        router = UpstreamRouter(
            [
                UpstreamRoute(name="default", upstream=other, url="http://default.invalid"),
                UpstreamRoute(name="local", upstream=chat, url=url, models=[MODEL]),
            ]
        )
        engine = create_lm_engine({"model": MODEL, "temperature": 0.1}, upstream=router)
        await engine.setup("conv_1")
        try:
            results = await engine.execute(
                "conv_1",
                [
                    call(CREATE_CUSTOMER, '{"name": "Ada"}', "c1"),
                    call(GET_CUSTOMER, '{"id": 12}', "c2"),
                ],
            )
        finally:
            await router.aclose()

    assert [r.output for r in results] == ['{"id":12,"name":"Ada"}'] * 2
    assert other.requests == []
    first, second = server.received
    assert first["model"] == MODEL
    assert first["temperature"] == 0.1
    assert first["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "create_customer",
            "schema": CREATE_CUSTOMER.output_schema,
            "strict": False,
        },
    }
    assert second["response_format"] == {"type": "json_object"}
    create = {"tool": CREATE_CUSTOMER.to_json(), "arguments": {"name": "Ada"}}
    get = {"tool": GET_CUSTOMER.to_json(), "arguments": {"id": 12}}
    assert [(m["role"], m["content"]) for m in second["messages"]] == [
        ("system", SYSTEM_INSTRUCTION),
        ("user", json.dumps(create, separators=(",", ":"))),
        ("assistant", '{"id":12,"name":"Ada"}'),
        ("user", json.dumps(get, separators=(",", ":"))),
    ]
