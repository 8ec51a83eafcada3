"""Start-up checks of the CLI, each failing with one :class:`StartupError` line a user can act on.

The checks run before any server starts: reading the configuration (TOML syntax, validation),
the environment variables the configuration names, the listening sockets, the upstream's
readiness (``--wait-for-upstream``) and the cassette a replay serves.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import socket
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from app.main import build_upstream
from app.options.secrets import SecretFileError, secret_environ
from app.recording.cassette import Cassette, CassetteError, load_cassette
from app.settings import Settings, load_settings
from app.tool_engines import build_tool_engines

_TOML_POSITION = re.compile(r"^(?P<message>.*?)\s*\(at line (?P<line>\d+), column (?P<col>\d+)\)$")


class StartupError(Exception):
    """A reason the command cannot start, as one line for the user (exit status ``code``)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(" ".join(message.split()))
        self.code = code


def load_config(config_file: Path | None, **overrides: Any) -> Settings:
    """:func:`load_settings`, with every way it can fail turned into a StartupError."""
    try:
        return load_settings(config_file, **overrides)
    except SecretFileError as exc:
        raise StartupError(str(exc)) from None
    except FileNotFoundError:
        raise StartupError(f"config file not found: {config_file}") from None
    except tomllib.TOMLDecodeError as exc:
        raise StartupError(toml_error_message(config_file, exc)) from None
    except ValidationError as exc:
        where = f" in {config_file}" if config_file is not None else ""
        raise StartupError(f"invalid configuration{where}: {validation_summary(exc)}") from None
    except SettingsError as exc:  # a RESPGATE_* variable that should hold JSON does not
        cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
        raise StartupError(f"invalid configuration: {exc}{cause}") from None


def toml_error_message(config_file: Path | None, exc: tomllib.TOMLDecodeError) -> str:
    """``config file F, line L, column C: what is wrong``."""
    text = str(exc)
    found = _TOML_POSITION.match(text)
    if found is None:
        return f"config file {config_file} is not valid TOML: {text}"
    return (
        f"config file {config_file}, line {found['line']}, column {found['col']}: "
        f"not valid TOML: {found['message']}"
    )


def validation_summary(exc: ValidationError) -> str:
    """Every validation error as ``key.path: message``, joined with ``; ``."""
    parts = []
    for error in exc.errors():
        location = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)


def check_environment(settings: Settings) -> None:
    """Every environment variable the configuration names (``api_key_env`` of
    ``[[upstreams]]``, ``headers_from_env`` of MCP servers, ``key_env`` of ``[[auth.keys]]``)
    is set, or its ``_FILE`` variable names a file that can be read."""
    environ = secret_environ()
    try:
        settings.auth.key_hashes(environ)
        for upstream in settings.resolved_upstreams():
            upstream.resolved_api_key(environ)
        for server in settings.mcp.servers:
            server.to_spec(environ)
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    if settings.tracing.enabled and importlib.util.find_spec("opentelemetry.sdk") is None:
        raise StartupError("[tracing] needs the otel extra: pip install 'respgate[otel]'")


def check_tool_engines(settings: Settings) -> None:
    """The configured tool engines can be built and every tool set's file read and checked:
    a mistake is one line naming the engine, the file and the field, before the server
    starts."""
    if not settings.tool_engines and not settings.tool_sets:
        return

    async def build() -> None:
        upstream = build_upstream(settings)
        try:
            engines = build_tool_engines(settings, upstream=upstream)
            await engines.resources.aclose()
        finally:
            await upstream.aclose()

    try:
        asyncio.run(build())
    except ValueError as exc:
        raise StartupError(str(exc)) from None


def bind_socket(host: str, port: int, flag: str = "--port") -> socket.socket:
    """A socket bound to ``host:port`` (the server listens on it), or a StartupError that says
    the port is taken (``flag`` names the option that chooses another)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        hint = f"; choose another port with {flag}" if exc.errno in _IN_USE else ""
        raise StartupError(f"cannot listen on {host}:{port}: {reason}{hint}") from None
    return sock


_IN_USE = {98, 48, 10048}  # EADDRINUSE on Linux, macOS, Windows


def socket_port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


def wait_until_ready(settings: Settings) -> None:
    """``--wait-for-upstream``: wait for every upstream's health, or a StartupError."""
    from app.main import UpstreamNotReadyError, build_upstream, wait_for_upstream

    async def wait() -> None:
        upstream = build_upstream(settings)
        urls = ", ".join(u.url for u in settings.resolved_upstreams())
        try:
            await wait_for_upstream(upstream, settings.wait_for_upstream, urls)
        finally:
            await upstream.aclose()

    try:
        asyncio.run(wait())
    except UpstreamNotReadyError as exc:
        raise StartupError(
            f"{exc}; is the inference server running at that URL? (its /health or /v1/models "
            "must answer)",
            code=1,
        ) from None


def read_cassette(path: Path) -> Cassette:
    """The cassette at ``path``, or a StartupError naming what is wrong with it."""
    if not path.is_file():
        raise StartupError(f"cassette not found: {path}")
    try:
        cassette = load_cassette(path)
    except CassetteError as exc:
        raise StartupError(str(exc)) from None
    if not cassette.turns:
        raise StartupError(f"cassette {path} has no turns to replay")
    return cassette
