"""Tool types an upstream cannot take, lowered to function tools, and the model's calls raised
back (pure, no I/O), so the client sees the items OpenAI would send.

An upstream takes some tool types natively (``native``: a chat-completions server only
``function``; see ``DEFAULT_NATIVE_TOOL_TYPES``). For the others of the client-run types
(``LOWERABLE``), ``lower_tools`` rewrites the Responses body before the kind's own translation:

- ``namespace`` tools: each inner tool becomes a top-level tool named ``{namespace}__{name}``
  (made safe, at most 64 characters, collision-free); a call comes back as the ``function_call``
  OpenAI sends for a namespaced tool (``name`` the inner name, ``namespace`` set), or a
  ``custom_tool_call`` with ``namespace`` for an inner custom tool;
- ``custom`` tools: a function with one string argument, ``input`` (the grammar or format in the
  description); calls come back as ``custom_tool_call`` items and, streaming, as
  ``response.custom_tool_call_input.delta``/``.done`` events (``tool_raising``);
- ``tool_search`` with ``"execution": "client"``: a function with the tool's ``parameters``; a
  call comes back as a ``tool_search_call`` item (``execution: "client"``, ``arguments`` an
  object), emitted whole at ``output_item.done`` (the SDK has no argument events for it).

The client-run tools of ``additional_tools`` input items (Codex's newest models) and of
``tool_search_output`` items (the tools a search loaded) join ``tools``. In the
history, ``custom_tool_call``/``tool_search_call`` go up as ``function_call``,
``custom_tool_call_output``/``tool_search_output`` as ``function_call_output``, and a namespaced
``function_call`` under its lowered name. ``ToolLowering.raise_item`` raises an answer's items;
``tool_raising`` raises stream events.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.protocol.json_types import JsonObject

# The client-run tool types this module can lower to function tools.
LOWERABLE = frozenset({"namespace", "custom", "tool_search"})

# Which tool types each kind takes natively by default (None: every type, nothing lowered).
# A chat server takes only ``function``. So, in effect, do the responses servers the gateway
# is for: vLLM's ``/v1/responses`` validates ``tools`` against the ``openai`` SDK's ``Tool``
# union of the version it pins (``namespace`` and ``tool_search`` are missing from the older
# ones, a 400) and hands only ``function`` tools to the chat template; SGLang's
# ``ResponseTool`` accepts ``custom``/``namespace``/``tool_search`` so that clients are not
# refused, but wires only ``function``, ``web_search*`` and ``code_interpreter`` to the model.
# An upstream that runs the others (OpenAI) lists them in its ``native_tool_types``.
DEFAULT_NATIVE_TOOL_TYPES: Mapping[str, frozenset[str] | None] = {
    "chat": frozenset({"function"}),
    "responses": frozenset({"function"}),
}

MAX_NAME_LENGTH = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# The history items of a tool type, by the type they belong to.
_ITEM_TOOL_TYPES = {
    "custom_tool_call": "custom",
    "custom_tool_call_output": "custom",
    "tool_search_call": "tool_search",
    "tool_search_output": "tool_search",
}


@dataclass(frozen=True, slots=True)
class Target:
    """What a lowered function name stands for."""

    kind: str  # "function" (in a namespace), "custom" or "tool_search"
    name: str
    namespace: str | None = None


@dataclass(slots=True)
class ToolLowering:
    """The lowered names of one request and how to raise the model's calls back."""

    targets: dict[str, Target] = field(default_factory=dict)  # lowered name -> target
    _names: dict[tuple[str, str | None, str], str] = field(default_factory=dict)
    _taken: set[str] = field(default_factory=set)

    def reserve(self, names: Iterable[str]) -> None:
        """Names the request's own function tools keep: no lowered name takes one."""
        self._taken.update(names)

    def lowered(self, kind: str, namespace: str | None, name: str) -> str:
        """The function name for a tool (the same one every time it is asked)."""
        key = (kind, namespace, name)
        known = self._names.get(key)
        if known is not None:
            return known
        base = _UNSAFE.sub("_", f"{namespace}__{name}" if namespace else name)
        candidate = base
        if len(candidate) > MAX_NAME_LENGTH or candidate in self._taken:
            digest = hashlib.sha1("\0".join((kind, namespace or "", name)).encode()).hexdigest()
            candidate = f"{base[: MAX_NAME_LENGTH - 9]}_{digest[:8]}"
        self._taken.add(candidate)
        self._names[key] = candidate
        self.targets[candidate] = Target(kind, name, namespace)
        return candidate

    def raise_item(self, item: Any) -> Any:
        """A ``function_call`` under a lowered name as the item OpenAI sends; others as they are."""
        if not isinstance(item, dict) or item.get("type") != "function_call":
            return item
        target = self.targets.get(str(item.get("name")))
        if target is None:
            return item
        if target.kind == "function":
            return {**item, "name": target.name, "namespace": target.namespace}
        arguments = item.get("arguments")
        text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
        if target.kind == "custom":
            raised: JsonObject = {
                "id": _raised_id(item.get("id"), "ctc"),
                "type": "custom_tool_call",
                "call_id": item.get("call_id"),
                "name": target.name,
                "input": custom_input(text),
            }
            if target.namespace:
                raised["namespace"] = target.namespace
            if item.get("status") is not None:
                raised["status"] = item["status"]
            return raised
        return {
            "id": _raised_id(item.get("id"), "tsc"),
            "type": "tool_search_call",
            "call_id": item.get("call_id"),
            "execution": "client",
            "arguments": _arguments_object(text),
            "status": item.get("status") or "completed",
        }

    def raise_response(self, response: JsonObject) -> JsonObject:
        output = response.get("output")
        if not isinstance(output, list):
            return response
        return {**response, "output": [self.raise_item(item) for item in output]}


def lower_tools(
    body: JsonObject, native: frozenset[str] | None
) -> tuple[JsonObject, ToolLowering | None]:
    """``body`` with the tools ``native`` lacks lowered to functions, and how to raise the calls
    back; ``(body, None)`` when nothing needs lowering (the body is not copied)."""
    if native is None:
        return body, None
    raw_input = body.get("input")
    items: list[Any] = raw_input if isinstance(raw_input, list) else []
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    # Tools that input items offer: Codex's additional_tools, and those a search loaded when
    # the search itself is lowered (its output then goes up as plain text).
    carriers = {"additional_tools"} | ({"tool_search_output"} - _native_items(native))
    extra = [
        t
        for item in items
        if isinstance(item, dict) and item.get("type") in carriers
        for t in item.get("tools") or []
        if isinstance(t, dict) and _client_run(t)
    ]
    if not _needs_lowering([*tools, *extra], items, native):
        return body, None
    lowering = ToolLowering()
    lowering.reserve(str(t.get("name")) for t in [*tools, *extra] if t.get("type") == "function")
    for tool in [*tools, *extra]:
        if tool.get("type") == "custom" and "custom" not in native:
            # A top-level custom tool keeps its own name, as a function does.
            lowering.lowered("custom", None, str(tool.get("name") or ""))
    lowered_tools: list[JsonObject] = []
    seen: set[str] = set()
    for tool in [*tools, *extra]:
        for out in _lower_tool(tool, native, lowering):
            name = out.get("name")
            if out.get("type") == "function" and isinstance(name, str):
                if name in seen:
                    continue  # a tool offered again (e.g. loaded by a tool search)
                seen.add(name)
            lowered_tools.append(out)
    out_body: JsonObject = {**body, "tools": lowered_tools}
    if isinstance(body.get("input"), list):
        out_body["input"] = [
            lowered
            for item in items
            if (lowered := _lower_item(item, lowering, native)) is not None
        ]
    if body.get("tool_choice") is not None:
        out_body["tool_choice"] = _lower_choice(body["tool_choice"], lowering, native)
    return out_body, lowering


def _needs_lowering(tools: list[JsonObject], items: list[Any], native: frozenset[str]) -> bool:
    if any(t.get("type") in LOWERABLE - native and _lowerable(t) for t in tools):
        return True
    for item in items:
        if not isinstance(item, dict):
            continue
        if _item_needs_lowering(item, native):
            return True
    return False


def _native_items(native: frozenset[str]) -> set[str]:
    """The history item types that stay as they are (their tool type is native)."""
    return {kind for kind, tool_type in _ITEM_TOOL_TYPES.items() if tool_type in native}


def _item_needs_lowering(item: JsonObject, native: frozenset[str]) -> bool:
    kind = item.get("type")
    if kind == "function_call":
        return bool(item.get("namespace")) and "namespace" not in native
    tool_type = _ITEM_TOOL_TYPES.get(str(kind))
    return tool_type is not None and tool_type not in native


def _client_run(tool: JsonObject) -> bool:
    """A tool the client runs: what may join ``tools`` from an input item (hosted tools there
    are left out: the gateway runs only those in ``tools``)."""
    return tool.get("type") in ("function", "custom", "namespace") or (
        tool.get("type") == "tool_search" and tool.get("execution") == "client"
    )


def _lowerable(tool: JsonObject) -> bool:
    return tool.get("type") != "tool_search" or tool.get("execution") == "client"


def _lower_tool(
    tool: JsonObject, native: frozenset[str], lowering: ToolLowering
) -> list[JsonObject]:
    kind = tool.get("type")
    if kind not in LOWERABLE or kind in native or not _lowerable(tool):
        return [tool]
    if kind == "custom":
        return [_custom_function(tool, None, lowering)]
    if kind == "tool_search":
        name = lowering.lowered("tool_search", None, "tool_search")
        parameters = tool.get("parameters")
        return [
            {
                "type": "function",
                "name": name,
                "description": str(tool.get("description") or "Search for more tools to load."),
                "parameters": parameters
                if isinstance(parameters, dict)
                else {
                    "type": "object",
                    "properties": {"query": {"type": "string"}},
                    "required": ["query"],
                },
            }
        ]
    namespace = str(tool.get("name") or "")
    about = tool.get("description")
    out: list[JsonObject] = []
    for inner in tool.get("tools") or []:
        if not isinstance(inner, dict):
            continue
        if inner.get("type") == "custom":
            out.append(_custom_function(inner, namespace, lowering, about))
            continue
        function: JsonObject = {
            "type": "function",
            "name": lowering.lowered("function", namespace, str(inner.get("name") or "")),
        }
        description = _joined(about, inner.get("description"))
        if description:
            function["description"] = description
        for key in ("parameters", "strict"):
            if inner.get(key) is not None:
                function[key] = inner[key]
        out.append(function)
    return out


def _custom_function(
    tool: JsonObject, namespace: str | None, lowering: ToolLowering, about: Any = None
) -> JsonObject:
    fmt = tool.get("format")
    described = _format_text(fmt)
    return {
        "type": "function",
        "name": lowering.lowered("custom", namespace, str(tool.get("name") or "")),
        "description": _joined(about, tool.get("description"), described),
        "parameters": {
            "type": "object",
            "properties": {
                "input": {"type": "string", "description": described or "The tool's input."}
            },
            "required": ["input"],
            "additionalProperties": False,
        },
    }


def _format_text(fmt: Any) -> str:
    if not isinstance(fmt, dict) or fmt.get("type") != "grammar":
        return "The input is free text." if fmt is not None else ""
    syntax = fmt.get("syntax") or "lark"
    return (
        f"Put the whole input, as plain text, in the `input` string. It must match this "
        f"{syntax} grammar:\n{fmt.get('definition') or ''}"
    )


def _joined(*texts: Any) -> str:
    return "\n\n".join(t for t in texts if isinstance(t, str) and t)


def _lower_item(item: Any, lowering: ToolLowering, native: frozenset[str]) -> Any:
    if not isinstance(item, dict):
        return item
    kind = item.get("type")
    if kind == "additional_tools":
        return None  # its tools joined ``tools``
    if not _item_needs_lowering(item, native):
        return item
    if kind == "function_call":
        name = lowering.lowered("function", str(item["namespace"]), str(item.get("name") or ""))
        lowered = {k: v for k, v in item.items() if k != "namespace"}
        lowered["name"] = name
        return lowered
    if kind == "custom_tool_call":
        namespace = item.get("namespace")
        name = lowering.lowered(
            "custom", str(namespace) if namespace else None, str(item.get("name") or "")
        )
        arguments = orjson.dumps({"input": str(item.get("input") or "")}).decode()
        return _function_call(item, name, arguments)
    if kind == "tool_search_call":
        name = lowering.lowered("tool_search", None, "tool_search")
        raw = item.get("arguments")
        text = raw if isinstance(raw, str) else orjson.dumps(raw).decode()
        return _function_call(item, name, text)
    if kind == "custom_tool_call_output":
        return {
            "type": "function_call_output",
            "call_id": item.get("call_id"),
            "output": item.get("output"),
        }
    if kind == "tool_search_output":
        loaded = [t.get("name") for t in item.get("tools") or [] if isinstance(t, dict)]
        text = "Loaded tools: " + ", ".join(str(n) for n in loaded) if loaded else "No tools found."
        return {"type": "function_call_output", "call_id": item.get("call_id"), "output": text}
    return item


def _function_call(item: JsonObject, name: str, arguments: str) -> JsonObject:
    return {
        "type": "function_call",
        "call_id": item.get("call_id") or item.get("id") or "",
        "name": name,
        "arguments": arguments,
    }


def _lower_choice(choice: Any, lowering: ToolLowering, native: frozenset[str]) -> Any:
    if not isinstance(choice, dict):
        return choice
    kind = choice.get("type")
    if kind == "custom" and "custom" not in native:
        return {
            "type": "function",
            "name": lowering.lowered("custom", None, str(choice.get("name"))),
        }
    if kind == "function" and choice.get("namespace") and "namespace" not in native:
        name = lowering.lowered("function", str(choice["namespace"]), str(choice.get("name")))
        return {"type": "function", "name": name}
    if kind == "allowed_tools" and isinstance(choice.get("tools"), list):
        return {**choice, "tools": [_lower_choice(t, lowering, native) for t in choice["tools"]]}
    return choice


# --------------------------------------------------------------------------- raising


def custom_input(arguments: str) -> str:
    """The ``input`` a lowered custom call's arguments carry (the raw text when they are not the
    ``{"input": ...}`` object the function asked for)."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict):
        value = parsed.get("input")
        if isinstance(value, str):
            return value
        strings = [v for v in parsed.values() if isinstance(v, str)]
        if len(strings) == 1:
            return strings[0]
    return parsed if isinstance(parsed, str) else arguments


def _arguments_object(arguments: str) -> Any:
    try:
        return orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {"query": arguments}


def _raised_id(item_id: Any, prefix: str) -> str:
    text = item_id if isinstance(item_id, str) else ""
    if text.startswith("fc_"):
        return f"{prefix}_{text[3:]}"
    return f"{prefix}_{text}" if text else prefix
