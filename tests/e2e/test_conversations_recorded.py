"""OpenAI's recorded Conversations API traffic, replayed step by step against the gateway.

Each recording (``conversations/*-openai.yaml``, ``text_only/conversation/*``) is a sequence of
client requests to OpenAI: conversation CRUD, item adds, lists and deletes, and
``POST /v1/responses`` with ``conversation`` or ``previous_response_id``. Every request is sent,
in order, to the gateway, whose upstream is a replay server holding the recording's
``/v1/responses`` turns (so the "model" answers exactly what OpenAI's model answered). For each
step the test asserts:

- the gateway answers with OpenAI's status code and body, field for field, except ids and
  timestamps: a recorded id met for the first time is mapped to the gateway's id at the same
  place, and every later occurrence (paths, ``after`` cursors, ``conversation``,
  ``previous_response_id``, item ids in request bodies, ids inside error messages) must be - and
  is sent as - the mapped one. Generated text needs no exception: the replayed upstream
  returns the recorded text.
- for ``/v1/responses``, that the request the gateway sent upstream carries the history OpenAI
  must have used. That history is modelled from the recording itself (items added, items
  deleted, each stored response's input and output appended to its conversation, a
  ``previous_response_id`` continuing from its parent's checkpoint) and the model is checked
  against every full ``GET .../items`` listing OpenAI returned. Compared without ids.

Legitimate gateway-vs-OpenAI differences, not asserted:

- Upstream request: the gateway sends the full history plus the new input as ``input`` and
  drops ``conversation``/``previous_response_id`` (its upstream is stateless); OpenAI's own
  model call is not observable.
- Response objects: OpenAI's account- and platform-specific fields (``billing``,
  ``moderation``, ``tool_usage``, ``access_programs``) are not produced by the gateway; the
  remaining fields must match. Streams are compared on their final ``response.completed``
  object and on the sequence of event types.
- Wire client: raw ``httpx``, not the ``openai`` SDK, because the comparison is of the exact
  JSON and status codes (the SDK's models would hide extra or missing fields); the SDK is
  exercised against the same endpoints in tests/api/test_conversations.py.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.history import as_input_list, canonical_item
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.recording.cassette import Cassette, Turn, load_cassette, sse_data_events
from app.recording.replay import create_replay_app
from app.settings import Settings
from tests.fakes import MemoryResponseStore
from tests.helpers import in_process, serve_in_thread
from tests.recordings import SHARED as SHARED_CASSETTES
from tests.recordings import needs_shared

pytestmark = needs_shared

RECORDINGS = [
    "conversations/conversations-continuation-openai.yaml",
    "conversations/conversations-branch-openai.yaml",
    "conversations/conversations-deletion-openai.yaml",
    "conversations/conversations-pagination-openai.yaml",
    "conversations/conversations-edge-cases-openai.yaml",
    "conversations/conversations-continuation-stream-openai.yaml",
    "conversations/conversations-branch-stream-openai.yaml",
    "conversations/conversations-deletion-stream-openai.yaml",
    "conversations/conversations-pagination-stream-openai.yaml",
    "text_only/conversation/conv-isolation-gpt-4o-nonstreaming.yaml",
    "text_only/conversation/conv-multi-branch-multi-turn-gpt-4o-nonstreaming.yaml",
    "text_only/conversation/conv-multi-turn-single-branch-gpt-4o-nonstreaming.yaml",
    "text_only/conversation/conv-store-false-followup-gpt-4o-nonstreaming.yaml",
    "text_only/conversation/conv-two-turn-gpt-4o-nonstreaming.yaml",
    "text_only/conversation/conv-two-turn-gpt-4o-streaming.yaml",
]

# Generated ids, OpenAI's (48-50 hex digits) and the gateway's (a UUIDv7's 32): ``msg_0a07…``.
# Client-invented ids such as ``item_wrongprefix_56195f6721fb44ea`` do not match.
ID_PATTERN = re.compile(r"\b[a-z]+_[0-9a-f]{32,}\b")
TIMESTAMP_KEYS = frozenset({"created_at", "completed_at"})
# Fields of OpenAI's Response object that describe its platform, not the response.
OPENAI_ONLY_RESPONSE_FIELDS = frozenset({"billing", "moderation", "tool_usage", "access_programs"})


# ------------------------------------------------------------------------------ id mapping


@dataclass
class IdMap:
    """Recorded id -> gateway id, learned where a recorded id first appears in an answer."""

    forward: dict[str, str] = field(default_factory=dict)
    backward: dict[str, str] = field(default_factory=dict)

    def translate(self, value: Any) -> Any:
        """``value`` with every mapped recorded id replaced by the gateway's."""
        if isinstance(value, str):
            return ID_PATTERN.sub(lambda m: self.forward.get(m.group(0), m.group(0)), value)
        if isinstance(value, list):
            return [self.translate(v) for v in value]
        if isinstance(value, dict):
            return {k: self.translate(v) for k, v in value.items()}
        return value

    def bind(self, recorded: str, actual: Any, where: str, problems: list[str]) -> None:
        if not isinstance(actual, str) or not ID_PATTERN.fullmatch(actual):
            problems.append(f"{where}: expected an id like {recorded!r}, got {actual!r}")
            return
        if recorded.split("_", 1)[0] != actual.split("_", 1)[0]:
            problems.append(f"{where}: prefix of {actual!r} differs from {recorded!r}")
        known = self.forward.get(recorded)
        if known is None:
            if actual in self.backward:
                problems.append(f"{where}: {actual!r} already stands for {self.backward[actual]!r}")
            self.forward[recorded] = actual
            self.backward[actual] = recorded
        elif known != actual:
            problems.append(f"{where}: expected {known!r} (recorded {recorded!r}), got {actual!r}")


# Keys the gateway sends that these recordings predate: the newest openai SDK requires them.
NEWER_KEYS = frozenset({"cache_write_tokens"})


def compare(
    recorded: Any,
    actual: Any,
    ids: IdMap,
    problems: list[str],
    where: str = "body",
    tolerated: frozenset[str] = frozenset(),
) -> None:
    """Record every difference between an OpenAI answer and the gateway's (see module doc)."""
    if isinstance(recorded, dict):
        if not isinstance(actual, dict):
            problems.append(f"{where}: expected an object, got {actual!r}")
            return
        missing = set(recorded) - set(actual) - tolerated
        extra = set(actual) - set(recorded) - NEWER_KEYS
        if missing or extra:
            problems.append(f"{where}: missing keys {sorted(missing)}, extra keys {sorted(extra)}")
        for key in recorded:
            if key not in actual:
                continue
            sub = f"{where}.{key}"
            if key in TIMESTAMP_KEYS:
                if (recorded[key] is None) != (actual[key] is None) or not isinstance(
                    actual[key], int | None
                ):
                    problems.append(f"{sub}: expected a timestamp like {recorded[key]!r}")
                continue
            compare(recorded[key], actual[key], ids, problems, sub)
    elif isinstance(recorded, list):
        if not isinstance(actual, list) or len(actual) != len(recorded):
            problems.append(f"{where}: expected {len(recorded)} elements, got {actual!r}")
            return
        for index, (a, b) in enumerate(zip(recorded, actual, strict=True)):
            compare(a, b, ids, problems, f"{where}[{index}]")
    elif isinstance(recorded, str) and ID_PATTERN.fullmatch(recorded):
        ids.bind(recorded, actual, where, problems)
    elif isinstance(recorded, str) and ID_PATTERN.search(recorded):
        if actual != ids.translate(recorded):
            problems.append(f"{where}: expected {ids.translate(recorded)!r}, got {actual!r}")
    elif recorded != actual or isinstance(recorded, bool) != isinstance(actual, bool):
        problems.append(f"{where}: expected {recorded!r}, got {actual!r}")


# ------------------------------------------------------------------------------ OpenAI's state


def without_ids(items: list[JsonObject]) -> list[JsonObject]:
    return [{k: v for k, v in item.items() if k != "id"} for item in items]


@dataclass
class ExpectedState:
    """What OpenAI's server held, modelled from the recorded requests and answers."""

    conversations: dict[str, list[JsonObject]] = field(default_factory=dict)
    checkpoints: dict[str, list[JsonObject]] = field(default_factory=dict)

    def history_of(self, body: JsonObject) -> list[JsonObject]:
        conversation = body.get("conversation")
        if isinstance(conversation, dict):
            conversation = conversation.get("id")
        if isinstance(conversation, str):
            return list(self.conversations[conversation])
        previous = body.get("previous_response_id")
        return list(self.checkpoints[previous]) if isinstance(previous, str) else []

    def observe(self, turn: Turn, answer: Any) -> None:
        """Fold one successful recorded step into the model."""
        request, path = turn.request, turn.request.path
        parts = path.strip("/").split("/")  # v1 conversations {id} items {item}
        body = request.body if isinstance(request.body, dict) else {}
        if parts[:2] == ["v1", "responses"] and request.method == "POST":
            inputs = [canonical_item(i) for i in as_input_list(body.get("input"))]
            history = self.history_of(body)
            if body.get("store") is False:
                return
            output = answer["output"]
            self.checkpoints[answer["id"]] = [*history, *inputs, *output]
            conversation = answer.get("conversation")
            if isinstance(conversation, dict):
                self.conversations[conversation["id"]] += [*inputs, *output]
            return
        if parts[:2] != ["v1", "conversations"]:
            return
        if len(parts) == 2 and request.method == "POST":
            raw = body.get("items") or []
            self.conversations[answer["id"]] = [canonical_item(i) for i in raw]
        elif len(parts) == 3 and request.method == "DELETE":
            self.conversations.pop(parts[2], None)
        elif len(parts) == 4 and request.method == "POST":
            self.conversations[parts[2]] += answer["data"]
        elif len(parts) == 4 and request.method == "GET":
            self.check_listing(parts[2], turn, answer)
        elif len(parts) == 5 and request.method == "DELETE":
            held = self.conversations[parts[2]]
            self.conversations[parts[2]] = [i for i in held if i.get("id") != parts[4]]

    def check_listing(self, conversation_id: str, turn: Turn, answer: JsonObject) -> None:
        """A full listing by OpenAI must equal the model (the model's own sanity check)."""
        if turn.request.query_params.get("after") or answer["has_more"]:
            return
        held = self.conversations[conversation_id]
        if turn.request.query_params.get("order", "desc") == "desc":
            held = held[::-1]
        assert without_ids(answer["data"]) == without_ids(held), f"model drifted at {turn}"


# ------------------------------------------------------------------------------ the replay


def responses_only(cassette: Cassette) -> Cassette:
    turns = [t for t in cassette.turns if t.request.path == "/v1/responses"]
    return Cassette(turns=copy.deepcopy(turns))


def final_response(events: list[JsonObject]) -> JsonObject:
    for event in reversed(events):
        if event.get("type") == "response.completed":
            response: JsonObject = event["response"]
            return response
    raise AssertionError(f"no response.completed in {[e.get('type') for e in events]}")


def parse_sse(text: str) -> list[JsonObject]:
    events: list[JsonObject] = []
    for line in text.splitlines():
        if line.startswith("data:"):
            payload = line[5:].strip()
            if payload and payload != "[DONE]":
                events.append(json.loads(payload))
    return events


@contextlib.contextmanager
def gateway_for(
    cassette: Cassette, store_kind: str, data_dir: Path
) -> Iterator[tuple[httpx.Client, str]]:
    """A client of the gateway (in this process) and the URL of its replay upstream."""
    with serve_in_thread(create_replay_app(responses_only(cassette))) as replay_url:
        store = MemoryResponseStore() if store_kind == "memory" else None
        settings = Settings(upstream_url=replay_url, data_dir=data_dir)
        with in_process(create_app(settings, store=store)) as client:
            yield client, replay_url


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
@pytest.mark.parametrize("recording", RECORDINGS)
def test_recorded_conversation(recording: str, store_kind: str, tmp_path: Path) -> None:
    cassette = load_cassette(SHARED_CASSETTES / recording)
    ids = IdMap()
    expected = ExpectedState()
    upstream_turns = 0
    with gateway_for(cassette, store_kind, tmp_path) as (client, replay_url):
        for turn in cassette.turns:
            problems: list[str] = []
            request = turn.request
            body = ids.translate(request.body) if request.body else None
            reply = client.request(
                request.method,
                ids.translate(request.path),
                params=ids.translate(request.query_params),
                json=body if request.method == "POST" else None,
            )
            step = f"{recording} {turn.filename} {request.method} {request.path}"
            assert reply.status_code == turn.response.status_code, f"{step}: {reply.text}"

            recorded_body: Any
            if turn.response.sse is not None:
                recorded_events = sse_data_events(turn)
                events = parse_sse(reply.text)
                assert [e["type"] for e in events] == [e["type"] for e in recorded_events], step
                recorded_body, actual = final_response(recorded_events), final_response(events)
            else:
                recorded_body, actual = turn.response.body, reply.json()

            is_response = request.path == "/v1/responses"
            tolerated = OPENAI_ONLY_RESPONSE_FIELDS if is_response else frozenset()
            compare(recorded_body, actual, ids, problems, tolerated=tolerated)
            assert not problems, f"{step}:\n  " + "\n  ".join(problems)

            if is_response:
                assert isinstance(request.body, dict)
                sent = httpx.get(f"{replay_url}/__replay/requests").json()[upstream_turns]
                upstream_turns += 1
                history = expected.history_of(request.body)
                inputs = [canonical_item(i) for i in as_input_list(request.body.get("input"))]
                assert "conversation" not in sent["body"], step
                assert "previous_response_id" not in sent["body"], step
                assert without_ids(sent["body"]["input"]) == without_ids([*history, *inputs]), (
                    f"{step}: the upstream did not get the history OpenAI used"
                )
            if turn.response.status_code == 200:
                expected.observe(turn, recorded_body)
    assert upstream_turns == len(responses_only(cassette).turns)
