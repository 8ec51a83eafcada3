"""``/openapi.json`` fuzzed by schemathesis over every operation: no input gets a 5xx, and every
answer is one the document describes (status, content type, body schema).

The gateway runs in process (schemathesis's ASGI transport, which runs the app's lifespan once)
on SQLite in a temporary directory, in front of the fake upstream of the other API tests.
Hypothesis is derandomized with a small number of examples per operation: the run is the same
every time and takes seconds. Four passes:

- positive: data that matches the schema (most of it still refused with a 400 by the gateway's
  own checks: the checks only ask that the refusal is documented and in OpenAI's envelope);
- negative: data that breaks the schema, for the operations whose body the document describes
  (the others have nothing to negate but a free-form path parameter);
- arbitrary JSON bodies (any JSON value, nested) POSTed to every operation that takes a body,
  the ones that read their body themselves included;
- arbitrary query parameters (pagination, ``include``: read by the routes themselves) on every
  GET.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.python.asgi import shutdown_lifespans
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.fakes import FakeEmbedder, FakeUpstream, text_response

ANSWER: JsonObject = text_response("hi")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
FUZZ = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    upstream = FakeUpstream(
        body=ANSWER, events=[{"type": "response.completed", "response": ANSWER}]
    )
    settings_ = Settings(data_dir=Path(tmp_path_factory.mktemp("schemathesis")))
    app = create_app(settings_, upstream=upstream, embedder=FakeEmbedder())
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    shutdown_lifespans()  # the app's lifespan, which schemathesis started and keeps running


def operations(schema: Any) -> list[Any]:
    found = [result.ok() for result in schema.get_all_operations()]
    assert len(found) > 30, "the document lost its operations"
    return found


def run(operation: Any, strategy: Any, failures: list[str]) -> None:
    """Every example of ``strategy`` sent and checked; a failure is noted, not raised, so one
    run reports every operation that fails."""

    @FUZZ
    @given(case=strategy)
    def fuzz(case: schemathesis.Case) -> None:
        case.call_and_validate(checks=CHECKS)

    try:
        fuzz()
    except (Exception, BaseExceptionGroup) as exc:
        failures.append(f"{operation.label}: {exc}")


def test_schema_conforming_requests(api_schema: Any) -> None:
    failures: list[str] = []
    for operation in operations(api_schema):
        run(operation, operation.as_strategy(generation_mode=GenerationMode.POSITIVE), failures)
    assert not failures, "\n\n".join(failures)


def test_schema_breaking_bodies(api_schema: Any) -> None:
    failures: list[str] = []
    with_body = [operation for operation in operations(api_schema) if operation.body]
    assert len(with_body) >= 4  # the hot routes at least
    for operation in with_body:
        run(operation, operation.as_strategy(generation_mode=GenerationMode.NEGATIVE), failures)
    assert not failures, "\n\n".join(failures)


def test_arbitrary_json_bodies(api_schema: Any) -> None:
    failures: list[str] = []
    posts = [operation for operation in operations(api_schema) if operation.method == "post"]
    for operation in posts:
        names = [parameter.name for parameter in operation.path_parameters]
        strategy = JSON_VALUES.map(
            lambda body, op=operation, names=names: op.Case(
                path_parameters=dict.fromkeys(names, "missing"),
                body=body,
                media_type="application/json",
            )
        )
        run(operation, strategy, failures)
    assert not failures, "\n\n".join(failures)


# The query parameters the routes read themselves (pagination, ``include``), not in the document.
QUERY = st.dictionaries(
    st.sampled_from(["limit", "order", "after", "before", "include", "include[]", "filter"]),
    st.text(max_size=12) | st.integers().map(str),
    max_size=4,
)


def test_arbitrary_query_parameters(api_schema: Any) -> None:
    failures: list[str] = []
    gets = [operation for operation in operations(api_schema) if operation.method == "get"]
    for operation in gets:
        names = [parameter.name for parameter in operation.path_parameters]
        strategy = QUERY.map(
            lambda query, op=operation, names=names: op.Case(
                path_parameters=dict.fromkeys(names, "missing"), query=query
            )
        )
        run(operation, strategy, failures)
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/responses", {"model": "m", "input": "hi", "stream": True}),
        ("/v1/responses", {"model": "m", "input": "hi"}),
        (
            "/v1/messages",
            {
                "model": "m",
                "max_tokens": 8,
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            },
        ),
    ],
)
def test_successful_answers_conform(api_schema: Any, path: str, body: JsonObject) -> None:
    """A request that succeeds, streams included (fuzzed data seldom does): its answer, every
    event of a stream, is as the document describes. (Chat completions are the upstream's
    answer, passed through; the fake upstream takes none.)"""
    operation = api_schema[path]["POST"]
    response = operation.Case(body=body, media_type="application/json").call_and_validate(
        checks=CHECKS
    )
    assert response.status_code == 200, response.text
