"""The ``lm`` engine against a scripted simulating model: the prompt (the session's earlier
calls as few-shot turns, and nothing else), sessions restored from a saved state, ``simulate``
leaving the session as it was, and how answers are read (compact JSON, reasoning ignored)."""

from __future__ import annotations

import json

import pytest

from app.core.engines import (
    EngineResult,
    SessionExistsError,
    ToolEngine,
    ToolFailure,
    UnknownSessionError,
)
from app.protocol.json_types import JsonObject
from app.tools.engines.lm import SYSTEM_INSTRUCTION, LmEngine, Sampling
from tests.fakes import message
from tests.tools.engines.lm.helpers import (
    CREATE_CUSTOMER,
    GET_CUSTOMER,
    Answer,
    SimulatorUpstream,
    assistant,
    call,
    user,
)

MODEL = "sim-model"


def turn(tool: JsonObject, arguments: object) -> JsonObject:
    """The user turn the engine should write for a call (compact JSON)."""
    text = json.dumps({"tool": tool, "arguments": arguments}, separators=(",", ":"))
    return user(text)


GET_1 = turn(GET_CUSTOMER.to_json(), {"id": 1})
CREATE_ADA = turn(CREATE_CUSTOMER.to_json(), {"name": "Ada"})
GET_7 = turn(GET_CUSTOMER.to_json(), {"id": 7})


async def engine_with(
    answers: list[Answer], session: str = "s1"
) -> tuple[LmEngine, SimulatorUpstream]:
    upstream = SimulatorUpstream(list(answers))
    engine = LmEngine(upstream, MODEL)
    await engine.setup(session)
    return engine, upstream


def test_is_a_tool_engine() -> None:
    assert isinstance(LmEngine(SimulatorUpstream(), MODEL), ToolEngine)


async def test_first_call_prompt_is_the_instruction_and_the_call() -> None:
    engine, upstream = await engine_with(['{"id": 1, "name": "Ada"}'])
    [result] = await engine.execute("s1", [call(GET_CUSTOMER, '{"id": 1}')])

    assert result == EngineResult(
        call_id="call_1", output='{"id":1,"name":"Ada"}', duration_ms=result.duration_ms
    )
    assert upstream.requests == [
        {
            "model": MODEL,
            "instructions": SYSTEM_INSTRUCTION,
            "input": [GET_1],
            "text": {"format": {"type": "json_object"}},
            "store": False,
        }
    ]
    assert upstream.headers == [{}]


async def test_earlier_calls_of_the_session_are_the_few_shot_turns() -> None:
    engine, upstream = await engine_with(
        ['{"id": 1, "name": "Ada"}', '{"id":7,"name":"Ada"}', '{"id": 7, "name": "Ada"}']
    )
    await engine.execute("s1", [call(GET_CUSTOMER, '{"id": 1}', "c1")])
    # One batch: the second call's prompt holds the first call of the batch and its result.
    results = await engine.execute(
        "s1",
        [call(CREATE_CUSTOMER, '{"name": "Ada"}', "c2"), call(GET_CUSTOMER, '{"id":7}', "c3")],
    )

    assert [r.output for r in results] == ['{"id":7,"name":"Ada"}', '{"id":7,"name":"Ada"}']
    assert [r["input"] for r in upstream.requests] == [
        [GET_1],
        [GET_1, assistant('{"id":1,"name":"Ada"}'), CREATE_ADA],
        [
            GET_1,
            assistant('{"id":1,"name":"Ada"}'),
            CREATE_ADA,
            assistant('{"id":7,"name":"Ada"}'),
            GET_7,
        ],
    ]
    # Nothing else: the fixed instruction, and never the tool's binding.
    assert {r["instructions"] for r in upstream.requests} == {SYSTEM_INSTRUCTION}
    assert "crm.invalid" not in json.dumps(upstream.requests)
    state = engine.get_session_state("s1")
    assert [entry["call"]["call_id"] for entry in state["history"]] == ["c1", "c2", "c3"]
    assert state["calls"] == 3


async def test_sessions_are_separate() -> None:
    engine, upstream = await engine_with(['{"id": 1}', '{"id": 2}'])
    await engine.setup("s2")
    await engine.execute("s1", [call(GET_CUSTOMER, '{"id": 1}')])
    await engine.execute("s2", [call(GET_CUSTOMER, '{"id": 1}')])
    assert upstream.requests[1]["input"] == [GET_1]


async def test_a_failed_earlier_result_is_an_error_turn() -> None:
    engine, upstream = await engine_with(["not json", '{"id": 1}'])
    [failed] = await engine.execute("s1", [call(GET_CUSTOMER, '{"id": 1}')])
    await engine.execute("s1", [call(GET_CUSTOMER, '{"id": 1}', "c2")])

    assert failed.error is not None and failed.error.kind == "unparseable_result"
    error = {"error": {"kind": "unparseable_result", "message": failed.error.message}}
    assert upstream.requests[1]["input"] == [
        GET_1,
        assistant(json.dumps(error, separators=(",", ":"))),
        GET_1,
    ]


async def test_a_restored_session_prompts_with_its_history() -> None:
    first, _ = await engine_with(['{"id": 1, "name": "Ada"}'])
    await first.execute("s1", [call(GET_CUSTOMER, '{"id": 1}')])
    saved = json.loads(json.dumps(first.get_session_state("s1")))  # as the store keeps it

    upstream = SimulatorUpstream(['{"id": 7}'])
    second = LmEngine(upstream, MODEL)
    await second.setup("conv_1", saved)
    await second.execute("conv_1", [call(GET_CUSTOMER, '{"id": 7}', "c2")])

    assert upstream.requests[0]["input"] == [GET_1, assistant('{"id":1,"name":"Ada"}'), GET_7]
    assert second.get_session_state("conv_1")["calls"] == 2


async def test_a_hand_written_state_prompts_with_its_history() -> None:
    state: JsonObject = {
        "history": [
            {
                "call": {"call_id": "x", "tool": GET_CUSTOMER.to_json(), "arguments": '{"id":1}'},
                "result": {"call_id": "x", "output": '{"id":1,"name":"Bob"}'},
            },
            {
                "call": {"call_id": "y", "tool": GET_CUSTOMER.to_json(), "arguments": "{oops"},
                "result": {
                    "call_id": "y",
                    "output": "",
                    "error": {"kind": "invalid_arguments", "message": "bad"},
                },
            },
        ]
    }
    engine = LmEngine(upstream := SimulatorUpstream(['{"id": 7}']), MODEL)
    await engine.setup("s1", state)
    await engine.execute("s1", [call(GET_CUSTOMER, '{"id": 7}')])
    raw = json.dumps({"tool": GET_CUSTOMER.to_json(), "arguments": "{oops"}, separators=(",", ":"))
    error = '{"error":{"kind":"invalid_arguments","message":"bad"}}'
    assert upstream.requests[0]["input"] == [
        GET_1,
        assistant('{"id":1,"name":"Bob"}'),
        user(raw),
        assistant(error),
        GET_7,
    ]


async def test_simulate_leaves_the_session_as_it_was() -> None:
    engine, upstream = await engine_with(['{"id": 1}', '{"id": 7}', '{"ok": true}', '{"id": 9}'])
    await engine.execute("s1", [call(GET_CUSTOMER, '{"id": 1}')])
    before = engine.get_session_state("s1")

    simulated = await engine.simulate(
        "s1", [call(GET_CUSTOMER, '{"id": 7}', "c2"), call(CREATE_CUSTOMER, '{"name": "Ada"}')]
    )

    assert engine.get_session_state("s1") == before
    # Within the simulated batch the second call still saw the first.
    assert upstream.requests[2]["input"] == [
        GET_1,
        assistant('{"id":1}'),
        GET_7,
        assistant('{"id":7}'),
        CREATE_ADA,
    ]
    assert [r.ok for r in simulated] == [True, False]  # {"ok": true} misses the output schema
    # The next real call is prompted as if the simulation never happened.
    await engine.execute("s1", [call(GET_CUSTOMER, '{"id": 7}', "c3")])
    assert upstream.requests[3]["input"] == [GET_1, assistant('{"id":1}'), GET_7]


async def test_simulate_restores_the_session_when_the_batch_is_cancelled() -> None:
    engine, _ = await engine_with(['{"id": 1}'])
    await engine.execute("s1", [call(GET_CUSTOMER, '{"id": 1}')])
    before = engine.get_session_state("s1")
    engine.upstream = SimulatorUpstream(['{"id": 2}', KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        await engine.simulate("s1", [call(GET_CUSTOMER, "{}"), call(GET_CUSTOMER, "{}")])
    assert engine.get_session_state("s1") == before


async def test_answers_are_read_from_output_text_only() -> None:
    reasoning = {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "The user wants {not json"}],
    }
    answer: JsonObject = {"status": "completed", "output": [reasoning, message('{"a": [1, 2]}')]}
    engine, _ = await engine_with([answer])
    [result] = await engine.execute("s1", [call(GET_CUSTOMER, '{"id": 1}')])
    assert result.output == '{"a":[1,2]}'


async def test_a_fenced_answer_is_read() -> None:
    engine, _ = await engine_with(['```json\n{"id": 1,\n "name": "Ada"}\n```'])
    [result] = await engine.execute("s1", [call(GET_CUSTOMER, '{"id": 1}')])
    assert result.output == '{"id":1,"name":"Ada"}'


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ("Sure! The customer is Ada.", "not JSON"),
        ('{"id": 1', "not JSON"),
        ("   ", "empty answer"),
    ],
    ids=["prose", "truncated", "blank"],
)
async def test_parse_failures_are_failed_results_kept_in_the_history(
    answer: str, says: str
) -> None:
    engine, _ = await engine_with([answer])
    [result] = await engine.execute("s1", [call(GET_CUSTOMER, '{"id": 1}')])
    assert result.error is not None
    assert result.error.kind == "unparseable_result"
    assert says in result.error.message
    assert result.output == ""
    [entry] = engine.get_session_state("s1")["history"]
    assert entry["result"]["error"] == {
        "kind": "unparseable_result",
        "message": result.error.message,
    }


async def test_invalid_arguments_fail_without_asking_the_model() -> None:
    engine, upstream = await engine_with([])
    [result] = await engine.execute("s1", [call(GET_CUSTOMER, "[1, 2]")])
    assert result.error == ToolFailure("invalid_arguments", "the arguments must be a JSON object")
    assert upstream.requests == []
    assert len(engine.get_session_state("s1")["history"]) == 1


async def test_sampling_fields_are_sent_when_set() -> None:
    upstream = SimulatorUpstream(['{"id": 1}'])
    engine = LmEngine(upstream, MODEL, sampling=Sampling(temperature=0.3, max_output_tokens=256))
    await engine.setup("s1")
    await engine.execute("s1", [call(GET_CUSTOMER, "")])
    assert upstream.requests[0]["temperature"] == 0.3
    assert upstream.requests[0]["max_output_tokens"] == 256
    assert upstream.requests[0]["input"] == [turn(GET_CUSTOMER.to_json(), {})]


async def test_max_history_bounds_the_prompt_and_the_state() -> None:
    upstream = SimulatorUpstream(default='{"id": 1}')
    engine = LmEngine(upstream, MODEL, max_history=2)
    await engine.setup("s1")
    for n in range(4):
        await engine.execute("s1", [call(GET_CUSTOMER, '{"id": 1}', f"c{n}")])
    assert len(upstream.requests[-1]["input"]) == 2 * 2 + 1
    state = engine.get_session_state("s1")
    assert [e["call"]["call_id"] for e in state["history"]] == ["c2", "c3"]
    assert state["calls"] == 4


async def test_session_lifecycle_errors() -> None:
    engine, _ = await engine_with([])
    with pytest.raises(SessionExistsError):
        await engine.setup("s1")
    with pytest.raises(UnknownSessionError):
        await engine.execute("nope", [call(GET_CUSTOMER, "{}")])
    with pytest.raises(UnknownSessionError):
        await engine.simulate("nope", [call(GET_CUSTOMER, "{}")])
    with pytest.raises(UnknownSessionError):
        engine.get_session_state("nope")
    await engine.teardown("nope")  # a no-op
    await engine.teardown("s1")
    await engine.setup("s1")
    assert engine.get_session_state("s1") == {"history": []}
