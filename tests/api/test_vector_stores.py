"""The Vector Stores API (``/v1/vector_stores``): stores, their files, file batches and search,
in process, with raw HTTP and the official ``openai`` SDK, on every backend (see
tests/api/test_files.py for the harness). Ingestion is awaited with ``wait_idle`` or observed
through the statuses while the fake embedder is held on a gate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest

from app.core.tenancy import DEFAULT_TENANT
from app.files.embeddings import EmbeddingsUnavailableError
from app.protocol.json_types import JsonObject
from tests.api.test_files import (
    BACKENDS,
    FileGateway,
    assert_error,
    file_gateway,
    postgres_files_url,
)

__all__ = ["postgres_files_url"]  # the session fixture, for the PostgreSQL backend

AUTO = {"type": "static", "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}}
ZERO_COUNTS = {"in_progress": 0, "completed": 0, "failed": 0, "cancelled": 0, "total": 0}
HERONS = "Herons are long-legged wading birds that eat fish and frogs."
TRAINS = "Steam locomotives burn coal to boil water; the steam drives the pistons."
OWLS = "Owls are nocturnal birds of prey with silent flight."


@pytest.fixture(params=BACKENDS)
async def gw(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[FileGateway]:
    async with file_gateway(request.param, tmp_path, request) as gateway:
        yield gateway


async def create_store(gw: FileGateway, **body: Any) -> JsonObject:
    reply = await gw.http.post("/v1/vector_stores", json=body)
    assert reply.status_code == 200, reply.text
    created: JsonObject = reply.json()
    return created


async def get(gw: FileGateway, path: str, **params: Any) -> JsonObject:
    reply = await gw.http.get(path, params=params)
    assert reply.status_code == 200, reply.text
    data: JsonObject = reply.json()
    return data


async def post(gw: FileGateway, path: str, body: JsonObject) -> JsonObject:
    reply = await gw.http.post(path, json=body)
    assert reply.status_code == 200, reply.text
    data: JsonObject = reply.json()
    return data


async def corpus(gw: FileGateway) -> tuple[str, dict[str, str]]:
    """A store with three ingested files with attributes; returns its id and the file ids."""
    ids = {
        name: (await gw.upload(f"{name}.txt", text))["id"]
        for name, text in (("herons", HERONS), ("trains", TRAINS), ("owls", OWLS))
    }
    store = await create_store(gw, name="corpus")
    attributes: dict[str, JsonObject] = {
        "herons": {"kind": "bird", "year": 2020, "public": True},
        "trains": {"kind": "machine", "year": 1890, "public": True},
        "owls": {"kind": "bird", "year": 1999, "public": False},
    }
    for name, file_id in ids.items():
        await post(
            gw,
            f"/v1/vector_stores/{store['id']}/files",
            {"file_id": file_id, "attributes": attributes[name]},
        )
    await gw.ingested()
    return store["id"], ids


# ------------------------------------------------------------------------------ stores


async def test_create_an_empty_store(gw: FileGateway) -> None:
    store = await create_store(gw)
    assert set(store) == {
        "id",
        "object",
        "created_at",
        "name",
        "usage_bytes",
        "file_counts",
        "status",
        "expires_after",
        "expires_at",
        "last_active_at",
        "metadata",
    }
    assert store["id"].startswith("vs_")
    assert store["object"] == "vector_store"
    assert store["created_at"] == store["last_active_at"] == int(gw.clock.now)
    assert (store["status"], store["usage_bytes"], store["file_counts"]) == (
        "completed",
        0,
        ZERO_COUNTS,
    )
    assert (store["name"], store["metadata"], store["expires_after"], store["expires_at"]) == (
        None,
        {},
        None,
        None,
    )
    assert await get(gw, f"/v1/vector_stores/{store['id']}") == store
    reply = await gw.http.post("/v1/vector_stores", content=b"", headers={"content-length": "0"})
    assert reply.status_code == 200, reply.text


async def test_create_with_files_with_the_sdk(gw: FileGateway) -> None:
    herons = await gw.upload("herons.txt", HERONS)
    trains = await gw.upload("trains.md", TRAINS)
    gate = asyncio.Event()
    gw.embedder.gate = gate
    store = await gw.sdk.vector_stores.create(
        name="docs",
        file_ids=[herons["id"], trains["id"]],
        metadata={"team": "birds"},
        expires_after={"anchor": "last_active_at", "days": 7},
        chunking_strategy={
            "type": "static",
            "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 50},
        },
        description="accepted, not stored",
    )
    assert store.status == "in_progress"
    assert store.file_counts.in_progress == 2
    assert store.expires_after is not None and store.expires_after.days == 7
    assert store.last_active_at is not None
    assert store.expires_at == store.last_active_at + 7 * 86400
    assert store.metadata == {"team": "birds"}
    gate.set()
    await gw.ingested()
    done = await gw.sdk.vector_stores.retrieve(store.id)
    assert done.status == "completed"
    assert done.file_counts.model_dump() == {**ZERO_COUNTS, "completed": 2, "total": 2}
    assert done.usage_bytes == len(HERONS) + len(TRAINS)
    record = await gw.sdk.vector_stores.files.retrieve(herons["id"], vector_store_id=store.id)
    assert record.chunking_strategy is not None
    assert record.chunking_strategy.model_dump() == {
        "type": "static",
        "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 50},
    }


async def test_update_list_and_delete_stores(gw: FileGateway) -> None:
    ids = []
    for i in range(4):
        ids.append((await create_store(gw, name=f"store {i}"))["id"])
        gw.clock.advance(1)
    path = f"/v1/vector_stores/{ids[0]}"
    updated = await post(
        gw,
        path,
        {
            "name": "renamed",
            "metadata": {"a": "1"},
            "expires_after": {"anchor": "last_active_at", "days": 1},
        },
    )
    assert (updated["name"], updated["metadata"]) == ("renamed", {"a": "1"})
    assert updated["expires_at"] == updated["last_active_at"] + 86400
    same = await post(gw, path, {"metadata": {"b": "2"}})  # name and expiry untouched
    assert (same["name"], same["metadata"], same["expires_at"]) == (
        "renamed",
        {"b": "2"},
        updated["expires_at"],
    )
    cleared = await post(gw, path, {"expires_after": None, "name": None, "metadata": None})
    assert (cleared["expires_after"], cleared["expires_at"], cleared["name"]) == (None, None, None)
    assert cleared["metadata"] == {}

    listed = await get(gw, "/v1/vector_stores")
    assert [s["id"] for s in listed["data"]] == ids[::-1]
    assert (listed["first_id"], listed["last_id"], listed["has_more"]) == (ids[3], ids[0], False)
    page = await get(gw, "/v1/vector_stores", limit=2, order="asc")
    assert ([s["id"] for s in page["data"]], page["has_more"]) == (ids[:2], True)
    page = await get(gw, "/v1/vector_stores", limit=2, order="asc", after=ids[1])
    assert ([s["id"] for s in page["data"]], page["has_more"]) == (ids[2:], False)
    page = await get(gw, "/v1/vector_stores", limit=2, order="asc", before=ids[3])
    assert ([s["id"] for s in page["data"]], page["has_more"]) == (ids[1:3], True)
    page = await get(gw, "/v1/vector_stores", order="asc", after=ids[0], before=ids[3])
    assert [s["id"] for s in page["data"]] == ids[1:3]
    assert [s.id async for s in gw.sdk.vector_stores.list(limit=3)] == ids[::-1]

    deleted = await gw.sdk.vector_stores.delete(ids[0])
    assert deleted.model_dump() == {"id": ids[0], "object": "vector_store.deleted", "deleted": True}
    for reply in (
        await gw.http.get(path),
        await gw.http.post(path, json={"name": "x"}),
        await gw.http.delete(path),
        await gw.http.post(f"{path}/search", json={"query": "x"}),
        await gw.http.get(f"{path}/files"),
        await gw.http.post(f"{path}/files", json={"file_id": "file-x"}),
        await gw.http.post(f"{path}/file_batches", json={"file_ids": ["file-x"]}),
    ):
        assert_error(
            reply, 404, "vector_store_id", None, f"No vector store found with id '{ids[0]}'."
        )
    assert_error(
        await gw.http.get("/v1/vector_stores", params={"after": "vs_missing"}),
        404,
        "after",
        None,
        "vs_missing",
    )


@pytest.mark.parametrize(
    ("body", "param", "code", "message"),
    [
        ({"nme": "x"}, "nme", "unknown_parameter", "Unknown parameter: 'nme'."),
        ({"name": 3}, "name", "invalid_value", ""),
        ({"file_ids": "file-1"}, "file_ids", "invalid_value", ""),
        ({"metadata": {"k": 1}}, "metadata.k", "invalid_type", "expected a string"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", None, "at most 16"),
        ({"expires_after": {"anchor": "last_active_at", "days": 0}}, "expires_after.days", "", ""),
        ({"expires_after": {"anchor": "created_at", "days": 1}}, "expires_after.anchor", "", ""),
        (
            {"chunking_strategy": {"type": "static", "static": {"max_chunk_size_tokens": 50}}},
            "chunking_strategy.static.chunk_overlap_tokens",
            "missing_required_parameter",
            "",
        ),
        (
            {
                "chunking_strategy": {
                    "type": "static",
                    "static": {"max_chunk_size_tokens": 300, "chunk_overlap_tokens": 200},
                }
            },
            "chunking_strategy.static.chunk_overlap_tokens",
            "invalid_value",
            "half of max_chunk_size_tokens",
        ),
        ({"chunking_strategy": {"type": "fancy"}}, "chunking_strategy.type", "invalid_value", ""),
        ({"file_ids": ["file-nope"]}, "file_ids", None, "No such File object: file-nope"),
    ],
)
async def test_bad_creates_are_errors_and_store_nothing(
    gw: FileGateway, body: JsonObject, param: str, code: str | None, message: str
) -> None:
    reply = await gw.http.post("/v1/vector_stores", json=body)
    status = 404 if "file-nope" in message else 400
    error = reply.json().get("error", {})
    expected_code = error.get("code") if code == "" else code
    if code is None and status == 400:
        expected_code = "object_above_max_properties"
    assert_error(reply, status, param, expected_code, message)
    assert (await get(gw, "/v1/vector_stores"))["data"] == []


# ------------------------------------------------------------------------------ files of a store


async def test_add_files_and_watch_their_status(gw: FileGateway) -> None:
    uploaded = await gw.upload("herons.txt", HERONS)
    store = await create_store(gw)
    gate = asyncio.Event()
    gw.embedder.gate = gate
    path = f"/v1/vector_stores/{store['id']}/files"
    record = await post(gw, path, {"file_id": uploaded["id"], "attributes": {"kind": "bird"}})
    assert set(record) == {
        "id",
        "object",
        "usage_bytes",
        "created_at",
        "vector_store_id",
        "status",
        "last_error",
        "chunking_strategy",
        "attributes",
    }
    assert record["object"] == "vector_store.file"
    assert (record["id"], record["vector_store_id"]) == (uploaded["id"], store["id"])
    assert (record["status"], record["usage_bytes"], record["last_error"]) == (
        "in_progress",
        0,
        None,
    )
    assert record["chunking_strategy"] == AUTO
    assert (await get(gw, f"/v1/vector_stores/{store['id']}"))["status"] == "in_progress"
    listed = await get(gw, path, filter="in_progress")
    assert [f["id"] for f in listed["data"]] == [uploaded["id"]]
    gate.set()
    await gw.ingested()
    record = await get(gw, f"{path}/{uploaded['id']}")
    assert (record["status"], record["usage_bytes"]) == ("completed", len(HERONS))
    assert record["attributes"] == {"kind": "bird"}
    assert (await get(gw, path, filter="in_progress"))["data"] == []
    store = await get(gw, f"/v1/vector_stores/{store['id']}")
    assert (store["status"], store["usage_bytes"]) == ("completed", len(HERONS))

    content = await get(gw, f"{path}/{uploaded['id']}/content")
    assert content == {
        "object": "vector_store.file_content.page",
        "data": [{"type": "text", "text": HERONS}],
        "has_more": False,
        "next_page": None,
    }
    parts = [
        part.text
        async for part in gw.sdk.vector_stores.files.content(
            uploaded["id"], vector_store_id=store["id"]
        )
    ]
    assert parts == [HERONS]


async def test_upload_and_poll_with_the_sdk(gw: FileGateway) -> None:
    store = await gw.sdk.vector_stores.create(name="sdk")
    record = await gw.sdk.vector_stores.files.upload_and_poll(
        vector_store_id=store.id,
        file=("owls.txt", OWLS.encode()),
        poll_interval_ms=5,
    )
    assert (record.status, record.usage_bytes) == ("completed", len(OWLS))
    batch = await gw.sdk.vector_stores.file_batches.upload_and_poll(
        store.id,
        files=[("a.txt", HERONS.encode()), ("b.txt", TRAINS.encode())],
        poll_interval_ms=5,
    )
    assert batch.object == "vector_store.files_batch"
    assert (batch.status, batch.file_counts.completed, batch.file_counts.total) == (
        "completed",
        2,
        2,
    )
    final = await gw.sdk.vector_stores.retrieve(store.id)
    assert final.file_counts.completed == 3
    assert final.usage_bytes == len(OWLS) + len(HERONS) + len(TRAINS)


async def test_update_and_remove_a_file(gw: FileGateway) -> None:
    store_id, ids = await corpus(gw)
    path = f"/v1/vector_stores/{store_id}/files/{ids['owls']}"
    updated = await gw.sdk.vector_stores.files.update(
        ids["owls"], vector_store_id=store_id, attributes={"kind": "raptor", "size": 1.5}
    )
    assert updated.attributes == {"kind": "raptor", "size": 1.5}
    assert updated.status == "completed"
    assert (await get(gw, path))["attributes"] == {"kind": "raptor", "size": 1.5}
    assert (await post(gw, path, {"attributes": None}))["attributes"] == {}

    deleted = await gw.sdk.vector_stores.files.delete(ids["owls"], vector_store_id=store_id)
    assert deleted.model_dump() == {
        "id": ids["owls"],
        "object": "vector_store.file.deleted",
        "deleted": True,
    }
    assert await gw.index.file_chunks(store_id, ids["owls"], tenant=DEFAULT_TENANT) == []
    assert (await gw.http.get(f"/v1/files/{ids['owls']}")).status_code == 200  # file stays
    store = await get(gw, f"/v1/vector_stores/{store_id}")
    assert store["file_counts"]["total"] == 2
    assert store["usage_bytes"] == len(HERONS) + len(TRAINS)
    for reply in (
        await gw.http.get(path),
        await gw.http.post(path, json={"attributes": {}}),
        await gw.http.delete(path),
        await gw.http.get(f"{path}/content"),
    ):
        assert_error(
            reply,
            404,
            "file_id",
            None,
            f"No file found with id '{ids['owls']}' in vector store '{store_id}'.",
        )


async def test_list_files_pages(gw: FileGateway) -> None:
    store = await create_store(gw)
    ids = []
    for i in range(4):
        ids.append((await gw.upload(f"{i}.txt", f"text {i}"))["id"])
        await post(gw, f"/v1/vector_stores/{store['id']}/files", {"file_id": ids[-1]})
        gw.clock.advance(1)
    await gw.ingested()
    path = f"/v1/vector_stores/{store['id']}/files"
    assert [f["id"] for f in (await get(gw, path))["data"]] == ids[::-1]
    page = await get(gw, path, limit=3, order="asc")
    assert ([f["id"] for f in page["data"]], page["has_more"]) == (ids[:3], True)
    page = await get(gw, path, order="asc", after=ids[2])
    assert [f["id"] for f in page["data"]] == ids[3:]
    page = await get(gw, path, before=ids[1])
    assert [f["id"] for f in page["data"]] == ids[:1:-1]
    assert (await get(gw, path, filter="failed"))["data"] == []
    listed = [
        f.id
        async for f in gw.sdk.vector_stores.files.list(store["id"], limit=2, filter="completed")
    ]
    assert listed == ids[::-1]
    assert_error(await gw.http.get(path, params={"filter": "done"}), 400, "filter", "invalid_value")
    assert_error(await gw.http.get(path, params={"limit": 101}), 400, "limit", "invalid_value")


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({}, "file_id", "missing_required_parameter"),
        ({"file_id": 1}, "file_id", "invalid_value"),
        ({"file_id": "F", "extra": 1}, "extra", "unknown_parameter"),
        ({"file_id": "F", "attributes": []}, "attributes", "invalid_type"),
        ({"file_id": "F", "attributes": {"a": {"b": 1}}}, "attributes.a", "invalid_type"),
        ({"file_id": "F", "attributes": {"a": None}}, "attributes.a", "invalid_type"),
        (
            {"file_id": "F", "attributes": {"a": "x" * 513}},
            "attributes.a",
            "string_above_max_length",
        ),
        ({"file_id": "F", "attributes": {"k" * 65: "x"}}, "attributes", "string_above_max_length"),
        (
            {"file_id": "F", "attributes": {f"k{i}": i for i in range(17)}},
            "attributes",
            "object_above_max_properties",
        ),
        (
            {"file_id": "F", "chunking_strategy": {"type": "auto", "x": 1}},
            "chunking_strategy.x",
            "unknown_parameter",
        ),
        ({"file_id": "file-nope"}, "file_id", None),
    ],
)
async def test_bad_file_adds_are_errors_and_store_nothing(
    gw: FileGateway, body: JsonObject, param: str, code: str | None
) -> None:
    uploaded = await gw.upload("a.txt", "text")
    store = await create_store(gw)
    if body.get("file_id") == "F":
        body = {**body, "file_id": uploaded["id"]}
    reply = await gw.http.post(f"/v1/vector_stores/{store['id']}/files", json=body)
    assert_error(reply, 404 if code is None else 400, param, code)
    assert (await get(gw, f"/v1/vector_stores/{store['id']}/files"))["data"] == []
    assert gw.vector_stores.ingest.is_pending(store["id"], uploaded["id"]) is False


async def test_failed_ingestion_is_reported(gw: FileGateway) -> None:
    image = await gw.upload("photo.png", b"\x89PNG\r\n\x1a\n" + bytes(40))
    text = await gw.upload("a.txt", "words")
    store = await create_store(gw, file_ids=[image["id"]])
    await gw.ingested()
    record = await get(gw, f"/v1/vector_stores/{store['id']}/files/{image['id']}")
    assert record["status"] == "failed"
    assert record["last_error"]["code"] == "unsupported_file"
    gw.embedder.fail = EmbeddingsUnavailableError("No embedding model is available.")
    await post(gw, f"/v1/vector_stores/{store['id']}/files", {"file_id": text["id"]})
    await gw.ingested()
    record = await get(gw, f"/v1/vector_stores/{store['id']}/files/{text['id']}")
    assert record["last_error"] == {
        "code": "server_error",
        "message": "No embedding model is available.",
    }
    store = await get(gw, f"/v1/vector_stores/{store['id']}")
    assert (store["status"], store["file_counts"]["failed"], store["usage_bytes"]) == (
        "completed",
        2,
        0,
    )


# ------------------------------------------------------------------------------ file batches


async def test_file_batches(gw: FileGateway) -> None:
    ids = [(await gw.upload(f"{n}.txt", t))["id"] for n, t in (("h", HERONS), ("t", TRAINS))]
    store = await create_store(gw)
    base = f"/v1/vector_stores/{store['id']}/file_batches"
    batch = await post(gw, base, {"file_ids": ids, "attributes": {"source": "upload"}})
    assert set(batch) == {"id", "object", "created_at", "vector_store_id", "status", "file_counts"}
    assert batch["id"].startswith("vsfb_")
    assert (batch["object"], batch["vector_store_id"]) == ("vector_store.files_batch", store["id"])
    assert batch["status"] == "in_progress"
    await gw.ingested()
    done = await get(gw, f"{base}/{batch['id']}")
    assert done["status"] == "completed"
    assert done["file_counts"] == {**ZERO_COUNTS, "completed": 2, "total": 2}
    files = await get(gw, f"{base}/{batch['id']}/files", order="asc")
    # Same created_at: ordered by id (UUIDv7: random within a millisecond).
    assert sorted(f["id"] for f in files["data"]) == sorted(ids)
    assert all(f["attributes"] == {"source": "upload"} for f in files["data"])

    third = (await gw.upload("o.txt", OWLS))["id"]
    per_file = await gw.sdk.vector_stores.file_batches.create(
        store["id"],
        files=[{"file_id": third, "attributes": {"n": 3}, "chunking_strategy": {"type": "auto"}}],
    )
    await gw.ingested()
    listed = [
        f
        async for f in gw.sdk.vector_stores.file_batches.list_files(
            per_file.id, vector_store_id=store["id"]
        )
    ]
    assert [(f.id, f.attributes) for f in listed] == [(third, {"n": 3})]
    retrieved = await gw.sdk.vector_stores.file_batches.retrieve(
        per_file.id, vector_store_id=store["id"]
    )
    assert retrieved.status == "completed"
    # Cancelling a batch that has finished changes nothing.
    late = await gw.sdk.vector_stores.file_batches.cancel(per_file.id, vector_store_id=store["id"])
    assert late == retrieved
    # The store lists every file, the batches only theirs.
    assert len((await get(gw, f"/v1/vector_stores/{store['id']}/files"))["data"]) == 3


async def test_cancel_a_batch(gw: FileGateway) -> None:
    ids = [(await gw.upload(f"{i}.txt", f"text {i}"))["id"] for i in range(3)]
    store = await create_store(gw)
    gate = asyncio.Event()
    gw.embedder.gate = gate
    batch = await gw.sdk.vector_stores.file_batches.create(store["id"], file_ids=ids)
    assert batch.file_counts.in_progress == 3
    cancelled = await gw.sdk.vector_stores.file_batches.cancel(
        batch.id, vector_store_id=store["id"]
    )
    assert cancelled.status == "cancelled"
    assert cancelled.file_counts.model_dump() == {**ZERO_COUNTS, "cancelled": 3, "total": 3}
    gate.set()
    await gw.ingested()
    for file_id in ids:
        record = await get(gw, f"/v1/vector_stores/{store['id']}/files/{file_id}")
        assert record["status"] == "cancelled"
        assert await gw.index.file_chunks(store["id"], file_id, tenant=DEFAULT_TENANT) == []
    assert (await get(gw, f"/v1/vector_stores/{store['id']}"))["file_counts"]["cancelled"] == 3


async def test_batch_errors(gw: FileGateway) -> None:
    uploaded = await gw.upload("a.txt", "text")
    store = await create_store(gw)
    base = f"/v1/vector_stores/{store['id']}/file_batches"
    assert_error(await gw.http.post(base, json={}), 400, "file_ids", "missing_required_parameter")
    assert_error(
        await gw.http.post(
            base, json={"file_ids": [uploaded["id"]], "files": [{"file_id": uploaded["id"]}]}
        ),
        400,
        "files",
        "invalid_value",
        "mutually exclusive",
    )
    assert_error(
        await gw.http.post(
            base,
            json={"files": [{"file_id": uploaded["id"], "attributes": {"a": [1]}}]},
        ),
        400,
        "files[0].attributes.a",
        "invalid_type",
    )
    assert_error(
        await gw.http.post(
            base,
            json={"files": [{"file_id": uploaded["id"], "chunking_strategy": {"type": "x"}}]},
        ),
        400,
        "files[0].chunking_strategy.type",
        "invalid_value",
        "Supported values are: 'auto' and 'static'.",
    )
    assert_error(
        await gw.http.post(base, json={"file_ids": [uploaded["id"], "file-nope"]}),
        404,
        "file_ids",
        None,
        "No such File object: file-nope",
    )
    assert (await get(gw, f"/v1/vector_stores/{store['id']}/files"))["data"] == []
    for reply in (
        await gw.http.get(f"{base}/vsfb_missing"),
        await gw.http.post(f"{base}/vsfb_missing/cancel"),
        await gw.http.get(f"{base}/vsfb_missing/files"),
    ):
        assert_error(reply, 404, "batch_id", None, "No file batch found with id 'vsfb_missing'")


# ------------------------------------------------------------------------------ search


async def test_search_with_the_sdk(gw: FileGateway) -> None:
    store_id, ids = await corpus(gw)
    results = [
        r
        async for r in gw.sdk.vector_stores.search(
            store_id, query="which birds eat fish", max_num_results=2
        )
    ]
    assert 1 <= len(results) <= 2
    best = results[0]
    assert (best.file_id, best.filename) == (ids["herons"], "herons.txt")
    assert best.attributes == {"kind": "bird", "year": 2020, "public": True}
    assert [c.model_dump() for c in best.content] == [{"type": "text", "text": HERONS}]
    assert 0.0 <= results[-1].score <= best.score <= 1.0


async def test_search_page_shape_and_options(gw: FileGateway) -> None:
    store_id, ids = await corpus(gw)
    path = f"/v1/vector_stores/{store_id}/search"
    page = await post(gw, path, {"query": "birds", "rewrite_query": True})
    assert set(page) == {"object", "search_query", "data", "has_more", "next_page"}
    assert page["object"] == "vector_store.search_results.page"
    assert page["search_query"] == ["birds"]
    assert (page["has_more"], page["next_page"]) == (False, None)
    for hit in page["data"]:
        assert set(hit) == {"file_id", "filename", "score", "attributes", "content"}

    birds = {"type": "eq", "key": "kind", "value": "bird"}
    page = await post(gw, path, {"query": ["steam", "coal"], "filters": birds})
    assert {hit["file_id"] for hit in page["data"]} <= {ids["herons"], ids["owls"]}
    assert page["search_query"] == ["steam", "coal"]
    compound = {
        "type": "and",
        "filters": [birds, {"type": "gte", "key": "year", "value": 2000}],
    }
    page = await post(gw, path, {"query": "birds", "filters": compound})
    assert [hit["file_id"] for hit in page["data"]] == [ids["herons"]]
    page = await post(
        gw, path, {"query": "x", "filters": {"type": "eq", "key": "public", "value": "maybe"}}
    )
    assert page["data"] == []

    page = await post(gw, path, {"query": "coal", "ranking_options": {"ranker": "keyword"}})
    assert [hit["file_id"] for hit in page["data"]] == [ids["trains"]]
    for ranker in ("auto", "default-2024-11-15", "none", "semantic", "hybrid"):
        page = await post(gw, path, {"query": "owls", "ranking_options": {"ranker": ranker}})
        assert page["data"], ranker
    options = {
        "ranker": None,
        "score_threshold": None,
        "hybrid_search": {"embedding_weight": 0.7, "text_weight": 0.3},
    }
    page = await post(gw, path, {"query": "owls", "ranking_options": options})
    assert page["data"]
    page = await post(gw, path, {"query": "birds", "max_num_results": 1})
    assert len(page["data"]) == 1
    page = await post(gw, path, {"query": "birds", "ranking_options": {"score_threshold": 1}})
    assert all(hit["score"] >= 1 for hit in page["data"])


async def test_search_updates_last_active_at_and_expiry(gw: FileGateway) -> None:
    store = await create_store(gw, expires_after={"anchor": "last_active_at", "days": 1})
    gw.clock.advance(600)
    await post(gw, f"/v1/vector_stores/{store['id']}/search", {"query": "anything"})
    touched = await get(gw, f"/v1/vector_stores/{store['id']}")
    assert touched["last_active_at"] == store["last_active_at"] + 600
    assert touched["expires_at"] == touched["last_active_at"] + 86400
    gw.clock.advance(86400)
    expired = await get(gw, f"/v1/vector_stores/{store['id']}")
    assert expired["status"] == "expired"
    assert_error(
        await gw.http.post(f"/v1/vector_stores/{store['id']}/search", json={"query": "x"}),
        400,
        "vector_store_id",
        "vector_store_expired",
        "has expired",
    )


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({}, "query", "missing_required_parameter"),
        ({"query": 3}, "query", "invalid_value"),
        ({"query": []}, "query", "invalid_value"),
        ({"query": "x", "max_num_results": 0}, "max_num_results", "invalid_value"),
        ({"query": "x", "max_num_results": 51}, "max_num_results", "invalid_value"),
        ({"query": "x", "ranking_options": {"ranker": "best"}}, "ranking_options.ranker", ""),
        (
            {"query": "x", "ranking_options": {"score_threshold": 1.5}},
            "ranking_options.score_threshold",
            "invalid_value",
        ),
        ({"query": "x", "filters": {"type": "eq", "key": "a"}}, "filters.value", ""),
        ({"query": "x", "filters": {"type": "near"}}, "filters.type", ""),
        ({"query": "x", "top_k": 3}, "top_k", "unknown_parameter"),
    ],
)
async def test_bad_searches_are_400(
    gw: FileGateway, body: JsonObject, param: str, code: str
) -> None:
    store = await create_store(gw)
    reply = await gw.http.post(f"/v1/vector_stores/{store['id']}/search", json=body)
    error = assert_error(reply, 400, param, code or reply.json()["error"]["code"])
    assert error["code"]


async def test_search_when_the_embedder_is_unavailable(gw: FileGateway) -> None:
    store = await create_store(gw)
    gw.embedder.fail = EmbeddingsUnavailableError("No embedding model is available.")
    reply = await gw.http.post(f"/v1/vector_stores/{store['id']}/search", json={"query": "x"})
    assert reply.status_code == 503
    assert reply.json()["error"]["message"] == "No embedding model is available."
    with pytest.raises(openai.InternalServerError):
        await gw.sdk.vector_stores.search(store["id"], query="x")
