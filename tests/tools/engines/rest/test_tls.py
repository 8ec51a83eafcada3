"""TLS: a server with a certificate of a self-signed CA that requires a client certificate.
The engine reaches it with ``ca_bundle`` and the client certificate; without the CA (verify on
by default) or without the client certificate the call is a ``network_error``."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from app.tools.engines.rest import RestEngine
from tests.tools.engines.rest.helpers import call, local_server, tool


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    usage: x509.ObjectIdentifier | None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer or (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if usage is None:  # the CA
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), True
        )
    else:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), False)
        if usage == ExtendedKeyUsageOID.SERVER_AUTH:
            san = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            builder = builder.add_extension(x509.SubjectAlternativeName(san), False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(
    folder: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> tuple[Path, Path]:
    cert_path, key_path = folder / f"{stem}.crt", folder / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("respgate test CA", ca_key, None, None)
    ca_path, _ = _write(folder, "ca", ca, ca_key)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue("127.0.0.1", server_key, (ca.subject, ca_key), ExtendedKeyUsageOID.SERVER_AUTH)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue(
        "a rest tool", client_key, (ca.subject, ca_key), ExtendedKeyUsageOID.CLIENT_AUTH
    )
    return Pki(
        ca_path,
        *_write(folder, "server", server, server_key),
        *_write(folder, "client", client, client_key),
    )


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
