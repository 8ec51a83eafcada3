"""The key that signs compaction items, shared by replicas: ``compaction_key`` (env
``RESPGATE_COMPACTION_KEY``) or, unset, ``data_dir/compaction.key``. A compaction item made by
one gateway with key K is accepted by another gateway with K (another data_dir, as another
machine has) and refused with a clear 400 by one with another key; the key is never shown."""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
from pydantic import ValidationError

from app.compaction_key import compaction_codec
from app.core.compaction import CompactionCodec
from app.main import create_app
from app.settings import Settings, load_settings
from tests.api.test_compaction import MODEL, SUMMARY, SummarizingUpstream
from tests.helpers import in_process, openai_client, serve_in_thread

KEY = "k" * 16 + "-shared-by-every-replica"
OTHER_KEY = "another-key-of-another-deployment"


def _replica(url: str, data_dir: Path, key: str | None) -> Settings:
    return Settings(upstream_url=url, data_dir=data_dir, compaction_key=key)


def _compacted_input(client: openai.OpenAI) -> list[Any]:
    first = client.responses.create(model=MODEL, input="My name is Ada.")
    compacted = client.responses.compact(model=MODEL, previous_response_id=first.id)
    items = [item.model_dump(exclude_none=True, warnings=False) for item in compacted.output]
    return [*items, {"role": "user", "content": "What is my name?"}]


def test_a_compaction_item_of_one_replica_is_accepted_by_another_with_the_same_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = SummarizingUpstream()
    caplog.set_level(logging.DEBUG)
    with serve_in_thread(server.app()) as url:
        with in_process(create_app(_replica(url, tmp_path / "a", KEY))) as http:
            carried = _compacted_input(openai_client(http))

        # The second replica reads its key from the environment, as a deployment sets it.
        monkeypatch.setenv("RESPGATE_COMPACTION_KEY", KEY)
        second = load_settings(upstream_url=url, data_dir=tmp_path / "b")
        with in_process(create_app(second)) as http:
            answer = openai_client(http).responses.create(model=MODEL, input=carried)
        assert answer.status == "completed"
        assert SUMMARY in json.dumps(server.requests[-1])  # the summary reached the model

        with in_process(create_app(_replica(url, tmp_path / "c", OTHER_KEY))) as http:
            calls = len(server.requests)
            with pytest.raises(openai.BadRequestError) as refused:
                openai_client(http).responses.create(model=MODEL, input=carried)
        assert len(server.requests) == calls  # refused before anything went upstream

    error: Any = refused.value.body
    assert error["code"] == "invalid_encrypted_content"
    assert error["param"] == "input[1].encrypted_content"
    assert "written under another key" in error["message"]
    # With a configured key no key file is made; the key is never logged nor shown.
    assert not (tmp_path / "a" / "compaction.key").exists()
    assert KEY not in caplog.text and OTHER_KEY not in caplog.text
    assert KEY not in repr(second) and KEY not in str(second.model_dump())


def test_without_a_key_the_data_dir_file_is_the_key(tmp_path: Path) -> None:
    """Unset, the key lives in data_dir: a replica with another data_dir has another key."""
    server = SummarizingUpstream()
    with serve_in_thread(server.app()) as url:
        with in_process(create_app(_replica(url, tmp_path / "a", None))) as http:
            carried = _compacted_input(openai_client(http))
        assert (tmp_path / "a" / "compaction.key").is_file()
        other = create_app(_replica(url, tmp_path / "b", None))
        with in_process(other) as http, pytest.raises(openai.BadRequestError) as refused:
            openai_client(http).responses.create(model=MODEL, input=carried)
    assert refused.value.body["code"] == "invalid_encrypted_content"  # type: ignore[index]


def test_a_short_key_is_refused_at_start() -> None:
    with pytest.raises(ValidationError, match="at least 16 bytes"):
        Settings(compaction_key="short")


def test_workers_starting_together_all_read_the_one_whole_key(tmp_path: Path) -> None:
    """``respgate serve --workers N`` starts N processes on one data_dir at once: each one that
    finds no key file makes one, and every one must read the same whole key (a worker that read
    a half-written file failed to start). Threads stand in for the processes."""
    for round_ in range(20):
        settings = _replica("http://127.0.0.1:9", tmp_path / str(round_), None)
        start = threading.Barrier(8)
        with ThreadPoolExecutor(8) as pool:
            codecs = list(pool.map(_open_codec, [(start, settings)] * 8))
        sealed = codecs[0].seal("the summary")
        assert all(codec.open(sealed) == "the summary" for codec in codecs)
        key = settings.data_dir / "compaction.key"
        assert len(key.read_text()) == 64
        assert key.stat().st_mode & 0o777 == 0o600
        assert [path.name for path in settings.data_dir.iterdir()] == ["compaction.key"]


def _open_codec(task: tuple[threading.Barrier, Settings]) -> CompactionCodec:
    start, settings = task
    start.wait()
    return compaction_codec(settings)
