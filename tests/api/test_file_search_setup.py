"""File search on a fresh set-up, the whole app in process (lifespan run): on PostgreSQL as
``respgate migrate`` leaves it (without pgvector where the server lacks it) and on SQLite,
files and vector stores work, the start-up log says which chunk index is used and why, and
with no embedding model a search answers 503 in OpenAI's envelope naming the setting to fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.api.test_conversations import ANSWER, postgres_database
from tests.fakes import FakeUpstream


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'data' / 'respgate.db'}"
    else:
        with postgres_database() as url:  # migrated to head
            yield url


def test_files_work_and_search_says_which_embedding_setting_is_missing(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        upstream_url="http://127.0.0.1:9/v1",
        embeddings_provider="upstream",
    )
    caplog.set_level("INFO", logger="app.store.vector_index.choice")
    with TestClient(create_app(settings, upstream=FakeUpstream(body=ANSWER))) as client:
        uploaded = client.post(
            "/v1/files",
            files={"file": ("notes.txt", b"the harbor opens at six", "text/plain")},
            data={"purpose": "assistants"},
        )
        assert uploaded.status_code == 200, uploaded.text
        store = client.post("/v1/vector_stores", json={"name": "docs"})
        assert store.status_code == 200, store.text
        reply = client.post(
            f"/v1/vector_stores/{store.json()['id']}/search", json={"query": "harbor"}
        )
        fetched = client.get(f"/v1/files/{uploaded.json()['id']}")

    assert fetched.status_code == 200
    assert reply.status_code == 503
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "embeddings_unavailable"
    assert (
        'embeddings_provider (RESPGATE_EMBEDDINGS_PROVIDER) is "upstream" but '
        "embeddings_model (RESPGATE_EMBEDDINGS_MODEL) is not set"
    ) in error["message"]
    if database_url.startswith("postgresql"):
        assert "file search index: " in caplog.text
        assert "pgvector" in caplog.text  # used, or why not
