"""Run the npm REST servers (json-server, Prism) as subprocesses on free ports.

``serve_json_server(db)`` serves a JSON file (json-server writes its changes back to it);
``serve_prism(document)`` mocks an OpenAPI document's operations from its examples and
schemas. Each yields the server's base URL and stops the process group afterwards.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from tests.helpers import free_port
from tests.npm import NodeUnavailableError, ensure_npm_package, serve_node

__all__ = [
    "PETSTORE",
    "NodeUnavailableError",
    "ensure_json_server",
    "ensure_prism",
    "serve_json_server",
    "serve_prism",
]

HERE = Path(__file__).resolve().parent
JSON_SERVER_DIR = HERE / "json_server"
JSON_SERVER_ENTRY = JSON_SERVER_DIR / "node_modules" / "json-server" / "lib" / "bin.js"
PRISM_DIR = HERE / "prism"
PRISM_ENTRY = PRISM_DIR / "node_modules" / "@stoplight" / "prism-cli" / "dist" / "index.js"
PETSTORE = HERE / "petstore.yaml"


def ensure_json_server() -> Path:
    return ensure_npm_package(JSON_SERVER_DIR, JSON_SERVER_ENTRY, "the npm REST server json-server")


def ensure_prism() -> Path:
    return ensure_npm_package(PRISM_DIR, PRISM_ENTRY, "the npm OpenAPI mock server Prism")


@contextlib.contextmanager
def _serve(
    entry_point: Path, args: Sequence[str], port: int, name: str, env: Mapping[str, str]
) -> Iterator[str]:
    """``node entry_point args`` (in a scratch folder holding an empty ``public/``, the static
    files json-server serves) until it answers on ``port``; yields its base URL."""
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "public").mkdir()
        argv = [str(entry_point), *args]
        env = {"NO_COLOR": "1", **env}
        with serve_node(argv, port=port, name=name, cwd=Path(scratch), env=env):
            yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def serve_json_server(db: Path) -> Iterator[str]:
    """json-server on 127.0.0.1 serving (and writing back to) the JSON file ``db``."""
    entry_point = ensure_json_server()
    port = free_port()
    args = [str(db), "--host", "127.0.0.1", "--port", str(port)]
    # NODE_ENV=production: json-server does not watch its file, whose reload after its own
    # write can race a later request and put back the data as it was before that request
    # (and its static files' folder, public/, must then exist).
    env = {"NODE_ENV": "production"}
    with _serve(entry_point, args, port, "json-server", env) as url:
        yield url


@contextlib.contextmanager
def serve_prism(document: Path = PETSTORE) -> Iterator[str]:
    """Prism mocking ``document``'s operations on 127.0.0.1 (static examples, so answers are
    reproducible)."""
    entry_point = ensure_prism()
    port = free_port()
    args = ["mock", str(document), "--host", "127.0.0.1", "--port", str(port)]
    with _serve(entry_point, args, port, "Prism", {}) as url:
        yield url
