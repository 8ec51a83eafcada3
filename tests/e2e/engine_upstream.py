"""A scripted Responses-API model server for the tool engine tests.

``EngineUpstream`` records every request and answers with what its ``script`` gives for the
request body: a list of output items (``call``, ``message``), streamed as vLLM does when the
request streams. Requests for ``SIMULATOR_MODEL`` (the ``lm`` engine simulating a tool) are
answered by ``simulate``, which by default returns the call's arguments with ``"simulated":
true`` as JSON text.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from app.protocol.json_types import JsonObject
from tests.clients.scripted_upstream import ScriptedServer
from tests.fakes import round_events

SIMULATOR_MODEL = "simulator-model"


def call(name: str, arguments: JsonObject, call_id: str) -> JsonObject:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def message(text: str, item_id: str = "msg_final") -> JsonObject:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def tool_outputs(body: JsonObject) -> dict[str, str]:
    """The ``function_call_output``s of the request's input, by call id."""
    items = body.get("input")
    return {
        str(item.get("call_id")): str(item.get("output"))
        for item in (items if isinstance(items, list) else [])
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


def offered(body: JsonObject) -> list[str]:
    """The function names the request offers the model."""
    return [str(t.get("name")) for t in body.get("tools") or [] if t.get("type") == "function"]


def echo_simulation(body: JsonObject) -> str:
    """A simulated result: the last user turn's call arguments, marked as simulated."""
    turns = body.get("input") or []
    last = json.loads(turns[-1]["content"]) if turns else {}
    arguments = last.get("arguments") if isinstance(last, dict) else None
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        parsed = arguments
    return json.dumps({"simulated": True, "arguments": parsed})


@dataclass
class EngineUpstream(ScriptedServer):
    script: Callable[[JsonObject], list[JsonObject]] = lambda body: [message("done")]
    simulate: Callable[[JsonObject], str] = echo_simulation
    simulations: list[JsonObject] = field(default_factory=list)

    def turns(self) -> list[JsonObject]:
        """The requests of the main model (not the simulator's)."""
        return [r for r in self.requests if r.get("model") != SIMULATOR_MODEL]

    async def _infer(self, request: Request) -> Response:
        body = await request.json()
        if body.get("model") == SIMULATOR_MODEL:
            self.simulations.append(copy.deepcopy(body))
            items = [message(self.simulate(body), f"msg_sim_{len(self.simulations)}")]
        else:
            self.requests.append(copy.deepcopy(body))
            items = self.script(body)
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": f"resp_up_{len(self.requests)}",
                    "object": "response",
                    "status": "completed",
                    "model": body.get("model"),
                    "output": items,
                }
            )
        events = round_events(items)
        shell = {"id": f"resp_up_{len(self.requests)}", "object": "response", "created_at": 0}
        for event in events:
            if isinstance(event.get("response"), dict):
                event["response"] = {**shell, "model": body.get("model"), **event["response"]}
        return StreamingResponse(_sse(events), media_type="text/event-stream")


async def _sse(events: list[JsonObject]) -> AsyncIterator[bytes]:
    for number, event in enumerate(events):
        event = {**event, "sequence_number": number}
        yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
