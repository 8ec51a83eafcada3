"""A scripted Responses-API upstream for client tests: it streams as vLLM does and answers the
first round with a shell call (or, when the prompt asks for ``PATCH_FILE``, an ``apply_patch``
call that creates it) and the round that carries the call's output with a message."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import ClassVar

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.protocol.json_types import JsonObject
from tests.fakes import round_events

# The function names a Codex version offers for running a command, in order of preference.
SHELL_TOOLS = ("exec_command", "shell", "shell_command")
COMMAND = "echo respgate-ok"
FINAL_TEXT = "The command printed respgate-ok."
PATCH_FILE = "hello.txt"
PATCH_TEXT = "hello from respgate"
PATCH = f"*** Begin Patch\n*** Add File: {PATCH_FILE}\n+{PATCH_TEXT}\n*** End Patch\n"
PATCH_DONE_TEXT = f"Created {PATCH_FILE}."


@dataclass
class ScriptedServer:
    """What every scripted model server shares: it records each inference request body (and
    its ``Authorization``), lists its one model and is healthy. A subclass names its inference
    route and answers it."""

    model: str = "scripted-model"
    requests: list[JsonObject] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    inference_path: ClassVar[str] = "/v1/responses"

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route(self.inference_path, self._infer, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/health", self._health, methods=["GET"]),
            ]
        )

    async def _health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _infer(self, request: Request) -> Response:
        raise NotImplementedError


@dataclass
class ScriptedUpstream(ScriptedServer):
    """A Responses-API server: records every request body; ``app`` serves them."""

    async def _infer(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(copy.deepcopy(body))
        self.authorizations.append(request.headers.get("authorization"))
        items = self.answer(body)
        if not body.get("stream"):
            return JSONResponse({"object": "response", "status": "completed", "output": items})
        events = round_events(items)
        # vLLM's response objects carry an id, which Codex needs on response.completed.
        shell = {"id": f"resp_{len(self.requests)}", "object": "response", "created_at": 0}
        for event in events:
            if isinstance(event.get("response"), dict):
                event["response"] = {**shell, "model": body.get("model"), **event["response"]}
        return StreamingResponse(_sse(events), media_type="text/event-stream")

    def answer(self, body: JsonObject) -> list[JsonObject]:
        """A call of the offered shell tool (``exec_command``/``shell``, or in code mode the
        ``exec`` custom tool running JavaScript that calls ``tools.exec_command``), or the
        final message once the command's output is back."""
        number = len(self.requests)
        output = command_output(body)
        patching = PATCH_FILE in json.dumps(body.get("input"))
        if output is not None:
            text = FINAL_TEXT if "respgate-ok" in output else "The command failed."
            return [_message(f"msg_{number}", PATCH_DONE_TEXT if patching else text)]
        patch = _patch_call(number, body) if patching else None
        if patch is not None:
            return [patch]
        name = shell_tool(body)
        if name is not None:
            return [_shell_call(number, name)]
        if code_mode(body):
            return [_exec_call(number)]
        lowered = lowered_exec(body)
        if lowered is not None:
            return [_lowered_exec_call(number, lowered)]
        return [_message(f"msg_{number}", "No shell tool was offered.")]


def _shell_call(number: int, name: str) -> JsonObject:
    arguments: JsonObject = {"cmd": COMMAND}
    if name != "exec_command":
        arguments = {"command": ["bash", "-lc", COMMAND]}
    return {
        "type": "function_call",
        "id": f"fc_{number}",
        "call_id": f"call_{number}",
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def _patch_call(number: int, body: JsonObject) -> JsonObject | None:
    """A call of ``apply_patch`` that creates ``PATCH_FILE``: a ``custom_tool_call`` when it is a
    custom tool, a ``function_call`` with the patch as ``input`` when the gateway lowered it."""
    for tool in body.get("tools") or []:
        if tool.get("name") != "apply_patch":
            continue
        call: JsonObject = {"call_id": f"call_{number}", "name": "apply_patch"}
        if tool.get("type") == "custom":
            return {"type": "custom_tool_call", "id": f"ctc_{number}", **call, "input": PATCH}
        arguments = json.dumps({"input": PATCH})
        return {"type": "function_call", "id": f"fc_{number}", **call, "arguments": arguments}
    return None


def _exec_call(number: int) -> JsonObject:
    return {
        "type": "custom_tool_call",
        "id": f"ctc_{number}",
        "call_id": f"call_{number}",
        "namespace": "functions",
        "name": "exec",
        "input": f"const r = await tools.exec_command({{cmd: {COMMAND!r}}});\ntext(r);",
        "status": "completed",
    }


def _lowered_exec_call(number: int, name: str) -> JsonObject:
    script = _exec_call(number)["input"]
    return {
        "type": "function_call",
        "id": f"fc_{number}",
        "call_id": f"call_{number}",
        "name": name,
        "arguments": json.dumps({"input": script}),
        "status": "completed",
    }


def lowered_exec(body: JsonObject) -> str | None:
    """The function the gateway offers for Codex's ``exec`` custom tool when the upstream takes
    only functions (``exec``, or ``{namespace}__exec`` inside a namespace)."""
    names = [str(t.get("name")) for t in body.get("tools") or [] if t.get("type") == "function"]
    return next((name for name in names if name.split("__")[-1] == "exec"), None)


def shell_tool(body: JsonObject) -> str | None:
    """The name of the first shell function among the request's tools."""
    names = {t.get("name") for t in body.get("tools") or [] if t.get("type") == "function"}
    return next((name for name in SHELL_TOOLS if name in names), None)


def code_mode(body: JsonObject) -> bool:
    """Whether the request offers Codex's ``exec`` tool (JavaScript that calls the other tools,
    in an ``additional_tools`` input item with the newest models)."""
    offered = list(body.get("tools") or [])
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            offered += item.get("tools") or []
    for tool in offered:
        inner = tool.get("tools") if tool.get("type") == "namespace" else [tool]
        if any(t.get("type") == "custom" and t.get("name") == "exec" for t in inner or []):
            return True
    return False


def command_output(body: JsonObject) -> str | None:
    """The text of the last ``function_call_output`` (or ``custom_tool_call_output``) in the
    request's input."""
    found: str | None = None
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") in (
            "function_call_output",
            "custom_tool_call_output",
        ):
            output = item.get("output")
            found = output if isinstance(output, str) else json.dumps(output)
    return found


def _message(item_id: str, text: str) -> JsonObject:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


async def _sse(events: list[JsonObject]) -> AsyncIterator[bytes]:
    for number, event in enumerate(events):
        event = {**event, "sequence_number": number}
        yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
