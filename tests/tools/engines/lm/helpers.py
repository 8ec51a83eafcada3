"""A scripted simulating model for the ``lm`` engine's tests: answers ``create_response`` from a
script (a text becomes a completed response whose message says it; an exception is raised; a dict
is returned as it is) and records every request body."""

from __future__ import annotations

import copy
from collections.abc import Mapping

from app.core.engines import EngineCall, ToolSpec
from app.protocol.json_types import JsonObject
from tests.fakes import FakeUpstream, text_response

Answer = str | BaseException | JsonObject

GET_CUSTOMER = ToolSpec(
    namespace="crm",
    name="get_customer",
    description="Look a customer up by id.",
    parameters={"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
)
CREATE_CUSTOMER = ToolSpec(
    namespace="crm",
    name="create_customer",
    description="Create a customer.",
    parameters={"type": "object", "properties": {"name": {"type": "string"}}},
    output_schema={
        "type": "object",
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
        "required": ["id", "name"],
    },
    binding={"method": "POST", "url": "https://crm.invalid/customers"},
)


def call(tool: ToolSpec, arguments: str, call_id: str = "call_1") -> EngineCall:
    return EngineCall(call_id=call_id, tool=tool, arguments=arguments)


def user(text: str) -> JsonObject:
    return {"type": "message", "role": "user", "content": text}


def assistant(text: str) -> JsonObject:
    return {"type": "message", "role": "assistant", "content": text}


class SimulatorUpstream(FakeUpstream):
    """The simulating model: answers round after round from ``answers`` (see the module
    docstring); ``default`` answers once the script is empty (None: the test fails)."""

    def __init__(self, answers: list[Answer] | None = None, *, default: str | None = None) -> None:
        super().__init__()
        self.answers = list(answers or [])
        self.default = default
        self.headers: list[Mapping[str, str]] = []

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        self.requests.append(copy.deepcopy(body))
        self.headers.append(dict(headers))
        if not self.answers:
            if self.default is None:
                raise AssertionError("the simulating model was asked once too often")
            return text_response(self.default)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, str):
            return text_response(answer)
        return copy.deepcopy(answer)
