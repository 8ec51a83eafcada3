"""``respgate keys create / list / revoke`` as real processes, on SQLite and on a real
PostgreSQL, and a real ``respgate serve`` that accepts a key made so and refuses it once it is
revoked; the start-up line that says whether authentication is on (``[auth] mode = "auto"``:
off on 127.0.0.1, on for 0.0.0.0, with a warning when nothing can be accepted)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.settings import Settings
from tests.api.auth_gateways import eventually
from tests.api.upstreams import completed_response
from tests.helpers import free_port, responses_app, serve_in_thread
from tests.postgres import throwaway_database

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 120


def respgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None: the embedded SQLite file (RESPGATE_DATA_DIR, tests/conftest.py); else a migrated
    PostgreSQL database."""
    if request.param == "sqlite":
        yield None
        return
    with throwaway_database("respgate_keys") as url:
        migrated = respgate("migrate", "--database-url", url)
        assert migrated.returncode == 0, migrated.stderr
        yield url


@pytest.fixture
def upstream() -> Iterator[str]:
    async def infer(request: Request) -> Response:
        return JSONResponse(completed_response("from the upstream"))

    with serve_in_thread(responses_app(infer)) as url:
        yield url


def write_config(path: Path, upstream: str, database_url: str | None, **auth: str) -> Path:
    lines = [f'upstream_url = "{upstream}"']
    if database_url is not None:
        lines.append(f'database_url = "{database_url}"')
    lines.append("[auth]")
    lines += [f"{key} = {value}" for key, value in auth.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def create_key(config: Path, tenant: str, name: str = "") -> tuple[str, str]:
    made = respgate("keys", "create", "--config", str(config), "--tenant", tenant, "--name", name)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    found = re.search(r"created (key_[0-9a-f]+) for tenant", made.stderr)
    assert found is not None, made.stderr
    return key, found[1]


def stored_rows(database_url: str | None) -> list[tuple[object, ...]]:
    url = database_url or Settings().resolved_database_url()

    async def read() -> list[tuple[object, ...]]:
        engine = create_async_engine(url, poolclass=NullPool)
        try:
            async with engine.connect() as connection:
                rows = await connection.execute(text("SELECT * FROM api_keys"))
                return [tuple(row) for row in rows]
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_create_list_revoke(tmp_path: Path, database_url: str | None) -> None:
    config = write_config(tmp_path / "respgate.toml", "http://127.0.0.1:9", database_url)
    key, key_id = create_key(config, "team-a", "ci")
    assert re.fullmatch(r"sk-rg-[A-Za-z0-9_-]{43}", key)
    other, other_id = create_key(config, "team-b")
    assert other != key

    listed = respgate("keys", "list", "--config", str(config))
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["ID", "TENANT", "NAME", "PREFIX", "CREATED", "REVOKED"]
    assert [row.split()[:4] for row in rows] == [
        [key_id, "team-a", "ci", key[:10] + "..."],
        [other_id, "team-b", "-", other[:10] + "..."],
    ]
    assert [row.split()[-1] for row in rows] == ["-", "-"]
    assert key not in listed.stdout and other not in listed.stdout

    # only the hash and the display prefix are stored
    stored = stored_rows(database_url)
    assert len(stored) == 2
    assert key not in repr(stored) and other not in repr(stored)
    assert hashlib.sha256(key.encode()).hexdigest() in repr(stored)

    revoked = respgate("keys", "revoke", key_id, "--config", str(config))
    assert revoked.returncode == 0, revoked.stderr
    assert f"{key_id} (tenant 'team-a') revoked at" in revoked.stdout
    rows = respgate("keys", "list", "--config", str(config)).stdout.splitlines()[1:]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rows[0].split()[-1])
    assert rows[1].split()[-1] == "-"

    unknown = respgate("keys", "revoke", "key_nope", "--config", str(config))
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == (
        "respgate: no key has the id 'key_nope' (see respgate keys list)"
    )
    bad = respgate("keys", "create", "--config", str(config), "--tenant", "two words")
    assert bad.returncode == 2 and "--tenant" in bad.stderr


def test_keys_on_an_unmigrated_postgresql_say_to_migrate() -> None:
    with throwaway_database("respgate_keys") as url:
        listed = respgate("keys", "list", "--database-url", url)
    assert listed.returncode == 1
    assert listed.stderr.startswith("respgate: ")
    assert "respgate migrate" in listed.stderr
    assert "Traceback" not in listed.stderr


@contextlib.contextmanager
def serving(log: Path, *args: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``respgate serve`` on a free port, its output in ``log``, once /health answers."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port), *args],
            cwd=ROOT,
            env=os.environ.copy(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            assert eventually(lambda: _healthy(url) or proc.poll() is not None, 60)
            assert proc.poll() is None, log.read_text()
            yield url, proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_serve_accepts_a_created_key_and_refuses_it_after_revoke(
    tmp_path: Path, database_url: str | None, upstream: str
) -> None:
    config = write_config(
        tmp_path / "respgate.toml", upstream, database_url, mode='"on"', refresh_seconds="0.2"
    )
    with serving(tmp_path / "serve.log", "--config", str(config)) as (url, _):
        anonymous = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-nobody", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            anonymous.responses.create(model="m", input="hi")
        key, key_id = create_key(config, "team-a", "laptop")
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
        assert client.responses.create(model="m", input="hi").output_text == "from the upstream"
        assert respgate("keys", "revoke", key_id, "--config", str(config)).returncode == 0
        refused = lambda: _status(url, key) == 401  # noqa: E731
        assert eventually(refused)
        with pytest.raises(openai.AuthenticationError):
            client.responses.create(model="m", input="hi")
    log = (tmp_path / "serve.log").read_text()
    assert "authentication on: [auth] mode is on" in log
    assert key not in log


def _status(url: str, key: str) -> int:
    response = httpx.post(
        f"{url}/v1/responses",
        json={"model": "m", "input": "hi"},
        headers={"authorization": f"Bearer {key}"},
        timeout=10,
    )
    return response.status_code


def test_auto_mode_says_why_at_start_up(tmp_path: Path, upstream: str) -> None:
    log = tmp_path / "open.log"
    with serving(log, "--host", "0.0.0.0", "--upstream-url", upstream) as (url, _):
        assert _status(url, "sk-anything") == 401
        assert httpx.get(f"{url}/ready", timeout=10).status_code == 200
    output = log.read_text()
    assert "authentication on: bound to 0.0.0.0" in output
    assert "no API key or JWT issuer is configured: every request answers 401" in output
    assert "respgate keys create --tenant" in output

    log = tmp_path / "loopback.log"
    with serving(log, "--host", "127.0.0.1", "--upstream-url", upstream) as (url, _):
        assert _status(url, "sk-anything") == 200
    assert "authentication off: bound to 127.0.0.1 (loopback only)" in log.read_text()
