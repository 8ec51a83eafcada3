"""The sweep of a purge's items (``app.store.retention``, whose docstring says what goes and why).

The steps hand the sweep the items of what they remove (``add``, in the transaction that
removes them): a real purge writes them to ``purge_candidates`` there, so that a purge
interrupted before its sweep (another process took the lock, the gateway stopped) leaves them
to the next purge; a dry run keeps them in memory. ``sweep`` then takes the candidates
``PASS_KEYS`` at a time (the table's, by key, and a dry run's own), checks which ones a
stored response or conversation of their tenant lists with one pass over every stored
checkpoint in a read-only snapshot, and deletes the others in transactions of ``batch_size``
keys, each checking again first the responses created since the pass began and the
conversations. A candidate row goes once it is swept, listed or not, but only as the sweep read
it: one that another purge wrote again meanwhile (``token``) waits for the next sweep.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select, true, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.retention import PurgeReport
from app.store.retention_sql import Key, PurgeSql, ids_value, keys_value
from app.store.tables import items, purge_candidates

# A purge sweeps when this many candidates were added (and after its steps); one pass over
# the stored checkpoints takes up to ``PASS_KEYS`` of them (bounded memory), so that a sweep
# is one pass even with some left over from an earlier purge.
SWEEP_KEYS = 50_000
PASS_KEYS = 2 * SWEEP_KEYS
# How long before a sweep's pass began a response saved during the sweep may have been
# created (the clocks of several gateways): such responses are checked again.
CLOCK_SKEW_SECONDS = 60


class Gone:
    """What a dry run has counted as removed so far (a real purge deletes it instead): left out
    of the references later batches and sweeps see."""

    def __init__(self) -> None:
        self.responses: list[str] = []
        self.conversations: list[str] = []
        self.items: set[Key] = set()
        self.sessions: set[Key] = set()

    def values(self) -> dict[str, str]:
        return {
            "gone": ids_value(self.responses),
            "gone_conversations": ids_value(self.conversations),
        }


class ItemSweep:
    """The candidate items of one purge, and their sweep."""

    def __init__(self, sql: PurgeSql, report: PurgeReport, gone: Gone, *, batch_size: int) -> None:
        self.sql = sql
        self.report = report
        self.dry_run = report.dry_run
        self.gone = gone
        self.size = batch_size
        # A dry run's candidates; a real purge's are rows of ``purge_candidates``.
        self.pending: set[Key] = set()
        # Candidates added since the last sweep.
        self.added = 0
        # Transactions the sweeps used.
        self.transactions = 0

    async def add(self, conn: AsyncConnection, keys: set[Key]) -> None:
        """Make ``keys`` candidates, in the transaction that removed what listed them."""
        if self.dry_run:
            self.pending |= keys - self.gone.items
        elif keys:
            values = {"keys": keys_value(sorted(keys)), "token": secrets.token_hex(8)}
            await conn.execute(self.sql.add_candidates(), values)
        self.added += len(keys)

    @property
    def due(self) -> bool:
        return self.added >= SWEEP_KEYS

    async def sweep(self) -> None:
        """Sweep every candidate: a dry run's own first, then the table's."""
        self.added = 0
        mine = sorted(self.pending - self.gone.items)
        self.pending = set()
        for start in range(0, len(mine), PASS_KEYS):
            chunk = mine[start : start + PASS_KEYS]
            async with self.sql.snapshot() as conn:
                listed = await self._referenced(conn, chunk)
            await self._remove(chunk, listed, None, began=int(time.time()))
        after: Key | None = None
        while True:
            began = int(time.time())
            async with self.sql.snapshot() as conn:
                tokens = await self._candidates(conn, after)
                chunk = [key for key in tokens if key not in self.gone.items]
                listed = await self._referenced(conn, chunk)
            await self._remove(chunk, listed, tokens, began=began)
            if len(tokens) < PASS_KEYS:
                return
            after = list(tokens)[-1]

    async def _candidates(self, conn: AsyncConnection, after: Key | None) -> dict[Key, str]:
        """The next ``PASS_KEYS`` rows of ``purge_candidates`` after the key ``after``: their
        tokens by key."""
        table = purge_candidates.c
        key = tuple_(table.tenant, table.item_id)
        result = await conn.execute(
            select(table.tenant, table.item_id, table.token)
            .where(key > tuple_(*after) if after else true())
            .order_by(table.tenant, table.item_id)
            .limit(PASS_KEYS)
        )
        return {(str(row[0]), str(row[1])): str(row[2]) for row in result}

    async def _remove(
        self, chunk: list[Key], listed: set[Key], tokens: dict[Key, str] | None, *, began: int
    ) -> None:
        """Delete the items of ``chunk`` not ``listed``, ``size`` keys a transaction, with
        their candidate rows (``tokens``: as read) in the same one."""
        for start in range(0, len(chunk), self.size):
            batch = chunk[start : start + self.size]
            unlisted = [key for key in batch if key not in listed]
            async with self.sql.transaction(self.dry_run) as conn:
                doomed = unlisted
                if not self.dry_run and unlisted:
                    since = began - CLOCK_SKEW_SECONDS
                    again = await self._referenced(conn, unlisted, since=since)
                    doomed = [key for key in unlisted if key not in again]
                self.report.items += await self._delete_items(conn, doomed)
                if tokens is not None and not self.dry_run:
                    await self._forget(conn, [(key, tokens[key]) for key in batch])
            self.transactions += 1
            if self.dry_run:
                self.gone.items.update(unlisted)

    async def _delete_items(self, conn: AsyncConnection, keys: Sequence[Key]) -> int:
        if not keys:
            return 0
        where = self.sql.in_keys(items.c.tenant, items.c.id, name="keys")
        values = {"keys": keys_value(keys)}
        if self.dry_run:
            return len(
                await self._keys(conn, select(items.c.tenant, items.c.id).where(where), values)
            )
        result = await conn.execute(delete(items).where(where), values)
        return int(result.rowcount or 0)

    async def _forget(self, conn: AsyncConnection, rows: list[tuple[Key, str]]) -> None:
        """Delete these candidate rows, if they still have the token they were read with."""
        if rows:
            table = purge_candidates.c
            where = self.sql.in_keys(table.tenant, table.item_id, table.token, name="rows")
            values = {"rows": keys_value([(*key, token) for key, token in rows])}
            await conn.execute(delete(purge_candidates).where(where), values)

    async def _referenced(
        self, conn: AsyncConnection, keys: list[Key], *, since: int | None = None
    ) -> set[Key]:
        """The ``keys`` that a response (every one, or those created ``since``) or a
        conversation of their tenant lists, but for what a dry run counted as gone."""
        if not keys:
            return set()
        values = {"keys": keys_value(keys), **self.gone.values()}
        found = await self._keys(conn, self.sql.in_checkpoints(since=since), values)
        return found | await self._keys(conn, self.sql.in_conversations(), values)

    async def _keys(
        self, conn: AsyncConnection, statement: Any, values: dict[str, str]
    ) -> set[Key]:
        return {(str(row[0]), str(row[1])) for row in await conn.execute(statement, values)}
