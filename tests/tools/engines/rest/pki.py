"""A throwaway PKI for TLS tests: a CA, a server certificate for 127.0.0.1 and a client
certificate it signed, written as PEM files (``make_pki``)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


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


def make_pki(folder: Path) -> Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, in ``folder``."""
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
