"""A real MCP server for the tests, built with the Python SDK's ``MCPServer``.

Served over streamable HTTP or SSE in a daemon thread (``serve_counter``), or over stdio as a
subprocess (``python -m tests.mcp_servers.counter --stdio``, see ``stdio_command``).

Besides the MCP endpoint the HTTP apps answer ``/unauthorized`` with a 401 for every method, so
tests can point a client at an endpoint that rejects it at the HTTP level.
"""

from __future__ import annotations

import argparse
import asyncio
import builtins
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.helpers import serve_in_thread

ROOT = Path(__file__).resolve().parents[2]

CounterTransport = Literal["streamable_http", "sse"]


class Address(BaseModel):
    city: str
    country: str = "FR"


class Person(BaseModel):
    """Someone to describe (a nested model, so the tool's schema carries $defs and $ref)."""

    name: str
    age: int = Field(ge=0)
    address: Address | None = None


def build_counter_server() -> MCPServer:
    """A fresh ``counter`` server (one per app: an app's session manager runs once)."""
    server = MCPServer("counter")

    @server.tool(description="Calculate the sum of two numbers")
    def sum(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Echo a message back")
    def echo(message: str) -> str:
        return message

    @server.tool(description="Say hello to the client")
    def say_hello() -> str:
        return "hello"

    @server.tool(description="Sleep for a number of seconds, then answer 'slept'")
    async def sleep(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "slept"

    @server.tool(description="Fail with the given message")
    def fail(message: str) -> str:
        raise ToolError(message)

    @server.tool(description="The Authorization and X-Test headers of the HTTP request, as JSON")
    def whoami(ctx: Context) -> str:
        headers = ctx.headers or {}
        return json.dumps(
            {"authorization": headers.get("authorization"), "x-test": headers.get("x-test")}
        )

    @server.tool(description="Add up a list of integers")
    def total(items: list[int]) -> int:
        return builtins.sum(items)

    @server.tool(description="Describe a person")
    def describe(person: Person) -> str:
        where = f" from {person.address.city}" if person.address else ""
        return f"{person.name} ({person.age}){where}"

    @server.custom_route("/unauthorized", methods=["GET", "POST", "DELETE"])
    async def unauthorized(request: Request) -> Response:
        return JSONResponse({"detail": "missing or bad token"}, status_code=401)

    return server


def counter_app(transport: CounterTransport) -> Starlette:
    """The Starlette app serving a fresh counter server over ``transport``."""
    server = build_counter_server()
    if transport == "sse":
        return server.sse_app()
    return server.streamable_http_app()


@contextlib.contextmanager
def serve_counter(transport: CounterTransport = "streamable_http") -> Iterator[str]:
    """Serve the counter server on 127.0.0.1 (free port, daemon thread); yields its endpoint."""
    with serve_in_thread(counter_app(transport)) as base_url:
        yield f"{base_url}/sse" if transport == "sse" else f"{base_url}/mcp"


def stdio_command() -> tuple[tuple[str, ...], dict[str, str]]:
    """argv and environment additions that start the counter server over stdio."""
    argv = (sys.executable, "-m", "tests.mcp_servers.counter", "--stdio")
    return argv, {"PYTHONPATH": str(ROOT)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout")
    parser.add_argument("--transport", choices=["streamable_http", "sse"], default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    server = build_counter_server()
    if args.stdio or args.transport is None:
        server.run("stdio")
    elif args.transport == "sse":
        server.run("sse", host=args.host, port=args.port)
    else:
        server.run("streamable-http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
