"""A store's typed errors are the API's 404 / 400; anything else the store raises is a bug: a
500 in the server_error envelope, even a ``KeyError`` or a ``ValueError``.

The stores are the in-memory fakes with one switch each: ``fault`` makes the named method raise
that exception (a bug) instead of answering. The response store runs under ``create_app`` in
process; the file store under the Files and Vector Stores routers (as in
tests/api/test_files.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from app.core.ports import NewResponse, Page
from app.files.files import FilesService
from app.files.ports import StoredFile, StoredVectorStore, StoredVectorStoreFile
from app.files.vector_stores import VectorStoresService
from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from tests.api.test_files import FileSearchState, build_app
from tests.fakes import (
    FakeClock,
    FakeEmbedder,
    FakeUpstream,
    MemoryBlobStore,
    MemoryFileStore,
    MemoryFileStores,
    MemoryResponseStore,
    MemoryVectorIndex,
    text_response,
)
from tests.helpers import in_process

ANSWER = text_response("Hi there")
SERVER_ERROR = {
    "message": "The server had an error while processing your request.",
    "type": "server_error",
    "param": None,
    "code": None,
}


class FaultyResponseStore(MemoryResponseStore):
    """``fault[method]``: what that method raises instead of answering (a bug in the store);
    ``drop_conversation_on_save``: the conversation is deleted just before a save (a real
    race: the client deleted it while the response was being generated)."""

    def __init__(self) -> None:
        super().__init__()
        self.fault: dict[str, Exception] = {}
        self.drop_conversation_on_save = False

    def _raise_fault(self, method: str) -> None:
        if method in self.fault:
            raise self.fault[method]

    async def save_response(self, new: NewResponse, *, tenant: str) -> None:
        self._raise_fault("save_response")
        if self.drop_conversation_on_save and new.conversation_id is not None:
            await self.delete_conversation(new.conversation_id, tenant=tenant)
        await super().save_response(new, tenant=tenant)

    async def list_input_items(
        self, response_id: str, *, tenant: str, after: str | None, limit: int, order: str
    ) -> Page | None:
        self._raise_fault("list_input_items")
        return await super().list_input_items(
            response_id, tenant=tenant, after=after, limit=limit, order=order
        )

    async def append_conversation_items(
        self, conversation_id: str, items: list[JsonObject], *, tenant: str
    ) -> list[JsonObject] | None:
        self._raise_fault("append_conversation_items")
        return await super().append_conversation_items(conversation_id, items, tenant=tenant)

    async def list_conversation_items(
        self, conversation_id: str, *, tenant: str, after: str | None, limit: int, order: str
    ) -> Page | None:
        self._raise_fault("list_conversation_items")
        return await super().list_conversation_items(
            conversation_id, tenant=tenant, after=after, limit=limit, order=order
        )


class FaultyFileStores(MemoryFileStores):
    """``fault[method]``: what that list method of every tenant's view raises instead of
    answering (a bug)."""

    def __init__(self) -> None:
        super().__init__()
        self.fault: dict[str, Exception] = {}

    def for_tenant(self, tenant: str) -> FaultyFileStore:
        return FaultyFileStore(self, tenant)


class FaultyFileStore(MemoryFileStore):
    """One tenant's view of ``FaultyFileStores``."""

    rows: FaultyFileStores

    def _raise_fault(self, method: str) -> None:
        if method in self.rows.fault:
            raise self.rows.fault[method]

    async def list_files(
        self, *, purpose: str | None, after: str | None, limit: int, order: str
    ) -> list[StoredFile]:
        self._raise_fault("list_files")
        return await super().list_files(purpose=purpose, after=after, limit=limit, order=order)

    async def list_vector_stores(
        self, *, after: str | None, limit: int, order: str
    ) -> list[StoredVectorStore]:
        self._raise_fault("list_vector_stores")
        return await super().list_vector_stores(after=after, limit=limit, order=order)

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
        self._raise_fault("list_vector_store_files")
        return await super().list_vector_store_files(
            vector_store_id,
            status=status,
            after=after,
            limit=limit,
            order=order,
            file_ids=file_ids,
        )


def assert_error(
    reply: httpx.Response, status: int, param: str | None, code: str | None, message: str
) -> None:
    assert reply.status_code == status, reply.text
    assert reply.json() == {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": code,
        }
    }


def assert_server_error(reply: httpx.Response) -> None:
    assert reply.status_code == 500, reply.text
    assert reply.json() == {"error": SERVER_ERROR}


# ------------------------------------------------------------------ the response store


@pytest.fixture
def responses_gw(tmp_path: Path) -> Iterator[tuple[TestClient, FaultyResponseStore]]:
    store = FaultyResponseStore()
    app = create_app(
        Settings(data_dir=tmp_path),
        upstream=FakeUpstream(body=ANSWER),
        store=store,
        embedder=FakeEmbedder(),
    )
    with in_process(app) as http:
        yield http, store


def create_response(http: TestClient, **body: Any) -> JsonObject:
    reply = http.post("/v1/responses", json={"model": "test-model", "input": "hi", **body})
    assert reply.status_code == 200, reply.text
    created: JsonObject = reply.json()
    return created


def create_conversation(http: TestClient) -> str:
    reply = http.post("/v1/conversations", json={"items": [{"role": "user", "content": "a"}]})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["id"])


@pytest.mark.parametrize("bug", [KeyError("oops"), ValueError("oops")], ids=repr)
def test_input_items_cursor(
    responses_gw: tuple[TestClient, FaultyResponseStore], bug: Exception
) -> None:
    http, store = responses_gw
    path = f"/v1/responses/{create_response(http)['id']}/input_items"
    missing = "msg_unknown"
    assert_error(
        http.get(path, params={"after": missing}),
        404,
        "after",
        None,
        f"No item found with id '{missing}'",
    )
    store.fault["list_input_items"] = bug
    assert_server_error(http.get(path, params={"after": missing}))


@pytest.mark.parametrize("bug", [KeyError("oops"), ValueError("oops")], ids=repr)
def test_conversation_items_cursor(
    responses_gw: tuple[TestClient, FaultyResponseStore], bug: Exception
) -> None:
    http, store = responses_gw
    path = f"/v1/conversations/{create_conversation(http)}/items"
    assert_error(
        http.get(path, params={"after": "msg_unknown"}),
        404,
        "after",
        None,
        "No item found with id 'msg_unknown'",
    )
    store.fault["list_conversation_items"] = bug
    assert_server_error(http.get(path, params={"after": "msg_unknown"}))


@pytest.mark.parametrize(
    "bug", [KeyError("oops"), ValueError("item_already_in_conversation")], ids=repr
)
def test_item_already_in_conversation(
    responses_gw: tuple[TestClient, FaultyResponseStore], bug: Exception
) -> None:
    http, store = responses_gw
    path = f"/v1/conversations/{create_conversation(http)}/items"
    first = http.get(path).json()["first_id"]
    again = {"items": [{"id": first, "type": "message", "role": "user", "content": "a"}]}
    assert_error(
        http.post(path, json=again),
        400,
        "items",
        "item_already_in_conversation",
        "Item already in conversation",
    )
    store.fault["append_conversation_items"] = bug
    assert_server_error(http.post(path, json=again))


def test_conversation_deleted_during_a_response(
    responses_gw: tuple[TestClient, FaultyResponseStore],
) -> None:
    http, store = responses_gw
    conversation_id = create_conversation(http)
    store.drop_conversation_on_save = True
    body = {"model": "test-model", "input": "hi", "conversation": conversation_id}
    assert_error(
        http.post("/v1/responses", json=body),
        404,
        "conversation",
        "not_found",
        f"Conversation with id '{conversation_id}' not found.",
    )
    store.drop_conversation_on_save = False
    conversation_id = create_conversation(http)
    store.fault["save_response"] = KeyError(conversation_id)
    body["conversation"] = conversation_id
    assert_server_error(http.post("/v1/responses", json=body))


# ------------------------------------------------------------------ the file store


@contextlib.asynccontextmanager
async def files_app(store: FaultyFileStores, data_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    clock, blobs = FakeClock(), MemoryBlobStore()
    vector_stores = VectorStoresService(store, blobs, MemoryVectorIndex(), FakeEmbedder(), clock)
    files = FilesService(store, blobs, clock, detacher=vector_stores.store_files)
    app = build_app(FileSearchState(Settings(data_dir=data_dir), files, vector_stores))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
            yield http
    finally:
        await vector_stores.aclose()


@pytest.mark.parametrize("bug", [KeyError("oops"), ValueError("oops")], ids=repr)
async def test_file_store_cursors(tmp_path: Path, bug: Exception) -> None:
    store = FaultyFileStores()
    async with files_app(store, tmp_path) as http:
        created = await http.post("/v1/vector_stores", json={"name": "notes"})
        assert created.status_code == 200, created.text
        lists = {
            "list_files": ("/v1/files", "file-unknown", "No file found with id 'file-unknown'"),
            "list_vector_stores": (
                "/v1/vector_stores",
                "vs_unknown",
                "No item found with id 'vs_unknown'",
            ),
            "list_vector_store_files": (
                f"/v1/vector_stores/{created.json()['id']}/files",
                "file-unknown",
                "No item found with id 'file-unknown'",
            ),
        }
        for method, (path, missing, message) in lists.items():
            reply = await http.get(path, params={"after": missing})
            assert_error(reply, 404, "after", None, message)
            store.fault[method] = bug
            assert_server_error(await http.get(path, params={"after": missing}))
