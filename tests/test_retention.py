"""Retention end to end, through the ``openai`` SDK on SQLite and on a real PostgreSQL:
``respgate purge`` (``--dry-run`` changes nothing and reports; the purge removes an expired
response and leaves the continuation of a kept one whole; a background response goes with
its event log; two tenants with gateway keys each store an item ``msg_1``, and one's expiry
takes its own only), and the gateway's own periodic purge.

Responses are made old by moving their ``created_at`` (and their job's times) back in the
database, so nothing waits on the clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from starlette.testclient import TestClient

from app.cli import main
from app.main import create_app
from app.options.retention import RetentionSettings
from app.settings import Settings, load_settings
from app.store.migrate import upgrade_to_head
from app.store.tables import background_events, background_jobs, responses
from tests.fakes import ScriptedUpstream, message
from tests.helpers import IN_PROCESS_URL, in_process, openai_client
from tests.postgres import run_in_thread, throwaway_database

LONG_AGO = 1_000_000  # 1970: older than any retention
DEADLINE = 30.0
# Two tenants' gateway keys ([auth] keys).
KEYS = {"team-a": "rg-team-a-retention-test-key", "team-b": "rg-team-b-retention-test-key"}


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'respgate.db'}"
        run_in_thread(lambda: upgrade_to_head(url))
        yield url
        return
    with throwaway_database("respgate_retention") as url:
        run_in_thread(lambda: upgrade_to_head(url))
        yield url


def sql(url: str, statement: Any) -> Any:
    """Run one statement on the gateway's database (a scalar result, if any)."""

    async def run() -> Any:
        engine = create_async_engine(url, poolclass=NullPool)
        try:
            async with engine.begin() as conn:
                result = await conn.execute(statement)
                return result.scalar() if result.returns_rows else None
        finally:
            await engine.dispose()

    return run_in_thread(run)


def age(url: str, response_id: str) -> None:
    """Make a response (and its background job, if any) older than any retention."""
    sql(url, update(responses).where(responses.c.id == response_id).values(created_at=LONG_AGO))
    sql(
        url,
        update(background_jobs)
        .where(background_jobs.c.response_id == response_id)
        .values(created_at=LONG_AGO, finished_at=LONG_AGO),
    )


def purge(url: str, capsys: pytest.CaptureFixture[str], *options: str) -> str:
    assert main(["purge", "--database-url", url, *options]) == 0
    return capsys.readouterr().out


def user_texts(request: dict[str, Any]) -> list[str]:
    """The texts of the messages the upstream was sent, in order."""
    texts = []
    for item in request["input"]:
        content = item.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [part["text"] for part in content if "text" in part]
    return texts


def test_purge_removes_an_expired_response_and_keeps_the_continuation_of_a_kept_one(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = ScriptedUpstream([[message("one")], [message("two")], [message("three")]])
    app = create_app(Settings(database_url=database_url), upstream=upstream)
    with in_process(app) as http:
        client = openai_client(http)
        first = client.responses.create(model="m", input="first")
        second = client.responses.create(model="m", input="second", previous_response_id=first.id)
        age(database_url, first.id)

        dry = purge(database_url, capsys, "--older-than", "30d", "--dry-run")
        assert "would remove 1 response, 0 conversations, 0 items, " in dry
        assert client.responses.retrieve(first.id).id == first.id  # the dry run changed nothing

        out = purge(database_url, capsys, "--older-than", "30d")
        assert "removed 1 response, 0 conversations, 0 items, 0 background jobs" in out
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(first.id)
        # The kept response is whole, and continuing from it sends the purged turn's items.
        assert client.responses.retrieve(second.id).output_text == "two"
        listed = client.responses.input_items.list(second.id)
        assert [item.content[0].text for item in listed.data] == ["second"]  # type: ignore[union-attr]
        third = client.responses.create(model="m", input="third", previous_response_id=second.id)
        assert third.output_text == "three"
        assert user_texts(upstream.requests[-1]) == ["first", "one", "second", "two", "third"]

        age(database_url, second.id)
        age(database_url, third.id)
        out = purge(database_url, capsys, "--older-than", "30d")
        assert "removed 2 responses, 0 conversations, 6 items, " in out
        with pytest.raises(openai.BadRequestError, match="not found"):
            client.responses.create(model="m", input="fourth", previous_response_id=third.id)


def client_of(http: TestClient, tenant: str) -> openai.OpenAI:
    """The ``openai`` SDK with ``tenant``'s gateway key."""
    return openai.OpenAI(
        base_url=f"{IN_PROCESS_URL}/v1", api_key=KEYS[tenant], max_retries=0, http_client=http
    )


def user(text: str, item_id: str) -> Any:
    """A user message with a client-chosen id (``Any``: the SDK's item types have no ``id``)."""
    return {"type": "message", "role": "user", "content": text, "id": item_id}


MSG_1: Any = [{"type": "item_reference", "id": "msg_1"}]


def test_purge_takes_one_tenants_expired_msg_1_and_leaves_anothers(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = ScriptedUpstream(
        [[message("A's answer")], [message("B's answer")], [message("B's next")]]
    )
    keys = [{"tenant": tenant, "key": key} for tenant, key in KEYS.items()]
    settings = Settings(database_url=database_url, auth={"mode": "on", "keys": keys})
    with in_process(create_app(settings, upstream=upstream)) as http:
        a, b = client_of(http, "team-a"), client_of(http, "team-b")
        # Each tenant stores its own msg_1 (a conversation keeps client ids), sends it in a
        # response by reference, and deletes the conversation: its response lists it alone.
        first = {}
        for client, words in ((a, "A's words"), (b, "B's words")):
            conversation = client.conversations.create(items=[user(words, "msg_1")])
            first[client] = client.responses.create(model="m", input=MSG_1)
            client.conversations.delete(conversation.id)
        assert user_texts(upstream.requests[1]) == ["B's words"]
        age(database_url, first[a].id)

        dry = purge(database_url, capsys, "--older-than", "30d", "--dry-run")
        assert "would remove 1 response, 0 conversations, 2 items, 0 background jobs, " in dry
        out = purge(database_url, capsys, "--older-than", "30d")
        assert "removed 1 response, 0 conversations, 2 items, 0 background jobs, " in out

        with pytest.raises(openai.NotFoundError):
            a.responses.retrieve(first[a].id)
        with pytest.raises(openai.NotFoundError, match="msg_1"):
            a.responses.create(model="m", input=MSG_1)
        # B's msg_1, and B's response that lists it, are whole; B continues from it.
        listed = b.responses.input_items.list(first[b].id)
        assert [item.id for item in listed.data] == ["msg_1"]
        assert [item.content[0].text for item in listed.data] == ["B's words"]  # type: ignore[union-attr]
        following = b.responses.create(model="m", input="next", previous_response_id=first[b].id)
        assert following.output_text == "B's next"
        assert user_texts(upstream.requests[-1]) == ["B's words", "B's answer", "next"]
        assert len(upstream.requests) == 3


def wait_for(client: openai.OpenAI, response_id: str, status: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while client.responses.retrieve(response_id).status != status:
        assert time.monotonic() < deadline, f"{response_id} never became {status}"
        time.sleep(0.01)


def test_purge_removes_a_background_response_with_its_job_and_event_log(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = ScriptedUpstream([[message("done in the background")], [message("kept")]])
    settings = Settings(database_url=database_url, background_event_retention_minutes=600)
    with in_process(create_app(settings, upstream=upstream)) as http:
        client = openai_client(http)
        expired = client.responses.create(model="m", input="old job", background=True)
        kept = client.responses.create(model="m", input="new job", background=True)
        wait_for(client, expired.id, "completed")
        wait_for(client, kept.id, "completed")
        events = select(func.count()).select_from(background_events)
        logged = sql(database_url, events)
        assert logged > 0
        age(database_url, expired.id)

        out = purge(database_url, capsys, "--older-than", "1d")

        assert "removed 1 response, 0 conversations, 2 items, 1 background job, " in out
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(expired.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(expired.id, stream=True)
        left = select(background_events.c.response_id).distinct()
        assert sql(database_url, left) == kept.id
        assert sql(database_url, events) < logged
        assert client.responses.retrieve(kept.id).output_text == "kept"
        assert list(client.responses.retrieve(kept.id, stream=True))  # its log replays


def test_the_gateway_purges_expired_responses_by_itself(database_url: str) -> None:
    upstream = ScriptedUpstream([[message("to expire")], [message("to keep")]])
    settings = Settings(
        database_url=database_url,
        retention={"responses_days": 30, "purge_interval_minutes": 0.001},
    )
    with in_process(create_app(settings, upstream=upstream)) as http:
        client = openai_client(http)
        expired = client.responses.create(model="m", input="old")
        kept = client.responses.create(model="m", input="new")
        age(database_url, expired.id)
        deadline = time.monotonic() + DEADLINE
        while True:
            try:
                client.responses.retrieve(expired.id)
            except openai.NotFoundError:
                break
            assert time.monotonic() < deadline, "the periodic purge never removed it"
            time.sleep(0.01)
        assert client.responses.retrieve(kept.id).output_text == "to keep"


# --------------------------------------------------------------------------- the command


def test_purge_uses_the_retention_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "respgate.toml"
    config.write_text("[retention]\nresponses_days = 30\nconversations_days = 90\n")
    data = tmp_path / "data"
    monkeypatch.setenv("RESPGATE_DATA_DIR", str(data))
    assert main(["purge", "--config", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "responses created before " in out and "conversations last active before " in out
    assert "no database file yet: nothing to purge" in out
    assert not data.exists()


def test_purge_with_nothing_expiring_says_what_to_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["purge"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("respgate: nothing expires: set [retention] responses_days")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["30", "-1d", "0h", "soon", "3y"])
def test_older_than_must_be_an_age(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["purge", f"--older-than={value}"])
    assert exited.value.code == 2
    assert "is not an age" in capsys.readouterr().err


def test_the_example_configuration_documents_every_retention_key() -> None:
    example = Path(__file__).resolve().parents[1] / "config" / "respgate.example.toml"
    text = example.read_text()
    section = text[text.index("\n[retention]") :]
    for name in RetentionSettings.model_fields:
        assert f"{name} = " in section, f"retention.{name} is not documented"
    assert load_settings(example).retention == RetentionSettings()
