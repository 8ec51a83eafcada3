"""``RestEngine``: the ``rest`` tool engine, real HTTP calls to operator-configured tools.

Each call's ``tool.binding`` (``binding.RestBinding``) says how to call it; ``client.RestClient``
makes the request (redirects are not followed: a 3xx is an ``http_status`` failure). Before any
request the arguments are checked against the tool's ``parameters`` with ``jsonschema``
(``invalid_arguments``) and the binding is validated (``invalid_binding``).

- ``execute`` runs a batch's calls concurrently (at most ``max_concurrency`` requests of the
  engine at once): a REST call does not read the session's history, the service it calls holds
  the state. Each (call, result) is recorded in call order; the history holds the spec as the
  model sees it, never the binding nor a header.
- ``simulate`` never makes an HTTP call: with a ``simulator`` engine (the ``lm`` engine) it sets
  up a throwaway simulator session seeded with this session's state, asks it to simulate the
  calls and tears it down, recording nothing; without one each call fails as
  ``simulation_unavailable``.
- Secrets come from ``environ`` (``os.environ`` by default) on each call.

``create_rest_engine`` builds one from the registry's options (``RestEngineOptions``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from app.core.engines import (
    EngineCall,
    EngineResult,
    ToolArgumentsError,
    ToolEngine,
    simulate_via,
)
from app.core.redaction import redact_url
from app.core.session_book import DEFAULT_MAX_HISTORY, BookedSessions, SessionBook, timed
from app.net.egress import EgressPolicy
from app.protocol.json_types import JsonObject
from app.tools.engines.rest.binding import (
    ArgumentError,
    MissingSecretError,
    RestBinding,
    build_request,
)
from app.tools.engines.rest.client import Limits, RestClient

logger = logging.getLogger(__name__)

_CACHE_SIZE = 1024


class RestEngineOptions(BaseModel):
    """The ``rest`` engine's options in configuration (unknown keys refused)."""

    model_config = ConfigDict(extra="forbid")

    default_timeout: float = Field(default=30.0, gt=0)
    default_max_response_bytes: int = Field(default=1024 * 1024, gt=0)
    max_history: int = Field(default=DEFAULT_MAX_HISTORY, ge=1)
    max_concurrency: int = Field(default=32, ge=1)


def describe_errors(errors: Sequence[ErrorDetails]) -> str:
    """Pydantic's errors as one line: ``field.path: message; ...``."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or '(binding)'}: {error['msg']}"
        for error in errors
    )


class _ByIdentity:
    """Values derived from the specs' own objects (a binding, a schema), kept by identity: a
    tool set's specs are made once and reused by every call."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[object, Any]] = {}

    def get(self, key: object) -> Any:
        entry = self._entries.get(id(key))
        return entry[1] if entry is not None and entry[0] is key else None

    def put(self, key: object, value: Any) -> None:
        if len(self._entries) >= _CACHE_SIZE:
            self._entries.clear()
        self._entries[id(key)] = (key, value)


class RestEngine(BookedSessions):
    """The ``rest`` engine (see the module docstring); implements ``ToolEngine``."""

    def __init__(
        self,
        options: RestEngineOptions | None = None,
        *,
        simulator: ToolEngine | None = None,
        environ: Mapping[str, str] | None = None,
        egress: EgressPolicy | None = None,
    ) -> None:
        """``egress``: the policy every request's connection follows (each binding's own
        host:port trusted)."""
        self.options = options or RestEngineOptions()
        self._simulator = simulator
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self.sessions = SessionBook(self.options.max_history)
        self._client = RestClient(egress=egress)
        self._gate = asyncio.Semaphore(self.options.max_concurrency)
        self._bindings = _ByIdentity()
        self._validators = _ByIdentity()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def execute(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        self.sessions.session(session_id)  # UnknownSessionError before any request
        if len(calls) == 1:  # no task to start for a lone call
            results = [await timed(calls[0], partial(self._run, calls[0]))]
        else:
            results = await asyncio.gather(*(timed(c, partial(self._run, c)) for c in calls))
        for call, result in zip(calls, results, strict=True):
            self.sessions.record(session_id, call, result)
        return list(results)

    async def simulate(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        state = self.sessions.state(session_id)
        simulator = self._simulator
        if simulator is None:
            return [
                EngineResult.failure(
                    call,
                    "simulation_unavailable",
                    f"{call.tool.qualified_name} cannot be simulated: "
                    "the rest engine has no simulator configured",
                )
                for call in calls
            ]
        return await simulate_via(simulator, session_id, state, calls)

    def _binding(self, call: EngineCall) -> RestBinding | str:
        """The call's validated binding, or why it has none."""
        raw = call.tool.binding
        if raw is None:
            return f"{call.tool.qualified_name} has no binding: the rest engine cannot call it"
        binding = self._bindings.get(raw)
        if binding is None:
            try:
                binding = RestBinding.model_validate(dict(raw))
            except ValidationError as exc:
                return f"{call.tool.qualified_name}'s binding is invalid: " + describe_errors(
                    exc.errors(include_url=False, include_input=False)
                )
            self._bindings.put(raw, binding)
        assert isinstance(binding, RestBinding)
        return binding

    def _check_arguments(self, call: EngineCall) -> JsonObject | EngineResult:
        """The call's arguments as an object, or the failed result that refuses them."""
        try:
            arguments = call.parsed_arguments()
        except ToolArgumentsError as exc:
            return EngineResult.failure(call, "invalid_arguments", str(exc))
        schema = call.tool.parameters
        validator = self._validators.get(schema)
        if validator is None:
            cls = jsonschema.validators.validator_for(schema)
            try:
                cls.check_schema(schema)
            except jsonschema.exceptions.SchemaError as exc:
                message = f"{call.tool.qualified_name}'s parameters are not a valid JSON schema"
                return EngineResult.failure(call, "invalid_tool", f"{message}: {exc.message}")
            validator = cls(schema)
            self._validators.put(schema, validator)
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        if error is None:
            return arguments
        where = "/".join(str(part) for part in error.absolute_path) or "(root)"
        message = f"the arguments do not match the tool's parameters: {where}: {error.message}"
        return EngineResult.failure(call, "invalid_arguments", message[:1000])

    async def _run(self, call: EngineCall) -> EngineResult:
        """The call's result; an unexpected exception is a failed result too (and logged)."""
        try:
            return await self._call(call)
        except Exception:
            logger.exception("rest call %s failed unexpectedly", call.tool.qualified_name)
            return EngineResult.failure(
                call, "internal_error", f"{call.tool.qualified_name} failed unexpectedly"
            )

    async def _call(self, call: EngineCall) -> EngineResult:
        binding = self._binding(call)
        if isinstance(binding, str):
            return EngineResult.failure(call, "invalid_binding", binding)
        arguments = self._check_arguments(call)
        if isinstance(arguments, EngineResult):
            return arguments
        try:
            request = build_request(binding, arguments, self._environ)
        except ArgumentError as exc:
            return EngineResult.failure(call, "invalid_arguments", str(exc))
        except MissingSecretError as exc:
            return EngineResult.failure(call, "configuration_error", str(exc))
        limits = Limits(
            timeout=binding.timeout or self.options.default_timeout,
            max_bytes=binding.max_response_bytes or self.options.default_max_response_bytes,
        )
        logger.debug(
            "rest call %s: %s %s", call.tool.qualified_name, request.method, redact_url(request.url)
        )
        async with self._gate:
            return await self._client.send(call, request, binding.tls, limits)


def create_rest_engine(
    options: Mapping[str, Any],
    *,
    simulator: ToolEngine | None,
    environ: Mapping[str, str],
    egress: EgressPolicy | None = None,
) -> RestEngine:
    """The registry's factory: ``options`` as ``RestEngineOptions`` (``ValueError`` naming the
    key when they are invalid)."""
    try:
        parsed = RestEngineOptions.model_validate(dict(options))
    except ValidationError as exc:
        problems = describe_errors(exc.errors(include_url=False, include_input=False))
        raise ValueError(f"rest engine options: {problems}") from None
    return RestEngine(parsed, simulator=simulator, environ=environ, egress=egress)
