"""A Messages request body -> the Responses request body the kernel runs.

What maps: ``system`` (a string or text blocks) -> ``instructions``; each message's blocks ->
input items in order (text and images -> a message, ``tool_use`` -> ``function_call``,
``tool_result`` -> ``function_call_output``, ``thinking`` -> ``reasoning``); ``role: "system"``
messages -> system messages; ``tools``, ``mcp_servers`` and ``tool_choice`` (module ``tools``);
``thinking`` and ``output_config.effort`` -> ``reasoning.effort``; ``max_tokens`` ->
``max_output_tokens``; ``temperature`` and ``top_p``; ``stop_sequences`` -> ``stop`` and
``top_k`` as they are (a chat-completions upstream takes both; the Responses API has no such
fields, so a Responses upstream gets them as extra fields). ``cache_control``,
``context_management``, ``metadata``, ``service_tier`` and ``container`` are accepted and
ignored. Nothing is stored: a Messages client sends the whole history each turn, so the
Responses request has ``store: false``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from app.frontends.anthropic.errors import invalid
from app.frontends.anthropic.tools import (
    TOOL_REFERENCE_PREFIX,
    deferred_found,
    mcp_tools,
    tool,
    tool_choice,
)
from app.protocol.json_types import JsonObject

_ROLES = frozenset({"user", "assistant", "system"})
# Anthropic's effort levels -> the Responses API's (``max`` is the most a server takes).
_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "max": "high"}


@dataclass(frozen=True, slots=True)
class MessagesRequest:
    """A checked Messages request: the Responses body to run and what the answer needs."""

    body: JsonObject
    model: str
    stream: bool
    stop_sequences: tuple[str, ...]
    # ``thinking.display: "omitted"``: thinking blocks come back without their text.
    omit_thinking: bool = False


def to_responses(messages_body: JsonObject) -> MessagesRequest:
    """Check ``messages_body`` as Anthropic does and translate it (400 on a bad shape)."""
    model = messages_body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model", "Field required (a model name).")
    max_tokens = messages_body.get("max_tokens")
    if max_tokens is None:
        raise invalid("max_tokens", "Field required (an integer >= 1).")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise invalid("max_tokens", f"Input should be an integer >= 1, not {max_tokens!r}.")
    stream = messages_body.get("stream", False)
    if not isinstance(stream, bool):
        raise invalid("stream", "Input should be a valid boolean.")
    body: JsonObject = {
        "model": model,
        "input": input_items(messages_body),
        "max_output_tokens": max_tokens,
        "store": False,
        "stream": stream,
    }
    instructions = system_text(messages_body.get("system"), "system")
    if instructions:
        body["instructions"] = instructions
    for name in ("temperature", "top_p"):
        value = messages_body.get(name)
        if value is not None:
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise invalid(name, "Input should be a valid number.")
            body[name] = value
    if messages_body.get("top_k") is not None:
        body["top_k"] = messages_body["top_k"]
    stops = _stop_sequences(messages_body.get("stop_sequences"))
    if stops:
        body["stop"] = list(stops)
    specs = _list(messages_body, "tools")
    found = deferred_found(specs, body["input"])
    tools = [tool(spec, f"tools[{i}]", found) for i, spec in enumerate(specs)]
    tools += mcp_tools(_list(messages_body, "mcp_servers"))
    offered = [tool for tool in tools if tool is not None]
    if offered:
        body["tools"] = offered
    tool_choice(messages_body.get("tool_choice"), body)
    reasoning = _reasoning(messages_body)
    if reasoning is not None:
        body["reasoning"] = reasoning
    thinking = messages_body.get("thinking")
    omit = isinstance(thinking, dict) and thinking.get("display") == "omitted"
    return MessagesRequest(body, model, stream, stops, omit)


def _list(body: JsonObject, name: str) -> list[Any]:
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid(name, "Input should be a valid list.")
    return value


def system_text(system: Any, param: str) -> str:
    """``system`` as one string: a string, or the text of its text blocks."""
    if system is None or isinstance(system, str):
        return system or ""
    if not isinstance(system, list):
        raise invalid(param, "Input should be a string or a list of text blocks.")
    texts = []
    for index, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise invalid(f"{param}[{index}]", "A system block must be a text block.")
        texts.append(_text(block, f"{param}[{index}]"))
    return "\n\n".join(texts)


def _text(block: JsonObject, param: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise invalid(f"{param}.text", "Field required (a string).")
    return text


def _stop_sequences(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise invalid("stop_sequences", "Input should be a list of strings.")
    return tuple(value)


# ------------------------------------------------------------------------------- messages


def input_items(messages_body: JsonObject) -> list[JsonObject]:
    messages = messages_body.get("messages")
    if not isinstance(messages, list):
        raise invalid("messages", "Field required (a list of messages).")
    items: list[JsonObject] = []
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise invalid(f"{param}.role", "Input should be 'user', 'assistant' or 'system'.")
        items += _message_items(message["role"], message.get("content"), param)
    return items


def _message_items(role: str, content: Any, param: str) -> list[JsonObject]:
    if isinstance(content, str):
        return [_message(role, [_text_part(role, content)])]
    if role == "system":
        return [_message(role, [_text_part(role, system_text(content, f"{param}.content"))])]
    if not isinstance(content, list):
        raise invalid(f"{param}.content", "Input should be a string or a list of blocks.")
    items: list[JsonObject] = []
    parts: list[JsonObject] = []
    for index, block in enumerate(content):
        where = f"{param}.content[{index}]"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise invalid(where, "A content block must be an object with a 'type'.")
        item = _block_item(block, where)
        if item is None:
            part = _content_part(role, block, where)
            if part is not None:
                parts.append(part)
            continue
        if parts:
            items.append(_message(role, parts))
            parts = []
        items.append(item)
    if parts or not items:
        items.append(_message(role, parts))
    return items


def _message(role: str, parts: list[JsonObject]) -> JsonObject:
    return {"type": "message", "role": role, "content": parts}


def _text_part(role: str, text: str) -> JsonObject:
    return {"type": "output_text" if role == "assistant" else "input_text", "text": text}


def _block_item(block: JsonObject, param: str) -> JsonObject | None:
    """The item a block becomes on its own (a call, an output, reasoning), else ``None``."""
    kind = block["type"]
    if kind == "tool_use":
        name = block.get("name")
        call_id = block.get("id")
        if not isinstance(name, str) or not isinstance(call_id, str):
            raise invalid(param, "A tool_use block needs a string 'id' and 'name'.")
        arguments = orjson.dumps(block.get("input") or {}).decode()
        return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}
    if kind == "tool_result":
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str):
            raise invalid(f"{param}.tool_use_id", "Field required (a string).")
        output = _tool_output(block.get("content"), f"{param}.content")
        if block.get("is_error") and isinstance(output, str):
            output = f"Error: {output}" if output else "Error"
        return {"type": "function_call_output", "call_id": call_id, "output": output}
    if kind == "thinking":
        thinking = block.get("thinking")
        if not isinstance(thinking, str):
            raise invalid(f"{param}.thinking", "Field required (a string).")
        signature = block.get("signature")
        # OpenAI's encrypted reasoning, which ``responses`` puts in the signature.
        encrypted = isinstance(signature, str) and signature.startswith("gAAAA")
        if not thinking and not encrypted:
            return None  # nothing to carry (``display: "omitted"`` gave it no text)
        item: JsonObject = {
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": thinking}],
        }
        if encrypted:
            item["encrypted_content"] = signature
        return item
    return None


def _content_part(role: str, block: JsonObject, param: str) -> JsonObject | None:
    """A block that is part of a message's content; ``None`` for blocks with nothing to say."""
    kind = block["type"]
    if kind == "text":
        return _text_part(role, _text(block, param))
    if kind == "image":
        return _image(block.get("source"), f"{param}.source")
    if kind == "document":
        return _document(block, param)
    if kind in ("thinking", "redacted_thinking", "server_tool_use") or kind.startswith(
        ("mcp_tool_", "web_search_tool_result")
    ):
        # Thinking without text, Anthropic's own encrypted reasoning, and server-tool calls and
        # results already folded into the assistant's text: nothing an upstream could read.
        return None
    # An unknown block is carried through: the upstream decides.
    return dict(block)


def _image(source: Any, param: str) -> JsonObject:
    if not isinstance(source, dict):
        raise invalid(param, "Field required (an image source).")
    kind = source.get("type")
    if kind == "base64":
        media_type, data = source.get("media_type"), source.get("data")
        if not isinstance(media_type, str) or not isinstance(data, str):
            raise invalid(param, "A base64 source needs 'media_type' and 'data'.")
        return {"type": "input_image", "image_url": f"data:{media_type};base64,{data}"}
    if kind == "url" and isinstance(source.get("url"), str):
        return {"type": "input_image", "image_url": source["url"]}
    raise invalid(f"{param}.type", "An image source is 'base64' or 'url'.")


def _document(block: JsonObject, param: str) -> JsonObject:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "text":
        return {"type": "input_text", "text": str(source.get("data") or "")}
    if isinstance(source, dict) and source.get("type") == "base64":
        name = str(block.get("title") or "document.pdf")
        data = f"data:{source.get('media_type')};base64,{source.get('data')}"
        return {"type": "input_file", "filename": name, "file_data": data}
    if isinstance(source, dict) and source.get("type") == "url":
        return {"type": "input_file", "file_url": str(source.get("url"))}
    raise invalid(f"{param}.source", "A document source is 'text', 'base64' or 'url'.")


def _tool_output(content: Any, param: str) -> str | list[JsonObject]:
    """A tool result's content: a string, or its blocks (a string when all are text)."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise invalid(param, "Input should be a string or a list of blocks.")
    parts: list[JsonObject] = []
    for index, block in enumerate(content):
        where = f"{param}[{index}]"
        if not isinstance(block, dict):
            raise invalid(where, "A content block must be an object.")
        if block.get("type") == "tool_reference":
            # Claude Code's tool search answers with references to the tools it found.
            name = block.get("tool_name")
            parts.append({"type": "input_text", "text": f"{TOOL_REFERENCE_PREFIX}{name}"})
        elif block.get("type") == "image":
            parts.append(_image(block.get("source"), f"{where}.source"))
        elif block.get("type") == "text":
            parts.append({"type": "input_text", "text": _text(block, where)})
        else:
            part = _content_part("user", block, where)
            if part is not None:
                parts.append(part)
    if all(part["type"] == "input_text" for part in parts):
        return "\n".join(part["text"] for part in parts)
    return parts


def _reasoning(messages_body: JsonObject) -> JsonObject | None:
    """``thinking`` and ``output_config.effort`` -> ``reasoning`` (``None``: the default)."""
    thinking = messages_body.get("thinking")
    effort: str | None = None
    if thinking is not None:
        if not isinstance(thinking, dict):
            raise invalid("thinking", "Input should be an object with a 'type'.")
        kind = thinking.get("type")
        if kind == "enabled":
            budget = thinking.get("budget_tokens")
            if not isinstance(budget, int) or isinstance(budget, bool):
                raise invalid("thinking.budget_tokens", "Field required (an integer).")
            effort = "low" if budget <= 4096 else "medium" if budget <= 16384 else "high"
        elif kind == "disabled":
            return None
        elif kind != "adaptive":
            raise invalid("thinking.type", "Input should be 'enabled', 'adaptive' or 'disabled'.")
    config = messages_body.get("output_config")
    if isinstance(config, dict) and config.get("effort") is not None:
        level = config["effort"]
        if level not in _EFFORTS:
            raise invalid(
                "output_config.effort", "Input should be 'low', 'medium', 'high' or 'max'."
            )
        effort = _EFFORTS[level]
    if effort is None:
        return None
    return {"effort": effort}
