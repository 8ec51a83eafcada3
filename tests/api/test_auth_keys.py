"""``KeyRing``: the keys of a process, by hash, over a hand-written key table: a burst of
unknown keys costs at most two reads of the table (one at once, one for the requests that came
while it ran), a key added before the burst is found by the first, revoked
keys leave the ring, configured keys stay, and a table that cannot be read leaves the keys of
the last good read (with one warning)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from app.api.auth_keys import KeyOwner, KeyRing
from app.core.api_keys import ApiKeyNotFoundError, ApiKeyRecord, hash_key


class TableOfKeys:
    """An ``ApiKeyStore`` in memory that counts its reads and can be made to fail."""

    def __init__(self) -> None:
        self.records: dict[str, ApiKeyRecord] = {}
        self.reads = 0
        self.failing = False

    def add(self, key: str, tenant: str, key_id: str) -> None:
        self.records[key_id] = ApiKeyRecord(key_id, tenant, "", hash_key(key), key[:10], 1)

    async def add_key(self, record: ApiKeyRecord) -> None:
        self.records[record.id] = record

    async def list_keys(self) -> list[ApiKeyRecord]:
        self.reads += 1
        await asyncio.sleep(0.01)  # a round trip: concurrent misses overlap it
        if self.failing:
            raise OSError("connection refused")
        return list(self.records.values())

    async def revoke_key(self, key_id: str, at: int) -> ApiKeyRecord:
        record = self.records.get(key_id)
        if record is None:
            raise ApiKeyNotFoundError(key_id)
        self.records[key_id] = ApiKeyRecord(
            record.id, record.tenant, record.name, record.key_hash, record.prefix, 1, at
        )
        return self.records[key_id]

    async def aclose(self) -> None:
        return None


async def until(check: Callable[[], bool]) -> None:
    for _ in range(3000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


CONFIGURED = {hash_key("sk-configured-key-000000"): KeyOwner("ops", "key_cfg_1")}


async def test_a_burst_of_unknown_keys_reads_the_table_at_most_twice() -> None:
    table = TableOfKeys()
    ring = KeyRing(CONFIGURED, refresh_seconds=3600)
    async with ring.running(table):
        assert table.reads == 1
        table.add("sk-rg-new", "team-a", "key_1")
        found = await asyncio.gather(
            ring.find(hash_key("sk-rg-new")), *(ring.find(hash_key(f"w{n}")) for n in range(50))
        )
        assert found[0] == KeyOwner("team-a", "key_1")
        assert found[1:] == [None] * 50
        assert table.reads <= 3
        reads = table.reads
        # another unknown key waits for the next allowed read, then reads once
        assert await ring.find(hash_key("sk-rg-other")) is None
        assert table.reads == reads + 1
        configured = await ring.find(hash_key("sk-configured-key-000000"))
        assert configured == KeyOwner("ops", "key_cfg_1")
        assert table.reads == reads + 1  # a known key reads nothing


async def test_revoked_keys_leave_and_configured_keys_stay() -> None:
    table = TableOfKeys()
    table.add("sk-rg-a", "team-a", "key_a")
    table.add("sk-rg-b", "team-b", "key_b")
    ring = KeyRing(CONFIGURED, refresh_seconds=3600)
    async with ring.running(table):
        assert ring.get(hash_key("sk-rg-a")) == KeyOwner("team-a", "key_a")
        await table.revoke_key("key_a", 2)
        await ring.refresh()
        assert ring.get(hash_key("sk-rg-a")) is None
        assert ring.get(hash_key("sk-rg-b")) == KeyOwner("team-b", "key_b")
        assert ring.get(hash_key("sk-configured-key-000000")) is not None
        assert len(ring) == 2


async def test_a_failing_table_keeps_the_last_keys(caplog: pytest.LogCaptureFixture) -> None:
    table = TableOfKeys()
    table.add("sk-rg-a", "team-a", "key_a")
    ring = KeyRing({}, refresh_seconds=0.01)
    caplog.set_level(logging.INFO, logger="app.api.auth_keys")
    async with ring.running(table):
        table.failing = True
        reads = table.reads
        await until(lambda: table.reads >= reads + 3)  # the refresh loop keeps trying
        assert ring.get(hash_key("sk-rg-a")) == KeyOwner("team-a", "key_a")
        table.failing = False
        table.add("sk-rg-b", "team-b", "key_b")
        await until(lambda: ring.get(hash_key("sk-rg-b")) is not None)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "keeping the keys read before" in warnings[0].getMessage()
    assert any("works again" in r.getMessage() for r in caplog.records)
