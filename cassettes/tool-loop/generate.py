"""Write the scripted upstream recordings of ``cassettes/tool-loop/``.

Each scenario of ``tests/e2e/test_tool_loop.py`` gets one cassette: the upstream turns
(``POST /v1/responses``) a vLLM server running Qwen/Qwen3.5-35B-A3B-FP8 would answer for a model
that calls the counter MCP server's tools through the gateway. They are hand-written, not
captured from a live server, but they keep vLLM's shapes as the real recordings of
``../shared/cassettes/upstream`` show them:

- streams: ``response.created`` and ``response.in_progress``, then per item
  ``output_item.added`` ... ``output_item.done`` with token-sized deltas (reasoning as
  ``reasoning_part.*`` + ``reasoning_text.delta``, calls as ``function_call_arguments.delta``,
  text as ``output_text.delta`` with ``logprobs``), then ``response.completed`` with usage
  (``*_per_turn`` arrays included);
- streamed item ids are bare hex, while the final object renames them (``rs_``, ``fc_``,
  ``msg_``) and gives function calls other call ids (``chatcmpl-tool-…`` instead of
  ``call_…``), as vLLM does; the gateway keeps what it streamed;
- JSON answers are the same final Response object;
- a round decoded for a forced ``tool_choice`` has no reasoning and echoes the structured
  output format (``text.format`` ``tool_calling_response``), as vLLM's do.

The request bodies are what the gateway sends for the tests' client requests (the model, the
conversation so far as items, the MCP tools as ``function`` tools named
``mcp__{server_label}__{tool}``, ``stream``). Ids the gateway generates (``msg_…``, ``rs_…``,
``mcp_…``: a prefix and 32 hex digits) are placeholders here; the tests compare bodies with
those ids numbered by first appearance.

The client side of each scenario (prompts, tools, limits) is ``tests/e2e/tool_loop_cases.py``.
The counter server's and server-everything's tool schemas are listed from the real servers
(``tests/mcp_servers``), so node is needed. Output is deterministic; run from the repository
root:

    .venv/bin/python cassettes/tool-loop/generate.py
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.recording.cassette import dump_cassette_text, parse_cassette  # noqa: E402
from app.tools.mcp.client import McpSession  # noqa: E402
from app.tools.mcp.spec import McpServerSpec  # noqa: E402
from tests.e2e import tool_loop_cases as cases  # noqa: E402
from tests.mcp_servers.counter import serve_counter  # noqa: E402
from tests.mcp_servers.everything import serve_everything  # noqa: E402

JsonObject = dict[str, Any]

OUT = Path(__file__).resolve().parent
HEADER = "# Scripted (hand-written) upstream recording, not captured from a live server: {}\n"
MAX_MODEL_LEN = 262144
CREATED_AT = 1789200000
USER_AGENT = "Python/3.11 aiohttp/3.14.5"
_TOKEN = re.compile(r"\s*[A-Za-z0-9_]+|\s*[^\sA-Za-z0-9_]|\s+")


def tokens(text: str) -> list[str]:
    """``text`` cut into token-sized deltas (words with their leading space, punctuation)."""
    return _TOKEN.findall(text)


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def arguments(value: JsonObject) -> str:
    """Arguments as Qwen writes them (``{"a": 20, "b": 22}``)."""
    return json.dumps(value, ensure_ascii=False)


# ----------------------------------------------------------------------------- the model's side


@dataclass
class Call:
    name: str
    arguments: str


@dataclass
class Round:
    """One upstream answer: reasoning (none when vLLM forces tool calls with structured
    output), then function calls or a message."""

    reasoning: str | None
    calls: list[Call] = field(default_factory=list)
    message: str | None = None


class Ids:
    """Deterministic ids, so that regenerating gives the same files."""

    def __init__(self, scenario: str) -> None:
        self._scenario = scenario
        self._count = 0

    def hex(self, digits: int = 16) -> str:
        self._count += 1
        seed = f"{self._scenario}:{self._count}".encode()
        return hashlib.sha256(seed).hexdigest()[:digits]

    def gateway(self, prefix: str) -> str:
        """A placeholder for an id the gateway generates (UUIDv7 hex)."""
        digits = self.hex(32)
        return f"{prefix}_0198{digits[4:12]}7{digits[13:16]}a{digits[17:]}"


def _usage(input_tokens: int, output_tokens: int, reasoning_tokens: int) -> JsonObject:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": 0,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {
            "reasoning_tokens": reasoning_tokens,
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": input_tokens + output_tokens,
    }


def _text_format(request: JsonObject) -> JsonObject | None:
    """vLLM's ``text`` echo: the structured output it decodes a forced tool choice with (an
    array of calls for ``required``, the function's parameters for a named function)."""
    choice = request.get("tool_choice", "auto")
    tools = request.get("tools") or []
    if choice == "required":
        schema: JsonObject = {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "anyOf": [
                    {
                        "properties": {
                            "name": {"type": "string", "enum": [tool["name"]]},
                            "parameters": tool["parameters"],
                        },
                        "required": ["name", "parameters"],
                    }
                    for tool in tools
                ],
            },
        }
    elif isinstance(choice, dict) and choice.get("type") == "function":
        (tool,) = [tool for tool in tools if tool["name"] == choice["name"]]
        schema = tool["parameters"]
    else:
        return None
    return {
        "format": {
            "name": "tool_calling_response",
            "schema": schema,
            "type": "json_schema",
            "description": None,
            "strict": True,
        },
        "verbosity": None,
    }


class Renderer:
    """One upstream answer in vLLM's shapes, streamed or as JSON."""

    def __init__(self, ids: Ids, request: JsonObject, answer: Round, created_at: int) -> None:
        self.ids = ids
        self.request = request
        self.answer = answer
        self.created_at = created_at
        self.response_id = f"resp_{ids.hex()}"
        self.input_tokens = len(compact([request.get("input"), request.get("tools")])) // 4
        reasoning = len(tokens(answer.reasoning or ""))
        calls = sum(len(tokens(call.arguments)) + 6 for call in answer.calls)
        text = len(tokens(answer.message or ""))
        self.usage = _usage(self.input_tokens, reasoning + calls + text + 2, reasoning)

    def response(
        self, status: str, output: list[JsonObject], usage: JsonObject | None
    ) -> JsonObject:
        tools = [{**tool, "defer_loading": None} for tool in self.request.get("tools") or []]
        return {
            "id": self.response_id,
            "created_at": self.created_at,
            "incomplete_details": None,
            "instructions": None,
            "metadata": None,
            "model": cases.MODEL,
            "object": "response",
            "output": output,
            "parallel_tool_calls": True,
            "temperature": 1.0,
            "tool_choice": self.request.get("tool_choice", "auto"),
            "tools": tools,
            "top_p": 0.95,
            "background": False,
            "max_output_tokens": MAX_MODEL_LEN - self.input_tokens,
            "max_tool_calls": None,
            "previous_response_id": None,
            "prompt": None,
            "reasoning": None,
            "service_tier": "auto",
            "status": status,
            "text": _text_format(self.request),
            "top_logprobs": None,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "kv_transfer_params": None,
            "input_messages": None,
            "output_messages": None,
        }

    # -- final items (the renamed ones of response.completed and of JSON answers)

    def final_output(self) -> list[JsonObject]:
        answer = self.answer
        output: list[JsonObject] = []
        if answer.reasoning is not None:
            output.append(
                {
                    "id": f"rs_{self.ids.hex()}",
                    "summary": [],
                    "type": "reasoning",
                    "content": [{"text": answer.reasoning, "type": "reasoning_text"}],
                    "encrypted_content": None,
                    "status": None,
                }
            )
        for call in answer.calls:
            output.append(
                {
                    "arguments": call.arguments,
                    "call_id": f"chatcmpl-tool-{self.ids.hex()}",
                    "name": call.name,
                    "type": "function_call",
                    "id": f"fc_{self.ids.hex()}",
                    "namespace": None,
                    "status": "completed",
                }
            )
        if answer.message is not None:
            output.append(
                {
                    "id": f"msg_{self.ids.hex()}",
                    "content": [
                        {
                            "annotations": [],
                            "text": answer.message,
                            "type": "output_text",
                            "logprobs": None,
                        }
                    ],
                    "role": "assistant",
                    "status": "completed",
                    "type": "message",
                    "phase": None,
                }
            )
        return output

    def body(self) -> JsonObject:
        return self.response("completed", self.final_output(), self.usage)

    # -- the stream

    def events(self) -> list[JsonObject]:
        events: list[JsonObject] = []

        def emit(kind: str, **fields: Any) -> None:
            events.append({**fields, "sequence_number": len(events), "type": kind})

        opening = self.response("in_progress", [], None)
        emit("response.created", response=opening)
        emit("response.in_progress", response=opening)
        index = -1
        answer = self.answer
        if answer.reasoning is not None:
            index += 1
            item_id = self.ids.hex()
            item: JsonObject = {
                "id": item_id,
                "summary": [],
                "type": "reasoning",
                "content": None,
                "encrypted_content": None,
                "status": "in_progress",
            }
            emit("response.output_item.added", item=item, output_index=index)
            where = {"content_index": 0, "item_id": item_id, "output_index": index}
            empty = {"text": "", "type": "reasoning_text"}
            emit("response.reasoning_part.added", **where, part=empty)
            for delta in tokens(answer.reasoning):
                emit("response.reasoning_text.delta", **where, delta=delta)
            emit("response.reasoning_text.done", **where, text=answer.reasoning)
            part = {"text": answer.reasoning, "type": "reasoning_text"}
            emit("response.reasoning_part.done", **where, part=part)
            done = {**item, "content": [part], "status": "completed"}
            emit("response.output_item.done", item=done, output_index=index)
        for call in answer.calls:
            index += 1
            item_id = self.ids.hex()
            item = {
                "arguments": "",
                "call_id": f"call_{self.ids.hex()}",
                "name": call.name,
                "type": "function_call",
                "id": item_id,
                "namespace": None,
                "status": "in_progress",
            }
            emit("response.output_item.added", item=item, output_index=index)
            where = {"item_id": item_id, "output_index": index}
            for delta in tokens(call.arguments):
                emit("response.function_call_arguments.delta", **where, delta=delta)
            emit(
                "response.function_call_arguments.done",
                **where,
                arguments=call.arguments,
                name=call.name,
            )
            done = {**item, "arguments": call.arguments, "status": "completed"}
            emit("response.output_item.done", item=done, output_index=index)
        if answer.message is not None:
            index += 1
            item_id = self.ids.hex()
            item = {
                "id": item_id,
                "content": [],
                "role": "assistant",
                "status": "in_progress",
                "type": "message",
                "phase": None,
            }
            emit("response.output_item.added", item=item, output_index=index)
            where = {"content_index": 0, "item_id": item_id, "output_index": index}
            empty = {"annotations": [], "text": "", "type": "output_text", "logprobs": []}
            emit("response.content_part.added", **where, part=empty)
            for delta in tokens(answer.message):
                emit("response.output_text.delta", **where, delta=delta, logprobs=[])
            emit("response.output_text.done", **where, logprobs=[], text=answer.message)
            part = {
                "annotations": [],
                "text": answer.message,
                "type": "output_text",
                "logprobs": None,
            }
            emit("response.content_part.done", **where, part=part)
            done = {**item, "content": [part], "status": "completed", "summary": []}
            emit("response.output_item.done", item=done, output_index=index)
        emit("response.completed", response=self.body())
        return [{k: event[k] for k in sorted(event)} for event in events]

    def sse(self) -> list[str]:
        lines: list[str] = []
        for event in self.events():
            lines += [f"event: {event['type']}\n", f"data: {compact(event)}\n", "\n"]
        return lines


# ----------------------------------------------------------------------------- the gateway's side


def function_tool(label: str, tool: JsonObject) -> JsonObject:
    """An MCP tool as the gateway offers it to the upstream."""
    return {
        "type": "function",
        "name": f"mcp__{label}__{tool['name']}",
        "description": tool.get("description") or "",
        "parameters": tool["input_schema"],
        "strict": False,
    }


class Conversation:
    """The items the gateway sends upstream, grown round by round like the tool loop does.

    Items keep the shapes the gateway gives them: the client's input in OpenAI's canonical
    form, the model's items as the gateway streamed them to the client (its own ids, vLLM's
    extra fields kept), MCP calls of earlier responses lowered to ``function_call`` and
    ``function_call_output`` pairs whose call id is the ``mcp_call`` item's id."""

    def __init__(self, ids: Ids) -> None:
        self.ids = ids
        self.items: list[JsonObject] = []

    def user(self, text: str) -> None:
        self.items.append(
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
                "status": "completed",
                "id": self.ids.gateway("msg"),
            }
        )

    def model_round(self, answer: Round, call_ids: list[str], *, streamed: bool) -> None:
        """The model's items of one round, as the gateway keeps them (a streamed message
        keeps the ``summary`` vLLM's ``output_item.done`` gives it)."""
        if answer.reasoning is not None:
            self.items.append(
                {
                    "id": self.ids.gateway("rs"),
                    "summary": [],
                    "type": "reasoning",
                    "content": [{"text": answer.reasoning, "type": "reasoning_text"}],
                    "encrypted_content": None,
                    "status": "completed",
                }
            )
        for call, call_id in zip(answer.calls, call_ids, strict=True):
            self.items.append(
                {
                    "arguments": call.arguments,
                    "call_id": call_id,
                    "name": call.name,
                    "type": "function_call",
                    "id": self.ids.gateway("fc"),
                    "namespace": None,
                    "status": "completed",
                }
            )
        if answer.message is not None:
            self.items.append(
                {
                    "id": self.ids.gateway("msg"),
                    "content": [
                        {
                            "annotations": [],
                            "text": answer.message,
                            "type": "output_text",
                            "logprobs": None,
                        }
                    ],
                    "role": "assistant",
                    "status": "completed",
                    "type": "message",
                    "phase": None,
                    **({"summary": []} if streamed else {}),
                }
            )

    def output(self, call_id: str, text: str) -> None:
        """A gateway call's result, fed back in the same response."""
        self.items.append({"type": "function_call_output", "call_id": call_id, "output": text})

    def client_output(self, call_id: str, text: str) -> None:
        """A client's ``function_call_output`` input item (canonical, with the gateway's id)."""
        self.items.append(
            {
                "type": "function_call_output",
                "call_id": call_id,
                "output": text,
                "status": "completed",
                "id": self.ids.gateway("fco"),
            }
        )

    def lower_calls(self, calls: list[str]) -> None:
        """The round's calls as a later response's history shows them: each gateway call's
        ``function_call`` is replaced by the lowered pair of its ``mcp_call`` item (call id
        the item's id); ``calls`` names the call ids of the gateway's calls."""
        lowered: list[JsonObject] = []
        outputs = {
            item["call_id"]: item["output"]
            for item in self.items
            if item["type"] == "function_call_output" and item["call_id"] in calls
        }
        for item in self.items:
            if item["type"] == "function_call_output" and item["call_id"] in calls:
                continue
            if item["type"] == "function_call" and item["call_id"] in calls:
                call_id = self.ids.gateway("mcp")
                lowered.append(
                    {
                        "type": "function_call",
                        "call_id": call_id,
                        "name": item["name"],
                        "arguments": item["arguments"],
                        "status": "completed",
                    }
                )
                lowered.append(
                    {
                        "type": "function_call_output",
                        "call_id": call_id,
                        "output": outputs[item["call_id"]],
                    }
                )
                continue
            lowered.append(item)
        self.items = lowered

    def approved_call(self, call: Call, request_id: str, output: str) -> None:
        """An approval request answered in this request: the call and its result (or the
        decline), under the request's id."""
        self.items.append(
            {
                "type": "function_call",
                "call_id": request_id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
        )
        self.items.append({"type": "function_call_output", "call_id": request_id, "output": output})

    def snapshot(self) -> list[JsonObject]:
        return json.loads(json.dumps(self.items))


class Script:
    """The turns of one cassette."""

    def __init__(self, name: str, tools: list[JsonObject]) -> None:
        self.name = name
        self.tools = tools
        self.ids = Ids(name)
        self.turns: list[JsonObject] = []

    def turn(
        self, conversation: Conversation, answer: Round, *, stream: bool, **extra: Any
    ) -> list[str]:
        """Record one upstream turn; the model's items join ``conversation``. Returns the call
        ids the model gave its calls (what the gateway feeds back)."""
        request: JsonObject = {
            "model": cases.MODEL,
            "input": conversation.snapshot(),
            "tools": self.tools,
            "stream": stream,
            **extra,
        }
        renderer = Renderer(self.ids, request, answer, CREATED_AT + len(self.turns))
        headers = {
            "accept": "text/event-stream" if stream else "application/json",
            "authorization": "Bearer ***",
            "content-type": "application/json",
            "user-agent": USER_AGENT,
        }
        response: JsonObject
        if stream:
            sse = renderer.sse()
            events = [json.loads(line[6:]) for line in sse if line.startswith("data: ")]
            call_ids = [
                e["item"]["call_id"]
                for e in events
                if e["type"] == "response.output_item.added"
                and e["item"]["type"] == "function_call"
            ]
            response = {
                "headers": {"content-type": "text/event-stream; charset=utf-8"},
                "sse": sse,
                "status_code": 200,
            }
        else:
            body = renderer.body()
            call_ids = [i["call_id"] for i in body["output"] if i["type"] == "function_call"]
            response = {
                "body": body,
                "headers": {"content-type": "application/json"},
                "status_code": 200,
            }
        self.turns.append(
            {
                "filename": f"t{len(self.turns) + 1}",
                "request": {
                    "body": request,
                    "headers": headers,
                    "method": "POST",
                    "path": "/v1/responses",
                    "query_params": {},
                },
                "response": response,
            }
        )
        conversation.model_round(answer, call_ids, streamed=stream)
        return call_ids

    def write(self, description: str) -> Path:
        """The cassette in the recorder's layout (``dump_cassette_text``), under its header."""
        path = OUT / f"{self.name}.yaml"
        cassette = parse_cassette(json.loads(json.dumps({"turns": self.turns})), str(path))
        path.write_text(HEADER.format(description) + dump_cassette_text(cassette), "utf-8")
        return path


# ----------------------------------------------------------------------------- scenarios


def sum_call(a: int, b: int) -> Call:
    return Call("mcp__counter__sum", arguments({"a": a, "b": b}))


def echo_call(message: str) -> Call:
    return Call("mcp__counter__echo", arguments({"message": message}))


class ToolSource:
    """The servers' tool listings, as the gateway turns them into function tools."""

    def __init__(self, counter: list[JsonObject], everything: list[JsonObject]) -> None:
        self._counter = counter
        self._everything = everything

    def counter(self, scenario: str) -> list[JsonObject]:
        allowed = cases.ALLOWED[scenario]
        return [function_tool(cases.COUNTER, t) for t in self._counter if t["name"] in allowed]

    def everything(self) -> list[JsonObject]:
        return [function_tool(cases.EVERYTHING, t) for t in self._everything]


def multi_round(tools: ToolSource) -> Script:
    """sum, then echo with its result, then the answer (streamed, then as JSON)."""
    script = Script("multi-round", tools.counter("multi-round"))
    for stream in (True, False):
        chat = Conversation(script.ids)
        chat.user(cases.PROMPTS["multi-round"])
        (first,) = script.turn(
            chat,
            Round(
                "The user wants me to add 20 and 22 with the sum tool first, then pass the "
                "result to echo. Let me call sum.\n",
                [sum_call(20, 22)],
            ),
            stream=stream,
        )
        chat.output(first, "42")
        (second,) = script.turn(
            chat,
            Round("sum returned 42. Now I pass it to echo.\n", [echo_call("42")]),
            stream=stream,
        )
        chat.output(second, "42")
        script.turn(
            chat,
            Round(
                "echo returned 42, so I can answer.\n",
                message="\n\nThe sum of 20 and 22 is 42, and echo returned 42.",
            ),
            stream=stream,
        )
    return script


def parallel(tools: ToolSource) -> Script:
    """sum and echo in one round, then the answer (streamed, then as JSON)."""
    script = Script("parallel", tools.counter("parallel"))
    for stream in (True, False):
        chat = Conversation(script.ids)
        chat.user(cases.PROMPTS["parallel"])
        add, echo = script.turn(
            chat,
            Round(
                "Two independent calls: sum with a=20 and b=22, and echo with 'hello'. I can "
                "make both at once.\n",
                [sum_call(20, 22), echo_call("hello")],
            ),
            stream=stream,
        )
        chat.output(add, "42")
        chat.output(echo, "hello")
        script.turn(
            chat,
            Round(
                "sum gave 42 and echo gave hello.\n",
                message="\n\nsum returned 42 and echo returned hello.",
            ),
            stream=stream,
        )
    return script


def failing_tool(tools: ToolSource) -> Script:
    """fail answers isError; the model reads the error and explains."""
    script = Script("failing-tool", tools.counter("failing-tool"))
    chat = Conversation(script.ids)
    chat.user(cases.PROMPTS["failing-tool"])
    (call,) = script.turn(
        chat,
        Round(
            "The user wants me to call fail with the message 'boom'.\n",
            [Call("mcp__counter__fail", arguments({"message": "boom"}))],
        ),
        stream=True,
    )
    chat.output(call, cases.FAIL_OUTPUT)
    script.turn(
        chat,
        Round(
            "The tool reported an error: Error executing tool fail: boom.\n",
            message="\n\nThe fail tool returned an error: boom.",
        ),
        stream=True,
    )
    return script


def timeout(tools: ToolSource) -> Script:
    """sleep(5) outlives the gateway's per-call timeout; the model is told it timed out."""
    script = Script("timeout", tools.counter("timeout"))
    chat = Conversation(script.ids)
    chat.user(cases.PROMPTS["timeout"])
    (call,) = script.turn(
        chat,
        Round(
            "I need to call sleep with seconds=5 and report whether it finished.\n",
            [Call("mcp__counter__sleep", arguments({"seconds": 5}))],
        ),
        stream=True,
    )
    chat.output(call, cases.TIMEOUT_OUTPUT)
    script.turn(
        chat,
        Round(
            "The sleep call timed out, so it did not finish.\n",
            message="\n\nThe sleep call did not finish: it timed out.",
        ),
        stream=True,
    )
    return script


def round_cap(tools: ToolSource) -> Script:
    """The model keeps calling sum; with tool_max_rounds=2 the second round's call is not run
    and there is no third turn (streamed, then as JSON)."""
    script = Script("round-cap", tools.counter("round-cap"))
    for stream in (True, False):
        chat = Conversation(script.ids)
        chat.user(cases.PROMPTS["round-cap"])
        (call,) = script.turn(
            chat,
            Round("I start with sum(1, 1).\n", [sum_call(1, 1)]),
            stream=stream,
        )
        chat.output(call, "2")
        script.turn(
            chat,
            Round("sum returned 2. Next I add 1 again: sum(2, 1).\n", [sum_call(2, 1)]),
            stream=stream,
        )
    return script


def max_tool_calls(tools: ToolSource) -> Script:
    """Two sum calls in one round with max_tool_calls=1: the second is not run and the model
    is told so."""
    script = Script("max-tool-calls", tools.counter("max-tool-calls"))
    chat = Conversation(script.ids)
    chat.user(cases.PROMPTS["max-tool-calls"])
    first, second = script.turn(
        chat,
        Round("Two sums, I can call both at once.\n", [sum_call(1, 2), sum_call(3, 4)]),
        stream=True,
    )
    chat.output(first, "3")
    chat.output(second, "Error: not run: this response reached max_tool_calls (1)")
    script.turn(
        chat,
        Round(
            "1 + 2 = 3; the second call was not run because of the tool call limit.\n",
            message="\n\n1 + 2 = 3. The second sum was not run (tool call limit reached).",
        ),
        stream=True,
    )
    return script


def mixed_round(tools: ToolSource) -> Script:
    """An MCP call and the client's get_weather in one round: the gateway runs sum and returns
    get_weather; the client continues with its output (previous_response_id). Streamed, then
    as JSON."""
    script = Script("mixed-round", [cases.GET_WEATHER, *tools.counter("mixed-round")])
    for stream in (True, False):
        chat = Conversation(script.ids)
        chat.user(cases.PROMPTS["mixed-round"])
        add, weather = script.turn(
            chat,
            Round(
                "I need sum(20, 22) from the counter and the weather in Paris.\n",
                [sum_call(20, 22), Call("get_weather", arguments({"location": "Paris"}))],
            ),
            stream=stream,
        )
        chat.output(add, "42")
        # The next request continues from the stored response: sum is now its mcp_call item.
        chat.lower_calls([add])
        chat.client_output(weather, cases.WEATHER_OUTPUT)
        script.turn(
            chat,
            Round(
                "sum gave 42 and Paris is at 18 degrees and sunny.\n",
                message="\n\n20 + 22 = 42, and it is 18 °C and sunny in Paris.",
            ),
            stream=stream,
        )
    return script


def approval(tools: ToolSource, approve: bool) -> Script:
    """require_approval "always": the first response ends with an approval request; the
    continuation approves (the call runs first) or declines (the model is told). Streamed,
    then as JSON."""
    name = "approval-approve" if approve else "approval-decline"
    script = Script(name, tools.counter(name))
    for stream in (True, False):
        chat = Conversation(script.ids)
        chat.user(cases.PROMPTS[name])
        call = sum_call(20, 22)
        script.turn(
            chat,
            Round("The user wants sum(20, 22). Let me call the tool.\n", [call]),
            stream=stream,
        )
        # The call became an mcp_approval_request; the continuation answers it.
        chat.items = [item for item in chat.items if item["type"] != "function_call"]
        request_id = script.ids.gateway("mcpr")
        chat.approved_call(call, request_id, "42" if approve else cases.DECLINED_TEXT)
        if approve:
            answer = Round("The tool returned 42.\n", message="\n\n20 + 22 = 42.")
        else:
            answer = Round(
                "The user declined the tool call, so I cannot use the counter.\n",
                message="\n\nYou declined the sum call, so I did not run it. "
                "Without the tool: 20 + 22 = 42.",
            )
        script.turn(chat, answer, stream=stream)
    return script


def continuation(tools: ToolSource) -> Script:
    """A response with an MCP call, then a continuation (previous_response_id) that calls
    echo: its history carries the lowered call and the server is not listed again. Streamed,
    then as JSON."""
    script = Script("continuation", tools.counter("continuation"))
    for stream in (True, False):
        chat = Conversation(script.ids)
        chat.user(cases.PROMPTS["continuation"])
        (add,) = script.turn(
            chat,
            Round("The user wants sum(20, 22).\n", [sum_call(20, 22)]),
            stream=stream,
        )
        chat.output(add, "42")
        script.turn(chat, Round("sum returned 42.\n", message="\n\n20 + 22 = 42."), stream=stream)
        chat.lower_calls([add])
        chat.user(cases.PROMPTS["continuation-2"])
        (echo,) = script.turn(
            chat,
            Round("The number was 42; I echo it.\n", [echo_call("42")]),
            stream=stream,
        )
        chat.output(echo, "42")
        script.turn(
            chat, Round("echo returned 42.\n", message="\n\necho returned 42."), stream=stream
        )
    return script


def mcp_headers(tools: ToolSource) -> Script:
    """whoami answers the headers the gateway sent the server (the client's authorization
    and headers); the model reads them, the upstream request carries no credentials of its
    own."""
    script = Script("mcp-headers", tools.counter("mcp-headers"))
    chat = Conversation(script.ids)
    chat.user(cases.PROMPTS["mcp-headers"])
    (call,) = script.turn(
        chat,
        Round("I call whoami, it takes no arguments.\n", [Call("mcp__counter__whoami", "{}")]),
        stream=True,
    )
    chat.output(call, cases.WHOAMI_OUTPUT)
    script.turn(
        chat,
        Round(
            "whoami returned the request's headers.\n",
            message="\n\nThe counter server saw your Authorization and X-Test headers.",
        ),
        stream=True,
    )
    return script


def forced_choice(tools: ToolSource, name: str) -> Script:
    """A forced tool_choice (``required``, or the counter's sum by name): vLLM decodes the
    first round with structured output (calls only, no reasoning); once the gateway has run
    the call, the next round is sent with tool_choice "auto" and the model answers."""
    script = Script(name, tools.counter(name))
    chat = Conversation(script.ids)
    chat.user(cases.PROMPTS[name])
    _, upstream_choice = cases.TOOL_CHOICES[name]
    (add,) = script.turn(
        chat, Round(None, [sum_call(20, 22)]), stream=True, tool_choice=upstream_choice
    )
    chat.output(add, "42")
    script.turn(
        chat,
        Round("sum returned 42.\n", message="\n\n20 + 22 = 42."),
        stream=True,
        tool_choice="auto",
    )
    return script


def everything_echo(tools: ToolSource) -> Script:
    """server-everything's tools offered to the model; it calls echo."""
    script = Script("everything-echo", tools.everything())
    chat = Conversation(script.ids)
    chat.user(cases.PROMPTS["everything-echo"])
    (call,) = script.turn(
        chat,
        Round(
            "The user wants the echo tool with 'hello from respgate'.\n",
            [Call("mcp__everything__echo", arguments({"message": "hello from respgate"}))],
        ),
        stream=True,
    )
    chat.output(call, "Echo: hello from respgate")
    script.turn(
        chat,
        Round(
            "The echo tool answered.\n",
            message="\n\nThe echo tool said: Echo: hello from respgate",
        ),
        stream=True,
    )
    return script


SCENARIOS: list[tuple[str, Callable[[ToolSource], Script]]] = [
    ("several rounds (sum, then echo with its result, then the answer)", multi_round),
    ("parallel calls (sum and echo in one round)", parallel),
    ("a failing tool (fail answers isError)", failing_tool),
    ("a slow tool (sleep 5) hitting tool_call_timeout=0.5", timeout),
    ("the round cap (tool_max_rounds=2, the model keeps calling sum)", round_cap),
    ("max_tool_calls=1 with two calls in one round", max_tool_calls),
    ("a mixed round (MCP sum + client get_weather), then the client's output", mixed_round),
    ("approval approved (require_approval always)", lambda t: approval(t, True)),
    ("approval declined (require_approval always)", lambda t: approval(t, False)),
    ("a continuation after an MCP call (previous_response_id)", continuation),
    ("MCP headers and authorization reach the server (whoami)", mcp_headers),
    (
        'tool_choice "required": forced first round, then "auto"',
        lambda t: forced_choice(t, "tool-choice-required"),
    ),
    (
        'tool_choice naming the counter\'s sum: forced first round, then "auto"',
        lambda t: forced_choice(t, "tool-choice-named"),
    ),
    ("@modelcontextprotocol/server-everything: echo", everything_echo),
]


async def _list(url: str, label: str) -> list[JsonObject]:
    spec = McpServerSpec(label=label, url=url)
    session = await McpSession.open(spec, connect_timeout=10)
    try:
        return [info.to_item_tool() for info in await session.list_tools(timeout=10)]
    finally:
        await session.aclose()


def list_tools() -> ToolSource:
    with serve_counter("streamable_http") as counter_url:
        counter = asyncio.run(_list(counter_url, cases.COUNTER))
    with serve_everything() as everything_url:
        everything = asyncio.run(_list(everything_url, cases.EVERYTHING))
    return ToolSource(counter, everything)


def main() -> None:
    tools = list_tools()
    for description, build in SCENARIOS:
        print(build(tools).write(description).relative_to(ROOT))


if __name__ == "__main__":
    main()
