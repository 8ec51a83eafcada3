"""The ``lm`` engine's request to the simulating model, and how its answer is read.

The prompt is built for each call, from the session's history only (no hard-coded examples):

- ``instructions``: the fixed ``SYSTEM_INSTRUCTION``;
- for each earlier call of the session, oldest first, a user turn with the call (compact JSON
  ``{"tool": <the spec's to_json()>, "arguments": <the arguments>}``) and an assistant turn with
  its result: the output as it was when the call succeeded, ``{"error": {"kind", "message"}}``
  when it failed (the instruction tells the model that such a turn was a failure that changed
  nothing, and never to answer with one);
- the current call as the last user turn.

The arguments are the parsed JSON object, or the text as the model wrote it when it is not one.
``text.format`` asks for ``json_schema`` (not strict) when the tool declares an output schema,
``json_object`` otherwise. The answer is the text of the response's ``output_text`` parts
(reasoning and other items are ignored), one JSON value, kept compact; a code fence around it is
tolerated.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.core.engines import EngineCall, EngineResult, ToolArgumentsError
from app.protocol.json_types import JsonObject

SYSTEM_INSTRUCTION = (
    "You simulate software tools. Each user message is one call of a tool, as JSON: the tool's "
    'spec under "tool" (its name, description, JSON-schema parameters and, when it has one, '
    'its output_schema) and the call\'s arguments under "arguments". Answer with the result '
    "the tool would return: a plausible, successful result, as one JSON value and nothing else "
    "(no prose, no code fence). When the tool declares an output_schema, the result must match "
    "it. Stay consistent with the earlier calls and results of this conversation: they "
    "happened, and the world they describe is the one the tools act on. An earlier answer of "
    'the form {"error": {"kind": ..., "message": ...}} was a failed call that changed nothing; '
    "never answer with an error yourself."
)

_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling fields sent with every request, when set."""

    temperature: float | None = None
    max_output_tokens: int | None = None


def call_turn(call: EngineCall) -> str:
    """The user turn of one call: the spec and the arguments, compact JSON."""
    try:
        arguments: Any = call.parsed_arguments()
    except ToolArgumentsError:
        arguments = call.arguments
    return orjson.dumps({"tool": call.tool.to_json(), "arguments": arguments}).decode()


def result_turn(result: EngineResult) -> str:
    """The assistant turn of one result: its output, or the error it carried."""
    if result.error is None:
        return result.output
    error = {"kind": result.error.kind, "message": result.error.message}
    return orjson.dumps({"error": error}).decode()


def text_format(call: EngineCall) -> JsonObject:
    """``json_schema`` when the tool declares an output schema, else ``json_object``."""
    schema = call.tool.output_schema
    if schema is None:
        return {"type": "json_object"}
    name = _NAME_UNSAFE.sub("_", call.tool.name)[:64] or "result"
    return {"type": "json_schema", "name": name, "schema": schema, "strict": False}


def build_request(
    model: str,
    history: Sequence[tuple[EngineCall, EngineResult]],
    call: EngineCall,
    sampling: Sampling,
) -> JsonObject:
    """The Responses request body that asks ``model`` for ``call``'s result."""
    turns: list[JsonObject] = []
    for earlier, result in history:
        turns.append(_message("user", call_turn(earlier)))
        turns.append(_message("assistant", result_turn(result)))
    turns.append(_message("user", call_turn(call)))
    body: JsonObject = {
        "model": model,
        "instructions": SYSTEM_INSTRUCTION,
        "input": turns,
        "text": {"format": text_format(call)},
        "store": False,
    }
    if sampling.temperature is not None:
        body["temperature"] = sampling.temperature
    if sampling.max_output_tokens is not None:
        body["max_output_tokens"] = sampling.max_output_tokens
    return body


def _message(role: str, text: str) -> JsonObject:
    return {"type": "message", "role": role, "content": text}


def answer_text(response: JsonObject) -> str:
    """The text of the response's ``output_text`` parts (reasoning and other items ignored)."""
    texts: list[str] = []
    for item in response.get("output") or ():
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        for part in item.get("content") or ():
            if isinstance(part, dict) and part.get("type") == "output_text":
                texts.append(str(part.get("text") or ""))
    return "".join(texts)


class UnparseableAnswer(ValueError):
    """The model's answer is not one JSON value."""


def parse_answer(text: str) -> Any:
    """The JSON value of the answer (a surrounding code fence tolerated)."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced is not None:
        stripped = fenced.group(1).strip()
    if not stripped:
        raise UnparseableAnswer("the simulating model gave an empty answer")
    try:
        return orjson.loads(stripped)
    except orjson.JSONDecodeError as exc:
        raise UnparseableAnswer(
            f"the simulated result is not JSON ({exc}): {_bounded(stripped)}"
        ) from None


def _bounded(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."
