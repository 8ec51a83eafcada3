"""file_search searches only the vector stores of the request's tenant (``ToolContext.tenant``):
naming another tenant's store answers exactly as naming one that does not exist, both when the
request is checked (a 404 before inference) and when a call searches (a failed call).

Over the real services (``VectorStoresService`` on the in-memory fakes of the ports) and
explicit tool contexts; and through ``ResponsesService``, whose requests run as the default
tenant while authentication is off.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from app.core.service import ResponsesService
from app.core.tenancy import DEFAULT_TENANT
from app.core.tools import GatewayCall, ToolContext
from app.files.checks import MissingObjectError
from app.files.files import FilesService
from app.files.requests import SearchRequest
from app.files.vector_stores import VectorStoresService
from app.protocol.json_types import JsonObject
from app.protocol.requests import ParsedRequest
from app.tools.file_search.provider import FileSearchToolProvider
from app.tools.toolkit import GatewayToolKit
from tests.fakes import (
    FakeClock,
    FakeEmbedder,
    MemoryBlobStore,
    MemoryFileStores,
    MemoryResponseStore,
    MemoryVectorIndex,
    ScriptedUpstream,
    message,
)

HERONS = "Herons are long-legged wading birds that eat fish and frogs."
EGRETS = "Egrets are herons with white plumage."
UNKNOWN = "vs_" + "0" * 32
SEARCH = GatewayCall("fs_1", "call_1", "file_search", '{"queries": ["herons"]}', 0)


@dataclass
class Stores:
    files: FilesService
    vector_stores: VectorStoresService

    async def own(self, tenant: str, text: str) -> tuple[str, str]:
        """A store of ``tenant`` holding one ingested file: (store id, file id)."""
        uploaded = await self.files.create(
            tenant=tenant, filename=f"{tenant}.txt", data=text.encode(), purpose="assistants"
        )
        store = await self.vector_stores.stores.create(
            tenant=tenant,
            name=tenant,
            metadata={},
            expires_after=None,
            file_ids=[str(uploaded["id"])],
        )
        await self.vector_stores.wait_idle()
        return str(store["id"]), str(uploaded["id"])


@pytest.fixture
async def stores() -> AsyncIterator[Stores]:
    rows, blobs, clock = MemoryFileStores(), MemoryBlobStore(), FakeClock()
    vector_stores = VectorStoresService(rows, blobs, MemoryVectorIndex(), FakeEmbedder(), clock)
    files = FilesService(rows, blobs, clock, detacher=vector_stores.store_files)
    yield Stores(files, vector_stores)
    await vector_stores.aclose()


def request(*store_ids: str) -> JsonObject:
    return {
        "tools": [{"type": "file_search", "vector_store_ids": list(store_ids)}],
        "include": ["file_search_call.results"],
    }


def as_tenant(tenant: str) -> ToolContext:
    return ToolContext("session", "resp_1", tenant=tenant)


async def test_a_request_searches_its_tenants_stores(stores: Stores) -> None:
    alice_store, alice_file = await stores.own("alice", HERONS)
    bob_store, bob_file = await stores.own("bob", EGRETS)
    kit = GatewayToolKit([FileSearchToolProvider(stores.vector_stores.searcher)])

    for tenant, store_id, file_id in (
        ("alice", alice_store, alice_file),
        ("bob", bob_store, bob_file),
    ):
        prepared = await kit.prepare(request(store_id), [], [], as_tenant(tenant))
        result = await prepared.executors["file_search"].run(SEARCH, timeout=5)
        assert result.ok
        assert [hit["file_id"] for hit in result.item["results"]] == [file_id]


async def test_another_tenants_store_is_a_404_before_inference(stores: Stores) -> None:
    alice_store, _ = await stores.own("alice", HERONS)
    kit = GatewayToolKit([FileSearchToolProvider(stores.vector_stores.searcher)])

    errors = []
    for store_id in (alice_store, UNKNOWN):
        with pytest.raises(MissingObjectError) as caught:
            await kit.prepare(request(store_id), [], [], as_tenant("bob"))
        errors.append((caught.value.status_code, caught.value.to_error()))

    theirs, unknown = errors
    assert theirs[0] == unknown[0] == 404
    assert theirs[1] == {
        **unknown[1],
        "message": unknown[1]["message"].replace(UNKNOWN, alice_store),
    }
    assert theirs[1]["param"] == "tools[0].vector_store_ids[0]"


class UncheckedSearch:
    """The real search, but a request's stores pass its check: what a call meets when the
    store it names is not (or no longer) the request's tenant's when it searches."""

    def __init__(self, stores: Stores) -> None:
        self._searcher = stores.vector_stores.searcher

    async def check_vector_store(self, vector_store_id: str, *, tenant: str) -> None:
        return None

    async def search(
        self, vector_store_id: str, request: SearchRequest, *, tenant: str
    ) -> JsonObject:
        return await self._searcher.search(vector_store_id, request, tenant=tenant)


async def test_a_call_on_another_tenants_store_fails_as_on_an_unknown_one(stores: Stores) -> None:
    alice_store, _ = await stores.own("alice", HERONS)
    kit = GatewayToolKit([FileSearchToolProvider(UncheckedSearch(stores))])

    results = []
    for store_id in (alice_store, UNKNOWN):
        prepared = await kit.prepare(request(store_id), [], [], as_tenant("bob"))
        results.append(await prepared.executors["file_search"].run(SEARCH, timeout=5))

    theirs, unknown = results
    assert not theirs.ok and theirs.error_kind == unknown.error_kind
    assert theirs.model_output == unknown.model_output.replace(UNKNOWN, alice_store)
    assert alice_store in theirs.model_output
    assert (theirs.item["status"], theirs.item["results"]) == ("failed", None)
    assert HERONS not in str(theirs.item)


async def test_a_request_without_authentication_cannot_name_a_tenants_store(
    stores: Stores,
) -> None:
    # authentication off: the request runs as the default tenant
    alice_store, _ = await stores.own("alice", HERONS)
    default_store, _ = await stores.own(DEFAULT_TENANT, EGRETS)
    upstream = ScriptedUpstream([[message("never")]])
    kit = GatewayToolKit([FileSearchToolProvider(stores.vector_stores.searcher)])
    service = ResponsesService(upstream, MemoryResponseStore(), toolkit=kit)
    body = {"model": "m", "input": "Which birds wade?", **request(default_store, alice_store)}

    with pytest.raises(MissingObjectError) as caught:
        await service.create(ParsedRequest.from_body(body, DEFAULT_TENANT), {})

    assert caught.value.to_error() == {
        "message": f"No vector store found with id '{alice_store}'.",
        "type": "invalid_request_error",
        "param": "tools[0].vector_store_ids[1]",
        "code": None,
    }
    assert upstream.requests == []
