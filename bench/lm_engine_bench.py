"""What the ``lm`` tool engine adds per call over asking its model directly, in-process.

    python bench/lm_engine_bench.py            # ~20 s
    python bench/lm_engine_bench.py --quick    # ~5 s

The model is an in-process ``Upstream`` that returns a canned Response at once (no network), so
the figures are the engine's own CPU per call: building the prompt from the session's history
(each earlier call a user and an assistant turn), reading the answer, validating it against the
tool's output schema (jsonschema), recording the (call, result) pair, and a ``simulate``'s
snapshot and restore. The baseline ("direct") is one ``create_response`` with a prebuilt body.
Each figure is the median over rounds of the mean µs per call, at session histories of 0, 10,
50 and 200 entries (200 is the default ``max_history``). Also: the error injection draw alone.
Nothing asserts: the script prints figures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.core.engines import EngineCall, EngineResult, ToolSpec
from app.core.ports import RawReply, UpstreamEventStream
from app.core.session_book import SessionBook
from app.protocol.json_types import JsonObject
from app.tools.engines.lm import ErrorInjection, InjectedError, LmEngine
from app.tools.engines.lm.injection import Injector

ANSWER = '{"id": 12, "name": "Ada Lovelace", "email": "ada@example.com", "tags": ["vip"]}'
TOOL = ToolSpec(
    namespace="crm",
    name="create_customer",
    description="Create a customer and return it.",
    parameters={
        "type": "object",
        "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
        "required": ["name"],
    },
    output_schema={
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": "string"},
            "email": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["id", "name"],
    },
)
PLAIN = ToolSpec(namespace="crm", name="get_customer", parameters=TOOL.parameters)
CALL = EngineCall("call_1", TOOL, '{"name": "Ada Lovelace", "email": "ada@example.com"}')


class CannedUpstream:
    """Answers every request at once with the same completed Response."""

    response: JsonObject = {
        "status": "completed",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": ANSWER, "annotations": []}],
            }
        ],
    }

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        return self.response

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> UpstreamEventStream:
        raise NotImplementedError

    async def list_models(self, headers: Mapping[str, str]) -> RawReply:
        raise NotImplementedError

    async def check_ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None


async def per_call_us(run: Callable[[], Awaitable[object]], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        await run()
    return (time.perf_counter() - started) / calls * 1e6


def batch_of(
    engine: LmEngine, method: str, call: EngineCall
) -> Callable[[], Awaitable[list[EngineResult]]]:
    run = engine.execute if method == "execute" else engine.simulate
    return lambda: run("s", [call])


async def engine_at(history: int, tool: ToolSpec) -> LmEngine:
    engine = LmEngine(CannedUpstream(), "m")
    await engine.setup("s")
    await engine.execute("s", [EngineCall(f"c{n}", tool, CALL.arguments) for n in range(history)])
    return engine


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds, calls = (3, 200) if args.quick else (7, 1000)

    upstream = CannedUpstream()
    body: JsonObject = {"model": "m", "input": "hi"}
    direct = [
        await per_call_us(lambda: upstream.create_response(body, {}), calls) for _ in range(rounds)
    ]
    print(f"direct create_response: {statistics.median(direct):8.1f} µs/call")
    print(f"{'history':>8} {'execute+schema':>15} {'execute, no schema':>19} {'simulate':>10}")
    for history in (0, 10, 50, 200):
        figures = []
        for tool, method in ((TOOL, "execute"), (PLAIN, "execute"), (TOOL, "simulate")):
            samples = []
            for _ in range(rounds):
                engine = await engine_at(history, tool)
                call = EngineCall("x", tool, CALL.arguments)
                if method == "execute":
                    # Keep the history at its size (at least 1): the oldest entry is dropped.
                    engine.sessions = SessionBook(max(history, 1))
                    await engine.setup("s", (await engine_at(history, tool)).get_session_state("s"))
                samples.append(await per_call_us(batch_of(engine, method, call), calls))
            figures.append(statistics.median(samples))
        print(f"{history:>8} {figures[0]:>12.1f} µs {figures[1]:>16.1f} µs {figures[2]:>7.1f} µs")

    rates = InjectedError(probability=0.1)
    injector = Injector(ErrorInjection(network_error=rates, schema_violation=rates, seed=1))
    started = time.perf_counter()
    for n in range(calls * 10):
        injector.draw("conv_1", n)
    draw = (time.perf_counter() - started) / (calls * 10) * 1e6
    print(f"error injection draw: {draw:.2f} µs/call")


if __name__ == "__main__":
    asyncio.run(main())
