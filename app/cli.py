"""``respgate serve | migrate | record | replay``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pydantic import ValidationError

from app.settings import Settings, load_settings


def _serve(args: argparse.Namespace) -> int:
    from app.store.migrate import DatabaseError, prepare_database_sync

    try:
        settings = load_settings(
            args.config,
            host=args.host,
            port=args.port,
            upstream_url=args.upstream_url,
            upstream_kind=args.upstream_kind,
            upstream_api_key=args.upstream_api_key,
            data_dir=args.data_dir,
            database_url=args.database_url,
            wait_for_upstream=args.wait_for_upstream,
            max_body_bytes=args.max_body_bytes,
            log_level=args.log_level,
        )
    except (ValidationError, FileNotFoundError) as exc:
        print(f"respgate: invalid configuration: {exc}", file=sys.stderr)
        return 2
    _configure_logging(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        # The embedded SQLite database is migrated; an out-of-date PostgreSQL one is an error.
        prepare_database_sync(settings.resolved_database_url(), auto_migrate=True)
    except DatabaseError as exc:
        print(f"respgate: {exc}", file=sys.stderr)
        return 2

    import uvicorn

    from app.main import create_app

    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from app.store.migrate import DatabaseError, display_url, upgrade_to_head_sync

    try:
        settings = load_settings(
            args.config,
            data_dir=args.data_dir,
            database_url=args.database_url,
            log_level=args.log_level,
        )
    except (ValidationError, FileNotFoundError) as exc:
        print(f"respgate: invalid configuration: {exc}", file=sys.stderr)
        return 2
    _configure_logging(settings)
    url = settings.resolved_database_url()
    try:
        revision = upgrade_to_head_sync(url)
    except DatabaseError as exc:
        print(f"respgate: {exc}", file=sys.stderr)
        return 1
    print(f"database {display_url(url)} is at revision {revision} (head)")
    return 0


def _record(args: argparse.Namespace) -> int:
    from app.recording.record import serve_record

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    serve_record(args.upstream_url, args.out, args.host, args.port, args.upstream_api_key)
    return 0


def _replay(args: argparse.Namespace) -> int:
    from app.recording.replay import serve_replay

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if not args.cassette.is_file():
        print(f"respgate: cassette not found: {args.cassette}", file=sys.stderr)
        return 2
    serve_replay(args.cassette, args.host, args.port, args.strict, args.loop)
    return 0


def _configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


DATABASE_URL_HELP = (
    "SQLAlchemy URL of the store, e.g. postgresql+asyncpg://user:pass@host/db "
    "(default: the SQLite file respgate.db in the data dir)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="respgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", type=Path, help="TOML configuration file")
    serve.add_argument("--host", help="bind address (default 0.0.0.0)")
    serve.add_argument("--port", type=int, help="port (default 9000)")
    serve.add_argument("--upstream-url", help="base URL of the inference server")
    serve.add_argument(
        "--upstream-kind",
        choices=("responses", "chat"),
        help="responses: the server has /v1/responses (default); chat: only /v1/chat/completions",
    )
    serve.add_argument("--upstream-api-key", help="API key sent upstream when the client sent none")
    serve.add_argument("--data-dir", type=Path, help="where the gateway writes (default ./data)")
    serve.add_argument("--database-url", help=DATABASE_URL_HELP)
    serve.add_argument(
        "--wait-for-upstream",
        type=float,
        metavar="SECONDS",
        help="wait up to SECONDS for the upstream's health before accepting traffic",
    )
    serve.add_argument("--max-body-bytes", type=int, help="request body limit (default 10 MiB)")
    serve.add_argument("--log-level", help="debug, info, warning, error")
    serve.set_defaults(func=_serve)

    migrate = sub.add_parser("migrate", help="upgrade the database schema to the latest revision")
    migrate.add_argument("--config", type=Path, help="TOML configuration file")
    migrate.add_argument("--database-url", help=DATABASE_URL_HELP)
    migrate.add_argument("--data-dir", type=Path, help="where the default SQLite file lives")
    migrate.add_argument("--log-level", help="debug, info, warning, error")
    migrate.set_defaults(func=_migrate)

    record = sub.add_parser("record", help="run a proxy that records upstream traffic")
    record.add_argument("--upstream-url", required=True)
    record.add_argument("--out", type=Path, required=True, help="cassette file to write")
    record.add_argument("--host", default="127.0.0.1")
    record.add_argument("--port", type=int, default=8001)
    record.add_argument("--upstream-api-key")
    record.set_defaults(func=_record)

    replay = sub.add_parser("replay", help="serve a cassette as an upstream")
    replay.add_argument("cassette", type=Path)
    replay.add_argument("--host", default="127.0.0.1")
    replay.add_argument("--port", type=int, default=8001)
    replay.add_argument(
        "--strict", action="store_true", help="answer 409 when a request differs from the recording"
    )
    replay.add_argument(
        "--loop", action="store_true", help="start the cassette over once every turn was answered"
    )
    replay.set_defaults(func=_replay)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
