"""The ``lm`` engine's results: output-schema validation (``json_schema`` asked for, the answer
checked), upstream failures as ``simulator_error`` results, and the factory's options."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from app.core.engines import ToolSpec
from app.errors import (
    InvalidRequestError,
    UpstreamHTTPError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from app.protocol.json_types import JsonObject
from app.tools.engines.lm import (
    ErrorInjection,
    InjectedError,
    LmEngine,
    Sampling,
    create_lm_engine,
)
from app.tools.engines.lm.engine import schema_violation
from tests.tools.engines.lm.helpers import (
    CREATE_CUSTOMER,
    GET_CUSTOMER,
    Answer,
    SimulatorUpstream,
    call,
)

ADA = '{"name": "Ada"}'


async def run_one(
    answer: Answer, tool: ToolSpec = CREATE_CUSTOMER
) -> tuple[LmEngine, SimulatorUpstream]:
    upstream = SimulatorUpstream([answer])
    engine = LmEngine(upstream, "m")
    await engine.setup("s")
    await engine.execute("s", [call(tool, ADA)])
    return engine, upstream


def last_result(engine: LmEngine) -> JsonObject:
    result: JsonObject = engine.get_session_state("s")["history"][-1]["result"]
    return result


async def test_an_output_schema_asks_for_json_schema_and_a_match_passes() -> None:
    engine, upstream = await run_one('{"id": 3, "name": "Ada", "extra": true}')
    assert upstream.requests[0]["text"] == {
        "format": {
            "type": "json_schema",
            "name": "create_customer",
            "schema": CREATE_CUSTOMER.output_schema,
            "strict": False,
        }
    }
    assert last_result(engine) == {
        "call_id": "call_1",
        "output": '{"id":3,"name":"Ada","extra":true}',
    }


@pytest.mark.parametrize(
    ("answer", "where"),
    [('{"id": "three", "name": "Ada"}', "$.id"), ('{"name": "Ada"}', "$"), ("[1]", "$")],
    ids=["wrong-type", "missing", "not-an-object"],
)
async def test_a_schema_violation_is_a_failed_result_kept_in_the_history(
    answer: str, where: str
) -> None:
    engine, _ = await run_one(answer)
    result = last_result(engine)
    assert result["output"] == ""
    assert result["error"]["kind"] == "schema_violation"
    assert f"at {where}:" in result["error"]["message"]


async def test_an_invalid_output_schema_is_a_failed_result() -> None:
    broken = ToolSpec(namespace="n", name="t-1.x", output_schema={"type": "nonsense"})
    engine, upstream = await run_one('{"a": 1}', broken)
    assert upstream.requests[0]["text"]["format"]["name"] == "t-1_x"
    assert last_result(engine)["error"]["kind"] == "schema_violation"
    assert "not a valid JSON schema" in last_result(engine)["error"]["message"]


def test_schema_violation_uses_the_schemas_draft() -> None:
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "string"}]}
    assert schema_violation(draft7, ["a", 1]) is None  # draft 7 tuple items
    assert schema_violation(draft7, [1]) is not None
    assert schema_violation({"type": "integer"}, 1) is None


@pytest.mark.parametrize(
    "error",
    [
        UpstreamTimeoutError("The upstream did not answer in time."),
        UpstreamUnreachableError("connection refused"),
        UpstreamHTTPError(429, {"error": {"message": "rate limited"}}),
        InvalidRequestError("unknown model"),
        TimeoutError(),
    ],
    ids=["timeout", "unreachable", "http", "invalid", "asyncio-timeout"],
)
async def test_an_upstream_error_is_a_simulator_error_result(error: BaseException) -> None:
    upstream = SimulatorUpstream([error, '{"id": 1}'])
    engine = LmEngine(upstream, "m")
    await engine.setup("s")
    results = await engine.execute(
        "s", [call(GET_CUSTOMER, "{}", "a"), call(GET_CUSTOMER, "{}", "b")]
    )
    assert results[0].error is not None
    assert results[0].error.kind == "simulator_error"
    assert results[0].error.message.startswith("The simulating model failed: ")
    assert results[1].ok  # the batch goes on
    assert len(engine.get_session_state("s")["history"]) == 2


async def test_a_failed_response_is_a_simulator_error_result() -> None:
    failed = {"status": "failed", "error": {"code": "server_error", "message": "out of memory"}}
    engine, _ = await run_one(failed, GET_CUSTOMER)
    assert last_result(engine)["error"] == {
        "kind": "simulator_error",
        "message": "The simulating model failed: out of memory",
    }


async def test_cancellation_is_not_swallowed() -> None:
    upstream = SimulatorUpstream([asyncio.CancelledError()])
    engine = LmEngine(upstream, "m")
    await engine.setup("s")
    with pytest.raises(asyncio.CancelledError):
        await engine.execute("s", [call(GET_CUSTOMER, "{}")])


# ----------------------------------------------------------------------------- the factory


def test_the_factory_reads_the_options() -> None:
    upstream = SimulatorUpstream()
    engine = create_lm_engine(
        {
            "model": "qwen3:8b",
            "seed": 7,
            "max_history": 5,
            "temperature": 0.2,
            "max_output_tokens": 300,
            "errors": {"network_error": {"probability": 0.1, "message": "reset"}},
        },
        upstream=upstream,
    )
    assert engine.upstream is upstream
    assert engine.model == "qwen3:8b"
    assert engine.sampling == Sampling(0.2, 300)
    assert engine.injector.config == ErrorInjection(
        network_error=InjectedError(probability=0.1, message="reset"), seed=7
    )
    assert engine.injector.seed == 7


def test_the_factory_defaults() -> None:
    engine = create_lm_engine({"model": "m"}, upstream=SimulatorUpstream())
    assert engine.sampling == Sampling()
    assert engine.injector.draw("s", 0) is None


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"model": ""},
        {"model": "m", "url": "http://x"},
        {"model": "m", "temperature": 3},
        {"model": "m", "max_history": 0},
        {"model": "m", "errors": {"timeout": {"probability": 0.1}}},
        {"model": "m", "errors": {"network_error": {"probability": 1.5}}},
        {"model": "m", "errors": {"network_error": {"probability": -0.1}}},
        {"model": "m", "errors": {"network_error": {"probability": 0.1, "rate": 2}}},
    ],
    ids=[
        "no-model",
        "empty-model",
        "extra-key",
        "temperature",
        "max-history",
        "unknown-category",
        "probability-over-1",
        "probability-under-0",
        "extra-category-key",
    ],
)
def test_the_factory_refuses_wrong_options(options: JsonObject) -> None:
    with pytest.raises(ValidationError):
        create_lm_engine(options, upstream=SimulatorUpstream())
