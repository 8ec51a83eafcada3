"""``MultiEngine``: routes each call by its namespace to the engine configured for it.

The configuration gives every namespace an engine and a mode; the multi engine has no other
logic. One batch is split by engine: different engines run at once, one engine's calls run as
one batch of that engine (its ``execute``, or its ``simulate`` for the namespaces in mode
``simulate`` and for a dry run), and the results come back in call order. A call to a namespace
nobody configured, or an engine that raises, gives failed results: never an exception.

The session state is ``{"engines": {engine name: that engine's state}}``: engines shared by
several namespaces keep one session (one simulated world) for all of them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.core.engines import (
    EngineCall,
    EngineMode,
    EngineResult,
    ToolEngine,
    UnknownSessionError,
)
from app.protocol.json_types import JsonObject

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Route:
    """Where a namespace's calls go."""

    engine_name: str
    engine: ToolEngine
    mode: EngineMode = "execute"


class MultiEngine:
    """A ``core.engines.ToolEngine`` over the engines of the configured namespaces."""

    def __init__(self, routes: Mapping[str, Route]) -> None:
        self._routes = dict(routes)
        self._engines: dict[str, ToolEngine] = {r.engine_name: r.engine for r in routes.values()}

    @property
    def namespaces(self) -> list[str]:
        return list(self._routes)

    async def setup(self, session_id: str, state: JsonObject | None = None) -> None:
        saved = state.get("engines") if state else None
        states = saved if isinstance(saved, dict) else {}
        opened: list[ToolEngine] = []
        try:
            for name, engine in self._engines.items():
                engine_state = states.get(name)
                await engine.setup(
                    session_id, engine_state if isinstance(engine_state, dict) else None
                )
                opened.append(engine)
        except BaseException:
            for engine in opened:
                await engine.teardown(session_id)
            raise

    async def teardown(self, session_id: str) -> None:
        for engine in self._engines.values():
            await engine.teardown(session_id)

    def get_session_state(self, session_id: str) -> JsonObject:
        return {
            "engines": {
                name: engine.get_session_state(session_id) for name, engine in self._engines.items()
            }
        }

    async def execute(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        return await self._run(session_id, calls, dry_run=False)

    async def simulate(self, session_id: str, calls: Sequence[EngineCall]) -> list[EngineResult]:
        return await self._run(session_id, calls, dry_run=True)

    async def _run(
        self, session_id: str, calls: Sequence[EngineCall], *, dry_run: bool
    ) -> list[EngineResult]:
        results: dict[int, EngineResult] = {}
        # engine name -> mode -> [(position, call)]
        plan: dict[str, dict[EngineMode, list[tuple[int, EngineCall]]]] = {}
        for position, call in enumerate(calls):
            route = self._routes.get(call.tool.namespace)
            if route is None:
                results[position] = EngineResult.failure(
                    call,
                    "unknown_namespace",
                    f"no tool set is configured for namespace '{call.tool.namespace}'",
                )
                continue
            mode: EngineMode = "simulate" if dry_run else route.mode
            plan.setdefault(route.engine_name, {}).setdefault(mode, []).append((position, call))
        parts = await asyncio.gather(
            *(self._run_engine(name, session_id, modes) for name, modes in plan.items())
        )
        for part in parts:
            results.update(part)
        return [results[position] for position in range(len(calls))]

    async def _run_engine(
        self,
        name: str,
        session_id: str,
        modes: Mapping[EngineMode, list[tuple[int, EngineCall]]],
    ) -> dict[int, EngineResult]:
        """One engine's calls: executed ones first, then simulated ones (never both at once on
        one session: a simulation rolls the session back)."""
        engine = self._engines[name]
        out: dict[int, EngineResult] = {}
        for mode in ("execute", "simulate"):
            group = modes.get(mode)
            if not group:
                continue
            batch = [call for _, call in group]
            run = engine.execute if mode == "execute" else engine.simulate
            try:
                answered = await run(session_id, batch)
                if len(answered) != len(batch):
                    raise RuntimeError(f"{len(answered)} results for {len(batch)} calls")
            except UnknownSessionError:
                raise
            except Exception as exc:  # an engine failure is data for the model
                logger.exception("tool engine %s failed", name)
                answered = [
                    EngineResult.failure(call, "engine_error", f"the tool engine failed: {exc}")
                    for call in batch
                ]
            out.update(
                {position: result for (position, _), result in zip(group, answered, strict=True)}
            )
        return out
