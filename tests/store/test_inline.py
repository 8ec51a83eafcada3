"""SQLite reads inline (``app.store.inline``): same answers, off the loop when busy or big."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from app.core.tenancy import DEFAULT_TENANT
from app.store import sql_database
from app.store.engine import create_engine_for, create_schema, default_database_url
from app.store.inline import InlineSqliteReader, inline_database_path
from app.store.sql import SqlResponseStore
from tests.store.builders import message, turn


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> Any:
    engine = create_engine_for(default_database_url(tmp_path))
    await create_schema(engine)
    store = SqlResponseStore(engine)
    yield store
    await store.aclose()


class Busy:
    """A sqlite3 connection stand-in that always finds the database busy."""

    calls = 0

    def execute(self, *_: Any) -> Any:
        Busy.calls += 1
        error = sqlite3.OperationalError("database is locked")
        error.sqlite_errorcode = sqlite3.SQLITE_BUSY
        raise error


def test_inline_database_path() -> None:
    assert inline_database_path(make_url("sqlite+aiosqlite:////data/r.db")) == "/data/r.db"
    assert inline_database_path(make_url("sqlite+aiosqlite://")) is None
    assert inline_database_path(make_url("sqlite+aiosqlite:///:memory:")) is None
    assert inline_database_path(make_url("sqlite+aiosqlite:///file:x?mode=ro&uri=true")) is None


async def test_reads_are_inline(sqlite_store: SqlResponseStore) -> None:
    new = turn("x")
    await sqlite_store.save_response(new, tenant=DEFAULT_TENANT)
    reader = sqlite_store.db.inline
    assert reader is not None
    calls: list[str] = []
    original = reader.fetch

    def spy(sql: str, args: Any) -> Any:
        calls.append(sql)
        return original(sql, args)

    reader.fetch = spy  # type: ignore[method-assign]
    stored = await sqlite_store.get_response(new.response["id"], tenant=DEFAULT_TENANT)
    assert stored is not None
    assert (
        await sqlite_store.load_items(stored.checkpoint_ids, tenant=DEFAULT_TENANT) == new.new_items
    )
    assert len(calls) == 2


async def test_busy_database_falls_back_to_aiosqlite(
    sqlite_store: SqlResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    new = turn(
        "x",
        conversation_id=(await sqlite_store.create_conversation({}, [], tenant=DEFAULT_TENANT)).id,
    )
    await sqlite_store.save_response(new, tenant=DEFAULT_TENANT)
    reader = sqlite_store.db.inline
    assert reader is not None
    monkeypatch.setattr(reader, "_connection", lambda: Busy())
    Busy.calls = 0

    stored = await sqlite_store.get_response(new.response["id"], tenant=DEFAULT_TENANT)
    assert stored is not None and stored.response == new.response
    assert (
        await sqlite_store.load_items(stored.checkpoint_ids, tenant=DEFAULT_TENANT) == new.new_items
    )
    assert (
        await sqlite_store.conversation_items(new.conversation_id or "", tenant=DEFAULT_TENANT)
        == new.new_items
    )
    assert Busy.calls == 3


async def test_big_loads_leave_the_loop(
    sqlite_store: SqlResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_database, "INLINE_READ_MAX_IDS", 2)
    items = [message(str(i)) for i in range(3)]
    await sqlite_store.save_response(
        turn(inputs=items[:2], outputs=items[2:]), tenant=DEFAULT_TENANT
    )
    reader = sqlite_store.db.inline
    assert reader is not None
    monkeypatch.setattr(reader, "_connection", lambda: Busy())
    Busy.calls = 0
    ids = [item["id"] for item in items]
    assert await sqlite_store.load_items(ids, tenant=DEFAULT_TENANT) == items  # 3 > 2: not inline
    assert Busy.calls == 0
    assert await sqlite_store.load_items(ids[:2], tenant=DEFAULT_TENANT) == items[:2]
    assert Busy.calls == 1


async def test_inline_connection_is_read_only(tmp_path: Path) -> None:
    engine = create_engine_for(default_database_url(tmp_path))
    await create_schema(engine)
    await engine.dispose()
    reader = InlineSqliteReader(str(tmp_path / "respgate.db"))
    try:
        assert reader.fetch("SELECT count(*) FROM items", ()) == [(0,)]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.fetch("DELETE FROM items", ())
    finally:
        reader.close()
    assert reader.fetch("SELECT 1", ()) is None  # closed: callers use aiosqlite


async def test_inline_reads_can_be_switched_off(tmp_path: Path) -> None:
    store = SqlResponseStore(create_engine_for(default_database_url(tmp_path)), inline_reads=False)
    try:
        assert store.db.inline is None
        await create_schema(store.db.engine)
        new = turn("x")
        await store.save_response(new, tenant=DEFAULT_TENANT)
        assert (
            await store.load_items(new.input_item_ids, tenant=DEFAULT_TENANT) == new.new_items[:1]
        )
    finally:
        await store.aclose()
