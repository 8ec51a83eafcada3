"""file_search end to end: the openai SDK uploads files, builds a vector store, and asks.

Real parts: the gateway on a socket, its SQLite store and embedded index, the local embedding
model (``respgate[embeddings]``), and the shared recording of gpt-oss on vLLM calling a
``file_search`` function, replayed as the upstream.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from app.files.embeddings import local_embeddings_installed
from app.main import create_app
from app.recording.cassette import load_cassette
from app.recording.replay import create_replay_app
from app.settings import Settings
from tests.fakes import ScriptedUpstream, function_call, message
from tests.helpers import serve_in_thread, without_parsed
from tests.lifecycle import assert_lifecycle

RECORDING = "file_search/vllm-file-search-openai-gpt-oss-20b.json"
RUST = (
    "Rust enforces memory safety without a garbage collector through ownership, borrowing, "
    "and lifetimes."
)
DOCS = {
    "rust-memory-safety.txt": RUST + " Each value has a single owner; references borrow it.",
    "python-gc.txt": "CPython frees memory by reference counting plus a cycle-detecting "
    "garbage collector.",
    "kitchen.md": "# Pasta\nBoil salted water, cook the pasta for nine minutes, then drain it.",
}

pytestmark = pytest.mark.skipif(
    not local_embeddings_installed(),
    reason="the local embedding model (respgate[embeddings]) is not installed",
)


def build_store(client: openai.OpenAI) -> str:
    """Upload the documents, put them in a vector store, wait for the ingestion."""
    ids = [
        client.files.create(file=(name, text.encode()), purpose="assistants").id
        for name, text in DOCS.items()
    ]
    store = client.vector_stores.create(name="docs", file_ids=ids)
    deadline = time.monotonic() + 120
    while True:
        store = client.vector_stores.retrieve(store.id)
        if store.file_counts.completed == len(ids):
            return store.id
        assert store.file_counts.failed == 0, client.vector_stores.files.list(store.id)
        assert time.monotonic() < deadline, "ingestion did not finish"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def recorded(
    shared_cassettes: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[openai.OpenAI, str, str]]:
    data_dir = tmp_path_factory.mktemp("file-search")
    cassette = load_cassette(shared_cassettes / RECORDING)
    with serve_in_thread(create_replay_app(cassette)) as replay_url:
        settings = Settings(upstream_url=replay_url, data_dir=data_dir)
        with serve_in_thread(create_app(settings)) as gateway_url:
            client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="sk-test", max_retries=0)
            yield client, build_store(client), replay_url
            client.close()


def test_the_recorded_file_search_turn_runs_against_a_real_index(
    recorded: tuple[openai.OpenAI, str, str], shared_cassettes: Path
) -> None:
    client, store_id, replay_url = recorded
    turns = json.loads((shared_cassettes / RECORDING).read_text())["turns"]
    response = client.responses.create(
        model="openai/gpt-oss-20b",
        input=turns[0]["request"]["body"]["input"],
        tools=[{"type": "file_search", "vector_store_ids": [store_id], "max_num_results": 2}],
        include=["file_search_call.results"],
    )
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "file_search_call", "reasoning", "message"]
    call = response.output[1]
    assert call.status == "completed" and call.queries == ["Rust memory safety ownership"]
    assert call.results is not None and call.results[0].filename == "rust-memory-safety.txt"
    assert 0 < (call.results[0].score or 0) <= 1
    recorded_text = turns[1]["response"]["body"]["output"][1]["content"][0]["text"]
    assert response.output_text == recorded_text
    sent = httpx.get(f"{replay_url}/__replay/requests").json()
    assert [t["name"] for t in sent[0]["body"]["tools"]] == ["file_search"]
    fed = sent[1]["body"]["input"][-1]
    assert fed["type"] == "function_call_output" and "rust-memory-safety.txt" in fed["output"]
    assert RUST in fed["output"]
    stored = client.responses.retrieve(response.id)
    assert stored.model_dump(mode="json") == response.model_dump(mode="json")


def test_search_endpoint_finds_the_passage(recorded: tuple[openai.OpenAI, str, str]) -> None:
    client, store_id, _ = recorded
    page = client.vector_stores.search(store_id, query="how long to cook pasta", max_num_results=1)
    assert [hit.filename for hit in page.data] == ["kitchen.md"]


def test_a_streamed_answer_cites_the_file(tmp_path: Path) -> None:
    upstream = ScriptedUpstream(
        [
            [function_call("file_search", '{"queries": ["garbage collection in CPython"]}')],
            [message("CPython counts references (python-gc.txt).")],
        ]
    )
    app = create_app(Settings(data_dir=tmp_path), upstream=upstream)
    with serve_in_thread(app) as gateway_url:
        client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="sk-test", max_retries=0)
        store_id = build_store(client)
        tools: Any = [{"type": "file_search", "vector_store_ids": [store_id]}]
        with client.responses.stream(
            model="m", input="How does CPython free memory?", tools=tools
        ) as stream:
            events = [event.model_dump(mode="json", warnings=False) for event in stream]
            final = stream.get_final_response()
        assert_lifecycle(events)
        kinds = [e["type"] for e in events]
        for kind in ("in_progress", "searching", "completed"):
            assert f"response.file_search_call.{kind}" in kinds
        assert "response.output_text.annotation.added" in kinds
        call, answer = final.output
        assert call.type == "file_search_call" and call.results is None  # no include
        [citation] = answer.content[0].annotations  # type: ignore[union-attr]
        assert citation.type == "file_citation" and citation.filename == "python-gc.txt"
        stored = client.responses.retrieve(final.id).model_dump(mode="json")
        assert stored == without_parsed(final.model_dump(mode="json", warnings=False))
        client.close()
