"""Two tenants on one gateway through the official ``openai`` SDK: each tries the Files and
Vector Stores APIs (files, stores, their files, file batches, search) on the other's ids and
gets exactly what an unknown id gets (404, the same message with the id in it), never a 403;
lists show each only its own, and the owner's objects are untouched afterwards.

Runs on every backend of tests/api/test_files.py (memory, SQLite, PostgreSQL). Who calls is
set by ``tests.file_tenants.TenantHeader``, the stand-in for the authentication middleware.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from app.core.tenancy import DEFAULT_TENANT
from app.files.vector_stores import VectorStoresService
from tests.api.test_files import BACKENDS, FileGateway, file_gateway, postgres_files_url
from tests.fakes import FakeEmbedder
from tests.file_tenants import TenantHeader, tenant_headers

__all__ = ["postgres_files_url"]  # the session fixture, for the PostgreSQL backend

HERONS = "Herons are long-legged wading birds that eat fish and frogs."
EGRETS = "Egrets are herons with white plumage."
UNKNOWN_FILE = "file-" + "0" * 32
UNKNOWN_STORE = "vs_" + "0" * 32
UNKNOWN_BATCH = "vsfb_" + "0" * 32


@dataclass
class Tenants:
    gw: FileGateway
    alice: openai.AsyncOpenAI
    bob: openai.AsyncOpenAI


@dataclass
class Owned:
    """One tenant's file, ingested into its vector store, with a batch of it."""

    file_id: str
    store_id: str
    batch_id: str


@pytest.fixture(params=BACKENDS)
async def tenants(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Tenants]:
    async with file_gateway(request.param, tmp_path, request) as gw:
        transport = httpx.ASGITransport(app=TenantHeader(gw.app))
        clients = [
            openai.AsyncOpenAI(
                base_url="http://gateway/v1",
                api_key="sk-test",
                max_retries=0,
                default_headers=tenant_headers(name),
                http_client=httpx.AsyncClient(transport=transport),
            )
            for name in ("alice", "bob")
        ]
        try:
            yield Tenants(gw, *clients)
        finally:
            for client in clients:
                await client.close()


async def own(gw: FileGateway, sdk: openai.AsyncOpenAI, name: str, text: str) -> Owned:
    uploaded = await sdk.files.create(file=(f"{name}.txt", text.encode()), purpose="assistants")
    store = await sdk.vector_stores.create(name=name, file_ids=[uploaded.id])
    batch = await sdk.vector_stores.file_batches.create(
        vector_store_id=store.id, file_ids=[uploaded.id]
    )
    await gw.ingested()
    return Owned(uploaded.id, store.id, batch.id)


async def as_unknown(call: Callable[[str], Awaitable[Any]], theirs: str, unknown: str) -> None:
    """``call`` on another tenant's id fails exactly as on an id that names nothing: a 404,
    the same body but for the id."""
    with pytest.raises(openai.NotFoundError) as other:
        await call(theirs)
    with pytest.raises(openai.NotFoundError) as missing:
        await call(unknown)
    assert other.value.status_code == missing.value.status_code == 404
    expected = json.loads(json.dumps(missing.value.response.json()).replace(unknown, theirs))
    assert other.value.response.json() == expected
    assert theirs in expected["error"]["message"]


async def test_files_of_another_tenant_are_unknown(tenants: Tenants) -> None:
    gw, alice, bob = tenants.gw, tenants.alice, tenants.bob
    mine = await alice.files.create(file=("notes.txt", b"alice's notes"), purpose="assistants")
    theirs = await bob.files.create(file=("notes.txt", b"bob's notes"), purpose="user_data")

    await as_unknown(bob.files.retrieve, mine.id, UNKNOWN_FILE)
    await as_unknown(bob.files.content, mine.id, UNKNOWN_FILE)
    await as_unknown(bob.files.delete, mine.id, UNKNOWN_FILE)
    await as_unknown(lambda after: bob.files.list(after=after), mine.id, UNKNOWN_FILE)

    assert [f.id async for f in bob.files.list()] == [theirs.id]
    assert [f.id async for f in alice.files.list()] == [mine.id]
    assert [f.id async for f in alice.files.list(purpose="assistants")] == [mine.id]
    assert (await alice.files.retrieve(mine.id)) == mine
    assert (await alice.files.content(mine.id)).content == b"alice's notes"
    # a gateway without authentication (the default tenant) sees neither
    assert (await gw.http.get("/v1/files")).json()["data"] == []
    await alice.files.delete(mine.id)
    await as_unknown(alice.files.retrieve, mine.id, UNKNOWN_FILE)
    assert (await bob.files.content(theirs.id)).content == b"bob's notes"


async def test_vector_stores_of_another_tenant_are_unknown(tenants: Tenants) -> None:
    gw, alice, bob = tenants.gw, tenants.alice, tenants.bob
    a = await own(gw, alice, "alice", HERONS)
    b = await own(gw, bob, "bob", EGRETS)
    stores = bob.vector_stores

    await as_unknown(stores.retrieve, a.store_id, UNKNOWN_STORE)
    await as_unknown(lambda vs: stores.update(vs, name="taken"), a.store_id, UNKNOWN_STORE)
    await as_unknown(stores.delete, a.store_id, UNKNOWN_STORE)
    await as_unknown(lambda vs: stores.search(vs, query="herons"), a.store_id, UNKNOWN_STORE)
    await as_unknown(lambda vs: stores.list(after=vs), a.store_id, UNKNOWN_STORE)
    assert [s.id async for s in stores.list()] == [b.store_id]
    assert [s.id async for s in alice.vector_stores.list()] == [a.store_id]

    # the files of alice's store
    files = stores.files
    await as_unknown(lambda vs: files.list(vector_store_id=vs), a.store_id, UNKNOWN_STORE)
    for call in (
        files.retrieve,
        files.delete,
        lambda f, vector_store_id: files.update(f, vector_store_id=vector_store_id, attributes={}),
        lambda f, vector_store_id: files.content(f, vector_store_id=vector_store_id),
    ):
        await as_unknown(
            lambda vs, c=call: c(a.file_id, vector_store_id=vs), a.store_id, UNKNOWN_STORE
        )
        # alice's file id in bob's own store: as a file that is not in it
        await as_unknown(
            lambda f, c=call: c(f, vector_store_id=b.store_id), a.file_id, UNKNOWN_FILE
        )

    # file batches
    batches = stores.file_batches
    for call in (batches.retrieve, batches.cancel, batches.list_files):
        await as_unknown(
            lambda vs, c=call: c(a.batch_id, vector_store_id=vs), a.store_id, UNKNOWN_STORE
        )
        await as_unknown(
            lambda batch, c=call: c(batch, vector_store_id=b.store_id), a.batch_id, UNKNOWN_BATCH
        )

    await as_unknown(
        lambda vs: batches.create(vector_store_id=vs, file_ids=[b.file_id]),
        a.store_id,
        UNKNOWN_STORE,
    )
    await as_unknown(
        lambda vs: files.create(vector_store_id=vs, file_id=b.file_id), a.store_id, UNKNOWN_STORE
    )

    # alice's store is as it was, and hers alone
    store = await alice.vector_stores.retrieve(a.store_id)
    assert (store.name, store.status, store.file_counts.completed) == ("alice", "completed", 1)
    found = await alice.vector_stores.search(a.store_id, query="wading birds")
    assert [hit.file_id for hit in found.data] == [a.file_id]
    batch = await alice.vector_stores.file_batches.retrieve(a.batch_id, vector_store_id=a.store_id)
    assert batch.status == "completed"
    content = await alice.vector_stores.files.content(a.file_id, vector_store_id=a.store_id)
    assert [part.text for part in content.data] == [HERONS]


async def test_attaching_another_tenants_file_fails_as_an_unknown_file(tenants: Tenants) -> None:
    gw, alice, bob = tenants.gw, tenants.alice, tenants.bob
    a = await own(gw, alice, "alice", HERONS)
    b = await own(gw, bob, "bob", EGRETS)

    await as_unknown(
        lambda f: bob.vector_stores.files.create(vector_store_id=b.store_id, file_id=f),
        a.file_id,
        UNKNOWN_FILE,
    )
    await as_unknown(
        lambda f: bob.vector_stores.file_batches.create(vector_store_id=b.store_id, file_ids=[f]),
        a.file_id,
        UNKNOWN_FILE,
    )
    await as_unknown(
        lambda f: bob.vector_stores.create(name="stolen", file_ids=[f]), a.file_id, UNKNOWN_FILE
    )

    assert [s.id async for s in bob.vector_stores.list()] == [b.store_id]  # none created
    assert [f.id async for f in bob.vector_stores.files.list(vector_store_id=b.store_id)] == [
        b.file_id
    ]
    found = await bob.vector_stores.search(b.store_id, query="herons")
    assert {hit.file_id for hit in found.data} == {b.file_id}  # never alice's passages


async def test_deleting_a_file_leaves_the_other_tenants_stores(tenants: Tenants) -> None:
    gw, alice, bob = tenants.gw, tenants.alice, tenants.bob
    a = await own(gw, alice, "alice", HERONS)
    b = await own(gw, bob, "bob", EGRETS)

    await bob.files.delete(b.file_id)
    await bob.vector_stores.delete(b.store_id)

    store = await alice.vector_stores.retrieve(a.store_id)
    assert store.file_counts.completed == 1
    assert (await alice.vector_stores.search(a.store_id, query="herons")).data


async def test_ingestion_and_its_resumption_keep_the_stores_tenant(tenants: Tenants) -> None:
    gw, alice = tenants.gw, tenants.alice
    a = await own(gw, alice, "alice", HERONS)
    # the chunks are alice's
    assert await gw.index.file_chunks(a.store_id, a.file_id, tenant="alice") == [HERONS]
    assert await gw.index.file_chunks(a.store_id, a.file_id, tenant=DEFAULT_TENANT) == []

    # a run stops while alice's second file is being ingested; the next one resumes it as hers
    uploaded = await alice.files.create(file=("egrets.txt", EGRETS.encode()), purpose="assistants")
    gw.embedder.gate = asyncio.Event()  # never set: the file stays in_progress
    await alice.vector_stores.files.create(vector_store_id=a.store_id, file_id=uploaded.id)
    await gw.vector_stores.aclose()
    restarted = VectorStoresService(gw.store, gw.blobs, gw.index, FakeEmbedder(), gw.clock)
    try:
        assert await restarted.resume_pending() == 1
        await restarted.wait_idle()
        record = await restarted.store_files.get_file(a.store_id, uploaded.id, tenant="alice")
        assert record["status"] == "completed"
        chunks = await gw.index.file_chunks(a.store_id, uploaded.id, tenant="alice")
        assert chunks == [EGRETS]
    finally:
        await restarted.aclose()
