"""Build the Response objects the gateway returns, with every field a strict client validates.

Pure functions: no I/O. Values come from the client's request first (what the client asked
for is what it should see echoed), then from the upstream's own response, then from OpenAI's
documented defaults, so that fields such as ``presence_penalty`` or ``top_logprobs`` are never
missing or ``null`` where the Open Responses schema requires a value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.core.ids import new_id
from app.core.jsoncopy import clone
from app.core.redaction import redact_url
from app.protocol.items import ITEM_ID_PREFIXES, fill_item
from app.protocol.json_types import JsonObject

# Fields whose value the client chose: echoed from the request when it set them.
_REQUEST_FIELDS = (
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "parallel_tool_calls",
    "previous_response_id",
    "store",
    "background",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "service_tier",
    "truncation",
    "text",
    "reasoning",
    "temperature",
    "top_p",
    "top_logprobs",
    "presence_penalty",
    "frequency_penalty",
    "tool_choice",
    "tools",
    "prompt",
)

# Fields the upstream knows better than the request (the resolved model, effective sampling).
_UPSTREAM_FIELDS = (
    "model",
    "temperature",
    "top_p",
    "top_logprobs",
    "presence_penalty",
    "frequency_penalty",
    "max_output_tokens",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "truncation",
    "service_tier",
    "prompt_cache_retention",
)

# Mutable defaults are factories, so that every response gets its own objects.
_DEFAULTS: JsonObject = {
    "background": False,
    "error": None,
    "incomplete_details": None,
    "instructions": None,
    "max_output_tokens": None,
    "max_tool_calls": None,
    "metadata": dict,
    "parallel_tool_calls": True,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "previous_response_id": None,
    "prompt_cache_key": None,
    "reasoning": lambda: {"effort": None, "summary": None},
    "safety_identifier": None,
    "service_tier": "default",
    "store": True,
    "temperature": 1.0,
    "text": lambda: {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": list,
    "top_logprobs": 0,
    "top_p": 1.0,
    "truncation": "disabled",
    "user": None,
}

# Key order of the object the gateway returns (OpenAI's order, then the optional extras).
_KEY_ORDER = (
    "id",
    "object",
    "created_at",
    "status",
    "background",
    "completed_at",
    "error",
    "incomplete_details",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "model",
    "output",
    "parallel_tool_calls",
    "presence_penalty",
    "frequency_penalty",
    "previous_response_id",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "usage",
    "user",
    "metadata",
    "conversation",
    "prompt",
)


def add_usage(total: JsonObject | None, more: JsonObject | None) -> JsonObject | None:
    """Token usage summed across rounds (nested ``*_details`` counts too)."""
    if more is None:
        return total
    if total is None:
        return clone(more)
    # ``total`` is a sum made here (never an upstream's object, never changed in place): its
    # numbers are replaced, its nested counts summed into new dicts, so no deep copy is needed.
    out = dict(total)
    for key, value in more.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            current = out.get(key)
            out[key] = (current if isinstance(current, int | float) else 0) + value
        elif isinstance(value, dict):
            nested = out.get(key)
            out[key] = add_usage(nested if isinstance(nested, dict) else {}, value)
    return out


def normalize_usage(usage: Any) -> JsonObject | None:
    """OpenAI's usage shape with its token details; vendor extras are kept."""
    if not isinstance(usage, dict):
        return None
    out = dict(usage)
    input_tokens = int(out.get("input_tokens") or out.get("prompt_tokens") or 0)
    output_tokens = int(out.get("output_tokens") or out.get("completion_tokens") or 0)
    out["input_tokens"] = input_tokens
    out["output_tokens"] = output_tokens
    out["total_tokens"] = int(out.get("total_tokens") or input_tokens + output_tokens)
    in_details = out.get("input_tokens_details")
    in_details = dict(in_details) if isinstance(in_details, dict) else {}
    in_details["cached_tokens"] = int(in_details.get("cached_tokens") or 0)
    # Required by the openai SDK's ``InputTokensDetails`` since 3.x; servers other than
    # OpenAI (vLLM, SGLang, chat servers) do not send it.
    in_details["cache_write_tokens"] = int(in_details.get("cache_write_tokens") or 0)
    out["input_tokens_details"] = in_details
    out_details = out.get("output_tokens_details")
    out_details = dict(out_details) if isinstance(out_details, dict) else {}
    out_details["reasoning_tokens"] = int(out_details.get("reasoning_tokens") or 0)
    out["output_tokens_details"] = out_details
    out.pop("prompt_tokens", None)
    out.pop("completion_tokens", None)
    return out


def empty_usage() -> JsonObject:
    return {
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 0,
    }


# ``Response.error.code`` is one of these in OpenAI's schema (openai SDK 3.57 ``ResponseError``);
# any other code (an upstream's "500", the gateway's "upstream_error") is reported there as
# ``server_error``, and as itself in the stream's ``error`` event, which takes any string.
RESPONSE_ERROR_CODES = frozenset(
    {
        "server_error",
        "rate_limit_exceeded",
        "invalid_prompt",
        "data_residency_mismatch",
        "bio_policy",
        "misalignment_policy_violation",
        "vector_store_timeout",
        "invalid_image",
        "invalid_image_format",
        "invalid_base64_image",
        "invalid_image_url",
        "image_too_large",
        "image_too_small",
        "image_parse_error",
        "image_content_policy_violation",
        "invalid_image_mode",
        "image_file_too_large",
        "unsupported_image_media_type",
        "empty_image_file",
        "failed_to_download_image",
        "image_file_not_found",
    }
)


def normalize_error(error: JsonObject | None) -> JsonObject | None:
    """A Response's ``error`` as OpenAI's schema has it: a known ``code`` and a ``message``."""
    if error is None:
        return None
    out = dict(error)
    if out.get("code") not in RESPONSE_ERROR_CODES:
        out["code"] = "server_error"
    out["message"] = str(out.get("message") or "The response failed.")
    return out


def without_secrets(tools: Any, secret_fields: Callable[[str], frozenset[str]]) -> Any:
    """``tools`` without the fields ``secret_fields(type)`` names (credentials that go to the
    tool only: never echoed, never stored), and with the credentials in any URL field
    (``server_url``: user information, ``token=`` ...) redacted; ``tools`` itself when no tool
    has any."""
    if not isinstance(tools, list):
        return tools
    out: list[Any] = []
    for tool in tools:
        if isinstance(tool, dict):
            secret = secret_fields(str(tool.get("type")))
            if secret and not secret.isdisjoint(tool):
                tool = {k: v for k, v in tool.items() if k not in secret}
            tool = _urls_redacted(tool)
        out.append(tool)
    changed = any(mine is not theirs for mine, theirs in zip(out, tools, strict=True))
    return out if changed else tools


def _urls_redacted(tool: JsonObject) -> JsonObject:
    redacted = {
        key: redact_url(value)
        for key, value in tool.items()
        if isinstance(value, str) and value[:8].lower().startswith(("http://", "https://"))
    }
    changed = {k: v for k, v in redacted.items() if v != tool[k]}
    return {**tool, **changed} if changed else tool


def normalize_tools(tools: Any) -> list[Any]:
    """Function tools get the fields a strict client expects (``strict``, ``description``)."""
    if not isinstance(tools, list):
        return []
    out: list[Any] = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "function":
            tool = dict(tool)
            if tool.get("strict") is None:
                tool["strict"] = True
            tool.setdefault("description", None)
            tool.setdefault("parameters", None)
        out.append(tool)
    return out


def normalize_part(part: JsonObject) -> JsonObject:
    kind = part.get("type")
    if kind == "output_text":
        if part.get("annotations") is None:
            part["annotations"] = []
        if "logprobs" not in part:
            part["logprobs"] = []
    elif kind == "refusal" and part.get("refusal") is None:
        part["refusal"] = ""
    return part


def normalize_item(
    item: JsonObject, *, status: str = "completed", fresh_id: bool = False
) -> JsonObject:
    """Fill what a strict client validates on the item types the gateway knows, in place.

    ``fresh_id`` gives the item a new gateway id (output items). Unknown item types are
    returned untouched.
    """
    kind = item.get("type")
    prefix = ITEM_ID_PREFIXES.get(kind) if isinstance(kind, str) else None
    if prefix is None:
        return item
    if fresh_id or not item.get("id"):
        item["id"] = new_id(prefix)
    if kind == "message":
        item.setdefault("role", "assistant")
        content = item.get("content")
        if not isinstance(content, list):
            content = [] if content is None else [{"type": "output_text", "text": str(content)}]
            item["content"] = content
        for part in content:
            if isinstance(part, dict):
                normalize_part(part)
        if item.get("status") in (None, "in_progress"):
            item["status"] = status
    elif kind == "function_call":
        if item.get("arguments") is None:
            item["arguments"] = ""
        if not item.get("call_id"):
            item["call_id"] = new_id("call")
        if item.get("status") in (None, "in_progress"):
            item["status"] = status
    elif kind == "reasoning" and item.get("summary") is None:
        item["summary"] = []
    fill_item(item)  # what a tool kind's item type needs
    return item


@dataclass(slots=True)
class ResponseOutcome:
    """What a response came to: the parts of its Response object the request does not give."""

    status: str
    output: list[JsonObject]
    upstream: JsonObject | None = None  # the upstream's own Response object, when it has one
    usage: JsonObject | None = None
    error: JsonObject | None = None
    incomplete_details: JsonObject | None = None
    completed_at: int | None = None


def build_response(
    request: JsonObject, response_id: str, created_at: int, outcome: ResponseOutcome
) -> JsonObject:
    """The gateway's Response object for a client request."""
    upstream = outcome.upstream or {}
    fields: JsonObject = {}
    for key in _UPSTREAM_FIELDS:
        value = upstream.get(key)
        if value is not None:
            fields[key] = value
    for key in _REQUEST_FIELDS:
        value = request.get(key)
        if value is not None:
            fields[key] = value
    model = fields.get("model") or request.get("model") or ""
    conversation = request.get("conversation")
    if isinstance(conversation, str):
        conversation = {"id": conversation}

    merged: JsonObject = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": outcome.status,
        "completed_at": outcome.completed_at,
        "error": normalize_error(outcome.error),
        "incomplete_details": outcome.incomplete_details,
        "model": model,
        "output": outcome.output,
        "usage": outcome.usage if outcome.usage is not None else empty_usage(),
    }
    for key, default in _DEFAULTS.items():
        if key not in merged:
            value = fields.get(key)
            merged[key] = (default() if callable(default) else default) if value is None else value
    merged["tools"] = normalize_tools(merged["tools"])
    if merged["metadata"] is None:
        merged["metadata"] = {}
    if conversation is not None:
        merged["conversation"] = conversation
    if "prompt" in fields:
        merged["prompt"] = fields["prompt"]
    if "prompt_cache_retention" in fields:
        merged["prompt_cache_retention"] = fields["prompt_cache_retention"]
    return {key: merged[key] for key in _KEY_ORDER if key in merged}
