"""A new tool kind needs no edit of the core nor of the protocol: a ``calculator`` kind written
here (its own tool type, item type, id prefix, ``include`` value and secret field), wired as
``app.main`` wires the gateway's (``GatewayToolKit`` + ``register_tool_kinds``), runs through
``ResponsesService`` with a scripted upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from app.core.ids import new_id
from app.core.service import ResponsesService
from app.core.tenancy import DEFAULT_TENANT
from app.core.tools import (
    CallPresentation,
    GatewayCall,
    ProviderTools,
    ToolExecutor,
    ToolKindSpec,
    ToolNames,
    ToolRequest,
    ToolResult,
)
from app.errors import InvalidRequestError
from app.main import register_tool_kinds
from app.protocol import items, requests
from app.protocol.items import ItemKind
from app.protocol.json_types import JsonObject
from app.protocol.requests import CreateResponseRequest, ParsedRequest, check_create_request
from app.tools.toolkit import GatewayToolKit
from tests.fakes import MemoryResponseStore, ScriptedUpstream, function_call, message
from tests.lifecycle import assert_lifecycle

STEPS = "calculator_call.steps"
SECRET = "sk-calc-very-secret"
PRESENTATION = CallPresentation(
    opened_events=("response.calculator_call.in_progress",),
    arguments_events=None,
    running_events=("response.calculator_call.calculating",),
    completed_event="response.calculator_call.completed",
    failed_event="response.calculator_call.failed",
)


def fill_calculator_call(item: JsonObject) -> None:
    item.setdefault("result", None)


class CalculatorExecutor:
    presentation = PRESENTATION

    def __init__(self, *, steps: bool) -> None:
        self.steps = steps

    def _item(self, call: GatewayCall, **fields: Any) -> JsonObject:
        item_id = call.item_id or new_id("calc")
        base = {"id": item_id, "type": "calculator_call", "status": "in_progress"}
        return {**base, "expression": call.arguments, **fields}

    def open_item(self, call: GatewayCall) -> JsonObject:
        return self._item(call)

    def approval_item(self, call: GatewayCall) -> JsonObject | None:
        return None

    async def run(self, call: GatewayCall, *, timeout: float) -> ToolResult:  # noqa: ASYNC109
        args = json.loads(call.arguments)
        total = args["a"] + args["b"]
        fields: JsonObject = {"result": total, "status": "completed"}
        if self.steps:
            fields["steps"] = [f"{args['a']} + {args['b']} = {total}"]
        return ToolResult(self._item(call, **fields), str(total), True)

    def error_result(self, call: GatewayCall, message: str, *, status: str) -> ToolResult:
        return ToolResult(self._item(call, error=message, status=status), message, False)


class CalculatorProvider:
    spec = ToolKindSpec(
        namespace="calculator",
        tool_types=frozenset({"calculator"}),
        items=(ItemKind("calculator_call", "calc", fill_calculator_call),),
        include=frozenset({STEPS}),
        secret_fields=frozenset({"api_key"}),
    )

    def __init__(self) -> None:
        self.keys: list[Any] = []  # what the provider itself was given

    def unavailable(self) -> str | None:
        return None

    async def prepare(
        self,
        tools: list[tuple[int, JsonObject]],
        history: list[JsonObject],
        new_input: list[JsonObject],
        request: ToolRequest,
    ) -> ProviderTools:
        names = request.names
        out = ProviderTools()
        if tools:
            self.keys.extend(tool.get("api_key") for _, tool in tools)
            name = names.claim("calculator")
            out.executors[name] = CalculatorExecutor(
                steps=STEPS in (request.body.get("include") or [])
            )
            parameters = {"type": "object", "properties": {"a": {}, "b": {}}}
            out.upstream_tools.append({"type": "function", "name": name, "parameters": parameters})
        return out

    def lower(self, items: list[JsonObject], names: ToolNames) -> list[JsonObject]:
        out: list[JsonObject] = []
        for item in items:
            if item.get("type") != "calculator_call":
                out.append(item)
                continue
            call_id = str(item["id"])
            arguments = str(item.get("expression"))
            out.append(
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": "calculator",
                    "arguments": arguments,
                }
            )
            output = str(item.get("result"))
            out.append({"type": "function_call_output", "call_id": call_id, "output": output})
        return out

    def unknown_executor(self, name: str) -> ToolExecutor:
        return CalculatorExecutor(steps=False)

    def choice_names(
        self, choice: JsonObject, executors: Mapping[str, ToolExecutor]
    ) -> list[str] | None:
        return [n for n, e in executors.items() if isinstance(e, CalculatorExecutor)]


@pytest.fixture
def provider() -> Iterator[CalculatorProvider]:
    """The calculator kind wired as ``app.main`` wires the gateway's; the protocol's tables are
    put back afterwards."""
    prefixes, fillers = dict(items.ITEM_ID_PREFIXES), dict(items.ITEM_FILLERS)
    includes = set(requests.KNOWN_INCLUDES)
    calculator = CalculatorProvider()
    register_tool_kinds(GatewayToolKit([calculator]))
    yield calculator
    items.ITEM_ID_PREFIXES.clear()
    items.ITEM_ID_PREFIXES.update(prefixes)
    items.ITEM_FILLERS.clear()
    items.ITEM_FILLERS.update(fillers)
    requests.KNOWN_INCLUDES.clear()
    requests.KNOWN_INCLUDES.update(includes)


def make_service(
    provider: CalculatorProvider, rounds: list[list[JsonObject]]
) -> tuple[ResponsesService, ScriptedUpstream, MemoryResponseStore]:
    upstream, store = ScriptedUpstream(rounds), MemoryResponseStore()
    return ResponsesService(upstream, store, toolkit=GatewayToolKit([provider])), upstream, store


async def respond(service: ResponsesService, body: JsonObject, stream: bool) -> JsonObject:
    if not stream:
        return await service.create(ParsedRequest.from_body(body, tenant=DEFAULT_TENANT), {})
    events = [
        e
        async for e in await service.open_stream(
            ParsedRequest.from_body({**body, "stream": True}, tenant=DEFAULT_TENANT), {}
        )
    ]
    return assert_lifecycle(events)


BODY: JsonObject = {
    "model": "m",
    "input": "2 + 3?",
    "tools": [{"type": "calculator", "api_key": SECRET}],
    "include": [STEPS, "reasoning.encrypted_content"],
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_the_gateway_runs_a_new_kind_keeps_its_secret_and_answers_its_include(
    provider: CalculatorProvider, stream: bool
) -> None:
    rounds = [[function_call("calculator", '{"a": 2, "b": 3}')], [message("5")]]
    service, upstream, store = make_service(provider, rounds)
    final = await respond(service, BODY, stream)
    call, answer = final["output"]
    assert call["type"] == "calculator_call" and call["id"].startswith("calc_")
    assert (call["result"], call["steps"], call["status"]) == (5, ["2 + 3 = 5"], "completed")
    assert answer["content"][0]["text"] == "5"
    assert provider.keys == [SECRET]  # the tool gets its secret …
    assert final["tools"] == [{"type": "calculator"}]  # … nobody else does
    assert SECRET not in repr(store.responses) + repr(store.items)
    assert SECRET not in json.dumps(upstream.requests)
    assert await service.get(final["id"], tenant=DEFAULT_TENANT) == final
    # The gateway answers its include value; the upstream gets only the others.
    assert [r["include"] for r in upstream.requests] == [["reasoning.encrypted_content"]] * 2


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_the_core_knows_the_new_item_type(provider: CalculatorProvider, stream: bool) -> None:
    # An upstream that ran a calculator itself: the item gets the kind's id prefix and fill.
    ran = {
        "id": "upstream_1",
        "type": "calculator_call",
        "expression": "1+1",
        "status": "completed",
    }
    service, upstream, _ = make_service(provider, [[ran, message("2")], [message("again")]])
    first = await respond(service, {"model": "m", "input": "1 + 1?"}, stream)
    item = first["output"][0]
    assert item["id"].startswith("calc_") and item["result"] is None
    # A client replaying such an item: stored under the kind's prefix, lowered for the upstream.
    replayed = {**item, "id": "client_chosen", "result": 2}
    body = {"model": "m", "input": [replayed, {"role": "user", "content": "again"}]}
    await respond(service, body, stream)
    [call, output, _] = upstream.requests[1]["input"]
    assert call["type"] == "function_call" and call["call_id"].startswith("calc_")
    assert output == {"type": "function_call_output", "call_id": call["call_id"], "output": "2"}


def test_request_validation_accepts_the_new_include_value(provider: CalculatorProvider) -> None:
    check_create_request(CreateResponseRequest(model="m", input="hi", include=[STEPS]))
    with pytest.raises(InvalidRequestError) as raised:
        check_create_request(CreateResponseRequest(model="m", input="hi", include=["abacus.beads"]))
    assert raised.value.param == "include[0]"


def test_an_item_type_is_registered_once(provider: CalculatorProvider) -> None:
    items.register_item_kinds(CalculatorProvider.spec.items)  # the same again: harmless
    for clash in (ItemKind("calculator_call", "calc"), ItemKind("message", "m")):
        with pytest.raises(ValueError, match="already registered"):
            items.register_item_kinds([clash])
