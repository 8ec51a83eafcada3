"""The MCP client layer against real servers: the counter server (Python MCPServer) over
streamable HTTP, SSE and stdio, and @modelcontextprotocol/server-everything from npm."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.server.lowlevel import Server

from app.tools.mcp.client import McpSession
from app.tools.mcp.errors import McpError
from app.tools.mcp.outcomes import McpCallOutcome
from app.tools.mcp.spec import McpServerSpec, transport_for_url
from tests.helpers import free_port, serve_in_thread
from tests.mcp_servers.counter import ROOT, stdio_command
from tests.tools.mcp.helpers import LOCAL, TIMEOUT, counter_spec, leftover_session_tasks, opened

COUNTER_TOOLS = {"sum", "echo", "say_hello", "sleep", "fail", "whoami", "total", "describe"}


def base_of(url: str) -> str:
    return url.rsplit("/", 1)[0]


@pytest.fixture(params=["streamable_http", "sse", "stdio"])
def any_counter(request: pytest.FixtureRequest) -> McpServerSpec:
    """The counter server over each transport."""
    transport: str = request.param
    if transport == "stdio":
        return counter_spec("stdio")
    fixture = "counter_sse_url" if transport == "sse" else "counter_url"
    return counter_spec(transport, request.getfixturevalue(fixture))


# --- the three transports ---------------------------------------------------------------------


async def test_list_and_call_over_each_transport(any_counter: McpServerSpec) -> None:
    async with opened(any_counter) as session:
        tools = await session.list_tools(timeout=TIMEOUT)
        assert {tool.name for tool in tools} == COUNTER_TOOLS
        by_name = {tool.name: tool for tool in tools}
        assert by_name["sum"].description == "Calculate the sum of two numbers"

        assert await session.call_tool("sum", {"a": 2, "b": 40}, timeout=TIMEOUT) == (
            McpCallOutcome(output="42", error=None)
        )
        echoed = await session.call_tool("echo", {"message": "héllo"}, timeout=TIMEOUT)
        assert echoed.output == "héllo"
        hello = await session.call_tool("say_hello", {}, timeout=TIMEOUT)
        assert hello.output == "hello"

        failed = await session.call_tool("fail", {"message": "boom"}, timeout=TIMEOUT)
        assert failed.output is None
        assert failed.error is not None
        assert failed.error["type"] == "mcp_tool_execution_error"
        [block] = failed.error["content"]
        assert block["type"] == "text"
        assert "boom" in block["text"]
    assert session.closed
    assert leftover_session_tasks() == []


async def test_headers_reach_the_server(counter_url: str, counter_sse_url: str) -> None:
    headers = {"Authorization": "Bearer sk-test", "X-Test": "respgate"}
    for url in (counter_url, counter_sse_url):
        async with opened(counter_spec(transport_for_url(url), url, headers=headers)) as session:
            outcome = await session.call_tool("whoami", {}, timeout=TIMEOUT)
        assert outcome.output is not None, outcome.error
        assert json.loads(outcome.output) == {
            "authorization": "Bearer sk-test",
            "x-test": "respgate",
        }


async def test_stdio_environment_reaches_the_server() -> None:
    argv, env = stdio_command()
    spec = McpServerSpec("counter", transport="stdio", command=argv, env={**env, "X": "1"})
    async with opened(spec) as session:
        assert (await session.call_tool("sum", {"a": 1, "b": 1}, timeout=TIMEOUT)).output == "2"


# --- tool listings ------------------------------------------------------------------------------


async def raw_tools(url: str) -> dict[str, dict[str, Any]]:
    """The server's listing as the SDK's own client returns it (what "verbatim" means)."""
    async with Client(url, mode="legacy") as client:
        listing = await client.list_tools()
    return {tool.name: tool.input_schema for tool in listing.tools}


async def test_input_schemas_are_verbatim(counter_url: str) -> None:
    async with opened(counter_spec("streamable_http", counter_url)) as session:
        tools = {tool.name: tool for tool in await session.list_tools(timeout=TIMEOUT)}
    raw = await raw_tools(counter_url)
    assert {name: tool.input_schema for name, tool in tools.items()} == raw

    describe = tools["describe"].input_schema
    assert describe["properties"]["person"] == {"$ref": "#/$defs/Person"}
    assert set(describe["$defs"]) == {"Person", "Address"}
    assert describe["$defs"]["Person"]["required"] == ["name", "age"]

    total = tools["total"].input_schema
    assert total["properties"]["items"]["type"] == "array"
    assert total["properties"]["items"]["items"] == {"type": "integer"}

    say_hello = tools["say_hello"].input_schema
    assert say_hello["type"] == "object"
    assert say_hello["properties"] == {}
    assert "required" not in say_hello


async def test_list_item_tool_shape(counter_url: str) -> None:
    async with opened(counter_spec("streamable_http", counter_url)) as session:
        tools = {tool.name: tool for tool in await session.list_tools(timeout=TIMEOUT)}
    item = tools["sum"].to_item_tool()
    assert list(item) == ["name", "input_schema", "description", "annotations"]
    assert item["name"] == "sum"
    assert item["description"] == "Calculate the sum of two numbers"
    assert item["annotations"] is None
    assert item["input_schema"]["required"] == ["a", "b"]
    # the item is a copy: changing it leaves the listing alone
    item["input_schema"]["required"].append("c")
    assert tools["sum"].input_schema["required"] == ["a", "b"]


async def list_paged_tools(
    ctx: Any, params: mcp_types.PaginatedRequestParams | None
) -> mcp_types.ListToolsResult:
    """Three pages of two tools; the cursor is the next page's number."""
    page = int(params.cursor) if params is not None and params.cursor else 0
    tools = [
        mcp_types.Tool(name=f"p{page}_{i}", input_schema={"type": "object", "properties": {}})
        for i in range(2)
    ]
    return mcp_types.ListToolsResult(tools=tools, next_cursor=str(page + 1) if page < 2 else None)


@pytest.fixture(scope="module")
def paged_url() -> Iterator[str]:
    """A low-level MCP server whose tool listing comes in three pages."""
    server = Server("paged", on_list_tools=list_paged_tools)
    with serve_in_thread(server.streamable_http_app()) as base_url:
        yield f"{base_url}/mcp"


async def test_list_tools_reads_every_page(paged_url: str) -> None:
    async with opened(McpServerSpec("paged", url=paged_url)) as session:
        tools = await session.list_tools(timeout=TIMEOUT)
    assert [tool.name for tool in tools] == ["p0_0", "p0_1", "p1_0", "p1_1", "p2_0", "p2_1"]


# --- call results -------------------------------------------------------------------------------


async def test_structured_arguments(counter_url: str) -> None:
    async with opened(counter_spec("streamable_http", counter_url)) as session:
        total = await session.call_tool("total", {"items": [1, 2, 3, 4]}, timeout=TIMEOUT)
        person = {"name": "Ada", "age": 36, "address": {"city": "London"}}
        described = await session.call_tool("describe", {"person": person}, timeout=TIMEOUT)
    assert total.output == "10"
    assert described.output == "Ada (36) from London"


async def test_unknown_tool_and_invalid_arguments_are_errors(counter_url: str) -> None:
    async with opened(counter_spec("streamable_http", counter_url)) as session:
        unknown = await session.call_tool("no_such_tool", {}, timeout=TIMEOUT)
        invalid = await session.call_tool("sum", {"a": "x"}, timeout=TIMEOUT)
        # the session is still usable afterwards
        assert (await session.call_tool("sum", {"a": 1, "b": 2}, timeout=TIMEOUT)).output == "3"
    for outcome in (unknown, invalid):
        assert outcome.output is None
        assert outcome.error is not None
        assert outcome.error["type"] == "mcp_tool_execution_error"
    assert unknown.error is not None
    assert "no_such_tool" in unknown.error["content"][0]["text"]


# --- timeouts and failures ----------------------------------------------------------------------


async def test_call_timeout_keeps_the_session(counter_url: str) -> None:
    async with opened(counter_spec("streamable_http", counter_url)) as session:
        outcome = await session.call_tool("sleep", {"seconds": 30}, timeout=0.3)
        assert outcome == McpCallOutcome(
            output=None,
            error={
                "type": "mcp_protocol_error",
                "code": -32001,
                "message": "MCP call to sleep timed out after 0.3s",
            },
        )
        assert not session.closed
        assert (await session.call_tool("echo", {"message": "ok"}, timeout=TIMEOUT)).output == "ok"


async def test_cancelling_the_caller_propagates(counter_url: str) -> None:
    async with opened(counter_spec("streamable_http", counter_url)) as session:
        call = session.call_tool("sleep", {"seconds": 30}, timeout=60)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(call, timeout=0.3)
        assert not session.closed
        assert (await session.call_tool("echo", {"message": "ok"}, timeout=TIMEOUT)).output == "ok"


async def test_connection_refused() -> None:
    for path in ("mcp", "sse"):
        url = f"http://127.0.0.1:{free_port()}/{path}"
        with pytest.raises(McpError) as caught:
            await McpSession.open(
                counter_spec(transport_for_url(url), url), connect_timeout=5, egress=LOCAL
            )
        error = caught.value.error
        assert error["type"] == "mcp_protocol_error"
        assert error["code"] == -32000
        assert str(caught.value) == error["message"] == "cannot connect to MCP server counter"
    assert leftover_session_tasks() == []


@pytest.mark.parametrize(
    ("path", "status"),
    [("unauthorized", 401), ("no/such/endpoint", 404), ("no/such/sse", 404)],
)
async def test_http_error_status(counter_url: str, path: str, status: int) -> None:
    url = f"{base_of(counter_url)}/{path}"
    with pytest.raises(McpError) as caught:
        await McpSession.open(
            counter_spec(transport_for_url(url), url), connect_timeout=5, egress=LOCAL
        )
    error = caught.value.error
    assert error["type"] == "http_error"
    assert error["code"] == status
    assert f"HTTP {status}" in error["message"]


async def test_credentials_in_the_url_go_as_basic_authorization(counter_url: str) -> None:
    url = counter_url.replace("http://", "http://alice:open%20sesame@")
    async with opened(counter_spec("streamable_http", url)) as session:
        seen = await session.call_tool("whoami", {}, timeout=TIMEOUT)
    assert seen.output is not None
    expected = "Basic " + base64.b64encode(b"alice:open sesame").decode()
    assert json.loads(seen.output)["authorization"] == expected
    # an Authorization header of the spec wins over the URL's user information
    spec = counter_spec("streamable_http", url, headers={"Authorization": "Bearer t"})
    async with opened(spec) as session:
        seen = await session.call_tool("whoami", {}, timeout=TIMEOUT)
    assert seen.output is not None and json.loads(seen.output)["authorization"] == "Bearer t"


@contextlib.contextmanager
def silent_listener() -> Iterator[str]:
    """A TCP port that accepts connections and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"


async def test_connect_timeout() -> None:
    with silent_listener() as url, pytest.raises(McpError) as caught:
        await McpSession.open(
            counter_spec("streamable_http", url), connect_timeout=0.5, egress=LOCAL
        )
    # An open port that never answers reads like a closed one (the log says it timed out).
    assert caught.value.error == {
        "type": "mcp_protocol_error",
        "code": -32000,
        "message": "cannot connect to MCP server counter",
    }
    assert leftover_session_tasks() == []


# --- concurrency and closing --------------------------------------------------------------------


async def test_parallel_calls_from_several_tasks(counter_url: str) -> None:
    async with opened(counter_spec("streamable_http", counter_url)) as session:

        async def echo(index: int) -> McpCallOutcome:
            await asyncio.sleep(0)
            return await session.call_tool("echo", {"message": f"m{index}"}, timeout=TIMEOUT)

        echoes = [asyncio.create_task(echo(index)) for index in range(8)]
        sleeps = [
            asyncio.create_task(session.call_tool("sleep", {"seconds": 0.2}, timeout=TIMEOUT))
            for _ in range(4)
        ]
        results = await asyncio.gather(*echoes)
        assert [result.output for result in results] == [f"m{index}" for index in range(8)]
        assert [(await task).output for task in sleeps] == ["slept"] * 4


async def test_close_from_another_task_during_a_call(any_counter: McpServerSpec) -> None:
    session = await McpSession.open(any_counter, connect_timeout=TIMEOUT, egress=LOCAL)
    in_flight = asyncio.create_task(session.call_tool("sleep", {"seconds": 60}, timeout=120))
    await asyncio.sleep(0.3)
    assert not in_flight.done()

    await asyncio.wait_for(asyncio.create_task(session.aclose()), timeout=20)
    outcome = await asyncio.wait_for(in_flight, timeout=20)
    assert outcome.output is None
    assert outcome.error is not None
    assert outcome.error["type"] == "mcp_protocol_error"
    assert outcome.error["code"] == -32000
    assert session.closed

    after = await session.call_tool("sum", {"a": 1, "b": 2}, timeout=TIMEOUT)
    assert after.error is not None
    assert after.error["code"] == -32000
    with pytest.raises(McpError):
        await session.list_tools(timeout=TIMEOUT)
    await session.aclose()  # idempotent
    assert leftover_session_tasks() == []


DYING_HOST = "127.0.0.2"


@contextlib.contextmanager
def counter_process(transport: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """The counter server in a subprocess, so a test can kill it.

    It listens on a loopback address of its own, ``DYING_HOST``: once killed, its port may be
    handed to a server of another test (another pytest-xdist worker), which the dead server's
    clients would then reach.
    """
    port = free_port(DYING_HOST)
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "tests.mcp_servers.counter"),
            *("--transport", transport, "--host", DYING_HOST, "--port", str(port)),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            with contextlib.suppress(OSError), socket.create_connection((DYING_HOST, port), 0.2):
                break
            if process.poll() is not None:
                raise RuntimeError("the counter server exited")
            time.sleep(0.05)
        path = "sse" if transport == "sse" else "mcp"
        yield process, f"http://{DYING_HOST}:{port}/{path}"
    finally:
        process.kill()
        process.wait(timeout=10)


@pytest.mark.parametrize("transport", ["streamable_http", "sse"])
async def test_server_dying_during_a_call(transport: str) -> None:
    with counter_process(transport) as (process, url):
        session = await McpSession.open(
            counter_spec(transport, url), connect_timeout=TIMEOUT, egress=LOCAL
        )
        try:
            assert (await session.call_tool("sum", {"a": 1, "b": 2}, timeout=TIMEOUT)).output == "3"
            in_flight = asyncio.create_task(
                session.call_tool("sleep", {"seconds": 60}, timeout=120)
            )
            await asyncio.sleep(0.3)
            process.kill()
            outcome = await asyncio.wait_for(in_flight, timeout=20)
            assert outcome.error is not None
            assert outcome.error["type"] == "mcp_protocol_error"
            after = await session.call_tool("sum", {"a": 1, "b": 2}, timeout=5)
            assert after.error is not None
            assert session.closed
        finally:
            await session.aclose()
    assert leftover_session_tasks() == []


async def test_stdio_server_dying_during_a_call(tmp_path: Path) -> None:
    argv, env = stdio_command()
    pid_file = tmp_path / "server.pid"
    script = f'echo $$ > "{pid_file}"; exec "$@"'
    spec = McpServerSpec(
        "counter", transport="stdio", command=("sh", "-c", script, "sh", *argv), env=env
    )
    session = await McpSession.open(spec, connect_timeout=TIMEOUT, egress=LOCAL)
    try:
        in_flight = asyncio.create_task(session.call_tool("sleep", {"seconds": 60}, timeout=120))
        await asyncio.sleep(0.3)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        outcome = await asyncio.wait_for(in_flight, timeout=20)
        assert outcome.error is not None
        assert outcome.error["type"] == "mcp_protocol_error"
        assert outcome.error["code"] == -32000
        assert session.closed
    finally:
        await session.aclose()
    assert leftover_session_tasks() == []


# --- server-everything (npm) --------------------------------------------------------------------


async def test_server_everything(everything_url: str) -> None:
    async with opened(McpServerSpec("everything", url=everything_url)) as session:
        tools = {tool.name: tool for tool in await session.list_tools(timeout=TIMEOUT)}
        assert {"echo", "get-sum", "get-tiny-image"} <= set(tools)

        echo = tools["echo"]
        assert echo.description == "Echoes back the input string"
        assert echo.input_schema["$schema"].startswith("http://json-schema.org/")
        assert echo.input_schema["properties"]["message"]["type"] == "string"
        assert echo.annotations is not None
        assert echo.annotations["readOnlyHint"] is True
        assert echo.to_item_tool()["annotations"] == echo.annotations

        raw = await raw_tools(everything_url)
        assert {name: tool.input_schema for name, tool in tools.items()} == raw

        echoed = await session.call_tool("echo", {"message": "hi"}, timeout=TIMEOUT)
        assert echoed == McpCallOutcome(output="Echo: hi", error=None)
        summed = await session.call_tool("get-sum", {"a": 1, "b": 2}, timeout=TIMEOUT)
        assert summed.output == "The sum of 1 and 2 is 3."

        image = await session.call_tool("get-tiny-image", {}, timeout=TIMEOUT)
        assert image.output is not None
        blocks = [json.loads(line) for line in image.output.split("\n") if line.startswith("{")]
        assert any(block["type"] == "image" and block["mimeType"] for block in blocks)

        unknown = await session.call_tool("no-such-tool", {}, timeout=TIMEOUT)
        assert unknown.error is not None
        assert unknown.error["type"] in {"mcp_tool_execution_error", "mcp_protocol_error"}

        parallel = await asyncio.gather(
            *(session.call_tool("echo", {"message": str(i)}, timeout=TIMEOUT) for i in range(5))
        )
        assert [outcome.output for outcome in parallel] == [f"Echo: {i}" for i in range(5)]
