"""``respgate demo``: a replayed upstream and the gateway in front of it, in one process.

The replay (content matching, :mod:`app.recording.replay`) listens on the loopback interface,
the gateway on ``--host``/``--port`` with the replay as its upstream and its state in a
temporary directory unless ``--data-dir`` says otherwise. Ctrl-C or SIGTERM stops both.
"""

from __future__ import annotations

import json
import logging
import shlex
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.recording.cassette import Cassette
from app.recording.replay import create_replay_app
from app.serving import make_server, run_servers
from app.settings import Settings
from app.startup import StartupError, bind_socket, load_config, read_cassette, socket_port

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoOptions:
    """What ``respgate demo`` was asked for."""

    cassette: Path
    host: str
    port: int
    replay_port: int
    data_dir: Path | None
    log_level: str


def run_demo(options: DemoOptions) -> int:
    """Start the replay and the gateway, print where to send requests, serve until stopped."""
    cassette = read_cassette(options.cassette)
    replay_sock = bind_socket("127.0.0.1", options.replay_port, flag="--replay-port")
    try:
        gateway_sock = bind_socket(options.host, options.port)
    except StartupError:
        replay_sock.close()
        raise
    replay_url = f"http://127.0.0.1:{socket_port(replay_sock)}"
    with _data_dir(options.data_dir) as data_dir:
        settings = gateway_settings(options, replay_url, data_dir)
        from app.main import create_app

        replay = make_server(create_replay_app(cassette, match="content"), options.log_level)
        gateway = make_server(create_app(settings), options.log_level)
        gateway_url = f"http://{_display_host(options.host)}:{socket_port(gateway_sock)}"

        def announce() -> None:
            print(banner(cassette, options.cassette, gateway_url, replay_url), flush=True)

        started = run_servers([(replay, replay_sock), (gateway, gateway_sock)], announce)
    if not started:
        raise StartupError("the demo did not start (the log above says why)", code=1)
    return 0


def gateway_settings(options: DemoOptions, replay_url: str, data_dir: Path) -> Settings:
    """The gateway's settings: the replay as its upstream, SQLite in ``data_dir``."""
    return load_config(
        None,
        host=options.host,
        port=options.port,
        upstream_url=replay_url,
        data_dir=data_dir,
        database_url=f"sqlite:///{(data_dir / 'respgate.db').as_posix()}",
        log_level=options.log_level,
    )


@contextmanager
def _data_dir(chosen: Path | None) -> Iterator[Path]:
    if chosen is not None:
        chosen.mkdir(parents=True, exist_ok=True)
        yield chosen.absolute()
        return
    with tempfile.TemporaryDirectory(prefix="respgate-demo-") as temporary:
        yield Path(temporary)


def _display_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def banner(cassette: Cassette, path: Path, gateway_url: str, replay_url: str) -> str:
    """Where to send requests, an example, and how to stop."""
    lines = [
        f"respgate demo: the gateway answers at {gateway_url}/v1 (OpenAI base URL),",
        f"in front of a replay of {path} at {replay_url}.",
    ]
    example = example_body(cassette)
    if example is None:
        lines.append("Send it the requests the cassette recorded.")
    else:
        for stream in (False, True):
            body = json.dumps({**example, **({"stream": True} if stream else {})})
            curl = "curl -sN" if stream else "curl -s"
            lines.append(
                f"  {curl} {gateway_url}/v1/responses -H 'content-type: application/json' "
                f"-d {shlex.quote(body)}"
            )
        lines.insert(2, "Try (JSON, then a stream):")
        lines.append(
            "The replay knows only the prompts it recorded; others get a 400 that says so."
        )
    lines.append("Stop it with Ctrl-C.")
    return "\n".join(lines)


def example_body(cassette: Cassette) -> dict[str, str] | None:
    """``model`` and ``input`` of the first recorded ``POST .../responses`` with a text input."""
    for turn in cassette.turns:
        body = turn.request.body
        if turn.request.method != "POST" or not turn.request.path.endswith("/responses"):
            continue
        if isinstance(body, dict) and isinstance(body.get("input"), str):
            model = body.get("model")
            return {"model": str(model), "input": body["input"]} if model else None
    return None
