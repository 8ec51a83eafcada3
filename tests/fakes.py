"""Hand-written fakes of the core ports."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from app.core.ids import new_id
from app.core.jobs import FINAL_STATUSES, BackgroundJob, LoggedEvent
from app.core.ports import (
    NewResponse,
    Page,
    RawReply,
    StoredConversation,
    StoredResponse,
)
from app.core.store_errors import (
    ConversationNotFoundError,
    ItemAlreadyInConversationError,
    UnknownCursorError,
)
from app.protocol.json_types import JsonObject


class ListEventStream:
    def __init__(self, events: list[JsonObject], fail_after: Exception | None = None) -> None:
        self._events = events
        self._fail_after = fail_after
        self.closed = False

    def __aiter__(self) -> AsyncIterator[JsonObject]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[JsonObject]:
        for event in self._events:
            yield copy.deepcopy(event)
        if self._fail_after is not None:
            raise self._fail_after

    async def aclose(self) -> None:
        self.closed = True


class FakeUpstream:
    """An Upstream that answers from canned events / bodies and records every request."""

    def __init__(
        self,
        *,
        events: list[JsonObject] | None = None,
        body: JsonObject | None = None,
        fail_after: Exception | None = None,
    ) -> None:
        self.events = events or []
        self.body = body or {}
        self.fail_after = fail_after
        self.requests: list[JsonObject] = []
        self.streams: list[ListEventStream] = []

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        self.requests.append(copy.deepcopy(body))
        return copy.deepcopy(self.body)

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> ListEventStream:
        self.requests.append(copy.deepcopy(body))
        stream = ListEventStream(self.events, self.fail_after)
        self.streams.append(stream)
        return stream

    async def list_models(self, headers: Mapping[str, str]) -> RawReply:
        return RawReply(200, "application/json", b'{"object":"list","data":[]}')

    async def check_ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None


class MemoryToolSessions:
    """An in-memory ``ToolSessionStore`` (``app.core.engines``): each state kept as its JSON
    text under (tenant, session id), so that what ``load_tool_session`` returns is a copy, as
    from the SQL store."""

    def __init__(self) -> None:
        self.tool_sessions: dict[tuple[str, str], str] = {}

    async def load_tool_session(self, session_id: str, *, tenant: str) -> JsonObject | None:
        text = self.tool_sessions.get((tenant, session_id))
        return None if text is None else dict(json.loads(text))

    async def save_tool_session(self, session_id: str, state: JsonObject, *, tenant: str) -> None:
        self.tool_sessions[tenant, session_id] = json.dumps(state)

    async def delete_tool_session(self, session_id: str, *, tenant: str) -> None:
        self.tool_sessions.pop((tenant, session_id), None)


class MemoryJobs:
    """An in-memory ``JobStore`` (``app.core.jobs``) with the SQL store's semantics (held to
    them by tests/store/test_job_store_contract.py); what it returns are copies. Jobs are kept
    by response id (each knows its tenant), their events and checkpoints by (tenant, id)."""

    def __init__(self) -> None:
        self.jobs: dict[str, BackgroundJob] = {}
        self.events: dict[tuple[str, str], dict[int, JsonObject]] = {}
        self.checkpoints: dict[tuple[str, str], JsonObject] = {}

    async def add_job(self, job: BackgroundJob, first_event: JsonObject) -> None:
        assert job.response_id not in self.jobs, "a job id is new"
        self.jobs[job.response_id] = copy.deepcopy(job)
        self.events[job.tenant, job.response_id] = {0: copy.deepcopy(first_event)}

    def _job(self, response_id: str, tenant: str) -> BackgroundJob | None:
        job = self.jobs.get(response_id)
        return job if job is not None and job.tenant == tenant else None

    async def get_job(self, response_id: str, *, tenant: str) -> BackgroundJob | None:
        return copy.deepcopy(self._job(response_id, tenant))

    def _active(self, response_id: str, owner: str | None, tenant: str) -> BackgroundJob | None:
        job = self._job(response_id, tenant)
        if job is None or not job.active or (owner is not None and job.owner != owner):
            return None
        return job

    async def renew_lease(
        self, response_id: str, owner: str, lease_until: float, *, tenant: str
    ) -> bool:
        job = self._active(response_id, owner, tenant)
        if job is not None:
            self.jobs[response_id] = dataclasses.replace(job, lease_until=lease_until)
        return job is not None

    async def update_job(
        self,
        response_id: str,
        owner: str,
        response: JsonObject,
        now: int,
        events: Sequence[LoggedEvent] = (),
        *,
        tenant: str,
    ) -> bool:
        job = self._active(response_id, owner, tenant)
        if job is not None:
            status = str(response["status"])
            finished = now if status in FINAL_STATUSES else job.finished_at
            if status in FINAL_STATUSES:
                self.checkpoints.pop((tenant, response_id), None)
            self.jobs[response_id] = dataclasses.replace(
                job, status=status, response=copy.deepcopy(response), finished_at=finished
            )
            await self.append_events(response_id, events, tenant=tenant)
        return job is not None

    async def cancel_job(
        self, response_id: str, response: JsonObject, now: int, *, tenant: str
    ) -> bool:
        job = self._active(response_id, None, tenant)
        if job is not None:
            self.checkpoints.pop((tenant, response_id), None)
            self.jobs[response_id] = dataclasses.replace(
                job, status="cancelled", response=copy.deepcopy(response), finished_at=now
            )
        return job is not None

    async def save_checkpoint(
        self, response_id: str, owner: str, checkpoint: JsonObject, *, tenant: str
    ) -> bool:
        job = self._active(response_id, owner, tenant)
        if job is not None:
            self.checkpoints[tenant, response_id] = copy.deepcopy(checkpoint)
        return job is not None

    async def get_checkpoint(self, response_id: str, *, tenant: str) -> JsonObject | None:
        return copy.deepcopy(self.checkpoints.get((tenant, response_id)))

    async def claim_lapsed(
        self, owner: str, now: float, lease_until: float, limit: int
    ) -> list[BackgroundJob]:
        lapsed = [j for j in self.jobs.values() if j.active and j.lease_until < now]
        claimed = []
        for job in sorted(lapsed, key=lambda j: j.created_at)[:limit]:
            job = dataclasses.replace(
                job, owner=owner, lease_until=lease_until, attempts=job.attempts + 1
            )
            self.jobs[job.response_id] = job
            claimed.append(copy.deepcopy(job))
        return claimed

    async def log_events(
        self, response_id: str, owner: str, events: Sequence[LoggedEvent], *, tenant: str
    ) -> bool:
        if self._active(response_id, owner, tenant) is None:
            return False
        await self.append_events(response_id, events, tenant=tenant)
        return True

    async def append_events(
        self, response_id: str, events: Sequence[LoggedEvent], *, tenant: str
    ) -> None:
        log = self.events.setdefault((tenant, response_id), {})
        for logged in events:
            assert logged.sequence_number not in log, "a sequence number is logged once"
        for logged in events:
            log[logged.sequence_number] = copy.deepcopy(logged.event)

    async def read_events(
        self, response_id: str, after: int, limit: int, *, tenant: str
    ) -> list[LoggedEvent]:
        log = self.events.get((tenant, response_id), {})
        numbers = sorted(n for n in log if n > after)[:limit]
        return [LoggedEvent(n, copy.deepcopy(log[n])) for n in numbers]

    async def last_sequence_number(self, response_id: str, *, tenant: str) -> int | None:
        log = self.events.get((tenant, response_id))
        return max(log) if log else None

    async def delete_job(self, response_id: str, *, tenant: str) -> bool:
        self.events.pop((tenant, response_id), None)
        self.checkpoints.pop((tenant, response_id), None)
        if self._job(response_id, tenant) is None:
            return False
        del self.jobs[response_id]
        return True

    async def purge_finished(self, finished_before: int) -> int:
        purged = 0
        for job in self.jobs.values():
            if job.finished_at is not None and job.finished_at < finished_before:
                purged += len(self.events.pop((job.tenant, job.response_id), {}))
        return purged


class MemoryResponseStore(MemoryToolSessions, MemoryJobs):
    """An in-memory ResponseStore with the SQL store's semantics, for core unit tests (held to
    them by the contract suite, tests/store/test_store_contract_*.py); also a
    ``ToolSessionStore`` (tests/store/test_tool_session_store_contract.py). Responses and
    conversations are kept by id (``tenants`` says whose each one is), items by (tenant, id)."""

    def __init__(self) -> None:
        MemoryToolSessions.__init__(self)
        MemoryJobs.__init__(self)
        self.items: dict[tuple[str, str], JsonObject] = {}
        self.responses: dict[str, StoredResponse] = {}
        self.conversations: dict[str, StoredConversation] = {}
        self.conversation_lists: dict[str, list[str]] = {}
        self.tenants: dict[str, str] = {}  # response or conversation id -> its tenant
        self.saved: list[NewResponse] = []

    def _mine(self, object_id: str, tenant: str) -> bool:
        """Whether the response or conversation ``object_id`` exists and is ``tenant``'s."""
        return self.tenants.get(object_id) == tenant and (
            object_id in self.responses or object_id in self.conversations
        )

    async def get_response(self, response_id: str, *, tenant: str) -> StoredResponse | None:
        return self.responses[response_id] if self._mine(response_id, tenant) else None

    async def load_items(self, item_ids: list[str], *, tenant: str) -> list[JsonObject]:
        items = self.items
        return [copy.deepcopy(items[tenant, i]) for i in item_ids if (tenant, i) in items]

    async def existing_item_ids(self, item_ids: list[str], *, tenant: str) -> set[str]:
        return {i for i in item_ids if (tenant, i) in self.items}

    async def save_response(self, new: NewResponse, *, tenant: str) -> None:
        response = new.response
        output_ids = [str(item["id"]) for item in response.get("output") or ()]
        conversation_id = new.conversation_id
        if conversation_id is not None and not self._mine(conversation_id, tenant):
            raise ConversationNotFoundError(conversation_id)
        for item in new.new_items:
            self.items.setdefault((tenant, str(item["id"])), copy.deepcopy(item))
        self.responses[response["id"]] = StoredResponse(
            id=response["id"],
            response=copy.deepcopy(response),
            checkpoint_ids=[*new.history_ids, *new.input_item_ids, *output_ids],
            input_item_ids=list(new.input_item_ids),
            conversation_id=conversation_id,
            created_at=int(response.get("created_at") or time.time()),
            root_id=new.root_id or str(response["id"]),
        )
        self.tenants[response["id"]] = tenant
        if conversation_id is not None:
            self.conversation_lists[conversation_id] += [*new.input_item_ids, *output_ids]
        self.saved.append(new)

    async def delete_response(self, response_id: str, *, tenant: str) -> bool:
        if not self._mine(response_id, tenant):
            return False
        del self.responses[response_id]
        return True

    async def list_input_items(
        self, response_id: str, *, tenant: str, after: str | None, limit: int, order: str
    ) -> Page | None:
        stored = await self.get_response(response_id, tenant=tenant)
        if stored is None:
            return None
        items = await self.load_items(stored.input_item_ids, tenant=tenant)
        return _page(items, after, limit, order)

    async def create_conversation(
        self, metadata: dict[str, str], items: list[JsonObject], *, tenant: str
    ) -> StoredConversation:
        conversation = StoredConversation(new_id("conv"), int(time.time()), dict(metadata))
        self.conversations[conversation.id] = conversation
        self.conversation_lists[conversation.id] = []
        self.tenants[conversation.id] = tenant
        await self.append_conversation_items(conversation.id, items, tenant=tenant)
        return conversation

    async def get_conversation(
        self, conversation_id: str, *, tenant: str
    ) -> StoredConversation | None:
        mine = self._mine(conversation_id, tenant)
        return self.conversations.get(conversation_id) if mine else None

    async def update_conversation(
        self, conversation_id: str, metadata: dict[str, str], *, tenant: str
    ) -> StoredConversation | None:
        old = await self.get_conversation(conversation_id, tenant=tenant)
        if old is None:
            return None
        self.conversations[conversation_id] = StoredConversation(
            old.id, old.created_at, dict(metadata)
        )
        return self.conversations[conversation_id]

    async def delete_conversation(self, conversation_id: str, *, tenant: str) -> bool:
        if await self.get_conversation(conversation_id, tenant=tenant) is None:
            return False
        self.conversation_lists.pop(conversation_id, None)
        await self.delete_tool_session(conversation_id, tenant=tenant)
        del self.conversations[conversation_id]
        return True

    async def conversation_items(
        self, conversation_id: str, *, tenant: str
    ) -> list[JsonObject] | None:
        if await self.get_conversation(conversation_id, tenant=tenant) is None:
            return None
        return await self.load_items(self.conversation_lists[conversation_id], tenant=tenant)

    async def append_conversation_items(
        self, conversation_id: str, items: list[JsonObject], *, tenant: str
    ) -> list[JsonObject] | None:
        if await self.get_conversation(conversation_id, tenant=tenant) is None:
            return None
        ids = [str(item["id"]) for item in items]
        if set(ids) & set(self.conversation_lists[conversation_id]):
            raise ItemAlreadyInConversationError(conversation_id)
        for item in items:
            self.items.setdefault((tenant, str(item["id"])), copy.deepcopy(item))
        self.conversation_lists[conversation_id] += ids
        return await self.load_items(ids, tenant=tenant)

    async def list_conversation_items(
        self, conversation_id: str, *, tenant: str, after: str | None, limit: int, order: str
    ) -> Page | None:
        items = await self.conversation_items(conversation_id, tenant=tenant)
        return None if items is None else _page(items, after, limit, order)

    async def get_conversation_item(
        self, conversation_id: str, item_id: str, *, tenant: str
    ) -> JsonObject | None:
        if not self._mine(conversation_id, tenant):
            return None
        if item_id not in self.conversation_lists.get(conversation_id, []):
            return None
        return copy.deepcopy(self.items[tenant, item_id])

    async def delete_conversation_item(
        self, conversation_id: str, item_id: str, *, tenant: str
    ) -> bool:
        ids = self.conversation_lists.get(conversation_id, [])
        if not self._mine(conversation_id, tenant) or item_id not in ids:
            return False
        self.conversation_lists[conversation_id] = [i for i in ids if i != item_id]
        return True

    async def aclose(self) -> None:
        return None


def _page(items: list[JsonObject], after: str | None, limit: int, order: str) -> Page:
    ordered = items if order == "asc" else list(reversed(items))
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise UnknownCursorError(after)
        # The last occurrence in this order, as the SQL store: paging over an id that is in
        # the list twice still moves forward.
        ordered = ordered[len(ids) - ids[::-1].index(after) :]
    return Page(items=ordered[:limit], has_more=len(ordered) > limit)


def round_events(items: list[JsonObject], *, usage: JsonObject | None = None) -> list[JsonObject]:
    """The stream a Responses server sends for ``items`` (messages and function calls)."""
    events: list[JsonObject] = [{"type": "response.created", "response": {"status": "in_progress"}}]
    for index, item in enumerate(items):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            opened = {**item, "content": [], "status": "in_progress"}
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": opened}
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            events.append(
                {
                    "type": "response.content_part.added",
                    "output_index": index,
                    "item_id": item["id"],
                    "content_index": 0,
                    "part": part,
                }
            )
            for chunk in (text[: len(text) // 2], text[len(text) // 2 :]):
                events.append(
                    {
                        "type": "response.output_text.delta",
                        "output_index": index,
                        "item_id": item["id"],
                        "content_index": 0,
                        "delta": chunk,
                    }
                )
        elif item["type"] == "reasoning":
            # vLLM's shapes: reasoning_part.* around reasoning_text deltas.
            text = "".join(p.get("text", "") for p in item.get("content") or [])
            opened = {**item, "content": None, "status": "in_progress"}
            address = {"output_index": index, "item_id": item["id"], "content_index": 0}
            part = {"type": "reasoning_text", "text": ""}
            events += [
                {"type": "response.output_item.added", "output_index": index, "item": opened},
                {"type": "response.reasoning_part.added", **address, "part": part},
                {"type": "response.reasoning_text.delta", **address, "delta": text},
                {"type": "response.reasoning_text.done", **address, "text": text},
                {"type": "response.reasoning_part.done", **address, "part": {**part, "text": text}},
            ]
        elif item["type"] == "function_call":
            opened = {**item, "arguments": "", "status": "in_progress"}
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": opened}
            )
            events.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "output_index": index,
                    "item_id": item["id"],
                    "delta": item["arguments"],
                }
            )
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    "output_index": index,
                    "item_id": item["id"],
                    "arguments": item["arguments"],
                }
            )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append(
        {
            "type": "response.completed",
            "response": {"status": "completed", "output": items, "usage": usage or USAGE},
        }
    )
    return events


USAGE: JsonObject = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}


def message(text: str) -> JsonObject:
    return {
        "id": f"msg_{new_id('x')[-8:]}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def text_response(text: str) -> JsonObject:
    """A completed upstream Response whose one output is a message saying ``text``."""
    return {
        "id": "resp_upstream",
        "object": "response",
        "status": "completed",
        "model": "test-model",
        "output": [message(text)],
        "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
    }


def function_call(name: str, arguments: str, call_id: str | None = None) -> JsonObject:
    return {
        "id": f"fc_{new_id('x')[-8:]}",
        "type": "function_call",
        "call_id": call_id or f"call_{new_id('x')[-8:]}",
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


class ScriptedUpstream(FakeUpstream):
    """An upstream that answers round after round from a script of output item lists."""

    def __init__(self, rounds: list[list[JsonObject]], *, delay: float = 0.0) -> None:
        super().__init__()
        self.rounds = rounds
        self.delay = delay

    def _next(self) -> list[JsonObject]:
        if not self.rounds:
            raise AssertionError("the script has no round left")
        return self.rounds.pop(0)

    async def create_response(self, body: JsonObject, headers: Mapping[str, str]) -> JsonObject:
        self.requests.append(copy.deepcopy(body))
        if self.delay:
            await asyncio.sleep(self.delay)
        items = self._next()
        return {"status": "completed", "output": copy.deepcopy(items), "usage": USAGE}

    async def stream_response(
        self, body: JsonObject, headers: Mapping[str, str]
    ) -> ListEventStream:
        self.requests.append(copy.deepcopy(body))
        if self.delay:
            await asyncio.sleep(self.delay)
        stream = ListEventStream(round_events(self._next()))
        self.streams.append(stream)
        return stream


# ---------------------------------------------------------------- files and vector stores
# Imported here so that this appended section stands alone.

import hashlib  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402

from app.files.fusion import (  # noqa: E402
    RankedIndex,
    TenantIndex,
    keyword_score,
    query_terms,
    semantic_score,
)
from app.files.ports import (  # noqa: E402
    IndexedChunk,
    SearchHit,
    StoredFile,
    StoredFileBatch,
    StoredVectorStore,
    StoredVectorStoreFile,
)


def _after(rows: list[Any], key: Any, after: str | None) -> list[Any]:
    if after is None:
        return rows
    ids = [key(row) for row in rows]
    if after not in ids:
        raise UnknownCursorError(after)
    return rows[ids.index(after) + 1 :]


class MemoryFileStores:
    """In-memory FileStores: every tenant's rows, each kept with its tenant, ids unique over
    tenants (as the gateway makes them); ``for_tenant`` gives a ``MemoryFileStore`` view."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[str, StoredFile]] = {}
        self.stores: dict[str, tuple[str, StoredVectorStore]] = {}
        self.store_files: dict[tuple[str, str], tuple[str, StoredVectorStoreFile]] = {}
        self.batches: dict[tuple[str, str], tuple[str, StoredFileBatch]] = {}

    def for_tenant(self, tenant: str) -> MemoryFileStore:
        return MemoryFileStore(self, tenant)

    async def unfinished_ingestions(self) -> list[tuple[str, StoredVectorStoreFile]]:
        rows = [
            (tenant, record)
            for tenant, record in self.store_files.values()
            if record.status == "in_progress"
        ]
        return sorted(rows, key=lambda r: (r[1].created_at, r[1].vector_store_id, r[1].file_id))

    async def aclose(self) -> None:
        return None


T = TypeVar("T")


def _mine(rows: dict[Any, tuple[str, T]], tenant: str) -> dict[Any, T]:
    return {key: record for key, (owner, record) in rows.items() if owner == tenant}


class MemoryFileStore:
    """One tenant's view of ``MemoryFileStores`` with ``store.files_sql``'s semantics: lists
    ordered by ``created_at`` then id, ``UnknownCursorError`` for an unknown ``after``,
    ``limit + 1`` rows; another tenant's rows are as absent as missing ones."""

    def __init__(self, rows: MemoryFileStores, tenant: str) -> None:
        self.rows = rows
        self.tenant = tenant

    @property
    def files(self) -> dict[str, StoredFile]:
        return _mine(self.rows.files, self.tenant)

    @property
    def stores(self) -> dict[str, StoredVectorStore]:
        return _mine(self.rows.stores, self.tenant)

    @property
    def store_files(self) -> dict[tuple[str, str], StoredVectorStoreFile]:
        return _mine(self.rows.store_files, self.tenant)

    async def add_file(self, file: StoredFile) -> None:
        self.rows.files[file.id] = (self.tenant, file)

    async def get_file(self, file_id: str) -> StoredFile | None:
        return self.files.get(file_id)

    async def existing_file_ids(self, file_ids: Iterable[str]) -> set[str]:
        mine = self.files
        return {file_id for file_id in file_ids if file_id in mine}

    async def list_files(
        self, *, purpose: str | None, after: str | None, limit: int, order: str
    ) -> list[StoredFile]:
        rows = sorted(self.files.values(), key=lambda f: (f.created_at, f.id))
        if order == "desc":
            rows.reverse()
        rows = _after(rows, lambda f: f.id, after)
        return [f for f in rows if purpose is None or f.purpose == purpose][: limit + 1]

    async def delete_file(self, file_id: str) -> bool:
        for key in [k for k in self.store_files if k[1] == file_id]:
            del self.rows.store_files[key]
        if file_id not in self.files:
            return False
        del self.rows.files[file_id]
        return True

    async def create_vector_store(self, store: StoredVectorStore) -> None:
        self.rows.stores[store.id] = (self.tenant, store)

    async def get_vector_store(self, vector_store_id: str) -> StoredVectorStore | None:
        return self.stores.get(vector_store_id)

    async def update_vector_store(self, store: StoredVectorStore) -> None:
        if store.id in self.stores:
            self.rows.stores[store.id] = (self.tenant, store)

    async def list_vector_stores(
        self, *, after: str | None, limit: int, order: str
    ) -> list[StoredVectorStore]:
        rows = sorted(self.stores.values(), key=lambda s: (s.created_at, s.id))
        if order == "desc":
            rows.reverse()
        return _after(rows, lambda s: s.id, after)[: limit + 1]

    async def delete_vector_store(self, vector_store_id: str) -> bool:
        for key in [k for k in self.store_files if k[0] == vector_store_id]:
            del self.rows.store_files[key]
        mine = _mine(self.rows.batches, self.tenant)
        for key in [k for k in mine if k[0] == vector_store_id]:
            del self.rows.batches[key]
        if vector_store_id not in self.stores:
            return False
        del self.rows.stores[vector_store_id]
        return True

    async def put_vector_store_file(self, record: StoredVectorStoreFile) -> None:
        key = (record.vector_store_id, record.file_id)
        if self.rows.store_files.get(key, (self.tenant,))[0] == self.tenant:
            self.rows.store_files[key] = (self.tenant, record)

    async def get_vector_store_file(
        self, vector_store_id: str, file_id: str
    ) -> StoredVectorStoreFile | None:
        return self.store_files.get((vector_store_id, file_id))

    async def named_vector_store_files(
        self, vector_store_id: str, file_ids: Iterable[str]
    ) -> dict[str, tuple[StoredVectorStoreFile, str]]:
        named: dict[str, tuple[StoredVectorStoreFile, str]] = {}
        records, files = self.store_files, self.files
        for file_id in file_ids:
            record = records.get((vector_store_id, file_id))
            if record is not None:
                file = files.get(file_id)
                named[file_id] = (record, file.filename if file is not None else "")
        return named

    async def list_vector_store_files(
        self,
        vector_store_id: str,
        *,
        status: str | None,
        after: str | None,
        limit: int,
        order: str,
        file_ids: list[str] | None = None,
    ) -> list[StoredVectorStoreFile]:
        rows = sorted(
            (r for k, r in self.store_files.items() if k[0] == vector_store_id),
            key=lambda r: (r.created_at, r.file_id),
        )
        if order == "desc":
            rows.reverse()
        rows = _after(rows, lambda r: r.file_id, after)
        return [
            r
            for r in rows
            if (status is None or r.status == status)
            and (file_ids is None or r.file_id in file_ids)
        ][: limit + 1]

    async def delete_vector_store_file(self, vector_store_id: str, file_id: str) -> bool:
        if (vector_store_id, file_id) not in self.store_files:
            return False
        del self.rows.store_files[(vector_store_id, file_id)]
        return True

    async def file_counts(self, vector_store_id: str) -> dict[str, int]:
        counts = dict.fromkeys(("in_progress", "completed", "failed", "cancelled"), 0)
        for (store_id, _), record in self.store_files.items():
            if store_id == vector_store_id:
                counts[record.status] += 1
        return {**counts, "total": sum(counts.values())}

    async def put_file_batch(self, batch: StoredFileBatch) -> None:
        key = (batch.vector_store_id, batch.id)
        if self.rows.batches.get(key, (self.tenant,))[0] == self.tenant:
            copied = dataclasses.replace(batch, file_ids=list(batch.file_ids))
            self.rows.batches[key] = (self.tenant, copied)

    async def get_file_batch(self, vector_store_id: str, batch_id: str) -> StoredFileBatch | None:
        return _mine(self.rows.batches, self.tenant).get((vector_store_id, batch_id))


class MemoryBlobStore:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    async def put(self, file_id: str, data: bytes) -> None:
        self.blobs[file_id] = bytes(data)

    async def put_stream(self, file_id: str, chunks: AsyncIterable[bytes]) -> int:
        data = b"".join([chunk async for chunk in chunks])
        self.blobs[file_id] = data
        return len(data)

    async def get(self, file_id: str) -> bytes | None:
        return self.blobs.get(file_id)

    async def local_path(self, file_id: str) -> Path | None:
        return None  # in memory: extraction gets the bytes

    async def delete(self, file_id: str) -> None:
        self.blobs.pop(file_id, None)

    async def aclose(self) -> None:
        return None


_WORD = re.compile(r"\w+")


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


# Tokens as the full-text indexes see them: runs of letters and digits ("_" splits too).
_TOKEN = re.compile(r"[^\W_]+")


def _tokens(text: str) -> list[str]:
    return [t.casefold() for t in _TOKEN.findall(text)]


class MemoryVectorIndex(RankedIndex):
    """Every tenant's chunks in a dict keyed by (vector store, file, tenant), with the SQL
    indexes' semantics (the VectorIndex contract, tests/store/test_vector_index_contract.py):
    exact cosine scored ``max(0, cos)`` among the chunks of the query's dimension; keyword
    search over ``fusion.query_terms`` (OR-ed, each a phrase of tokens), relevance a small BM25
    squashed by ``fusion.keyword_score``; ``hybrid`` by ``fusion``'s reciprocal-rank fusion.
    Its tenant views record every search they are asked (``searches``).

    ``chunks`` may be another index's, as two processes share one database."""

    def __init__(
        self, chunks: dict[tuple[str, str, str], list[IndexedChunk]] | None = None
    ) -> None:
        self.chunks: dict[tuple[str, str, str], list[IndexedChunk]] = (
            {} if chunks is None else chunks
        )
        self.searches: list[JsonObject] = []

    def for_tenant(self, tenant: str) -> TenantIndex:
        return _RecordingTenantIndex(self, tenant)

    async def replace_file_chunks(
        self, vector_store_id: str, file_id: str, chunks: list[IndexedChunk], *, tenant: str
    ) -> None:
        for chunk in chunks:  # all or nothing, as one transaction
            if chunk.text is None:
                raise ValueError("chunk text must not be null")
        if chunks:
            self.chunks[(vector_store_id, file_id, tenant)] = list(chunks)
        else:
            self.chunks.pop((vector_store_id, file_id, tenant), None)

    async def delete_file(self, vector_store_id: str, file_id: str, *, tenant: str) -> None:
        self.chunks.pop((vector_store_id, file_id, tenant), None)

    async def delete_store(self, vector_store_id: str, *, tenant: str) -> None:
        for key in [k for k in self.chunks if k[0] == vector_store_id and k[2] == tenant]:
            del self.chunks[key]

    async def file_chunks(self, vector_store_id: str, file_id: str, *, tenant: str) -> list[str]:
        chunks = self.chunks.get((vector_store_id, file_id, tenant), [])
        return [c.text for c in sorted(chunks, key=lambda c: c.position)]

    def _candidates(
        self, vector_store_id: str, file_ids: list[str] | None, tenant: str
    ) -> list[tuple[str, IndexedChunk]]:
        return [
            (file_id, chunk)
            for (store_id, file_id, owner), chunks in list(self.chunks.items())
            if store_id == vector_store_id
            and owner == tenant
            and (file_ids is None or file_id in file_ids)
            for chunk in chunks
        ]

    async def semantic(
        self,
        vector_store_id: str,
        embedding: list[float],
        limit: int,
        file_ids: list[str] | None = None,
        *,
        tenant: str,
    ) -> list[SearchHit]:
        scored = [
            SearchHit(
                file_id,
                chunk.position,
                chunk.text,
                semantic_score(sum(a * b for a, b in zip(embedding, chunk.embedding, strict=True))),
            )
            for file_id, chunk in self._candidates(vector_store_id, file_ids, tenant)
            if len(chunk.embedding) == len(embedding)
        ]
        return sorted(scored, key=lambda hit: -hit.score)[:limit]

    async def keyword(
        self,
        vector_store_id: str,
        query: str,
        limit: int,
        file_ids: list[str] | None = None,
        *,
        tenant: str,
    ) -> list[SearchHit]:
        phrases = [tuple(_tokens(term)) for term in query_terms(query)]
        phrases = [phrase for phrase in phrases if phrase]
        candidates = self._candidates(vector_store_id, file_ids, tenant)
        documents = [_tokens(chunk.text) for _, chunk in candidates]
        counts = [[_occurrences(phrase, tokens) for phrase in phrases] for tokens in documents]
        total = len(candidates)
        average = sum(len(tokens) for tokens in documents) / total if total else 0.0
        frequency = [sum(1 for row in counts if row[i]) for i in range(len(phrases))]
        hits: list[SearchHit] = []
        for (file_id, chunk), tokens, row in zip(candidates, documents, counts, strict=True):
            if not any(row):
                continue
            relevance = 0.0
            for i, found in enumerate(row):
                if found:  # BM25 (k1 = 1.2, b = 0.75)
                    idf = math.log(1 + (total - frequency[i] + 0.5) / (frequency[i] + 0.5))
                    norm = 1.2 * (0.25 + 0.75 * len(tokens) / (average or 1.0))
                    relevance += idf * found * 2.2 / (found + norm)
            hits.append(SearchHit(file_id, chunk.position, chunk.text, keyword_score(relevance)))
        return sorted(hits, key=lambda hit: -hit.score)[:limit]


class _RecordingTenantIndex(TenantIndex):
    """A tenant's view of a ``MemoryVectorIndex`` that records each search in its
    ``searches``."""

    def __init__(self, index: MemoryVectorIndex, tenant: str) -> None:
        super().__init__(index, tenant)
        self._searches = index.searches

    async def search(
        self,
        vector_store_id: str,
        *,
        embedding: list[float] | None,
        query: str,
        limit: int,
        ranker: str,
        file_ids: list[str] | None = None,
    ) -> list[SearchHit]:
        self._searches.append(
            {
                "vector_store_id": vector_store_id,
                "tenant": self.tenant,
                "query": query,
                "limit": limit,
                "ranker": ranker,
                "file_ids": file_ids,
                "embedded": embedding is not None,
            }
        )
        return await super().search(
            vector_store_id,
            embedding=embedding,
            query=query,
            limit=limit,
            ranker=ranker,
            file_ids=file_ids,
        )


def _occurrences(phrase: tuple[str, ...], tokens: list[str]) -> int:
    size = len(phrase)
    return sum(1 for i in range(len(tokens) - size + 1) if tuple(tokens[i : i + size]) == phrase)


class FakeEmbedder:
    """Deterministic bag-of-words hash vectors (texts sharing words are close), L2-normalized.

    ``fail`` makes every call raise it; ``gate`` (when set) holds every call until it is set,
    so tests can watch files ``in_progress``. Records the batches it embedded.
    """

    def __init__(
        self,
        *,
        dimensions: int = 64,
        fail: Exception | None = None,
        gate: asyncio.Event | None = None,
    ) -> None:
        self.name = "fake-embedder"
        self.dimensions = dimensions
        self.fail = fail
        self.gate = gate
        self.batches: list[list[str]] = []

    def vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for word in _words(text) or [text]:
            digest = hashlib.sha256(word.encode()).digest()
            vector[int.from_bytes(digest[:4], "big") % self.dimensions] += 1.0
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm for x in vector]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        self.batches.append(list(texts))
        return [self.vector(text) for text in texts]

    async def aclose(self) -> None:
        return None


class FakeClock:
    """A settable ``clock`` for services (seconds since the epoch)."""

    def __init__(self, now: float = 1_750_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def scripted_cassette(rounds: list[list[JsonObject]], *, stream: bool) -> Any:
    """A cassette with one upstream turn per round of output items, streamed like vLLM
    (``round_events``) or answered as JSON: the model's side of a recorded gateway exchange."""
    from app.recording.cassette import Cassette, RecordedRequest, RecordedResponse, Turn

    turns = []
    for number, items in enumerate(rounds, start=1):
        if stream:
            lines: list[str] = []
            for event in round_events(items):
                lines += [f"event: {event['type']}\n", f"data: {json.dumps(event)}\n", "\n"]
            response = RecordedResponse(
                status_code=200, headers={"content-type": "text/event-stream"}, sse=lines
            )
        else:
            body = {"object": "response", "status": "completed", "output": items}
            response = RecordedResponse(
                status_code=200, headers={"content-type": "application/json"}, body=body
            )
        request = RecordedRequest(method="POST", path="/v1/responses", body={"stream": stream})
        turns.append(Turn(filename=f"t{number}", request=request, response=response))
    return Cassette(turns=turns)
