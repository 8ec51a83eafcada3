"""Responses API request body -> chat-completions request body (pure, no I/O).

A chat-completions server (Ollama, llama.cpp, TGI, vLLM, SGLang, DeepSeek-style APIs) knows
messages, function tools and a handful of sampling fields. What it cannot express is either
dropped (stateful fields, item types of the gateway's own that the core did not lower) or, when
dropping it would change the answer the client asked for (files, hosted tools), refused with a
400 naming the offending parameter.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from app.errors import InvalidRequestError
from app.protocol.json_types import JsonObject
from app.upstream.chat_items import arguments_text

logger = logging.getLogger(__name__)

# Sampling extras of vLLM, SGLang, llama.cpp, Ollama and TGI a client may put in the body.
_PASSTHROUGH_FIELDS = (
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
    "logit_bias",
    "chat_template_kwargs",
)

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})
_TOOL_CHOICE_MODES = frozenset({"auto", "none", "required"})


@dataclass(frozen=True, slots=True)
class ChatOptions:
    """How requests are shaped for one chat-completions upstream."""

    # How prior reasoning items are sent: dropped, or as the next assistant message's
    # ``reasoning_content`` (DeepSeek, llama.cpp, older vLLM) or ``reasoning`` (newer vLLM) field.
    reasoning_history: Literal["drop", "reasoning_content", "reasoning"] = "drop"
    send_reasoning_effort: bool = True  # reasoning.effort -> reasoning_effort
    stream_usage: bool = True  # stream_options.include_usage when streaming


def to_chat_request(body: JsonObject, options: ChatOptions, *, stream: bool) -> JsonObject:
    """The chat-completions body for a Responses request body.

    Raises ``InvalidRequestError`` (with ``param``) for what a chat server cannot take.
    """
    out: JsonObject = {}
    if body.get("model") is not None:
        out["model"] = body["model"]
    out["messages"] = _messages(body, options)

    tools, tool_choice = _tools_and_choice(body.get("tools"), body.get("tool_choice"))
    if tools:
        # Without tools, OpenAI-strict servers reject tool_choice and parallel_tool_calls.
        out["tools"] = tools
        if tool_choice is not None:
            out["tool_choice"] = tool_choice
        if body.get("parallel_tool_calls") is not None:
            out["parallel_tool_calls"] = body["parallel_tool_calls"]

    response_format = _response_format(body.get("text"))
    if response_format is not None:
        out["response_format"] = response_format
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = body[key]
    if options.send_reasoning_effort:
        reasoning = body.get("reasoning")
        effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
        if effort is not None:
            out["reasoning_effort"] = effort
    user = body.get("user") or body.get("safety_identifier")
    if user is not None:
        out["user"] = user
    for key in _PASSTHROUGH_FIELDS:
        value = body.get(key)
        if value is not None:
            out[key] = value

    out["stream"] = stream
    if stream and options.stream_usage:
        out["stream_options"] = {"include_usage": True}
    return out


# --------------------------------------------------------------------------- messages


class _MessageBuilder:
    """Appends chat messages for input items, merging an assistant turn's text and calls."""

    __slots__ = ("messages", "options", "pending_reasoning")

    def __init__(self, options: ChatOptions) -> None:
        self.options = options
        self.messages: list[JsonObject] = []
        self.pending_reasoning: list[str] = []

    def add_item(self, item: Any) -> None:
        if not isinstance(item, dict):
            logger.debug("chat upstream: dropped a non-object input item")
            return
        kind = item.get("type")
        if kind == "message" or (kind is None and "role" in item):
            self._message(item)
        elif kind == "function_call":
            self._function_call(item)
        elif kind == "function_call_output":
            self.messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id") or "",
                    "content": _output_text(item.get("output")),
                }
            )
        elif kind == "reasoning":
            if self.options.reasoning_history != "drop":
                text = _reasoning_text(item)
                if text:
                    self.pending_reasoning.append(text)
        else:
            logger.debug("chat upstream: dropped an input item of type %r", kind)

    def _message(self, item: JsonObject) -> None:
        role = _ROLES.get(str(item.get("role") or "user"))
        if role is None:
            logger.debug("chat upstream: dropped a message with role %r", item.get("role"))
            return
        content = item.get("content")
        if role == "assistant":
            message: JsonObject = {"role": "assistant", "content": _assistant_text(content)}
            self._attach_reasoning(message)
            self.messages.append(message)
            return
        self.messages.append({"role": role, "content": _user_content(content)})

    def _function_call(self, item: JsonObject) -> None:
        arguments = item.get("arguments")
        call = {
            "id": item.get("call_id") or item.get("id") or "",
            "type": "function",
            "function": {"name": item.get("name") or "", "arguments": arguments_text(arguments)},
        }
        last = self.messages[-1] if self.messages else None
        if last is not None and last.get("role") == "assistant":
            # Consecutive calls, or the calls that follow the turn's text: one assistant turn.
            last.setdefault("tool_calls", []).append(call)
            self._attach_reasoning(last)
            return
        message: JsonObject = {"role": "assistant", "content": "", "tool_calls": [call]}
        self._attach_reasoning(message)
        self.messages.append(message)

    def _attach_reasoning(self, message: JsonObject) -> None:
        if not self.pending_reasoning:
            return
        field = self.options.reasoning_history
        text = "\n".join(self.pending_reasoning)
        self.pending_reasoning = []
        previous = message.get(field)
        message[field] = f"{previous}\n{text}" if isinstance(previous, str) and previous else text


def _messages(body: JsonObject, options: ChatOptions) -> list[JsonObject]:
    builder = _MessageBuilder(options)
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        builder.messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        builder.messages.append({"role": "user", "content": items})
    elif isinstance(items, list):
        for item in items:
            builder.add_item(item)
    return builder.messages


def _user_content(content: Any) -> str | list[JsonObject]:
    """A plain string when every part is text (what every chat server takes), else parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else str(content)
    parts: list[JsonObject] = []
    has_image = False
    for part in content:
        if not isinstance(part, dict):
            if isinstance(part, str):
                parts.append({"type": "text", "text": part})
            continue
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": str(part.get("text") or "")})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal") or "")})
        elif kind == "input_image":
            parts.append(_image_part(part))
            has_image = True
        elif kind == "input_file":
            raise InvalidRequestError(
                "A chat-completions upstream cannot take input_file parts; "
                "send the file's text as input_text instead.",
                param="input",
            )
        else:
            logger.debug("chat upstream: dropped a content part of type %r", kind)
    if has_image:
        return parts
    return "\n".join(part["text"] for part in parts)


def _image_part(part: JsonObject) -> JsonObject:
    url = part.get("image_url")
    if isinstance(url, dict):  # the chat shape, sent by some clients anyway
        url = url.get("url")
    if not isinstance(url, str) or not url:
        raise InvalidRequestError(
            "A chat-completions upstream cannot take an input_image by file_id; "
            "send it as image_url (an https or data: URL).",
            param="input",
        )
    image: JsonObject = {"url": url}
    if part.get("detail") is not None:
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def _assistant_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else str(content)
    texts: list[str] = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict):
            kind = part.get("type")
            if kind in _TEXT_PARTS:
                texts.append(str(part.get("text") or ""))
            elif kind == "refusal":
                texts.append(str(part.get("refusal") or ""))
            else:
                logger.debug("chat upstream: dropped an assistant part of type %r", kind)
    return "".join(texts)


def _output_text(output: Any) -> str:
    """A function_call_output's ``output`` as the tool message's string content."""
    if isinstance(output, str):
        return output
    if output is None:
        return ""
    if isinstance(output, list):
        texts = []
        for part in output:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                logger.debug("chat upstream: dropped a tool output part %r", _kind(part))
        return "\n".join(texts)
    return orjson.dumps(output).decode()


def _reasoning_text(item: JsonObject) -> str:
    texts = _part_texts(item.get("content"), "reasoning_text")
    if not texts:
        texts = _part_texts(item.get("summary"), "summary_text")
    return "\n".join(texts)


def _part_texts(parts: Any, kind: str) -> list[str]:
    if not isinstance(parts, list):
        return []
    return [
        part["text"]
        for part in parts
        if isinstance(part, dict)
        and part.get("type", kind) == kind
        and isinstance(part.get("text"), str)
        and part["text"]
    ]


def _kind(part: Any) -> Any:
    return part.get("type") if isinstance(part, dict) else type(part).__name__


# --------------------------------------------------------------------------- tools


def _tools_and_choice(tools: Any, choice: Any) -> tuple[list[JsonObject], Any]:
    out: list[JsonObject] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        kind = tool.get("type")
        if kind != "function":
            raise InvalidRequestError(
                f"A chat-completions upstream cannot run tools of type {kind!r}; "
                "only function tools are supported.",
                param="tools",
            )
        function: JsonObject = {"name": tool.get("name")}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        out.append({"type": "function", "function": function})
    if choice is None:
        return out, None
    if isinstance(choice, str) and choice in _TOOL_CHOICE_MODES:
        return out, _checked_choice(choice, out)
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "function" and isinstance(choice.get("name"), str):
            named = {"type": "function", "function": {"name": choice["name"]}}
            return out, _checked_choice(named, out)
        if kind == "allowed_tools" and choice.get("mode", "auto") in ("auto", "required"):
            allowed = _allowed_names(choice.get("tools"))
            kept = [tool for tool in out if tool["function"]["name"] in allowed]
            return kept, _checked_choice(choice.get("mode", "auto"), kept)
    raise InvalidRequestError(
        f"A chat-completions upstream cannot take tool_choice {_describe(choice)}.",
        param="tool_choice",
    )


def _checked_choice(choice: Any, tools: list[JsonObject]) -> Any:
    """``auto``/``none`` need no tools (and are then left out); a forced choice does."""
    if tools or choice in ("auto", "none"):
        return choice
    raise InvalidRequestError(
        "tool_choice requires a tool to call, but the request offers none.",
        param="tool_choice",
    )


def _allowed_names(entries: Any) -> set[str]:
    names: set[str] = set()
    for entry in entries if isinstance(entries, list) else []:
        if not (isinstance(entry, dict) and entry.get("type") == "function"):
            raise InvalidRequestError(
                "A chat-completions upstream can only restrict allowed_tools to function tools.",
                param="tool_choice",
            )
        name = entry.get("name")
        if isinstance(name, str):
            names.add(name)
    return names


def _describe(choice: Any) -> str:
    if isinstance(choice, dict):
        return f"of type {choice.get('type')!r}"
    return repr(choice)


def _response_format(text: Any) -> JsonObject | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict):
        return None
    kind = fmt.get("type")
    if kind == "json_schema":
        schema: JsonObject = {"name": fmt.get("name") or "response"}
        for key in ("description", "schema", "strict"):
            if fmt.get(key) is not None:
                schema[key] = fmt[key]
        return {"type": "json_schema", "json_schema": schema}
    if kind == "json_object":
        return {"type": "json_object"}
    if kind not in (None, "text"):
        raise InvalidRequestError(
            f"A chat-completions upstream cannot take text.format of type {kind!r}.",
            param="text.format",
        )
    return None
