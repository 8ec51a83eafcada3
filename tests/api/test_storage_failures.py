"""Storage failures, for real, on PostgreSQL: the gateway's database made read-only, then gone
(connections refused), then back. Through the ``openai`` SDK (its default two retries on):

- before anything went upstream (a history to load): 503 ``storage_unavailable``, a safe retry:
  the upstream generated nothing;
- after the generation (the save failed): 503 ``response_not_stored`` with ``x-should-retry:
  false``, so the SDK does not retry: exactly one generation; a stream delivers the answer, then
  ``error`` (same code) and ``response.failed``;
- no message carries the driver's text; ``/ready`` is 503 naming the store while ``/health``
  stays 200; afterwards what was stored is still there and the gateway serves again without a
  restart.

The faults are the database's own switches, on a throwaway database of the test server
(``tests/postgres.py``): ``default_transaction_read_only`` and ``ALLOW_CONNECTIONS``, each with
the gateway's sessions terminated (``pg_terminate_backend``) so its pool meets them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import openai
import pytest
from sqlalchemy.engine import make_url

from app.main import create_app
from app.settings import Settings
from app.store.migrate import upgrade_to_head
from tests.api.upstreams import UpstreamLog, build_upstream
from tests.helpers import serve_in_thread
from tests.postgres import admin_execute, run_in_thread, throwaway_database

# What the driver says; none of it may reach a client.
INTERNAL = ("asyncpg", "sqlalchemy", "read-only transaction", "accepting connections", "Error")


class Gateway:
    def __init__(self, url: str, database: str, log: UpstreamLog) -> None:
        self.url = url
        self.database = database
        self.log = log
        self.sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=2)

    def generations(self) -> int:
        return len(self.log.posts())

    def terminate_sessions(self) -> None:
        admin_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{self.database}' AND pid <> pg_backend_pid()"
        )

    def ready(self) -> httpx.Response:
        return httpx.get(f"{self.url}/ready", timeout=10)


@pytest.fixture
def gateway(tmp_path: object) -> Iterator[Gateway]:
    upstream, log = build_upstream({})
    with throwaway_database("respgate_storage") as database_url:
        run_in_thread(lambda: upgrade_to_head(database_url))
        name = str(make_url(database_url).database)
        with serve_in_thread(upstream) as upstream_url:
            settings = Settings(
                upstream_url=upstream_url,
                database_url=database_url,
                data_dir=str(tmp_path),
                job_signals="none",
            )
            with serve_in_thread(create_app(settings)) as url:
                yield Gateway(url, name, log)
        # The throwaway database is dropped WITH (FORCE) whatever its switches.


def assert_storage_error(exc: openai.APIStatusError, code: str) -> None:
    assert exc.status_code == 503
    assert exc.code == code
    assert exc.type == "server_error"
    assert isinstance(exc.body, dict)
    message = str(exc.body["message"])
    assert not any(text in message for text in INTERNAL), message
    retry = exc.response.headers.get("x-should-retry")
    assert retry == ("false" if code == "response_not_stored" else None)


def stream_events(gateway: Gateway, **body: object) -> list[object]:
    with gateway.sdk.responses.create(model="m", input="hi", stream=True, **body) as stream:
        return list(stream)


def assert_not_stored_stream(events: list[object]) -> None:
    """The whole answer, then ``error`` (response_not_stored) and ``response.failed``."""
    types = [getattr(event, "type", None) for event in events]
    assert "response.output_text.delta" in types
    assert types[-2:] == ["error", "response.failed"], types
    error, failed = events[-2:]
    assert getattr(error, "code", None) == "response_not_stored"
    message = str(getattr(error, "message", ""))
    assert "not stored" in message or "could not be stored" in message
    assert not any(text in message for text in INTERNAL), message
    assert failed.response.status == "failed"  # type: ignore[attr-defined]


def test_read_only_then_gone_then_back(gateway: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    kept = gateway.sdk.responses.create(model="m", input="remember this")
    assert gateway.ready().json()["store"] == "ready"

    # ---- read-only: reads work, saves fail after the generation
    admin_execute(f'ALTER DATABASE "{gateway.database}" SET default_transaction_read_only = on')
    gateway.terminate_sessions()
    ready = gateway.ready()
    assert ready.status_code == 503, ready.text
    assert ready.json()["error"]["code"] == "storage_unavailable"
    assert "store" in ready.json()["error"]["message"]
    assert "read-only" in ready.json()["error"]["message"]
    assert httpx.get(f"{gateway.url}/health").status_code == 200
    assert gateway.sdk.responses.retrieve(kept.id).output_text == kept.output_text

    before = gateway.generations()
    with pytest.raises(openai.InternalServerError) as raised:
        gateway.sdk.responses.create(model="m", input="hi", extra_headers={"x-request-id": "r-1"})
    assert_storage_error(raised.value, "response_not_stored")
    assert gateway.generations() == before + 1  # the SDK did not retry

    before = gateway.generations()
    with pytest.raises(openai.InternalServerError) as raised:
        gateway.sdk.responses.create(model="m", input="more", previous_response_id=kept.id)
    assert_storage_error(raised.value, "response_not_stored")
    assert gateway.generations() == before + 1

    before = gateway.generations()
    assert_not_stored_stream(stream_events(gateway))
    assert gateway.generations() == before + 1
    # ``store: false`` writes nothing: it still works.
    assert gateway.sdk.responses.create(model="m", input="hi", store=False).status == "completed"

    # The cause is logged, once per failure, with the request id; never sent.
    logged = [r for r in caplog.records if "response_not_stored" in r.getMessage()]
    assert any("request_id=r-1" in r.getMessage() and r.exc_info for r in logged)
    assert any("failed mid-stream" in r.getMessage() and r.exc_info for r in logged)

    # ---- gone: no connection can be made
    admin_execute(f'ALTER DATABASE "{gateway.database}" WITH ALLOW_CONNECTIONS false')
    gateway.terminate_sessions()
    ready = gateway.ready()
    assert ready.status_code == 503, ready.text
    assert ready.json()["error"]["code"] == "storage_unavailable"
    assert "not answering" in ready.json()["error"]["message"]
    assert httpx.get(f"{gateway.url}/health").status_code == 200

    before = gateway.generations()
    with pytest.raises(openai.InternalServerError) as raised:
        gateway.sdk.responses.retrieve(kept.id)
    assert_storage_error(raised.value, "storage_unavailable")
    with pytest.raises(openai.InternalServerError) as raised:
        gateway.sdk.responses.create(model="m", input="more", previous_response_id=kept.id)
    assert_storage_error(raised.value, "storage_unavailable")
    with pytest.raises(openai.InternalServerError) as raised:
        stream_events(gateway, previous_response_id=kept.id)
    assert_storage_error(raised.value, "storage_unavailable")
    # Retried by the SDK, and nothing generated: the history could not be loaded.
    assert gateway.generations() == before

    with pytest.raises(openai.InternalServerError) as raised:
        gateway.sdk.responses.create(model="m", input="hi")
    assert_storage_error(raised.value, "response_not_stored")
    assert gateway.generations() == before + 1

    # ---- back: no restart, nothing lost
    admin_execute(f'ALTER DATABASE "{gateway.database}" WITH ALLOW_CONNECTIONS true')
    admin_execute(f'ALTER DATABASE "{gateway.database}" RESET default_transaction_read_only')
    ready = gateway.ready()
    assert ready.status_code == 200, ready.text
    assert gateway.sdk.responses.retrieve(kept.id).output_text == kept.output_text
    follow = gateway.sdk.responses.create(model="m", input="more", previous_response_id=kept.id)
    assert gateway.sdk.responses.retrieve(follow.id).previous_response_id == kept.id

    # ---- the gateway's sessions cut (a server restart): the save goes through on a new one
    gateway.terminate_sessions()
    before = gateway.generations()
    fresh = gateway.sdk.responses.create(model="m", input="after a restart")
    assert gateway.generations() == before + 1
    assert gateway.sdk.responses.retrieve(fresh.id).output_text == fresh.output_text
