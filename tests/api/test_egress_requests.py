"""The egress policy seen by a client (the openai SDK) of the gateway: an MCP ``server_url`` on
a loopback address is refused by default and reached once ``[egress]`` allows it; a refused
address, a closed port, a port that never answers and a name that does not resolve all read the
same to the client, while the gateway's log says which; credentials in a ``server_url`` reach
the server but never the stored response, the stream, the upstream or the log."""

from __future__ import annotations

import base64
import json
import logging
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from app.options.egress import EgressSettings
from app.settings import Settings
from tests.fakes import ScriptedUpstream, function_call, message
from tests.helpers import free_port, in_process, local_egress, openai_client

UNREACHABLE = "Error retrieving tool list from MCP server: cannot connect to MCP server srv"


def mcp_tool(url: str) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "srv", "server_url": url, "require_approval": "never"}


def listing_of(settings: Settings, url: str) -> dict[str, Any]:
    """The ``mcp_list_tools`` item of a request naming ``url``, and what the model was offered."""
    upstream = ScriptedUpstream([[message("done")]])
    with in_process(create_app(settings, upstream=upstream)) as http:
        response = openai_client(http).responses.create(
            model="m", input="hi", tools=[mcp_tool(url)]
        )
    item: dict[str, Any] = response.output[0].model_dump()
    assert item["type"] == "mcp_list_tools"
    item["offered"] = [t["name"] for t in upstream.requests[0].get("tools") or []]
    return item


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


def test_a_loopback_server_url_is_refused_by_default_and_reached_when_allowed(
    counter_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    refused = listing_of(Settings(), counter_url)
    assert refused["error"] == UNREACHABLE
    assert refused["tools"] == [] and refused["offered"] == []
    assert "127.0.0.1 is a loopback address" in caplog.text  # the reason: in the log only

    allowed = listing_of(Settings(egress=local_egress()), counter_url)
    assert allowed.get("error") is None
    assert "sum" in [tool["name"] for tool in allowed["tools"]]
    assert "mcp__srv__sum" in allowed["offered"]


def test_refusals_closed_ports_timeouts_and_unknown_names_read_the_same(
    silent_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    egress = EgressSettings(allow_networks=["127.0.0.0/8"], resolve_timeout=1.0)
    settings = Settings(egress=egress, mcp={"connect_timeout": 1.0})  # type: ignore[arg-type]
    urls = {
        "refused": "http://10.20.30.40:5432/mcp",
        "closed": f"http://127.0.0.1:{free_port()}/mcp",
        "silent": f"http://127.0.0.1:{silent_port}/mcp",
        "unknown": "http://no-such-host.invalid/mcp",
    }
    errors = {case: listing_of(settings, url)["error"] for case, url in urls.items()}
    assert errors == dict.fromkeys(urls, UNREACHABLE)
    log = caplog.text
    assert "10.20.30.40 is a private address" in log
    assert "no-such-host.invalid" in log and "resolve" in log
    assert "timed out" in log


SECRETS = ("pa55-SECRET-word", "tok-SECRET-123", "sig-SECRET-456")


@pytest.mark.parametrize("stream", [False, True])
def test_credentials_in_a_server_url_are_never_stored_streamed_or_logged(
    counter_url: str, _isolated_data_dir: Path, caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    caplog.set_level(logging.DEBUG)
    url = counter_url.replace("http://", "http://alice:pa55-SECRET-word@")
    url += "?token=tok-SECRET-123&sig=sig-SECRET-456&view=full"
    upstream = ScriptedUpstream(
        [[function_call("mcp__srv__sum", '{"a": 1, "b": 2}')], [message("3")]]
    )
    app = create_app(Settings(egress=local_egress()), upstream=upstream)
    body = {"model": "m", "input": "add", "tools": [mcp_tool(url)]}
    with in_process(app) as http:
        if stream:
            with http.stream("POST", "/v1/responses", json={**body, "stream": True}) as reply:
                text = "".join(reply.iter_text())
            lines = [line[6:] for line in text.splitlines() if line.startswith("data: {")]
            response = json.loads(lines[-1])["response"]
        else:
            reply = http.post("/v1/responses", json=body)
            assert reply.status_code == 200, reply.text
            text = reply.text
            response = reply.json()
        stored = http.get(f"/v1/responses/{response['id']}").json()
    assert [item["type"] for item in response["output"]] == [
        "mcp_list_tools",
        "mcp_call",
        "message",
    ]
    assert response["output"][1]["output"] == "3"  # the server was reached
    shown = counter_url.replace("http://", "http://***@")
    assert stored["tools"][0]["server_url"] == f"{shown}?token=***&sig=***&view=full"
    assert stored == response
    basic = base64.b64encode(b"alice:pa55-SECRET-word").decode()
    with sqlite3.connect(_isolated_data_dir / "respgate.db") as db:
        rows = db.execute("SELECT response FROM responses").fetchall()
        rows += db.execute("SELECT payload FROM items").fetchall()
    assert "token=***" in caplog.text  # httpx2 logged each request's URL: redacted
    for where in (text, json.dumps(stored), json.dumps(upstream.requests), str(rows), caplog.text):
        assert not any(secret in where for secret in SECRETS)
        assert basic not in where
