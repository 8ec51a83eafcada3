"""Tool engines: given the calls the model made, what are the results?

A ``ToolEngine`` answers a batch of ``EngineCall``s for one session with ``EngineResult``s, in
call order. The session id is opaque to the engine (the gateway uses the conversation id, or
the id of the first response of a ``previous_response_id`` chain). A session's state is JSON
(``get_session_state``); an engine that runs calls itself keeps ``{"history": [{"call": ...,
"result": ...}, ...]}``, the calls it ran and what they gave, oldest first (``multi`` keeps the
states of the engines it routes to). The gateway persists that state between
requests and hands it back to ``setup``, so a session continued later, or on another replica,
sees the same world.

- ``setup(session_id, state)`` opens a session (from a saved state, or empty); on a live
  session it raises ``SessionExistsError``. ``teardown`` of an unknown session is a no-op.
- ``execute`` runs the calls and appends each (call, result) to the history; within one batch a
  later call sees the earlier results. ``simulate`` returns results and leaves the session
  exactly as it was. Calling either on a session that is not set up raises
  ``UnknownSessionError``.
- A failed call is a result carrying a ``ToolFailure`` (fed to the model, kept in the
  history), never an exception.

A ``ToolSpec`` is one tool of one namespace: what the model reads (name, description, JSON
schema parameters, optional output schema) and an engine-specific ``binding`` (how the ``rest``
engine calls it). Each call carries its spec, so one engine serves any number of namespaces.
A ``Namespace`` is one configured tool set: its tools, the engine that runs them and the
operator's terms (mode, allowed tools, approval).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import orjson

from app.protocol.json_types import JsonObject

QUALIFIER = "::"
"""Joins a namespace and a tool name in configuration and logs: ``crm::create_customer``."""

EngineMode = Literal["execute", "simulate"]


def _empty_object_schema() -> JsonObject:
    return {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool of one namespace."""

    namespace: str
    name: str
    description: str = ""
    parameters: JsonObject = field(default_factory=_empty_object_schema)
    output_schema: JsonObject | None = None
    # How the engine reaches the tool (the ``rest`` engine's method, URL template ...);
    # engine-specific, never shown to the model nor stored in a session's history.
    binding: Mapping[str, Any] | None = None
    annotations: JsonObject | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}{QUALIFIER}{self.name}"

    def to_json(self) -> JsonObject:
        """The spec as the model (and a session's history) sees it: no binding."""
        out: JsonObject = {
            "namespace": self.namespace,
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }
        if self.output_schema is not None:
            out["output_schema"] = self.output_schema
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> ToolSpec:
        parameters = data.get("parameters")
        output_schema = data.get("output_schema")
        return cls(
            namespace=str(data.get("namespace") or ""),
            name=str(data.get("name") or ""),
            description=str(data.get("description") or ""),
            parameters=parameters if isinstance(parameters, dict) else _empty_object_schema(),
            output_schema=output_schema if isinstance(output_schema, dict) else None,
        )


class ToolArgumentsError(ValueError):
    """The model's arguments are not a JSON object."""


@dataclass(frozen=True, slots=True)
class EngineCall:
    """One call the model made: its id, the tool's spec, its arguments as the model wrote them."""

    call_id: str
    tool: ToolSpec
    arguments: str

    def parsed_arguments(self) -> JsonObject:
        """The arguments as a JSON object (empty text: ``{}``); ``ToolArgumentsError`` else."""
        if not self.arguments.strip():
            return {}
        try:
            value = orjson.loads(self.arguments)
        except orjson.JSONDecodeError as exc:
            raise ToolArgumentsError(f"the arguments are not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ToolArgumentsError("the arguments must be a JSON object")
        return value

    def to_json(self) -> JsonObject:
        return {"call_id": self.call_id, "tool": self.tool.to_json(), "arguments": self.arguments}

    @classmethod
    def from_json(cls, data: JsonObject) -> EngineCall:
        tool = data.get("tool")
        return cls(
            call_id=str(data.get("call_id") or ""),
            tool=ToolSpec.from_json(tool if isinstance(tool, dict) else {}),
            arguments=str(data.get("arguments") or ""),
        )


@dataclass(frozen=True, slots=True)
class ToolFailure:
    """Why a call failed: ``kind`` is a short machine-readable word (``http_status``,
    ``timeout``, ``network_error``, ``invalid_arguments``, ``schema_violation``,
    ``unknown_tool`` ...), ``message`` what the model reads. ``detail`` is an optional
    structured error for the client's item (an MCP error object)."""

    kind: str
    message: str
    detail: JsonObject | None = None


@dataclass(frozen=True, slots=True)
class EngineResult:
    """The result of one call: ``output`` (what the tool gave, usually JSON text) or ``error``."""

    call_id: str
    output: str = ""
    error: ToolFailure | None = None
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def model_text(self) -> str:
        """What the model reads."""
        return self.output if self.error is None else f"Error: {self.error.message}"

    @classmethod
    def failure(
        cls, call: EngineCall, kind: str, message: str, *, detail: JsonObject | None = None
    ) -> EngineResult:
        return cls(call_id=call.call_id, error=ToolFailure(kind, message, detail))

    def to_json(self) -> JsonObject:
        out: JsonObject = {"call_id": self.call_id, "output": self.output}
        if self.error is not None:
            out["error"] = {"kind": self.error.kind, "message": self.error.message}
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> EngineResult:
        error = data.get("error")
        return cls(
            call_id=str(data.get("call_id") or ""),
            output=str(data.get("output") or ""),
            error=(
                ToolFailure(str(error.get("kind") or "error"), str(error.get("message") or ""))
                if isinstance(error, dict)
                else None
            ),
        )


class SessionExistsError(RuntimeError):
    """``setup`` of a session that is live."""


class UnknownSessionError(LookupError):
    """``execute`` or ``simulate`` on a session that is not set up."""


@runtime_checkable
class ToolEngine(Protocol):
    """Runs tool calls for sessions (see the module docstring for the contract)."""

    async def setup(self, session_id: str, state: JsonObject | None = None) -> None: ...

    async def execute(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]: ...

    async def simulate(
        self, session_id: str, calls: Sequence[EngineCall]
    ) -> list[EngineResult]: ...

    async def teardown(self, session_id: str) -> None: ...

    def get_session_state(self, session_id: str) -> JsonObject: ...


class ToolSet(Protocol):
    """The tools of one namespace (a file of specs, an OpenAPI document, an MCP server)."""

    async def list_tools(self) -> list[ToolSpec]: ...


@dataclass(frozen=True, slots=True)
class Namespace:
    """One configured tool set: clients select it by name (``{"type": "mcp",
    "server_label": name}``); ``engine`` names the engine that runs its calls; ``mode``
    ``simulate`` simulates every call of it. ``allowed_tools`` and ``require_approval`` are
    the operator's ceiling: a request may narrow them, never widen them."""

    name: str
    engine: str
    tools: ToolSet
    mode: EngineMode = "execute"
    allowed_tools: tuple[str, ...] | None = None
    require_approval: Any = "never"
    description: str | None = None


@runtime_checkable
class ToolSessionStore(Protocol):
    """Where engine sessions persist between requests (one JSON state per tenant and session
    id): a session is its tenant's (``core.tenancy``), another tenant's is missing."""

    async def load_tool_session(self, session_id: str, *, tenant: str) -> JsonObject | None: ...

    async def save_tool_session(
        self, session_id: str, state: JsonObject, *, tenant: str
    ) -> None: ...

    async def delete_tool_session(self, session_id: str, *, tenant: str) -> None: ...


async def simulate_via(
    simulator: ToolEngine, session_id: str, state: JsonObject, calls: Sequence[EngineCall]
) -> list[EngineResult]:
    """``simulator``'s simulated results for ``calls`` in a throwaway session seeded with
    ``state`` (a real engine's session, so the simulation sees what really happened); the
    simulator's own session ``session_id`` is untouched."""
    scratch = f"{session_id}#simulate-{id(calls):x}"
    await simulator.setup(scratch, state)
    try:
        return await simulator.simulate(scratch, calls)
    finally:
        await simulator.teardown(scratch)


def history_of(state: JsonObject | None) -> list[tuple[EngineCall, EngineResult]]:
    """The (call, result) pairs of a session state, oldest first (malformed entries skipped)."""
    entries = state.get("history") if state else None
    out: list[tuple[EngineCall, EngineResult]] = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict):
            call, result = entry.get("call"), entry.get("result")
            if isinstance(call, dict) and isinstance(result, dict):
                out.append((EngineCall.from_json(call), EngineResult.from_json(result)))
    return out


def history_entry(call: EngineCall, result: EngineResult) -> JsonObject:
    return {"call": call.to_json(), "result": result.to_json()}
