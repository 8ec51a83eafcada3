"""MCP tools over HTTP: credentials never echoed nor stored, bad tools rejected up front.

(That the credentials do reach the MCP server is tested in tests/tools/test_registry.py.)
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from app.settings import Settings
from tests.fakes import ScriptedUpstream, function_call, message
from tests.helpers import in_process, local_egress

SECRET = "tok-very-secret-123"


def mcp_tool(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "mcp",
        "server_label": "counter",
        "server_url": url,
        "require_approval": "never",
        "headers": {"X-Test": SECRET + "-header"},
        "authorization": SECRET,
        **extra,
    }


@pytest.mark.parametrize("stream", [False, True])
def test_headers_and_authorization_are_never_echoed_nor_stored(
    counter_url: str, _isolated_data_dir: Path, stream: bool
) -> None:
    upstream = ScriptedUpstream(
        [[function_call("mcp__counter__sum", '{"a": 1, "b": 2}')], [message("3")]]
    )
    app = create_app(Settings(egress=local_egress()), upstream=upstream)
    with in_process(app) as client:
        body = {"model": "m", "input": "who am I?", "tools": [mcp_tool(counter_url)]}
        if stream:
            with client.stream("POST", "/v1/responses", json={**body, "stream": True}) as reply:
                text = "".join(reply.iter_text())
            assert SECRET not in text
            done = [
                json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")
            ][-1]
            response = done["response"]
        else:
            reply = client.post("/v1/responses", json=body)
            assert reply.status_code == 200, reply.text
            assert SECRET not in reply.text
            response = reply.json()
        assert response["output"][1]["output"] == "3"
        stored = client.get(f"/v1/responses/{response['id']}").json()
        assert stored == response
        [tool] = stored["tools"]
        assert "headers" not in tool and "authorization" not in tool
        assert tool["server_url"] == counter_url
        sent_tools = upstream.requests[0]["tools"]
        assert all("authorization" not in t and "headers" not in t for t in sent_tools)
    database = _isolated_data_dir / "respgate.db"
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT response FROM responses").fetchall()
        rows += db.execute("SELECT payload FROM items").fetchall()
    assert rows and all(SECRET not in str(row) for row in rows)


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        (
            {"type": "mcp", "server_label": "x", "server_url": "file:///etc/passwd"},
            "tools[0].server_url",
        ),
        ({"type": "mcp", "server_label": "x"}, "tools[0].server_url"),
        ({"type": "mcp", "server_url": "http://127.0.0.1:9/mcp"}, "tools[0].server_label"),
    ],
)
def test_bad_mcp_tools_are_400s_and_store_nothing(tool: dict[str, Any], param: str) -> None:
    upstream = ScriptedUpstream([])
    app = create_app(Settings(), upstream=upstream)
    with in_process(app) as client:
        for stream in (False, True):
            body = {"model": "m", "input": "hi", "tools": [tool], "stream": stream}
            reply = client.post("/v1/responses", json=body)
            assert reply.status_code == 400, reply.text
            error = reply.json()["error"]
            assert error["type"] == "invalid_request_error" and error["param"] == param
    assert upstream.requests == []
