"""The ``respgate`` command: ``serve``, ``demo``, ``migrate``, ``keys``, ``purge``, ``record``,
``replay``.

Every start-up failure is one ``respgate: ...`` line on stderr and a non-zero exit status
(:class:`app.startup.StartupError`), never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from pathlib import Path
from typing import get_args

from app import __version__
from app.keys_cli import add_keys_command
from app.logs import configure_logging, uvicorn_log_config
from app.purge import add_purge_command
from app.recording.cassette import QUICKSTART_CASSETTE
from app.settings import LOG_LEVELS, Settings, UpstreamKind
from app.startup import (
    StartupError,
    bind_socket,
    check_environment,
    check_tool_engines,
    load_config,
    read_cassette,
)
from app.workers import workers_refusal

DESCRIPTION = """\
respgate gives any inference server an OpenAI Responses API endpoint. Put it in front of
vLLM, SGLang or OpenAI, or of a server that only speaks chat completions (Ollama, llama.cpp,
TGI), and any OpenAI client talks to POST /v1/responses on respgate: stored responses,
conversations, and tools the gateway runs itself (MCP servers, web search, file search).
"""

EPILOG = """\
examples:
  respgate demo          # try it: a recorded vLLM upstream behind the gateway, no GPU
  respgate serve --upstream-url http://127.0.0.1:8000 --wait-for-upstream 600

Run "respgate COMMAND --help" for a command's options. The README (README.md in the source
tree, also the package's description: "pip show -v respgate") documents the API, the
settings and the tools; config/respgate.example.toml lists every setting with its default.
"""


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every option's default: ``(required)``, ``(default: off)`` for flags, and none
    added when the help text already says what happens by default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or "default" in text or action.default is argparse.SUPPRESS:
            return text
        if action.required:
            return f"{text} (required)"
        if action.default is False:
            return f"{text} (default: off)"
        return f"{text} (default: %(default)s)"


DATABASE_URL_HELP = (
    "SQLAlchemy URL of the store, e.g. postgresql+asyncpg://user:pass@host/db "
    "(default: the SQLite file respgate.db in the data dir)"
)

logger = logging.getLogger(__name__)


def _serve(args: argparse.Namespace) -> int:
    settings = load_config(
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
        access_log=args.access_log,
        workers=args.workers,
        drain_timeout_seconds=args.drain_timeout,
    )
    refusal = workers_refusal(settings.workers, settings.resolved_database_url())
    if refusal is not None:
        raise StartupError(refusal)
    check_environment(settings)
    check_tool_engines(settings)
    _configure_logging(settings.log_level, log_format=settings.log_format)
    sock = bind_socket(settings.host, settings.port)
    try:
        _prepare_to_serve(settings)
    except BaseException:
        sock.close()
        raise
    ready = settings.model_copy(update={"wait_for_upstream": 0.0})
    if settings.workers == 1:
        return _run_gateway(ready, sock)
    from app.workers import metrics_directory, run_workers

    with metrics_directory():  # GET /metrics sums every worker's values
        return run_workers(settings.workers, sock, lambda index: _run_gateway(ready, sock, index))


def _prepare_to_serve(settings: Settings) -> None:
    """The data directory, the database (SQLite migrated, an out-of-date PostgreSQL an error)
    and, with ``--wait-for-upstream``, a ready upstream."""
    from app.startup import wait_until_ready
    from app.store.migrate import DatabaseError, prepare_database_sync

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        prepare_database_sync(settings.resolved_database_url(), auto_migrate=True)
    except DatabaseError as exc:
        raise StartupError(str(exc)) from None
    if settings.wait_for_upstream > 0:
        wait_until_ready(settings)


def upstream_connections(settings: Settings) -> int:
    """The upstream connections one process may hold: every upstream's pool (one without a
    limit, ``max_connections = 0``, as many as the server takes clients)."""
    clients = settings.server.max_connections
    return sum(u.max_connections or clients for u in settings.resolved_upstreams())


def _run_gateway(settings: Settings, sock: socket.socket, worker: int | None = None) -> int:
    """Serve the gateway on ``sock`` until a signal; ``worker``: its index under --workers."""
    from app.main import create_app
    from app.serving import make_server, run_servers

    server = make_server(
        create_app(settings),
        settings.log_level,
        access_log=settings.access_log,
        drain_timeout=settings.drain_timeout_seconds,
        **uvicorn_log_config(settings.log_format),
        connections=settings.server,
        upstream_connections=upstream_connections(settings),
    )
    upstreams = ", ".join(u.url for u in settings.resolved_upstreams())
    who = f"respgate {__version__}" if worker is None else f"respgate worker {worker}"
    address = sock.getsockname()[:2]
    started = run_servers(
        [(server, sock)],
        lambda: _announce(address, f"{who} (pid {os.getpid()}), upstream {upstreams}"),
    )
    if not started:
        raise StartupError("the gateway did not start (the log above says why)", code=1)
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from app.store.migrate import DatabaseError, display_url, upgrade_to_head_sync

    settings = load_config(
        args.config,
        data_dir=args.data_dir,
        database_url=args.database_url,
        log_level=args.log_level,
    )
    _configure_logging(settings.log_level, migrations=True)
    url = settings.resolved_database_url()
    try:
        revision = upgrade_to_head_sync(url)
    except DatabaseError as exc:
        raise StartupError(str(exc), code=1) from None
    print(f"database {display_url(url)} is at revision {revision} (head)")
    return 0


def _record(args: argparse.Namespace) -> int:
    from app.options.urls import check_http_url
    from app.recording.record import create_record_app
    from app.serving import make_server, run_servers

    try:
        check_http_url(args.upstream_url)
    except ValueError as exc:
        raise StartupError(f"--upstream-url: {exc}") from None
    _configure_logging(args.log_level)
    sock = bind_socket(args.host, args.port)
    app = create_record_app(args.upstream_url, args.out, args.upstream_api_key)
    what = f"recording {args.upstream_url} into {args.out}"
    address = sock.getsockname()[:2]
    run_servers([(make_server(app, args.log_level), sock)], lambda: _announce(address, what))
    return 0


def _replay(args: argparse.Namespace) -> int:
    from app.recording.replay import create_replay_app
    from app.serving import make_server, run_servers

    cassette = read_cassette(args.cassette)
    _configure_logging(args.log_level)
    sock = bind_socket(args.host, args.port)
    app = create_replay_app(cassette, strict=args.strict, loop=args.loop, match=args.match)
    what = f"replaying {args.cassette} ({len(cassette.turns)} turns, --match {args.match})"
    address = sock.getsockname()[:2]
    run_servers([(make_server(app, args.log_level), sock)], lambda: _announce(address, what))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from app.demo import DemoOptions, run_demo

    _configure_logging(args.log_level)
    options = DemoOptions(
        cassette=args.cassette or QUICKSTART_CASSETTE,
        host=args.host,
        port=args.port,
        replay_port=args.replay_port,
        data_dir=args.data_dir,
        log_level=args.log_level,
    )
    return run_demo(options)


def _announce(address: tuple[str, int], what: str) -> None:
    """Log where the server listens (``address`` read when the socket was bound: a worker told
    to stop while it starts may have closed its socket already)."""
    host, port = address
    shown = f"[{host}]" if ":" in host else host
    logger.info("%s: listening on http://%s:%s", what, shown, port)


def _configure_logging(level: str, *, migrations: bool = False, log_format: str = "text") -> None:
    """Logging at ``level``, in ``log_format`` (``app.logs``). Below debug, alembic's narration
    is left out (its plugins, "Context impl SQLiteImpl."; app.store.migrate logs which revision
    the database went to), except, with ``migrations``, the revisions it runs (``respgate
    migrate``)."""
    configure_logging(level, log_format)
    if level.lower() != "debug":
        logging.getLogger("alembic").setLevel(logging.INFO if migrations else logging.WARNING)
        logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="respgate",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"respgate {__version__}")
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    _add_serve(sub)
    _add_demo(sub)
    _add_migrate(sub)
    add_keys_command(sub)
    add_purge_command(sub)
    _add_record(sub)
    _add_replay(sub)
    return parser


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve",
        help="run the gateway in front of an inference server",
        description="Run the gateway. Options override RESPGATE_* variables, which override "
        "the --config file.",
    )
    serve.add_argument("--config", type=Path, help="TOML configuration file")
    serve.add_argument("--host", help="bind address (default 127.0.0.1; any other turns [auth] on)")
    serve.add_argument("--port", type=int, help="port (default 9000)")
    serve.add_argument(
        "--upstream-url", help="base URL of the inference server (default http://127.0.0.1:8000)"
    )
    serve.add_argument(
        "--upstream-kind",
        choices=get_args(UpstreamKind),
        help="responses: the server has /v1/responses (default); chat: only /v1/chat/completions",
    )
    serve.add_argument("--upstream-api-key", help="the API key the gateway sends upstream")
    serve.add_argument("--data-dir", type=Path, help="where the gateway writes (default ./data)")
    serve.add_argument("--database-url", help=DATABASE_URL_HELP)
    serve.add_argument(
        "--wait-for-upstream",
        type=float,
        metavar="SECONDS",
        help="wait up to SECONDS for the upstream's health before accepting traffic (default 0)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="processes serving the port; more than 1 needs PostgreSQL (default 1)",
    )
    serve.add_argument(
        "--drain-timeout",
        type=float,
        metavar="SECONDS",
        help="on SIGTERM, how long open requests and streams may finish before they are cut "
        "(default 30)",
    )
    serve.add_argument("--max-body-bytes", type=int, help="request body limit (default 10 MiB)")
    serve.add_argument("--log-level", help="debug, info, warning, error (default info)")
    serve.add_argument(
        "--access-log",
        action="store_true",
        default=None,
        help="log one line per request (refused and failed requests are logged either way)",
    )
    serve.set_defaults(func=_serve)


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser(
        "demo",
        help="try it without a GPU: a recorded upstream and the gateway, in one process",
        description="Start a replay of a cassette and the gateway in front of it, print where "
        "to send requests, and run until Ctrl-C. The default cassette is vLLM serving "
        "openai/gpt-oss-20b, for one prompt.",
        formatter_class=DefaultsHelpFormatter,
    )
    demo.add_argument(
        "--cassette",
        type=Path,
        default=None,
        help="the cassette the upstream replays (default: the bundled quick-start cassette, "
        "vLLM serving openai/gpt-oss-20b)",
    )
    demo.add_argument("--host", default="127.0.0.1", help="the gateway's bind address")
    demo.add_argument("--port", type=int, default=9000, help="the gateway's port")
    demo.add_argument(
        "--replay-port",
        type=int,
        default=0,
        help="the replayed upstream's port on 127.0.0.1 (0: any free port)",
    )
    demo.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the gateway keeps its state (default: a temporary directory, removed on exit)",
    )
    demo.add_argument("--log-level", default="warning", choices=LOG_LEVELS, help="log level")
    demo.set_defaults(func=_demo)


def _add_migrate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    migrate = sub.add_parser(
        "migrate", help="upgrade the database schema (PostgreSQL; serve migrates SQLite itself)"
    )
    migrate.add_argument("--config", type=Path, help="TOML configuration file")
    migrate.add_argument("--database-url", help=DATABASE_URL_HELP)
    migrate.add_argument("--data-dir", type=Path, help="where the default SQLite file lives")
    migrate.add_argument("--log-level", help="debug, info, warning, error (default info)")
    migrate.set_defaults(func=_migrate)


def _add_record(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    record = sub.add_parser(
        "record",
        help="run a proxy that records upstream traffic into a cassette",
        description="Forward every request to the upstream and append each exchange to the "
        "cassette (rewritten after every turn; Ctrl-C keeps what was recorded).",
        formatter_class=DefaultsHelpFormatter,
    )
    record.add_argument("--upstream-url", required=True, help="base URL of the server to record")
    record.add_argument(
        "--out", type=Path, required=True, help="cassette file to write (overwritten)"
    )
    record.add_argument("--host", default="127.0.0.1", help="the proxy's bind address")
    record.add_argument("--port", type=int, default=8001, help="the proxy's port")
    record.add_argument(
        "--upstream-api-key",
        default=None,
        help="sent as Bearer key when a request has no Authorization header (never recorded; "
        "default: none)",
    )
    record.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="log level")
    record.set_defaults(func=_record)


def _add_replay(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    replay = sub.add_parser(
        "replay",
        help="serve a cassette as an upstream",
        description="Answer requests from a recorded cassette, as the recorded server did.",
        formatter_class=DefaultsHelpFormatter,
    )
    replay.add_argument("cassette", type=Path, help="the cassette file (YAML or JSON)")
    replay.add_argument("--host", default="127.0.0.1", help="bind address")
    replay.add_argument("--port", type=int, default=8001, help="port")
    replay.add_argument(
        "--match",
        choices=("content", "order"),
        default="content",
        help="content: answer each request with a turn recorded for the same model and input, "
        "as JSON or SSE as asked, as often as asked; order: answer with the recorded turns in "
        "order, each once",
    )
    replay.add_argument(
        "--strict",
        action="store_true",
        help="answer 409 when a request body differs from the matched turn's recorded body",
    )
    replay.add_argument(
        "--loop",
        action="store_true",
        help="with --match order: start the cassette over once every turn was answered",
    )
    replay.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="log level")
    replay.set_defaults(func=_replay)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except StartupError as exc:
        print(f"respgate: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
