"""The ``rest`` engine against json-server (npm), a real stateful JSON API, with its tools from
a ``FileToolSet``: create, read and update through ``execute``; the same calls under
``simulate`` leave json-server's data unchanged (read directly)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from app.core.engines import ToolSpec
from app.tools.engines.rest import RestEngine
from app.tools.engines.toolsets import FileToolSet
from tests.rest_servers.node import NodeUnavailableError, ensure_json_server, serve_json_server
from tests.tools.engines.rest.helpers import FakeSimulator, call

POST = {"title": {"type": "string"}, "views": {"type": "integer", "minimum": 0}}


def tool_file(base: str) -> list[dict[str, Any]]:
    one = {"id": {"type": "string", "description": "the post's id"}}
    return [
        {
            "name": "list_posts",
            "description": "List the posts",
            "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
            "binding": {"method": "GET", "url": f"{base}/posts"},
        },
        {
            "name": "get_post",
            "parameters": {"type": "object", "properties": one, "required": ["id"]},
            "binding": {"method": "GET", "url": f"{base}/posts/{{id}}"},
        },
        {
            "name": "create_post",
            "parameters": {"type": "object", "properties": POST, "required": ["title"]},
            "output_schema": {"type": "object"},
            "binding": {"method": "POST", "url": f"{base}/posts"},
        },
        {
            "name": "update_post",
            "parameters": {"type": "object", "properties": {**one, **POST}, "required": ["id"]},
            "binding": {
                "method": "PATCH",
                "url": f"{base}/posts/{{id}}",
                "body": ["title", "views"],
            },
        },
    ]


@pytest.fixture(scope="module")
def installed() -> None:
    try:
        ensure_json_server()
    except NodeUnavailableError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "db.json"
    path.write_text(json.dumps({"posts": [{"id": "1", "title": "first", "views": 1}]}))
    return path


@pytest.fixture
def base(installed: None, db: Path) -> Iterator[str]:
    with serve_json_server(db) as url:
        yield url


@pytest.fixture
def tools(base: str, tmp_path: Path) -> dict[str, ToolSpec]:
    path = tmp_path / "posts.yaml"
    path.write_text(yaml.safe_dump(tool_file(base)))
    return {spec.name: spec for spec in FileToolSet(path, "blog", require_binding=True).load()}


async def posts(base: str) -> Any:
    """json-server's posts, read directly (not through the engine)."""
    async with aiohttp.ClientSession() as session, session.get(f"{base}/posts") as resp:
        return await resp.json()


@pytest.fixture
async def engine() -> AsyncIterator[RestEngine]:
    engine = RestEngine(simulator=FakeSimulator(), environ={})
    await engine.setup("conv")
    yield engine
    await engine.aclose()


async def test_create_read_update(
    engine: RestEngine, tools: dict[str, ToolSpec], base: str
) -> None:
    [created] = await engine.execute(
        "conv", [call(tools["create_post"], {"title": "hello", "views": 0}, "c1")]
    )
    assert created.ok, created.error
    new_id = orjson.loads(created.output)["id"]
    [updated, read] = await engine.execute(
        "conv",
        [
            call(tools["update_post"], {"id": new_id, "views": 5}, "c2"),
            call(tools["list_posts"], {"title": "hello"}, "c3"),
        ],
    )
    assert orjson.loads(updated.output) == {"id": new_id, "title": "hello", "views": 5}
    assert [post["id"] for post in orjson.loads(read.output)] == [new_id]
    [fetched] = await engine.execute("conv", [call(tools["get_post"], {"id": new_id}, "c4")])
    assert orjson.loads(fetched.output)["views"] == 5
    assert {post["id"] for post in await posts(base)} == {"1", new_id}
    [missing] = await engine.execute("conv", [call(tools["get_post"], {"id": "nope"}, "c5")])
    assert missing.error is not None and missing.error.kind == "http_status"
    assert missing.error.message.startswith("HTTP 404")
    history = engine.get_session_state("conv")["history"]
    assert [entry["call"]["call_id"] for entry in history] == ["c1", "c2", "c3", "c4", "c5"]


async def test_simulate_leaves_the_data_unchanged(
    engine: RestEngine, tools: dict[str, ToolSpec], base: str, db: Path
) -> None:
    before, file_before = await posts(base), await asyncio.to_thread(db.read_text)
    state_before = engine.get_session_state("conv")
    results = await engine.simulate(
        "conv",
        [
            call(tools["create_post"], {"title": "dry run"}, "s1"),
            call(tools["update_post"], {"id": "1", "title": "changed"}, "s2"),
        ],
    )
    assert [orjson.loads(r.output) for r in results] == [
        {"simulated": "create_post"},
        {"simulated": "update_post"},
    ]
    assert await posts(base) == before
    assert await asyncio.to_thread(db.read_text) == file_before
    assert engine.get_session_state("conv") == state_before
