"""``RestEngine`` against a local aiohttp server: answers, failures, secrets, sessions,
concurrency and ``simulate``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from app.core.engines import SessionExistsError, ToolEngine, UnknownSessionError
from app.net.egress import EgressPolicy
from app.net.resolver import MemoryResolver
from app.tools.engines.rest import RestEngine, RestEngineOptions, create_rest_engine
from tests.helpers import free_port
from tests.tools.engines.rest.helpers import FakeSimulator, call, local_server, tool

SECRET = "s3cr3t-token-value"
ITEM_PARAMETERS = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "q": {"type": "string"}},
    "required": ["id"],
}


def build_app(seen: list[web.Request]) -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        seen.append(request)
        body = await request.read()
        return web.json_response(
            {
                "method": request.method,
                "path": request.rel_url.raw_path,
                "query": dict(request.query),
                "body": orjson.loads(body) if body else None,
                "auth": request.headers.get("Authorization"),
                "key": request.headers.get("X-Key"),
                "static": request.headers.get("X-Static"),
            },
            dumps=lambda value: orjson.dumps(value, option=orjson.OPT_INDENT_2).decode(),
        )

    async def text(request: web.Request) -> web.Response:
        return web.Response(text="plain words")

    async def failing(request: web.Request) -> web.Response:
        status = int(request.match_info["status"])
        return web.Response(status=status, text="went wrong " + "x" * 5000)

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound("/text")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="late")

    async def big(request: web.Request) -> web.Response:
        return web.Response(body=b"a" * 5000)

    async def big_chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(50):
            await response.write(b"b" * 1000)
        await response.write_eof()
        return response

    async def echo_secret(request: web.Request) -> web.Response:
        return web.Response(status=403, text=f"refused {request.headers.get('X-Key')}")

    app = web.Application()
    app.router.add_route("*", "/items/{id}", echo)
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/text", text)
    app.router.add_get("/status/{status}", failing)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/slow", slow)
    app.router.add_get("/big", big)
    app.router.add_get("/big-chunked", big_chunked)
    app.router.add_get("/echo-secret", echo_secret)
    return app


@pytest.fixture
def seen() -> list[web.Request]:
    return []


@pytest.fixture
async def base(seen: list[web.Request]) -> AsyncIterator[str]:
    async with local_server(build_app(seen)) as url:
        yield url


@pytest.fixture
async def engine() -> AsyncIterator[RestEngine]:
    engine = RestEngine(environ={"TOKEN": SECRET, "KEY": SECRET + "-key"})
    await engine.setup("s")
    yield engine
    await engine.aclose()


def test_the_engine_is_a_tool_engine() -> None:
    assert isinstance(RestEngine(environ={}), ToolEngine)


async def test_get_sends_path_and_query_and_compacts_json(engine: RestEngine, base: str) -> None:
    spec = tool({"method": "get", "url": base + "/items/{id}"}, ITEM_PARAMETERS)
    [result] = await engine.execute("s", [call(spec, {"id": "a/b c", "q": "x y"})])
    assert result.ok, result.error
    answer = orjson.loads(result.output)
    assert answer["path"] == "/items/a%2Fb%20c"
    assert answer["query"] == {"q": "x y"}
    assert "\n" not in result.output  # re-serialised compactly
    assert result.duration_ms > 0


async def test_post_sends_the_rest_as_a_json_body_and_static_headers(
    engine: RestEngine, base: str
) -> None:
    binding = {"method": "POST", "url": base + "/items/{id}", "headers": {"X-Static": "yes"}}
    spec = tool(binding, ITEM_PARAMETERS)
    [result] = await engine.execute("s", [call(spec, {"id": "7", "q": "body"})])
    answer = orjson.loads(result.output)
    assert (answer["method"], answer["body"], answer["query"]) == ("POST", {"q": "body"}, {})
    assert answer["static"] == "yes"


async def test_query_and_body_lists_place_the_arguments(engine: RestEngine, base: str) -> None:
    parameters = {"type": "object", "properties": {"a": {}, "b": {}, "c": {"type": "array"}}}
    binding = {"method": "PUT", "url": base + "/echo", "query": ["a", "c"], "body": ["b"]}
    args = {"a": 1, "b": {"deep": True}, "c": ["x", "y"]}
    [result] = await engine.execute("s", [call(tool(binding, parameters), args)])
    answer = orjson.loads(result.output)
    assert answer["query"] == {"a": "1", "c": "x"}  # dict() keeps the first of a repeated key
    assert answer["body"] == {"b": {"deep": True}}


async def test_body_argument_is_the_whole_body(engine: RestEngine, base: str) -> None:
    parameters = {"type": "object", "properties": {"body": {"type": "array"}, "v": {}}}
    binding = {"method": "POST", "url": base + "/echo", "body_argument": "body"}
    [result] = await engine.execute(
        "s", [call(tool(binding, parameters), {"body": [1, 2], "v": 3})]
    )
    answer = orjson.loads(result.output)
    assert (answer["body"], answer["query"]) == ([1, 2], {"v": "3"})


async def test_plain_text_answers_are_kept_as_text(engine: RestEngine, base: str) -> None:
    [result] = await engine.execute("s", [call(tool({"url": base + "/text"}))])
    assert result.output == "plain words"


@pytest.mark.parametrize("status", [404, 500])
async def test_non_2xx_is_an_http_status_failure_with_a_bounded_body(
    engine: RestEngine, base: str, status: int
) -> None:
    [result] = await engine.execute("s", [call(tool({"url": base + f"/status/{status}"}))])
    assert result.error is not None and result.error.kind == "http_status"
    assert result.error.message.startswith(f"HTTP {status} ")
    assert "went wrong" in result.error.message
    assert len(result.error.message) < 2200
    assert result.error.detail == {"status": status}
    assert engine.get_session_state("s")["history"][0]["result"]["error"]["kind"] == "http_status"


async def test_redirects_are_not_followed(engine: RestEngine, base: str) -> None:
    [result] = await engine.execute("s", [call(tool({"url": base + "/redirect"}))])
    assert result.error is not None and result.error.kind == "http_status"
    assert result.error.message.startswith("HTTP 302")


async def test_a_slow_answer_is_a_timeout(engine: RestEngine, base: str) -> None:
    [result] = await engine.execute("s", [call(tool({"url": base + "/slow", "timeout": 0.2}))])
    assert result.error is not None and result.error.kind == "timeout"


@pytest.mark.parametrize("path", ["/big", "/big-chunked"])
async def test_an_answer_over_the_limit_is_response_too_large(
    engine: RestEngine, base: str, path: str
) -> None:
    spec = tool({"url": base + path, "max_response_bytes": 1000})
    [result] = await engine.execute("s", [call(spec)])
    assert result.error is not None and result.error.kind == "response_too_large"
    [fits] = await engine.execute("s", [call(tool({"url": base + "/big"}))])  # 1 MiB default
    assert fits.output == "a" * 5000


async def test_secrets_reach_the_server_but_no_history_or_message(
    engine: RestEngine, base: str, seen: list[web.Request]
) -> None:
    binding = {
        "url": base + "/echo",
        "auth": {"type": "bearer", "token_env": "TOKEN"},
        "headers_from_env": {"X-Key": "KEY"},
    }
    [result] = await engine.execute("s", [call(tool(binding))])
    headers = seen[-1].headers
    assert headers["Authorization"] == f"Bearer {SECRET}" and headers["X-Key"] == SECRET + "-key"
    answer = orjson.loads(result.output)  # the echo is hidden from the model and the history
    assert answer["auth"] == "***" and answer["key"] == "***"
    refused = {"url": base + "/echo-secret", "headers_from_env": {"X-Key": "KEY"}}
    [failed] = await engine.execute("s", [call(tool(refused))])
    assert failed.error is not None and "refused ***" in failed.error.message
    state = orjson.dumps(engine.get_session_state("s")).decode()
    assert SECRET not in state and SECRET not in failed.error.message


@pytest.mark.parametrize(
    ("auth", "header", "expected"),
    [
        ({"type": "api_key", "header": "X-Key", "key_env": "TOKEN"}, "X-Key", SECRET),
        (
            {"type": "basic", "username": "u", "password_env": "TOKEN"},
            "Authorization",
            "Basic dTpzM2NyM3QtdG9rZW4tdmFsdWU=",
        ),
    ],
)
async def test_api_key_and_basic_auth(
    engine: RestEngine,
    base: str,
    seen: list[web.Request],
    auth: dict[str, str],
    header: str,
    expected: str,
) -> None:
    [result] = await engine.execute("s", [call(tool({"url": base + "/echo", "auth": auth}))])
    assert result.ok and seen[-1].headers[header] == expected
    assert SECRET not in result.output


async def test_a_missing_secret_fails_without_a_request(
    engine: RestEngine, base: str, seen: list[web.Request]
) -> None:
    binding = {"url": base + "/echo", "auth": {"type": "bearer", "token_env": "ABSENT"}}
    [result] = await engine.execute("s", [call(tool(binding))])
    assert result.error is not None and result.error.kind == "configuration_error"
    assert "ABSENT" in result.error.message and not seen


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"q": "x"}, "'id' is a required property"),
        ({"id": 3}, "id: 3 is not of type 'string'"),
        ("[1]", "must be a JSON object"),
        ("{oops", "not valid JSON"),
        ({"id": ".."}, "cannot be '..'"),
        ({"id": "."}, "cannot be '.'"),
    ],
)
async def test_invalid_arguments_make_no_request(
    engine: RestEngine,
    base: str,
    seen: list[web.Request],
    arguments: dict[str, object] | str,
    fragment: str,
) -> None:
    spec = tool({"url": base + "/items/{id}"}, ITEM_PARAMETERS)
    [result] = await engine.execute("s", [call(spec, arguments)])
    assert result.error is not None and result.error.kind == "invalid_arguments"
    assert fragment in result.error.message and not seen


@pytest.mark.parametrize(
    ("binding", "fragment"),
    [
        (None, "has no binding"),
        ({"url": "ftp://x/y"}, "url"),
        ({"url": "http://x/", "verb": "GET"}, "verb: Extra inputs are not permitted"),
        ({"url": "http://x/", "auth": {"type": "bearer"}}, "token_env"),
    ],
)
async def test_an_invalid_binding_is_a_failed_result(
    engine: RestEngine, binding: dict[str, object] | None, fragment: str
) -> None:
    [result] = await engine.execute("s", [call(tool(binding))])
    assert result.error is not None and result.error.kind == "invalid_binding"
    assert fragment in result.error.message


async def test_a_closed_port_is_a_network_error(engine: RestEngine) -> None:
    spec = tool({"url": f"http://127.0.0.1:{free_port()}/x"})
    [result] = await engine.execute("s", [call(spec)])
    assert result.error is not None and result.error.kind == "network_error"


async def test_calls_go_through_the_egress_policy(base: str, seen: list[web.Request]) -> None:
    """A binding's host:port is the operator's: trusted under the default policy (this server
    is on loopback), yet resolved by the policy and connected to at the address it checked;
    a cloud metadata address stays refused, and the URL's credentials are not shown."""
    resolver = MemoryResolver({"api.test": [["127.0.0.1"]], "meta.test": [["169.254.169.254"]]})
    engine = RestEngine(environ={}, egress=EgressPolicy().with_resolver(resolver))
    await engine.setup("s")
    try:
        port = base.rsplit(":", 1)[1]
        spec = tool({"url": f"http://api.test:{port}/items/{{id}}"}, ITEM_PARAMETERS)
        [result] = await engine.execute("s", [call(spec, {"id": "7"})])
        assert result.ok, result.error
        meta = tool({"url": "http://ops:pw-SECRET@meta.test/latest/meta-data"})
        [refused] = await engine.execute("s", [call(meta)])
    finally:
        await engine.aclose()
    assert refused.error is not None and refused.error.kind == "network_error"
    assert "cloud metadata" in refused.error.message
    assert "pw-SECRET" not in refused.error.message
    assert resolver.lookups == ["api.test", "meta.test"]
    assert len(seen) == 1


async def test_a_batch_runs_concurrently_and_records_in_call_order(engine: RestEngine) -> None:
    arrived: list[str] = []
    all_in = asyncio.Event()

    async def barrier(request: web.Request) -> web.Response:
        arrived.append(request.match_info["n"])
        if len(arrived) == 3:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), 5)  # a sequential engine would time out here
        return web.json_response({"n": request.match_info["n"]})

    app = web.Application()
    app.router.add_get("/b/{n}", barrier)
    async with local_server(app) as url:
        spec = tool({"url": url + "/b/{n}"}, {"type": "object", "properties": {"n": {}}})
        calls = [call(spec, {"n": str(n)}, call_id=f"c{n}") for n in range(3)]
        results = await engine.execute("s", calls)
    assert [r.call_id for r in results] == ["c0", "c1", "c2"]
    assert all(r.ok for r in results)
    history = engine.get_session_state("s")["history"]
    assert [entry["call"]["call_id"] for entry in history] == ["c0", "c1", "c2"]
    assert "binding" not in history[0]["call"]["tool"]


async def test_sessions(base: str) -> None:
    engine = RestEngine(environ={})
    with pytest.raises(UnknownSessionError):
        await engine.execute("nope", [])
    await engine.setup("s", {"history": [], "extra": 1})
    with pytest.raises(SessionExistsError):
        await engine.setup("s")
    await engine.execute("s", [call(tool({"url": base + "/text"}))])
    state = engine.get_session_state("s")
    assert state["extra"] == 1 and len(state["history"]) == 1
    await engine.teardown("s")
    await engine.teardown("s")  # unknown: a no-op
    await engine.aclose()


async def test_simulate_without_a_simulator_fails_each_call(
    engine: RestEngine, base: str, seen: list[web.Request]
) -> None:
    calls = [call(tool({"url": base + "/echo"}), call_id=f"c{n}") for n in range(2)]
    results = await engine.simulate("s", calls)
    assert [r.error.kind if r.error else None for r in results] == ["simulation_unavailable"] * 2
    assert not seen and engine.get_session_state("s")["history"] == []


async def test_simulate_delegates_to_a_seeded_throwaway_session(
    base: str, seen: list[web.Request]
) -> None:
    simulator = FakeSimulator()
    engine = RestEngine(simulator=simulator, environ={})
    await engine.setup("s")
    await engine.execute("s", [call(tool({"url": base + "/text"}), call_id="real")])
    before = engine.get_session_state("s")
    [result] = await engine.simulate("s", [call(tool({"url": base + "/echo"}), call_id="sim")])
    assert orjson.loads(result.output) == {"simulated": "t"}
    assert len(seen) == 0  # /text is not an echo route; /echo was never reached
    [(scratch, state)] = simulator.setups
    assert scratch != "s" and state == before
    assert simulator.teardowns == [scratch] and not simulator.live
    assert engine.get_session_state("s") == before
    await engine.aclose()


def test_create_rest_engine_reads_options_and_refuses_unknown_keys() -> None:
    engine = create_rest_engine(
        {"default_timeout": 5, "max_concurrency": 2}, simulator=None, environ={}
    )
    assert engine.options == RestEngineOptions(default_timeout=5, max_concurrency=2)
    with pytest.raises(ValueError, match="rest engine options: retries: Extra inputs"):
        create_rest_engine({"retries": 3}, simulator=None, environ={})
    with pytest.raises(ValueError, match="default_timeout"):
        create_rest_engine({"default_timeout": 0}, simulator=None, environ={})
