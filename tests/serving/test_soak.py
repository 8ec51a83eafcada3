"""The short soak (tests/serving/soak.py): a real ``respgate serve`` on SQLite, and on
PostgreSQL, takes a few thousand mixed requests (JSON, streams, continuations through
``previous_response_id`` and conversations, retrievals, deletes) at concurrency 32: no errors,
every continuation carried its history to the upstream, every stored response is retrievable
whole, and the database holds exactly those, none half-written. bench/soak.py is the long one."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import gateway_process, serve_in_thread
from tests.serving.soak import SoakUpstream, plan, soak
from tests.serving.support import write_config

REQUESTS = 1500
CONCURRENCY = 32


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'soak.db'}"
    else:
        yield request.getfixturevalue("postgres_url")


def test_mixed_requests_at_concurrency_lose_nothing(tmp_path: Path, database_url: str) -> None:
    upstream = SoakUpstream()
    with serve_in_thread(upstream.app()) as upstream_url:
        config = write_config(tmp_path, upstream_url, database_url=database_url)
        with gateway_process(config) as (gateway, _):
            report = asyncio.run(soak(gateway, upstream_url, database_url, REQUESTS, CONCURRENCY))
    print(report.figures())
    assert report.errors == 0, report.examples
    assert report.requests >= REQUESTS
    assert upstream.bad_history == 0, upstream.examples
    kinds = [kind for kind, _ in plan(REQUESTS)]
    # A chain makes two continuations, a conversation one.
    assert upstream.continuations == 2 * kinds.count("chain") + kinds.count("conversation")
    assert report.verified > REQUESTS // 4
    assert report.database == []
