"""``LmEngine``: the ``lm`` tool engine, a model simulates each tool's result.

For each call the engine asks a model, through the kernel's ``Upstream`` port (the gateway's
router, which sends the model to whichever configured upstream serves it), for the result the
tool would give; the prompt holds the session's earlier calls and results (``prompt``). The
answer is validated: not one JSON value is a failed result of kind ``unparseable_result``; when
the tool declares an output schema, a result that does not match it (checked with
``jsonschema``) is a failed result of kind ``schema_violation``. An upstream failure (any
``GatewayError``, a timeout) is a failed result of kind ``simulator_error``, never an
exception. Arguments that are not a JSON object fail as ``invalid_arguments`` without asking
the model. Every result, failed or not, is kept in the session's history.

Error injection (``injection``) comes first: an injected outcome replaces the call's result
without asking the model.

``execute`` runs a batch in order, each call prompted with the results of the batch's earlier
calls. ``simulate`` does the same and then puts the session back exactly as it was. The session
state is ``{"history": [...], "calls": n}``: ``calls`` counts the calls the session ran (the
history keeps only the newest ``max_history``), the position error injection draws from. A
session runs one batch at a time (the gateway serialises the calls of a session).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

import orjson
from jsonschema import SchemaError, validators
from jsonschema.exceptions import best_match

from app.core.engines import (
    EngineCall,
    EngineResult,
    ToolArgumentsError,
    history_of,
)
from app.core.ports import Upstream
from app.core.session_book import DEFAULT_MAX_HISTORY, BookedSessions, SessionBook, timed
from app.errors import GatewayError
from app.protocol.json_types import JsonObject
from app.tools.engines.lm.injection import ErrorInjection, Injector
from app.tools.engines.lm.prompt import (
    Sampling,
    UnparseableAnswer,
    answer_text,
    build_request,
    parse_answer,
)

logger = logging.getLogger(__name__)

CALLS_KEY = "calls"
"""The session state's count of the calls it ran (the position error injection draws from)."""


class LmEngine(BookedSessions):
    """``core.engines.ToolEngine`` whose results a model simulates (see the module docstring)."""

    def __init__(
        self,
        upstream: Upstream,
        model: str,
        *,
        injection: ErrorInjection | None = None,
        max_history: int = DEFAULT_MAX_HISTORY,
        sampling: Sampling | None = None,
    ) -> None:
        self.upstream = upstream
        self.model = model
        self.injector = Injector(injection)
        self.sampling = sampling or Sampling()
        self.sessions = SessionBook(max_history)

    async def execute(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        self.sessions.session(session_id)  # UnknownSessionError before any call
        results: list[EngineResult] = []
        for call in calls:
            position = self._next_position(session_id)
            result = await timed(call, functools.partial(self._run, session_id, call, position))
            self.sessions.record(session_id, call, result)
            results.append(result)
        return results

    async def simulate(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        snapshot = self.sessions.snapshot(session_id)
        try:
            return await self.execute(session_id, calls)
        finally:
            if self.sessions.live(session_id):
                self.sessions.restore(session_id, snapshot)

    def _next_position(self, session_id: str) -> int:
        """The 0-based position of the session's next call; counts it."""
        session = self.sessions.session(session_id)
        counted = session.get(CALLS_KEY)
        position = counted if isinstance(counted, int) else len(session["history"])
        session[CALLS_KEY] = position + 1
        return position

    async def _run(self, session_id: str, call: EngineCall, position: int) -> EngineResult:
        injected = self.injector.draw(session_id, position)
        if injected is not None:
            logger.debug(
                "lm engine: injected %s for %s", injected.category, call.tool.qualified_name
            )
            if injected.category == "unparseable_result":
                return EngineResult(call_id=call.call_id, output=injected.text)
            return EngineResult.failure(call, injected.category, injected.text)
        try:
            call.parsed_arguments()
        except ToolArgumentsError as exc:
            return EngineResult.failure(call, "invalid_arguments", str(exc))
        history = history_of({"history": self.sessions.history(session_id)})
        body = build_request(self.model, history, call, self.sampling)
        try:
            response = await self.upstream.create_response(body, {})
        except (GatewayError, TimeoutError) as exc:
            message = exc.message if isinstance(exc, GatewayError) else "timed out"
            return EngineResult.failure(
                call, "simulator_error", f"The simulating model failed: {message}"
            )
        return _checked(call, response)


def _checked(call: EngineCall, response: JsonObject) -> EngineResult:
    """The result the model's answer gives: its JSON, compact, if it is JSON and matches the
    tool's output schema; a failed result else."""
    status = response.get("status")
    if status == "failed":
        error = response.get("error")
        detail = error.get("message") if isinstance(error, dict) else None
        message = f"The simulating model failed: {detail or 'the response failed'}"
        return EngineResult.failure(call, "simulator_error", message)
    try:
        value = parse_answer(answer_text(response))
    except UnparseableAnswer as exc:
        return EngineResult.failure(call, "unparseable_result", str(exc))
    schema = call.tool.output_schema
    if schema is not None:
        violation = schema_violation(schema, value)
        if violation is not None:
            return EngineResult.failure(call, "schema_violation", violation)
    return EngineResult(call_id=call.call_id, output=orjson.dumps(value).decode())


def schema_violation(schema: JsonObject, value: Any) -> str | None:
    """Why ``value`` does not match ``schema``, or why ``schema`` is not a JSON schema; None
    when it matches."""
    try:
        validator = _validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS).decode())
    except SchemaError as exc:
        return f"The tool's output schema is not a valid JSON schema: {exc.message}"
    error = best_match(validator.iter_errors(value))
    if error is None:
        return None
    return (
        "The simulated result does not match the tool's output schema "
        f"at {error.json_path}: {error.message}"
    )


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    schema = orjson.loads(schema_json)
    cls = validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)
