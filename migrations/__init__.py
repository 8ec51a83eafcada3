"""Alembic migrations of the respgate store (schema: ``app.store.tables``).

A package so that it ships in the wheel: ``app.store.migrate`` points Alembic's
``script_location`` at this directory, wherever respgate is installed. Run them with
``respgate migrate``; ``alembic`` with the repository's alembic.ini works too, for developers.
"""

from __future__ import annotations

from pathlib import Path

SCRIPT_LOCATION = Path(__file__).resolve().parent
