"""The Files API (``/v1/files``) in process, with raw HTTP and the official ``openai`` SDK.

Each test runs on three backends: the in-memory fakes of the ports, and the real adapters
(``SqlFileStore``, ``DiskBlobStore``, the SQL vector index) on embedded SQLite in a temporary
directory and on a throwaway PostgreSQL database (``RESPGATE_TEST_POSTGRES_URL``, as in
tests/api/test_conversations.py; skipped when no server answers, unless ``CI`` is set). The
embedder is ``FakeEmbedder`` everywhere (deterministic, offline).

The routers are mounted on a small FastAPI app whose state carries the two services the way
``GatewayState`` does (``files``, ``vector_stores``). ``FileGateway`` is shared with
tests/api/test_vector_stores.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.errors import install_error_handlers
from app.api.routes import files as files_routes
from app.api.routes import vector_stores as vector_stores_routes
from app.core.tenancy import DEFAULT_TENANT
from app.files.files import FilesService
from app.files.ports import BlobStore, FileStores, VectorIndexes
from app.files.vector_stores import VectorStoresService
from app.protocol.json_types import JsonObject
from app.settings import Settings
from app.store.blobs import DiskBlobStore
from app.store.engine import create_engine_for
from app.store.files_sql import SqlFileStores
from app.store.migrate import prepare_database, upgrade_to_head
from app.store.vector_index.choice import open_vector_index
from tests.fakes import (
    FakeClock,
    FakeEmbedder,
    MemoryBlobStore,
    MemoryFileStores,
    MemoryVectorIndex,
)
from tests.postgres import run_in_thread, throwaway_database

BACKENDS = ["memory", "sqlite", "postgresql"]


@dataclass
class FileSearchState:
    """What the routers read from ``app.state.gateway`` (a stand-in for ``GatewayState``)."""

    settings: Settings
    files: FilesService
    vector_stores: VectorStoresService


@dataclass
class FileGateway:
    http: httpx.AsyncClient
    sdk: openai.AsyncOpenAI
    files: FilesService
    vector_stores: VectorStoresService
    store: FileStores
    blobs: BlobStore
    index: VectorIndexes
    embedder: FakeEmbedder
    clock: FakeClock
    backend: str
    settings: Settings
    app: FastAPI

    async def upload(
        self, filename: str, data: bytes | str, purpose: str = "assistants", **form: str
    ) -> JsonObject:
        content = data.encode() if isinstance(data, str) else data
        reply = await self.http.post(
            "/v1/files",
            files={"file": (filename, content)},
            data={"purpose": purpose, **form},
        )
        assert reply.status_code == 200, reply.text
        uploaded: JsonObject = reply.json()
        return uploaded

    async def ingested(self) -> None:
        await self.vector_stores.wait_idle()


def build_app(state: FileSearchState) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(files_routes.router)
    app.include_router(vector_stores_routes.router)
    app.state.gateway = state
    return app


@pytest.fixture(scope="session")
def postgres_files_url() -> Iterator[str]:
    """A throwaway PostgreSQL database migrated to head, for the session (its chunk index is
    pgvector's where the server has pgvector, the exact one over real[] elsewhere)."""
    with throwaway_database("respgate_files") as url:
        run_in_thread(lambda: upgrade_to_head(url))
        yield url


async def _empty_postgres(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        names = (
            await connection.execute(
                text(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                    "AND tablename <> 'alembic_version'"
                )
            )
        ).scalars()
        tables = ", ".join(f'"{name}"' for name in names)
        if tables:
            await connection.execute(text(f"TRUNCATE {tables}"))


@contextlib.asynccontextmanager
async def file_gateway(
    backend: str, data_dir: Path, request: pytest.FixtureRequest
) -> AsyncIterator[FileGateway]:
    """The Files and Vector Stores routers on ``backend``'s adapters, with a fake clock and a
    fake embedder; pending ingestion is cancelled at the end."""
    async with contextlib.AsyncExitStack() as stack:
        store: FileStores
        blobs: BlobStore
        index: VectorIndexes
        if backend == "memory":
            store, blobs, index = MemoryFileStores(), MemoryBlobStore(), MemoryVectorIndex()
        else:
            if backend == "sqlite":
                url = f"sqlite+aiosqlite:///{data_dir / 'respgate.db'}"
                await prepare_database(url, auto_migrate=True)
            else:
                url = request.getfixturevalue("postgres_files_url")
            engine = create_engine_for(url)
            stack.push_async_callback(engine.dispose)
            if backend == "postgresql":
                await _empty_postgres(engine)
            store, blobs, index = (
                SqlFileStores(engine),
                DiskBlobStore(data_dir / "files"),
                await open_vector_index(engine),
            )
        embedder, clock = FakeEmbedder(), FakeClock()
        vector_stores = VectorStoresService(store, blobs, index, embedder, clock)
        stack.push_async_callback(vector_stores.aclose)
        files = FilesService(store, blobs, clock, detacher=vector_stores.store_files)
        settings = Settings(data_dir=data_dir)
        app = build_app(FileSearchState(settings, files, vector_stores))
        transport = httpx.ASGITransport(app=app)
        http = httpx.AsyncClient(transport=transport, base_url="http://gateway")
        stack.push_async_callback(http.aclose)
        sdk = openai.AsyncOpenAI(
            base_url="http://gateway/v1",
            api_key="sk-test",
            max_retries=0,
            http_client=httpx.AsyncClient(transport=transport),
        )
        stack.push_async_callback(sdk.close)
        yield FileGateway(
            http,
            sdk,
            files,
            vector_stores,
            store,
            blobs,
            index,
            embedder,
            clock,
            backend,
            settings,
            app,
        )


@pytest.fixture(params=BACKENDS)
async def gw(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[FileGateway]:
    async with file_gateway(request.param, tmp_path, request) as gateway:
        yield gateway


def assert_error(
    reply: httpx.Response, status: int, param: str | None, code: str | None, message: str = ""
) -> JsonObject:
    assert reply.status_code == status, reply.text
    error: JsonObject = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert (error["param"], error["code"]) == (param, code), error
    assert message in error["message"], error["message"]
    return error


async def listed_ids(gw: FileGateway, **params: Any) -> list[str]:
    reply = await gw.http.get("/v1/files", params=params)
    assert reply.status_code == 200, reply.text
    return [item["id"] for item in reply.json()["data"]]


# ------------------------------------------------------------------------------ upload


async def test_upload_with_the_sdk(gw: FileGateway) -> None:
    created = await gw.sdk.files.create(file=("notes.txt", b"hello files"), purpose="assistants")
    assert created.id.startswith("file-")
    assert (created.object, created.bytes, created.filename) == ("file", 11, "notes.txt")
    assert (created.purpose, created.status, created.status_details) == (
        "assistants",
        "processed",
        None,
    )
    assert created.created_at == int(gw.clock.now)
    assert created.expires_at is None
    raw = (await gw.http.get(f"/v1/files/{created.id}")).json()
    assert set(raw) == {
        "id",
        "object",
        "bytes",
        "created_at",
        "expires_at",
        "filename",
        "purpose",
        "status",
        "status_details",
    }
    assert raw == created.model_dump()
    assert (await gw.sdk.files.retrieve(created.id)) == created
    content = await gw.sdk.files.content(created.id)
    assert content.content == b"hello files"
    assert content.response.headers["content-type"].startswith("text/plain")


async def test_upload_expiring_file(gw: FileGateway) -> None:
    created = await gw.sdk.files.create(
        file=("batch.jsonl", b"{}\n"),
        purpose="batch",
        expires_after={"anchor": "created_at", "seconds": 3600},
    )
    assert created.expires_at == created.created_at + 3600
    as_json = await gw.upload("b.txt", "x", expires_after='{"anchor":"created_at","seconds":7200}')
    assert as_json["expires_at"] == as_json["created_at"] + 7200
    gw.clock.advance(3600)
    assert_error(
        await gw.http.get(f"/v1/files/{created.id}"), 404, "id", None, "No such File object"
    )
    assert await listed_ids(gw) == [as_json["id"]]


async def test_content_types_follow_the_filename(gw: FileGateway) -> None:
    for name, expected in (
        ("doc.pdf", "application/pdf"),
        ("data.json", "application/json"),
        ("blob", "application/octet-stream"),
    ):
        uploaded = await gw.upload(name, b"\x00\x01 bytes", purpose="user_data")
        reply = await gw.http.get(f"/v1/files/{uploaded['id']}/content")
        assert reply.status_code == 200
        assert reply.headers["content-type"] == expected
        assert reply.content == b"\x00\x01 bytes"
        assert name in reply.headers["content-disposition"]


@pytest.mark.parametrize(
    ("form", "files", "param", "code", "message"),
    [
        ({}, True, "purpose", "missing_required_parameter", "Missing required parameter"),
        ({"purpose": "assistants"}, False, "file", "missing_required_parameter", "'file'"),
        ({"purpose": "fun"}, True, "purpose", "invalid_value", "Invalid value: 'fun'"),
        (
            {"purpose": "batch", "expires_after[anchor]": "created_at"},
            True,
            "expires_after.seconds",
            "missing_required_parameter",
            "",
        ),
        (
            {
                "purpose": "batch",
                "expires_after[anchor]": "created_at",
                "expires_after[seconds]": "60",
            },
            True,
            "expires_after.seconds",
            "invalid_value",
            "between 3600 and 2592000",
        ),
        (
            {
                "purpose": "batch",
                "expires_after[anchor]": "last_active_at",
                "expires_after[seconds]": "3600",
            },
            True,
            "expires_after.anchor",
            "invalid_value",
            "",
        ),
        ({"purpose": "batch", "expires_after": "{"}, True, "expires_after", "invalid_value", ""),
    ],
)
async def test_bad_uploads_are_400_and_store_nothing(
    gw: FileGateway,
    form: dict[str, str],
    files: bool,
    param: str,
    code: str,
    message: str,
) -> None:
    reply = await gw.http.post(
        "/v1/files", data=form, files={"file": ("a.txt", b"abc")} if files else {"x": ("", b"")}
    )
    assert_error(reply, 400, param, code, message)
    assert await listed_ids(gw) == []


async def test_an_upload_must_be_multipart(gw: FileGateway) -> None:
    reply = await gw.http.post("/v1/files", json={"purpose": "assistants"})
    assert_error(reply, 400, None, "invalid_content_type", "multipart/form-data")


async def test_the_upload_limit(gw: FileGateway, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gw.settings, "max_upload_bytes", 1000)
    reply = await gw.http.post(
        "/v1/files", data={"purpose": "assistants"}, files={"file": ("a.txt", b"x" * 2000)}
    )
    assert reply.status_code == 413, reply.text
    assert reply.json()["error"]["code"] == "request_too_large"

    # Without a content-length, the body is counted as it arrives.
    boundary = "respgateboundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nassistants\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n'
            "Content-Type: text/plain\r\n\r\n"
        ).encode()
        + b"y" * 5000
        + f"\r\n--{boundary}--\r\n".encode()
    )

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 512):
            yield body[start : start + 512]

    reply = await gw.http.post(
        "/v1/files",
        content=chunks(),
        headers={"content-type": f"multipart/form-data; boundary={boundary}"},
    )
    assert reply.status_code == 413, reply.text
    assert await listed_ids(gw) == []
    small = await gw.upload("small.txt", b"z" * 100)
    assert small["bytes"] == 100


# ------------------------------------------------------------------------------ list


async def test_list_pages_filters_and_orders(gw: FileGateway) -> None:
    ids = []
    for i in range(5):
        purpose = "assistants" if i % 2 == 0 else "user_data"
        ids.append((await gw.upload(f"{i}.txt", f"file {i}", purpose=purpose))["id"])
        gw.clock.advance(1)
    assert await listed_ids(gw) == ids[::-1]  # newest first
    assert await listed_ids(gw, order="asc") == ids
    assert await listed_ids(gw, purpose="user_data") == [ids[3], ids[1]]
    first = (await gw.http.get("/v1/files", params={"limit": 2})).json()
    assert first["object"] == "list"
    assert [f["id"] for f in first["data"]] == [ids[4], ids[3]]
    assert (first["first_id"], first["last_id"], first["has_more"]) == (ids[4], ids[3], True)
    rest = (await gw.http.get("/v1/files", params={"limit": 10, "after": ids[3]})).json()
    assert [f["id"] for f in rest["data"]] == [ids[2], ids[1], ids[0]]
    assert rest["has_more"] is False

    sdk_ids = [f.id async for f in gw.sdk.files.list(limit=2, order="asc")]
    assert sdk_ids == ids
    only = [f.id async for f in gw.sdk.files.list(purpose="assistants")]
    assert only == [ids[4], ids[2], ids[0]]


async def test_list_parameter_errors(gw: FileGateway) -> None:
    for limit in ("0", "10001", "many"):
        assert_error(
            await gw.http.get("/v1/files", params={"limit": limit}),
            400,
            "limit",
            "invalid_value",
            "between 1 and 10000",
        )
    assert (await gw.http.get("/v1/files", params={"limit": 10000})).status_code == 200
    assert_error(
        await gw.http.get("/v1/files", params={"order": "up"}), 400, "order", "invalid_value"
    )
    assert_error(
        await gw.http.get("/v1/files", params={"after": "file-nope"}),
        404,
        "after",
        None,
        "file-nope",
    )


# ------------------------------------------------------------------------------ get / delete


async def test_unknown_files_are_404(gw: FileGateway) -> None:
    for reply in (
        await gw.http.get("/v1/files/file-missing"),
        await gw.http.get("/v1/files/file-missing/content"),
        await gw.http.delete("/v1/files/file-missing"),
    ):
        assert_error(reply, 404, "id", None, "No such File object: file-missing")
    with pytest.raises(openai.NotFoundError):
        await gw.sdk.files.retrieve("file-missing")


async def test_delete(gw: FileGateway) -> None:
    uploaded = await gw.upload("a.txt", "to be deleted")
    kept = await gw.upload("b.txt", "kept")
    deleted = await gw.sdk.files.delete(uploaded["id"])
    assert deleted.model_dump() == {"id": uploaded["id"], "object": "file", "deleted": True}
    assert (await gw.http.get(f"/v1/files/{uploaded['id']}")).status_code == 404
    assert await gw.blobs.get(uploaded["id"]) is None
    assert await listed_ids(gw) == [kept["id"]]


async def test_delete_detaches_the_file_from_vector_stores(gw: FileGateway) -> None:
    uploaded = await gw.upload("herons.txt", "Herons wade in shallow water.")
    other = await gw.upload("owls.txt", "Owls hunt at night.")
    stores = []
    for _ in range(2):
        reply = await gw.http.post(
            "/v1/vector_stores", json={"file_ids": [uploaded["id"], other["id"]]}
        )
        stores.append(reply.json()["id"])
    await gw.ingested()
    assert (await gw.http.delete(f"/v1/files/{uploaded['id']}")).status_code == 200
    for store_id in stores:
        store = (await gw.http.get(f"/v1/vector_stores/{store_id}")).json()
        assert store["file_counts"]["total"] == 1
        assert store["usage_bytes"] == len("Owls hunt at night.")
        reply = await gw.http.get(f"/v1/vector_stores/{store_id}/files/{uploaded['id']}")
        assert reply.status_code == 404
        assert await gw.index.file_chunks(store_id, uploaded["id"], tenant=DEFAULT_TENANT) == []
        found = (
            await gw.http.post(f"/v1/vector_stores/{store_id}/search", json={"query": "herons"})
        ).json()
        assert {hit["file_id"] for hit in found["data"]} <= {other["id"]}
