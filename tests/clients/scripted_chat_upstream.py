"""A scripted chat-completions upstream for client tests (an Ollama or llama.cpp server, say):
it streams chat chunks and answers the first round with a tool call and the round that carries
the tool's output with a message.

It sees only what a chat server sees: function tools (the gateway lowers Codex's ``namespace``,
``custom`` and ``tool_search`` tools into functions) and ``tool`` messages. The call is the shell
(``exec_command``), Codex's ``exec`` code-mode tool (a lowered custom tool: one ``input``
string), when the prompt asks for ``PATCH_FILE``, ``apply_patch`` (a lowered custom tool) with a
patch that creates it, or, when it names ``SEARCH_QUERY``, ``tool_search`` (Codex's client-run
tool search, lowered).
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import ClassVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from app.protocol.json_types import JsonObject
from tests.clients.scripted_upstream import (
    COMMAND,
    FINAL_TEXT,
    PATCH,
    PATCH_DONE_TEXT,
    PATCH_FILE,
    SHELL_TOOLS,
    ScriptedServer,
)

SEARCH_QUERY = "calendar"
SEARCH_DONE_TEXT = "The tool search ran."


@dataclass
class ScriptedChatUpstream(ScriptedServer):
    """A chat-completions server: records every chat request body; ``app`` serves them."""

    inference_path: ClassVar[str] = "/v1/chat/completions"

    async def _infer(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(copy.deepcopy(body))
        message = self.answer(body)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish}
            return JSONResponse({"object": "chat.completion", "choices": [choice]})
        return StreamingResponse(_chunks(message, finish), media_type="text/event-stream")

    def answer(self, body: JsonObject) -> JsonObject:
        """The assistant message for this round."""
        number = len(self.requests)
        messages = body.get("messages") or []
        outputs = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
        if outputs:
            return {"role": "assistant", "content": _final_text(body, outputs[-1])}
        functions = {t["function"]["name"]: t["function"] for t in body.get("tools") or []}
        if PATCH_FILE in _prompt(body) and "apply_patch" in functions:
            return _call(number, "apply_patch", {"input": PATCH})
        if SEARCH_QUERY in _prompt(body) and "tool_search" in functions:
            return _call(number, "tool_search", {"query": SEARCH_QUERY})
        shell = next((name for name in SHELL_TOOLS if name in functions), None)
        if shell == "exec_command":
            return _call(number, shell, {"cmd": COMMAND})
        if shell is not None:
            return _call(number, shell, {"command": ["bash", "-lc", COMMAND]})
        code = next((name for name in functions if name.split("__")[-1] == "exec"), None)
        if code is not None:
            script = f"const r = await tools.exec_command({{cmd: {COMMAND!r}}});\ntext(r);"
            return _call(number, code, {"input": script})
        return {"role": "assistant", "content": "No shell tool was offered."}


def _prompt(body: JsonObject) -> str:
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    return json.dumps(users[-1].get("content")) if users else ""


def _final_text(body: JsonObject, output: str) -> str:
    if PATCH_FILE in _prompt(body):
        return PATCH_DONE_TEXT
    if SEARCH_QUERY in _prompt(body):
        return SEARCH_DONE_TEXT
    return FINAL_TEXT if "respgate-ok" in output else "The command failed."


def _call(number: int, name: str, arguments: JsonObject) -> JsonObject:
    call = {
        "id": f"call_{number}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


async def _chunks(message: JsonObject, finish: str) -> AsyncIterator[bytes]:
    head = {"object": "chat.completion.chunk", "created": 0, "model": "scripted-model"}
    deltas: list[JsonObject] = [{"role": "assistant"}]
    if message.get("content"):
        text = str(message["content"])
        deltas += [{"content": text[: len(text) // 2]}, {"content": text[len(text) // 2 :]}]
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        opening = {**call, "index": index, "function": {"name": call["function"]["name"]}}
        deltas.append({"tool_calls": [opening]})
        # The arguments in small pieces, as a model streams them (escapes split too).
        for start in range(0, len(arguments), 7):
            piece = {"index": index, "function": {"arguments": arguments[start : start + 7]}}
            deltas.append({"tool_calls": [piece]})
    for delta in deltas:
        chunk = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    last = {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    yield f"data: {json.dumps(last)}\n\n".encode()
    yield b"data: [DONE]\n\n"
