"""Strict clients: every Response and every stream event the gateway emits, for every recorded
upstream answer, validates with the newest ``openai`` SDK's typed models.

Each recorded ``/v1/responses`` or ``/v1/chat/completions`` turn (the shared recordings, and
this repository's ``cassettes/``) is the answer of a replaying upstream (``RecordedUpstream``,
a hand-written fake of the port: the chat kind goes through the gateway's real chat
translation). The client asks for it once as JSON and once as SSE, through the gateway
running in process; what comes back on the wire is validated with
``openai.types.responses.Response`` and the ``ResponseStreamEvent`` union, and so is the stored
copy ``GET /v1/responses/{id}`` returns.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import orjson
import pytest
from openai.types.responses import Response, ResponseOutputItem, ResponseStreamEvent
from pydantic import BaseModel
from starlette.testclient import TestClient

from app.core.ports import SingleResponseStream
from app.errors import GatewayError, UpstreamProtocolError
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.recording.cassette import CassetteError, Turn, load_cassette, sse_data_events
from app.settings import Settings
from app.upstream.chat_response import ChatStreamTranslator, to_response
from tests.fakes import FakeEmbedder, FakeUpstream, ListEventStream
from tests.recordings import SHARED, needs_shared

ROOT = Path(__file__).resolve().parents[2]
PROJECT_CASSETTES = ROOT / "cassettes"
BUNDLED_CASSETTES = ROOT / "app" / "recording" / "bundled"  # the quick start's
RESPONSES_PATH = "/v1/responses"
CHAT_PATH = "/v1/chat/completions"
# Tool types the gateway runs itself: left out of the replayed requests, whose answers are
# what an upstream recorded (with the gateway's tools, the gateway would call them).
GATEWAY_TOOL_TYPES = frozenset({"mcp", "file_search"})
GATEWAY_TOOL_PREFIX = "web_search"
STATE_FIELDS = ("previous_response_id", "conversation", "stream", "background")


def _event_models() -> dict[str, type[BaseModel]]:
    """The SDK's event model for each ``type`` of the ``ResponseStreamEvent`` union."""
    (union, *_) = get_args(ResponseStreamEvent)
    models: dict[str, type[BaseModel]] = {}
    for model in get_args(union):
        for kind in get_args(model.model_fields["type"].annotation):
            models[kind] = model
    return models


def _item_types() -> frozenset[str]:
    """The output item types the SDK's ``Response.output`` union knows."""
    (union, *_) = get_args(ResponseOutputItem)
    members = get_args(union)
    return frozenset(k for m in members for k in get_args(m.model_fields["type"].annotation))


EVENT_MODELS = _event_models()
ITEM_TYPES = _item_types()


@dataclass(frozen=True)
class ReplayCase:
    """One recorded upstream answer and the client request that asks for it."""

    name: str
    kind: str  # "responses" or "chat"
    turn: Turn
    request: JsonObject

    @property
    def passed(self) -> frozenset[str]:
        """The event types the recorded upstream stream itself has."""
        return frozenset(str(e.get("type")) for e in sse_data_events(self.turn))


class RecordedUpstream(FakeUpstream):
    """``core.ports.Upstream`` answering the current case's recorded turn, as JSON or as a
    stream, whichever the gateway asks for (a recorded stream is folded for a JSON request,
    a recorded JSON answer becomes the one terminal event, as a real server that ignores
    ``stream`` does)."""

    def __init__(self) -> None:
        super().__init__()
        self.case: ReplayCase | None = None

    def _current(self) -> ReplayCase:
        assert self.case is not None
        return self.case

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        case = self._current()
        if case.turn.response.is_sse:
            events, failure = self._events(case, body)
            if failure is not None:
                raise failure  # a stream that broke has no JSON form: the upstream's error
            return _terminal_response(events)
        answer = copy.deepcopy(case.turn.response.body)
        return to_response(answer, body) if case.kind == "chat" else answer

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> ListEventStream | SingleResponseStream:
        case = self._current()
        if not case.turn.response.is_sse:
            return SingleResponseStream(await self.create_response(body, headers))
        events, failure = self._events(case, body)
        return ListEventStream(events, fail_after=failure)

    def _events(
        self, case: ReplayCase, body: JsonObject
    ) -> tuple[list[JsonObject], GatewayError | None]:
        """The recorded stream as Responses events, and the error that ended it, if any."""
        chunks = sse_data_events(case.turn)
        if case.kind != "chat":
            return chunks, None
        translator = ChatStreamTranslator(body)
        events: list[JsonObject] = []
        try:
            for chunk in chunks:
                events.extend(translator.feed(chunk))
            if not translator.done:
                events.extend(translator.finish())
        except GatewayError as exc:
            return events, exc
        return events, None


def _terminal_response(events: list[JsonObject]) -> JsonObject:
    for event in reversed(events):
        response = event.get("response")
        if isinstance(response, dict) and str(event.get("type")).startswith("response."):
            return response
    # A recording cut short: as a JSON answer, the upstream's failure.
    raise UpstreamProtocolError("the recorded stream ends without a response")


# ---------------------------------------------------------------------------- cases


def client_request(recorded: Any, kind: str) -> JsonObject:
    """What a client sends to get this answer: the recorded Responses request without server
    state and gateway tools; for a chat turn, a Responses request of the same model."""
    if kind == "chat":
        return {"model": str(recorded.get("model") or "m"), "input": "replayed"}
    body = {k: v for k, v in recorded.items() if k not in STATE_FIELDS}
    tools = [t for t in body.get("tools") or [] if not _gateway_tool(t)]
    if tools:
        body["tools"] = tools
    else:
        body.pop("tools", None)
    if body.get("tool_choice") not in (None, "auto", "none") and (
        not tools or isinstance(body.get("tool_choice"), dict)
    ):
        body.pop("tool_choice", None)
    body.setdefault("input", "replayed")
    body.setdefault("model", "replayed")  # a hand-composed fixture may leave it out
    return body


def _gateway_tool(tool: Any) -> bool:
    kind = str(tool.get("type")) if isinstance(tool, dict) else ""
    return kind in GATEWAY_TOOL_TYPES or kind.startswith(GATEWAY_TOOL_PREFIX)


def replay_cases(root: Path) -> list[ReplayCase]:
    cases: list[ReplayCase] = []
    for path in sorted([*root.rglob("*.yaml"), *root.rglob("*.json")]):
        try:
            cassette = load_cassette(path)
        except CassetteError:
            continue  # a sidecar (tools.json …), not a recording
        for index, turn in enumerate(cassette.turns):
            kind = {RESPONSES_PATH: "responses", CHAT_PATH: "chat"}.get(turn.request.path)
            recorded = turn.request.body
            if kind is None or turn.response.status_code != 200 or not isinstance(recorded, dict):
                continue
            name = f"{path.relative_to(root)}#{index}"
            cases.append(ReplayCase(name, kind, turn, client_request(recorded, kind)))
    return cases


# ---------------------------------------------------------------------------- the gateway


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Any]]:
    upstream = RecordedUpstream()
    data_dir = tmp_path_factory.mktemp("strict")
    settings = Settings(data_dir=data_dir, upstream_url="http://127.0.0.1:9")
    app = create_app(settings, upstream=upstream, embedder=FakeEmbedder())
    with TestClient(app) as client:
        yield client, upstream


def replay_and_validate(gateway: tuple[TestClient, Any], cases: list[ReplayCase]) -> int:
    """Every case through JSON and SSE; returns how many objects were validated."""
    client, upstream = gateway
    validated = 0
    for case in cases:
        upstream.case = case
        for stream in (False, True):
            body = {**case.request, "stream": stream}
            try:
                objects = _stream_objects(client, body) if stream else _json_object(client, body)
            except AssertionError as exc:
                raise AssertionError(f"{case.name} (stream={stream}): {exc}") from None
            for what, value in objects:
                _validate(what, value, f"{case.name} (stream={stream})", case.passed)
                validated += 1
    return validated


def _json_object(client: TestClient, body: JsonObject) -> list[tuple[str, JsonObject]]:
    """The Response of a JSON request; none when the recorded stream broke (the gateway
    answers the upstream's error, in OpenAI's envelope)."""
    reply = client.post(RESPONSES_PATH, json=body)
    data: JsonObject = reply.json()
    if reply.status_code >= 500 and set(data) == {"error"}:
        return []
    assert reply.status_code == 200, reply.text
    return [("response", data)]


def _stream_objects(client: TestClient, body: JsonObject) -> list[tuple[str, JsonObject]]:
    objects: list[tuple[str, JsonObject]] = []
    with client.stream("POST", RESPONSES_PATH, json=body) as reply:
        assert reply.status_code == 200, reply.read().decode()
        for line in reply.iter_lines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                objects.append(("event", orjson.loads(line[5:])))
    final = objects[-1][1].get("response") if objects else None
    stored = body.get("store") is not False
    if stored and isinstance(final, dict) and final.get("status") in ("completed", "incomplete"):
        stored = client.get(f"{RESPONSES_PATH}/{final['id']}")
        assert stored.status_code == 200, stored.text
        objects.append(("response", stored.json()))
    return objects


def _validate(what: str, value: JsonObject, where: str, passed: frozenset[str]) -> None:
    """``value`` against the SDK's model. Item and event types the SDK does not know are
    carried through by design (a vendor's ``multi_agent_call``): such items are left out, and
    an unknown event must be one the upstream sent (``passed``)."""
    model: type[BaseModel]
    if what == "response":
        value, model = _known_output(value), Response
    elif _carried_through(value, passed):
        return
    else:
        model = EVENT_MODELS.get(str(value.get("type")), _NotOpenAIs)
        if isinstance(value.get("response"), dict):
            value = {**value, "response": _known_output(value["response"])}
    try:
        model.model_validate(value, strict=False)
    except ValueError as exc:
        first = str(exc).splitlines()[:3]
        shown = orjson.dumps(value).decode()[:600]
        raise AssertionError(f"{where}: {what} {value.get('type')!r}: {first} in {shown}") from None


def _carried_through(event: JsonObject, passed: frozenset[str]) -> bool:
    item = event.get("item")
    if isinstance(item, dict) and item.get("type") not in ITEM_TYPES:
        return True
    return event.get("type") in passed and event.get("type") not in EVENT_MODELS


def _known_output(response: JsonObject) -> JsonObject:
    output = [i for i in response.get("output") or [] if i.get("type") in ITEM_TYPES]
    return {**response, "output": output}


class _NotOpenAIs(BaseModel):
    """Stands for an event type neither the SDK nor the upstream has: it never validates."""

    never: None


# ---------------------------------------------------------------------------- tests


def test_project_cassettes_validate_with_the_sdk(gateway: tuple[TestClient, Any]) -> None:
    cases = replay_cases(PROJECT_CASSETTES) + replay_cases(BUNDLED_CASSETTES)
    assert {c.kind for c in cases} == {"responses", "chat"}
    assert replay_and_validate(gateway, cases) > 4 * len(cases)


@needs_shared
def test_shared_recordings_validate_with_the_sdk(gateway: tuple[TestClient, Any]) -> None:
    cases = replay_cases(SHARED)
    assert len(cases) > 50
    assert replay_and_validate(gateway, cases) > 4 * len(cases)


def test_opening_events_carry_no_usage(gateway: tuple[TestClient, Any]) -> None:
    client, upstream = gateway
    (case,) = [c for c in replay_cases(BUNDLED_CASSETTES) if "quickstart" in c.name][:1]
    upstream.case = case
    objects = _stream_objects(client, {**case.request, "stream": True})
    events = [value for what, value in objects if what == "event"]
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[0]["response"]["usage"] is None
    assert events[1]["response"]["usage"] is None
    usage = events[-1]["response"]["usage"]
    assert usage["input_tokens_details"]["cache_write_tokens"] == 0
    assert usage["output_tokens_details"]["reasoning_tokens"] >= 0
