"""Tool engines end to end: the ``openai`` SDK on the gateway, a scripted model upstream, the
``rest`` engine on json-server (npm), the ``lm`` engine simulating on the same upstream, and a
real MCP server, all configured as the README shows.

- CRUD through the tool loop on json-server; the same request as a dry run
  (``extra_body={"simulate": True}``) leaves json-server's data unchanged.
- One request mixing a REST namespace, an LM namespace and an MCP server: results route right,
  in order, in one batch per round (the engines run in parallel).
- A conversation continued after a restart, and on a second gateway on the same database, sees
  the same session (the simulator's prompt holds the earlier calls).
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.main import create_app
from app.protocol.json_types import JsonObject
from app.settings import Settings
from app.store.migrate import upgrade_to_head_sync
from app.tool_settings import ToolSetConfig
from tests.clients.claude_code_cli import ensure_installed as ensure_claude
from tests.clients.claude_code_cli import run_claude_print
from tests.clients.codex_cli import ensure_installed as ensure_codex
from tests.clients.codex_cli import run_codex_exec
from tests.e2e import hook_sink
from tests.e2e.engine_upstream import (
    SIMULATOR_MODEL,
    EngineUpstream,
    call,
    message,
    offered,
    tool_outputs,
)
from tests.helpers import gateway_process, in_process, openai_client, serve_in_thread
from tests.postgres import throwaway_database
from tests.rest_servers.node import (
    PETSTORE,
    NodeUnavailableError,
    ensure_json_server,
    ensure_prism,
    serve_json_server,
    serve_prism,
)
from tests.tools.engines.rest.pki import make_pki

ROOT = Path(__file__).resolve().parents[2]
MODEL = "scripted-model"
POST = {"title": {"type": "string"}, "views": {"type": "integer"}}


def crm_tools(base: str) -> list[JsonObject]:
    one = {"id": {"type": "string"}}
    return [
        {
            "name": "create_post",
            "description": "Create a post",
            "parameters": {"type": "object", "properties": POST, "required": ["title"]},
            "binding": {"method": "POST", "url": f"{base}/posts"},
        },
        {
            "name": "get_post",
            "description": "Read a post",
            "parameters": {"type": "object", "properties": one, "required": ["id"]},
            "binding": {"method": "GET", "url": f"{base}/posts/{{id}}"},
        },
        {
            "name": "update_post",
            "description": "Change a post",
            "parameters": {"type": "object", "properties": {**one, **POST}, "required": ["id"]},
            "binding": {"method": "PATCH", "url": f"{base}/posts/{{id}}"},
        },
    ]


WEATHER_TOOLS: list[JsonObject] = [
    {
        "name": "forecast",
        "description": "Tomorrow's weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        "output_schema": {
            "type": "object",
            "properties": {"simulated": {"type": "boolean"}},
            "required": ["simulated"],
        },
    }
]


@pytest.fixture(scope="module")
def installed() -> None:
    try:
        ensure_json_server()
    except NodeUnavailableError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def json_server(installed: None, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    db = tmp_path / "db.json"
    db.write_text(json.dumps({"posts": [{"id": "1", "title": "first", "views": 1}]}))
    (tmp_path / "public").mkdir()
    with serve_json_server(db) as url:
        yield url, db


@dataclass
class Gateway:
    client: openai.OpenAI
    http: httpx.Client
    upstream: EngineUpstream


def engine_settings(
    tmp_path: Path, upstream_url: str, json_server_url: str, **more: Any
) -> Settings:
    (tmp_path / "crm.yaml").write_text(yaml.safe_dump(crm_tools(json_server_url)))
    (tmp_path / "weather.yaml").write_text(yaml.safe_dump(WEATHER_TOOLS))
    fields: dict[str, Any] = {
        "upstream_url": upstream_url,
        "database_url": f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}",
        "data_dir": tmp_path / "data",
        "tool_engines": {
            "sim": {"kind": "lm", "model": SIMULATOR_MODEL},
            "api": {"kind": "rest", "simulator": "sim"},
        },
        "tool_hooks": ["tests.e2e.hook_sink:record"],
        "tool_sets": [
            {"namespace": "crm", "engine": "api", "file": str(tmp_path / "crm.yaml")},
            {"namespace": "weather", "engine": "sim", "file": str(tmp_path / "weather.yaml")},
        ],
    }
    if "upstreams" in more:
        del fields["upstream_url"]
    return Settings(**(fields | more))


@contextlib.contextmanager
def gateway(settings: Settings, upstream: EngineUpstream) -> Iterator[Gateway]:
    with in_process(create_app(settings)) as http:
        yield Gateway(openai_client(http), http, upstream)


@contextlib.contextmanager
def upstream_serving(upstream: EngineUpstream) -> Iterator[str]:
    with serve_in_thread(upstream.app()) as url:
        yield url


def crud_script(body: JsonObject) -> list[JsonObject]:
    """Round 1 creates a post; round 2 reads and updates it at once; round 3 answers."""
    outputs = tool_outputs(body)
    if "c1" not in outputs:
        return [call("mcp__crm__create_post", {"title": "hello", "views": 0}, "c1")]
    if "c2" not in outputs:
        created = json.loads(outputs["c1"])
        post_id = str(created.get("id") or created.get("arguments", {}).get("id", "x"))
        return [
            call("mcp__crm__get_post", {"id": post_id}, "c2"),
            call("mcp__crm__update_post", {"id": post_id, "views": 5}, "c3"),
        ]
    return [message(f"done: {outputs['c3']}")]


def json_server_posts(url: str) -> list[JsonObject]:
    posts: list[JsonObject] = httpx.get(f"{url}/posts").json()
    return posts


def test_crud_on_json_server_through_the_tool_loop(
    tmp_path: Path, json_server: tuple[str, Path]
) -> None:
    url, _ = json_server
    upstream = EngineUpstream(model=MODEL, script=crud_script)
    with upstream_serving(upstream) as upstream_url:
        settings = engine_settings(tmp_path, upstream_url, url)
        with gateway(settings, upstream) as gw:
            response = gw.client.responses.create(
                model=MODEL,
                input="Create a post, then read it and give it 5 views.",
                tools=[{"type": "mcp", "server_label": "crm", "require_approval": "never"}],
            )
    kinds = [(item.type, getattr(item, "name", None)) for item in response.output]
    assert kinds == [
        ("mcp_list_tools", None),
        ("mcp_call", "create_post"),
        ("mcp_call", "get_post"),
        ("mcp_call", "update_post"),
        ("message", None),
    ]
    calls = [item for item in response.output if item.type == "mcp_call"]
    assert all(c.server_label == "crm" and c.error is None for c in calls)
    created = json.loads(calls[0].output or "{}")
    assert created["title"] == "hello"
    assert json.loads(calls[1].output or "{}")["id"] == created["id"]
    posts = {p["id"]: p for p in json_server_posts(url)}
    assert posts[created["id"]] == {"id": created["id"], "title": "hello", "views": 5}
    # The model saw its tools under names every upstream accepts, and the results in order.
    first = upstream.turns()[0]
    names = sorted(t["name"] for t in first["tools"])
    assert names == ["mcp__crm__create_post", "mcp__crm__get_post", "mcp__crm__update_post"]
    assert list(tool_outputs(upstream.turns()[-1])) == ["c1", "c2", "c3"]
    # The configured hook saw each call start and complete, under its qualified name.
    events = hook_sink.take(response.id)
    started = [e.tool for e in events if e.type == "tool_call.started"]
    completed = [e for e in events if e.type == "tool_call.completed"]
    assert started == ["crm::create_post", "crm::get_post", "crm::update_post"]
    assert sorted(e.tool for e in completed) == sorted(started)
    assert all(e.ok and e.duration_ms is not None and e.preview for e in completed)


def test_a_dry_run_leaves_json_server_unchanged(
    tmp_path: Path, json_server: tuple[str, Path]
) -> None:
    url, db = json_server
    before, before_file = json_server_posts(url), db.read_text()
    upstream = EngineUpstream(model=MODEL, script=crud_script)
    with upstream_serving(upstream) as upstream_url:
        settings = engine_settings(tmp_path, upstream_url, url)
        with gateway(settings, upstream) as gw:
            response = gw.client.responses.create(
                model=MODEL,
                input="Create a post, then read it and give it 5 views.",
                tools=[{"type": "mcp", "server_label": "crm", "require_approval": "never"}],
                extra_body={"simulate": True},
            )
            assert all("simulate" not in body for body in upstream.requests)
            conversation_state = gw.http.get(f"/v1/responses/{response.id}").json()
    assert json_server_posts(url) == before and db.read_text() == before_file
    calls = [item for item in response.output if item.type == "mcp_call"]
    assert [c.name for c in calls] == ["create_post", "get_post", "update_post"]
    assert all(json.loads(c.output or "{}")["simulated"] is True for c in calls)
    assert len(upstream.simulations) == 3
    # The simulator was asked for each call with the tool's spec; nothing was saved for it.
    first_turn = json.loads(upstream.simulations[0]["input"][-1]["content"])
    assert first_turn["tool"]["name"] == "create_post"
    assert conversation_state["status"] == "completed"


def mixed_script(body: JsonObject) -> list[JsonObject]:
    outputs = tool_outputs(body)
    if not outputs:
        return [
            call("mcp__weather__forecast", {"city": "Lyon"}, "w1"),
            call("mcp__crm__get_post", {"id": "1"}, "r1"),
            call("mcp__counter__sum", {"a": 20, "b": 22}, "m1"),
            call("mcp__weather__forecast", {"city": "Nice"}, "w2"),
        ]
    return [message(json.dumps(outputs, sort_keys=True))]


def test_rest_lm_and_mcp_in_one_request_stream(
    tmp_path: Path, json_server: tuple[str, Path], counter_url: str
) -> None:
    url, _ = json_server
    upstream = EngineUpstream(model=MODEL, script=mixed_script)
    mcp = {"servers": [{"label": "counter", "url": counter_url, "allowed_tools": ["sum"]}]}
    with upstream_serving(upstream) as upstream_url:
        settings = engine_settings(tmp_path, upstream_url, url, mcp=mcp)
        with gateway(settings, upstream) as gw:
            stream = gw.client.responses.create(
                model=MODEL,
                input="Weather in Lyon and Nice, post 1, and 20 + 22.",
                tools=[
                    {"type": "mcp", "server_label": label, "require_approval": "never"}
                    for label in ("crm", "weather", "counter")
                ],
                stream=True,
            )
            events = list(stream)
    final = events[-1].response  # type: ignore[union-attr]
    calls = [item for item in final.output if item.type == "mcp_call"]
    assert [(c.server_label, c.name) for c in calls] == [
        ("weather", "forecast"),
        ("crm", "get_post"),
        ("counter", "sum"),
        ("weather", "forecast"),
    ]
    outputs = [c.output or "" for c in calls]
    assert json.loads(outputs[0])["arguments"] == {"city": "Lyon"}
    assert json.loads(outputs[1]) == {"id": "1", "title": "first", "views": 1}
    assert outputs[2] == "42"
    assert json.loads(outputs[3])["arguments"] == {"city": "Nice"}
    # The lm engine ran its two calls as one batch: the second prompt holds the first call.
    second = upstream.simulations[1]["input"]
    assert len(second) == 3 and "Lyon" in second[0]["content"]
    kinds = [e.type for e in events]
    for name in ("in_progress", "completed"):
        assert kinds.count(f"response.mcp_call.{name}") == 4
    assert kinds.count("response.mcp_list_tools.completed") == 3
    assert list(tool_outputs(upstream.turns()[-1])) == ["w1", "r1", "m1", "w2"]


def weather_script(body: JsonObject) -> list[JsonObject]:
    outputs = tool_outputs(body)
    city = "Oslo" if len(upstream_turns_of(body)) < 2 else "Bergen"
    if not outputs or all(not key.startswith(f"w_{city}") for key in outputs):
        return [call("mcp__weather__forecast", {"city": city}, f"w_{city}")]
    return [message("noted")]


def upstream_turns_of(body: JsonObject) -> list[JsonObject]:
    """The user messages of the request's input."""
    items = body.get("input")
    return [
        item
        for item in (items if isinstance(items, list) else [])
        if isinstance(item, dict) and item.get("role") == "user"
    ]


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}"
        return
    with throwaway_database("respgate_engines") as url:
        upgrade_to_head_sync(url)
        yield url


def serve_config(tmp_path: Path, upstream_url: str, database_url: str) -> Path:
    """The gateway's TOML file for ``respgate serve`` (the tool sets written by
    ``engine_settings``)."""
    config = tmp_path / "respgate.toml"
    config.write_text(
        f"""upstream_url = "{upstream_url}"
database_url = "{database_url}"
data_dir = "{tmp_path / "data"}"

[tool_engines.sim]
kind = "lm"
model = "{SIMULATOR_MODEL}"

[tool_engines.api]
kind = "rest"
simulator = "sim"

[[tool_sets]]
namespace = "crm"
engine = "api"
file = "{tmp_path / "crm.yaml"}"

[[tool_sets]]
namespace = "weather"
engine = "sim"
file = "{tmp_path / "weather.yaml"}"
"""
    )
    return config


@contextlib.contextmanager
def serve_process(config: Path) -> Iterator[openai.OpenAI]:
    """``respgate serve --config`` as a real process; the openai SDK on it."""
    with gateway_process(config) as (url, _):
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)


def test_a_conversation_keeps_its_simulated_world_across_restarts_and_processes(
    tmp_path: Path, json_server: tuple[str, Path], database_url: str
) -> None:
    url, _ = json_server
    upstream = EngineUpstream(model=MODEL, script=weather_script)
    tools: Any = [{"type": "mcp", "server_label": "weather", "require_approval": "never"}]
    with upstream_serving(upstream) as upstream_url:
        settings = engine_settings(tmp_path, upstream_url, url, database_url=database_url)
        with gateway(settings, upstream) as first:
            conversation = first.client.conversations.create()
            first.client.responses.create(
                model=MODEL, input="Oslo?", tools=tools, conversation=conversation.id
            )
            chained = first.client.responses.create(model=MODEL, input="Oslo?", tools=tools)
        assert len(upstream.simulations) == 2
        assert len(upstream.simulations[0]["input"]) == 1  # a new session: no earlier calls
        # The same gateway restarted, and another gateway process on the same database.
        config = serve_config(tmp_path, upstream_url, database_url)
        with gateway(settings, upstream) as restarted, serve_process(config) as other:
            restarted.client.responses.create(
                model=MODEL, input="Bergen?", tools=tools, conversation=conversation.id
            )
            other.responses.create(
                model=MODEL, input="Bergen?", tools=tools, previous_response_id=chained.id
            )
    conversation_prompt = upstream.simulations[2]["input"]
    chain_prompt = upstream.simulations[3]["input"]
    for prompt in (conversation_prompt, chain_prompt):
        assert len(prompt) == 3  # the earlier call and its result, then this call
        assert "Oslo" in prompt[0]["content"] and "Bergen" in prompt[2]["content"]
        assert prompt[1]["role"] == "assistant"


def pets_script(body: JsonObject) -> list[JsonObject]:
    outputs = tool_outputs(body)
    if not outputs:
        return [
            call("mcp__pets__showPetById", {"petId": 1}, "p1"),
            call("mcp__crm__get_post", {"id": "missing"}, "p2"),
        ]
    return [message("ok")]


def test_openapi_tools_on_prism_and_a_404_the_model_reads(
    tmp_path: Path, json_server: tuple[str, Path]
) -> None:
    try:
        ensure_prism()
    except NodeUnavailableError as exc:
        pytest.skip(str(exc))
    url, _ = json_server
    upstream = EngineUpstream(model=MODEL, script=pets_script)
    with upstream_serving(upstream) as upstream_url, serve_prism(PETSTORE) as prism:
        pets = {
            "namespace": "pets",
            "engine": "api",
            "openapi": str(PETSTORE),
            "tags": ["pets"],
            "base_url": prism,
        }
        settings = engine_settings(tmp_path, upstream_url, url)
        settings = settings.model_copy(
            update={"tool_sets": [*settings.tool_sets, ToolSetConfig(**pets)]}
        )
        with gateway(settings, upstream) as gw:
            response = gw.client.responses.create(
                model=MODEL,
                input="Show pet 1 and post 'missing'.",
                tools=[
                    {"type": "mcp", "server_label": ns, "require_approval": "never"}
                    for ns in ("pets", "crm")
                ],
            )
    listing = next(
        i for i in response.output if i.type == "mcp_list_tools" and i.server_label == "pets"
    )
    assert sorted(t.name for t in listing.tools) == [
        "createPet",
        "deletePet",
        "listPets",
        "showPetById",
    ]
    pet, missing = [i for i in response.output if i.type == "mcp_call"]
    assert json.loads(pet.output or "{}")["name"] == "Rex" and pet.error is None
    assert missing.output is None and missing.error is not None
    assert missing.error.type == "http_error" and missing.error.code == 404
    assert "404" in missing.error.message
    fed = tool_outputs(upstream.turns()[-1])
    assert fed["p2"].startswith("Error: ") and "404" in fed["p2"]
    failed = [e for e in hook_sink.take(response.id) if e.type == "tool_call.failed"]
    assert [(e.tool, e.error_kind) for e in failed] == [("crm::get_post", "http_status")]
    assert failed[0].message and "404" in failed[0].message


def default_script(body: JsonObject) -> list[JsonObject]:
    outputs = tool_outputs(body)
    names = offered(body)
    if not outputs and "mcp__weather__forecast" in names:
        return [call("mcp__weather__forecast", {"city": "Rome"}, "d1")]
    return [message(",".join(sorted(names)) or "no tools")]


def test_default_tool_sets_reach_clients_that_send_no_tools(
    tmp_path: Path, json_server: tuple[str, Path]
) -> None:
    url, _ = json_server
    upstream = EngineUpstream(model=MODEL, script=default_script)
    with upstream_serving(upstream) as upstream_url:
        routes = [
            {"name": "main", "url": upstream_url, "default": True},
            {
                "name": "crm-only",
                "url": upstream_url,
                "models": ["crm-model"],
                "tool_sets": ["crm"],
            },
        ]
        settings = engine_settings(
            tmp_path, upstream_url, url, default_tool_sets=["weather"], upstreams=routes
        )
        with gateway(settings, upstream) as gw:
            plain = gw.client.responses.create(model=MODEL, input="Weather in Rome?")
            routed = gw.client.responses.create(model="crm-model", input="Which tools?")
            echoed = gw.http.get(f"/v1/responses/{plain.id}").json()
    (forecast,) = [i for i in plain.output if i.type == "mcp_call"]
    assert (forecast.server_label, forecast.name) == ("weather", "forecast")
    assert json.loads(forecast.output or "{}")["arguments"] == {"city": "Rome"}
    assert echoed["tools"] == []  # the operator's defaults are not echoed as the client's
    final = routed.output[-1]
    assert final.type == "message"
    assert final.content[0].text == (  # type: ignore[union-attr]
        "mcp__crm__create_post,mcp__crm__get_post,mcp__crm__update_post"
    )


SUNNY = "Tomorrow in Oslo: sunny, by the forecast tool."


def codex_script(body: JsonObject) -> list[JsonObject]:
    """Codex's turn: a call of the operator's default tool, then the answer."""
    if "mcp__weather__forecast" not in offered(body):
        return [message("the weather tool was not offered")]
    if not tool_outputs(body):
        return [call("mcp__weather__forecast", {"city": "Oslo"}, "cx1")]
    return [message(SUNNY)]


def test_codex_cli_gets_the_operator_default_tool_sets(
    tmp_path: Path, json_server: tuple[str, Path]
) -> None:
    """Codex sends its own tools only; the operator's default tool set is run by the gateway
    in the same turn, and Codex (the real one, from npm) finishes the turn with its answer."""
    try:
        ensure_codex()
    except NodeUnavailableError as exc:
        pytest.skip(str(exc))
    url, _ = json_server
    upstream = EngineUpstream(model="Qwen/Qwen3-8B", script=codex_script)
    with upstream_serving(upstream) as upstream_url:
        settings = engine_settings(tmp_path, upstream_url, url, default_tool_sets=["weather"])
        with serve_in_thread(create_app(settings)) as gateway_url:
            run = run_codex_exec(
                f"{gateway_url}/v1",
                "Weather in Oslo tomorrow?",
                tmp_path / "codex",
                model="Qwen/Qwen3-8B",
            )
    assert run.returncode == 0, run.stderr[-3000:]
    assert SUNNY in run.stdout
    assert len(upstream.simulations) == 1
    assert tool_outputs(upstream.turns()[-1])["cx1"].startswith('{"simulated":true')


def tls_script(body: JsonObject) -> list[JsonObject]:
    if not tool_outputs(body):
        return [call("mcp__secure__whoami", {}, "t1"), call("mcp__secure__anonymous", {}, "t2")]
    return [message("ok")]


def test_a_rest_tool_over_tls_with_a_client_certificate(tmp_path: Path) -> None:
    """The binding's CA bundle and client certificate reach a server that requires them; the
    same server without the client certificate refuses, and the model reads the failure."""
    pki = make_pki(tmp_path)

    async def whoami(request: Request) -> JSONResponse:
        # The server requires a client certificate its CA signed: an answer proves one came.
        return JSONResponse({"scheme": request.url.scheme})

    tls = {
        "ssl_certfile": str(pki.server_cert),
        "ssl_keyfile": str(pki.server_key),
        "ssl_ca_certs": str(pki.ca),
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
    }
    server = Starlette(routes=[Route("/whoami", whoami)])
    upstream = EngineUpstream(model=MODEL, script=tls_script)
    with upstream_serving(upstream) as upstream_url, serve_in_thread(server, **tls) as https:
        trusted = {"ca_bundle": str(pki.ca)}
        certificate = {"client_cert": str(pki.client_cert), "client_key": str(pki.client_key)}
        tools = [
            {
                "name": name,
                "parameters": {"type": "object", "properties": {}},
                "binding": {"url": f"{https}/whoami", "tls": trusted | client},
            }
            for name, client in (("whoami", certificate), ("anonymous", {}))
        ]
        (tmp_path / "secure.yaml").write_text(yaml.safe_dump(tools))
        settings = Settings(
            upstream_url=upstream_url,
            data_dir=tmp_path / "data",
            tool_engines={"api": {"kind": "rest"}},
            tool_sets=[
                {"namespace": "secure", "engine": "api", "file": str(tmp_path / "secure.yaml")}
            ],
        )
        with gateway(settings, upstream) as gw:
            response = gw.client.responses.create(
                model=MODEL,
                input="Who am I?",
                tools=[{"type": "mcp", "server_label": "secure", "require_approval": "never"}],
            )
    whoami_call, anonymous = [i for i in response.output if i.type == "mcp_call"]
    assert whoami_call.error is None
    assert json.loads(whoami_call.output or "{}") == {"scheme": "https"}
    assert anonymous.output is None and anonymous.error is not None
    fed = tool_outputs(upstream.turns()[-1])
    assert fed["t2"].startswith("Error: ")


def test_claude_code_gets_the_operator_default_tool_sets(
    tmp_path: Path, json_server: tuple[str, Path]
) -> None:
    """Claude Code (the real one, from npm) on the Messages front end: the operator's default
    tool set runs inside its turn (shown to it as MCP tool blocks) and it prints the answer."""
    try:
        ensure_claude()
    except NodeUnavailableError as exc:
        pytest.skip(str(exc))
    url, _ = json_server
    upstream = EngineUpstream(model=MODEL, script=codex_script)
    with upstream_serving(upstream) as upstream_url:
        settings = engine_settings(tmp_path, upstream_url, url, default_tool_sets=["weather"])
        with serve_in_thread(create_app(settings)) as gateway_url:
            run = run_claude_print(gateway_url, "Weather in Oslo tomorrow?", tmp_path / "claude")
    assert run.returncode == 0, run.stderr[-3000:]
    assert SUNNY in run.stdout
    assert upstream.simulations
    assert all(
        tool_outputs(turn).get("cx1", '{"simulated":true').startswith('{"simulated":true')
        for turn in upstream.turns()
    )
