"""The ``ToolSessionStore`` contract (``app.core.engines``): one JSON state per tool engine
session id. Every test runs on every implementation (conftest's ``any_backend``: the tests'
in-memory store, SQLite with and without inline reads, PostgreSQL), through the response store
the gateway already has (``SqlResponseStore`` is also the session store)."""

from __future__ import annotations

import asyncio
from typing import Protocol

import pytest

from app.core.engines import (
    EngineCall,
    EngineResult,
    ToolSessionStore,
    ToolSpec,
    history_entry,
    history_of,
)
from app.core.ids import new_id
from app.core.ports import ResponseStore
from app.core.tenancy import DEFAULT_TENANT
from app.protocol.json_types import JsonObject
from app.store.sql import SqlResponseStore
from tests.store.builders import message
from tests.store.conftest import Backend, MemoryBackend


class Store(ResponseStore, ToolSessionStore, Protocol):
    """A response store that keeps tool engine sessions too."""


@pytest.fixture
def store(any_backend: Backend | MemoryBackend) -> Store:
    return any_backend.new_store()


def session_state(*results: str) -> JsonObject:
    """A state as an engine writes it: one (call, result) per result, oldest first."""
    spec = ToolSpec(
        namespace="crm",
        name="create_customer",
        description="Créer un client ✓",
        parameters={"type": "object", "properties": {"name": {"type": "string"}}},
    )
    history = []
    for index, output in enumerate(results):
        call = EngineCall(f"call_{index}", spec, '{"name": "Zoë 日本"}')
        history.append(history_entry(call, EngineResult(call.call_id, output=output)))
    return {"history": history}


async def test_an_unknown_session_is_none(store: Store) -> None:
    assert await store.load_tool_session("conv_unknown", tenant=DEFAULT_TENANT) is None


async def test_save_then_load_round_trips_nested_json(store: Store) -> None:
    call = EngineCall("call_1", ToolSpec("crm", "lookup"), "{}")
    failed = EngineResult.failure(call, "http_status", "HTTP 404: «not found»")
    state: JsonObject = {
        **session_state('{"id": 1, "name": "Zoë 日本"}'),
        "zeta": {"y": [1, 2.5, None, True, {"deep": ["é", {"ü": "✓"}]}], "b": "", "a": {}},
        "alpha": -3,
    }
    state["history"].append(history_entry(call, failed))

    await store.save_tool_session("resp_root", state, tenant=DEFAULT_TENANT)
    loaded = await store.load_tool_session("resp_root", tenant=DEFAULT_TENANT)

    assert loaded == state
    assert loaded is not None
    assert list(loaded) == ["history", "zeta", "alpha"]  # key order kept
    assert list(loaded["zeta"]) == ["y", "b", "a"]
    [(call_0, result_0), (call_1, result_1)] = history_of(loaded)
    assert call_0.tool.description == "Créer un client ✓"
    assert call_0.parsed_arguments() == {"name": "Zoë 日本"}
    assert result_0.output == '{"id": 1, "name": "Zoë 日本"}'
    assert call_1.call_id == "call_1" and result_1.error is not None
    assert result_1.error.message == "HTTP 404: «not found»"


async def test_what_is_loaded_is_a_copy(store: Store) -> None:
    state = session_state("one")
    await store.save_tool_session("s", state, tenant=DEFAULT_TENANT)
    state["history"].append({"changed": "after the save"})
    loaded = await store.load_tool_session("s", tenant=DEFAULT_TENANT)
    assert loaded == session_state("one")
    assert loaded is not None
    loaded["history"].clear()
    assert await store.load_tool_session("s", tenant=DEFAULT_TENANT) == session_state("one")


async def test_a_save_replaces_the_whole_state(store: Store) -> None:
    await store.save_tool_session("s", {**session_state("one"), "extra": 1}, tenant=DEFAULT_TENANT)
    await store.save_tool_session("s", session_state("one", "two"), tenant=DEFAULT_TENANT)

    assert await store.load_tool_session("s", tenant=DEFAULT_TENANT) == session_state("one", "two")
    await store.save_tool_session("s", {"history": []}, tenant=DEFAULT_TENANT)
    assert await store.load_tool_session("s", tenant=DEFAULT_TENANT) == {"history": []}


async def test_delete(store: Store) -> None:
    await store.save_tool_session("s", session_state("one"), tenant=DEFAULT_TENANT)

    await store.delete_tool_session("s", tenant=DEFAULT_TENANT)

    assert await store.load_tool_session("s", tenant=DEFAULT_TENANT) is None
    # the id can be used again
    await store.save_tool_session("s", session_state("again"), tenant=DEFAULT_TENANT)
    assert await store.load_tool_session("s", tenant=DEFAULT_TENANT) == session_state("again")


async def test_deleting_an_unknown_session_does_nothing(store: Store) -> None:
    await store.save_tool_session("kept", session_state("one"), tenant=DEFAULT_TENANT)

    await store.delete_tool_session("never_saved", tenant=DEFAULT_TENANT)
    await store.delete_tool_session("never_saved", tenant=DEFAULT_TENANT)

    assert await store.load_tool_session("never_saved", tenant=DEFAULT_TENANT) is None
    assert await store.load_tool_session("kept", tenant=DEFAULT_TENANT) == session_state("one")


async def test_sessions_are_isolated(store: Store) -> None:
    await store.save_tool_session("a", session_state("for a"), tenant=DEFAULT_TENANT)
    await store.save_tool_session("b", session_state("for b"), tenant=DEFAULT_TENANT)
    await store.save_tool_session("a", session_state("for a", "again"), tenant=DEFAULT_TENANT)
    await store.delete_tool_session("b", tenant=DEFAULT_TENANT)

    assert await store.load_tool_session("a", tenant=DEFAULT_TENANT) == session_state(
        "for a", "again"
    )
    assert await store.load_tool_session("b", tenant=DEFAULT_TENANT) is None
    assert await store.load_tool_session("A", tenant=DEFAULT_TENANT) is None  # ids are exact


async def test_a_session_is_its_tenants(store: Store) -> None:
    # One session id, two tenants: two sessions; neither reads, replaces nor deletes the other.
    await store.save_tool_session("conv_1", session_state("for a"), tenant="tenant-a")
    assert await store.load_tool_session("conv_1", tenant="tenant-b") is None
    await store.save_tool_session("conv_1", session_state("for b"), tenant="tenant-b")
    await store.delete_tool_session("conv_1", tenant="tenant-c")

    assert await store.load_tool_session("conv_1", tenant="tenant-a") == session_state("for a")
    assert await store.load_tool_session("conv_1", tenant="tenant-b") == session_state("for b")
    await store.delete_tool_session("conv_1", tenant="tenant-b")
    assert await store.load_tool_session("conv_1", tenant="tenant-a") == session_state("for a")


async def test_another_tenant_cannot_delete_a_conversations_session(store: Store) -> None:
    conversation = await store.create_conversation({}, [], tenant="tenant-a")
    await store.save_tool_session(conversation.id, session_state("a"), tenant="tenant-a")

    assert await store.delete_conversation(conversation.id, tenant="tenant-b") is False

    saved = await store.load_tool_session(conversation.id, tenant="tenant-a")
    assert saved == session_state("a")


async def test_deleting_a_conversation_deletes_its_session(store: Store) -> None:
    conversation = await store.create_conversation({}, [message("hi")], tenant=DEFAULT_TENANT)
    other = await store.create_conversation({}, [], tenant=DEFAULT_TENANT)
    await store.save_tool_session(conversation.id, session_state("one"), tenant=DEFAULT_TENANT)
    await store.save_tool_session(other.id, session_state("other"), tenant=DEFAULT_TENANT)
    await store.save_tool_session("resp_chain", session_state("chain"), tenant=DEFAULT_TENANT)

    assert await store.delete_conversation(conversation.id, tenant=DEFAULT_TENANT) is True

    assert await store.load_tool_session(conversation.id, tenant=DEFAULT_TENANT) is None
    assert await store.load_tool_session(other.id, tenant=DEFAULT_TENANT) == session_state("other")
    assert await store.load_tool_session("resp_chain", tenant=DEFAULT_TENANT) == session_state(
        "chain"
    )
    assert await store.delete_conversation(conversation.id, tenant=DEFAULT_TENANT) is False


async def test_two_stores_on_one_database_share_sessions(
    any_backend: Backend | MemoryBackend,
) -> None:
    # Two gateway processes on one database: a session continued on either sees the other's.
    first: Store = any_backend.new_store()
    second: Store = any_backend.new_store()
    session_id = new_id("conv")

    await first.save_tool_session(session_id, session_state("one"), tenant=DEFAULT_TENANT)
    assert await second.load_tool_session(session_id, tenant=DEFAULT_TENANT) == session_state("one")
    await second.save_tool_session(session_id, session_state("one", "two"), tenant=DEFAULT_TENANT)
    assert await first.load_tool_session(session_id, tenant=DEFAULT_TENANT) == session_state(
        "one", "two"
    )
    await first.delete_tool_session(session_id, tenant=DEFAULT_TENANT)
    assert await second.load_tool_session(session_id, tenant=DEFAULT_TENANT) is None


async def test_concurrent_saves_of_one_session_keep_one_whole_state(
    any_backend: Backend | MemoryBackend,
) -> None:
    first: Store = any_backend.new_store()
    second: Store = any_backend.new_store()
    states = [session_state(*(f"r{n}" for n in range(count))) for count in range(1, 21)]

    await asyncio.gather(
        *(
            (first if index % 2 else second).save_tool_session(
                "shared", state, tenant=DEFAULT_TENANT
            )
            for index, state in enumerate(states)
        )
    )

    assert await first.load_tool_session("shared", tenant=DEFAULT_TENANT) in states
    assert await second.load_tool_session(
        "shared", tenant=DEFAULT_TENANT
    ) == await first.load_tool_session("shared", tenant=DEFAULT_TENANT)


async def test_a_session_outlives_its_store(any_backend: Backend | MemoryBackend) -> None:
    store = any_backend.new_store()
    await store.save_tool_session("s", session_state("kept"), tenant=DEFAULT_TENANT)
    await store.aclose()
    if isinstance(any_backend, Backend) and isinstance(store, SqlResponseStore):
        any_backend.stores.remove(store)  # closed here, not again at teardown

    reopened: Store = any_backend.new_store()
    assert await reopened.load_tool_session("s", tenant=DEFAULT_TENANT) == session_state("kept")
