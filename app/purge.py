"""``respgate purge``: remove the expired responses and conversations now, and print what went.

What expires is ``[retention]`` (``responses_days``, ``conversations_days``), or, with
``--older-than AGE``, responses created and conversations last active more than ``AGE`` ago.
``--dry-run`` prints what a purge would remove and changes nothing. The purge is the one the
gateway runs periodically (``app.store.retention``): safe while gateways run on the database.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import time
from datetime import UTC, datetime
from pathlib import Path

from app.core.retention import PurgeReport, RetentionCutoffs
from app.startup import StartupError, load_config

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` as seconds (argparse type)."""
    found = _AGE.match(text)
    if found is None or float(found[1]) <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: a positive number and a unit, s, m, h, d or w (e.g. 30d)"
        )
    return float(found[1]) * _UNIT_SECONDS[found[2]]


def add_purge_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    purge = sub.add_parser(
        "purge",
        help="remove expired responses and conversations now ([retention] or --older-than)",
        description="Remove the responses and conversations [retention] expires (or those "
        "older than --older-than), with their items that nothing kept lists, their background "
        "jobs and tool sessions, and print what went. Safe while gateways run.",
    )
    purge.add_argument("--config", type=Path, help="TOML configuration file")
    purge.add_argument("--database-url", help="SQLAlchemy URL of the store (default: SQLite)")
    purge.add_argument("--data-dir", type=Path, help="where the default SQLite file lives")
    purge.add_argument(
        "--older-than",
        type=parse_age,
        metavar="AGE",
        help="purge responses created and conversations last active more than AGE ago "
        "(30d, 12h, 90m, 45s, 2w) instead of [retention]'s ages",
    )
    purge.add_argument(
        "--dry-run", action="store_true", help="print what would be removed; change nothing"
    )
    purge.add_argument("--log-level", help="debug, info, warning, error (default warning)")
    purge.set_defaults(func=run_purge)


def run_purge(args: argparse.Namespace) -> int:
    from app.store.migrate import display_url, sqlite_path

    settings = load_config(
        args.config,
        data_dir=args.data_dir,
        database_url=args.database_url,
        log_level=args.log_level or "warning",
    )
    logging.basicConfig(level=settings.log_level.upper())
    now = time.time()
    if args.older_than is not None:
        before = int(now - args.older_than)
        cutoffs = RetentionCutoffs(responses_before=before, conversations_before=before)
    else:
        policy = settings.retention.policy()
        if policy is None:
            raise StartupError(
                "nothing expires: set [retention] responses_days or conversations_days "
                "(RESPGATE_RETENTION__RESPONSES_DAYS ...), or pass --older-than AGE"
            )
        cutoffs = policy.cutoffs(now)
    url = settings.resolved_database_url()
    print(f"database {display_url(url)}: {_what(cutoffs)}")
    path = sqlite_path(url)
    if path is not None and not path.exists():
        print("no database file yet: nothing to purge")
        return 0
    batch_size = settings.retention.purge_batch_size
    report = asyncio.run(_purge(url, cutoffs, dry_run=args.dry_run, batch_size=batch_size))
    if report is None:
        raise StartupError("another process is purging this database now; try again later", 1)
    if report.dry_run:
        print(f"would remove {report.summary(every_kind=True)} (--dry-run: nothing changed)")
    else:
        print(f"removed {report.summary(every_kind=True)}")
    return 0


async def _purge(
    url: str, cutoffs: RetentionCutoffs, *, dry_run: bool, batch_size: int
) -> PurgeReport | None:
    from app.store.engine import create_engine_for
    from app.store.migrate import DatabaseError, prepare_database
    from app.store.retention import SqlRetention
    from app.store.sql_database import SqlDatabase

    try:
        await prepare_database(url, auto_migrate=True)
    except DatabaseError as exc:
        raise StartupError(str(exc), code=1) from None
    db = SqlDatabase(create_engine_for(url), inline_reads=False)
    try:
        return await SqlRetention(db, batch_size=batch_size).purge(cutoffs, dry_run=dry_run)
    finally:
        await db.aclose()


def _what(cutoffs: RetentionCutoffs) -> str:
    parts = []
    if cutoffs.responses_before is not None:
        parts.append(f"responses created before {_instant(cutoffs.responses_before)}")
    if cutoffs.conversations_before is not None:
        parts.append(f"conversations last active before {_instant(cutoffs.conversations_before)}")
    return ", ".join(parts)


def _instant(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
