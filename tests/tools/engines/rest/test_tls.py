"""TLS: a server with a certificate of a self-signed CA that requires a client certificate.
The engine reaches it with ``ca_bundle`` and the client certificate; without the CA (verify on
by default) or without the client certificate the call is a ``network_error``."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from app.tools.engines.rest import RestEngine
from tests.tools.engines.rest.helpers import call, local_server, tool
from tests.tools.engines.rest.pki import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
async def https_url(pki: Pki) -> AsyncIterator[str]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.verify_mode = ssl.CERT_REQUIRED

    async def whoami(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(part[0] for part in peer["subject"]) if peer else {}
        return web.json_response({"client": subject.get("commonName")})

    app = web.Application()
    app.router.add_get("/whoami", whoami)
    async with local_server(app, context) as url:
        yield url


@pytest.fixture
async def engine() -> AsyncIterator[RestEngine]:
    engine = RestEngine(environ={})
    await engine.setup("s")
    yield engine
    await engine.aclose()


async def test_ca_bundle_and_client_certificate(
    engine: RestEngine, https_url: str, pki: Pki
) -> None:
    tls = {
        "ca_bundle": str(pki.ca),
        "client_cert": str(pki.client_cert),
        "client_key": str(pki.client_key),
    }
    [result] = await engine.execute("s", [call(tool({"url": https_url + "/whoami", "tls": tls}))])
    assert result.ok, result.error
    assert result.output == '{"client":"a rest tool"}'


async def test_without_the_ca_verification_fails(
    engine: RestEngine, https_url: str, pki: Pki
) -> None:
    tls = {"client_cert": str(pki.client_cert), "client_key": str(pki.client_key)}
    [result] = await engine.execute("s", [call(tool({"url": https_url + "/whoami", "tls": tls}))])
    assert result.error is not None and result.error.kind == "network_error"
    assert "certificate" in result.error.message.lower()


async def test_without_the_client_certificate_the_server_refuses(
    engine: RestEngine, https_url: str, pki: Pki
) -> None:
    tls = {"ca_bundle": str(pki.ca)}
    [result] = await engine.execute("s", [call(tool({"url": https_url + "/whoami", "tls": tls}))])
    assert result.error is not None and result.error.kind == "network_error"


async def test_unreadable_tls_files_are_a_configuration_error(
    engine: RestEngine, https_url: str, tmp_path: Path
) -> None:
    tls = {"ca_bundle": str(tmp_path / "absent.pem")}
    [result] = await engine.execute("s", [call(tool({"url": https_url + "/whoami", "tls": tls}))])
    assert result.error is not None and result.error.kind == "configuration_error"
