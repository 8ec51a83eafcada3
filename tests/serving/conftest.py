"""The PostgreSQL database the tests of several gateway processes share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.store.migrate import upgrade_to_head
from tests.postgres import run_in_thread, throwaway_database


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL database at the head revision (skips without PostgreSQL)."""
    with throwaway_database("respgate_drain") as url:
        run_in_thread(lambda: upgrade_to_head(url))
        yield url
