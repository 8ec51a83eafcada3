"""``RestClient``: the ``rest`` engine's HTTP calls over aiohttp, and what their answers become.

One ``aiohttp.ClientSession`` per distinct TLS setting (CA bundle, client certificate and key,
verify), made on first use and kept until ``aclose``, each on the egress policy's connector
(``app.net.egress_aiohttp``): a request goes to the host:port its binding names (the operator's
destination, trusted by the policy as the engine first calls it, resolved once and connected
to at the checked address; cloud metadata addresses stay refused). ``send`` makes one request
and turns every way it can end into an ``EngineResult``, never an exception:

- 2xx: the body as text (JSON re-serialised compactly); a body over ``max_bytes`` (announced by
  Content-Length, or read: never more than ``max_bytes + 1`` bytes) is ``response_too_large``.
- Any other status is ``http_status`` (status, reason and the body's first
  ``ERROR_BODY_CHARS`` characters). Redirects are **not followed**: a 3xx is an ``http_status``
  failure too, so a tool cannot be sent elsewhere than its binding says.
- No complete answer within the timeout is ``timeout``; connection, DNS and TLS errors are
  ``network_error``; a certificate or key file that cannot be loaded is ``configuration_error``.

Every message and output has the request's secrets (``Request.secrets``) replaced by ``***``
(a server that echoes a header back does not put the secret in the session's history), and the
URL it shows has its credentials redacted (``core.redaction``).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

import aiohttp
import certifi
import orjson

from app.core.engines import EngineCall, EngineResult
from app.core.redaction import redact_text, redact_url
from app.net.egress import EgressPolicy
from app.net.egress_aiohttp import EgressConnector
from app.tools.engines.rest.binding import Request, TlsSettings

ERROR_BODY_CHARS = 2000
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """How long one request may take (seconds) and how large its answer may be (bytes)."""

    timeout: float
    max_bytes: int


def _tls_context(tls: TlsSettings) -> ssl.SSLContext | bool:
    if not tls.verify:
        return False
    context = ssl.create_default_context(cafile=tls.ca_bundle or certifi.where())
    if tls.client_cert is not None:
        context.load_cert_chain(tls.client_cert, tls.client_key)
    return context


def _hide(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _as_text(raw: bytes, charset: str | None) -> str:
    try:
        return orjson.dumps(orjson.loads(raw)).decode()
    except orjson.JSONDecodeError:
        pass
    try:
        return raw.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return raw.decode("utf-8", errors="replace")


async def _read_bounded(resp: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The body, or None when it is longer than ``limit`` (at most ``limit + 1`` bytes read)."""
    length = resp.content_length
    if length is not None:  # aiohttp reads no more than Content-Length says
        return await resp.read() if length <= limit else None
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = await resp.content.read(min(_READ_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return None if size > limit else b"".join(chunks)


class RestClient:
    """The aiohttp sessions of one engine (see the module docstring)."""

    def __init__(
        self, connections_per_session: int = 100, *, egress: EgressPolicy | None = None
    ) -> None:
        self._limit = connections_per_session
        self._egress = egress or EgressPolicy()
        self._sessions: dict[TlsSettings, tuple[aiohttp.ClientSession, EgressConnector]] = {}

    def _session(self, tls: TlsSettings, url: str) -> aiohttp.ClientSession:
        """The session of ``tls``, its connector trusting the host:port of ``url`` (a
        binding's: the operator's)."""
        entry = self._sessions.get(tls)
        if entry is None or entry[0].closed:
            connector = EgressConnector(self._egress, ssl=_tls_context(tls), limit=self._limit)
            session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
            entry = self._sessions[tls] = (session, connector)
        entry[1].trust(url)
        return entry[0]

    async def aclose(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session, _connector in sessions:
            await session.close()

    async def send(
        self, call: EngineCall, request: Request, tls: TlsSettings, limits: Limits
    ) -> EngineResult:
        try:
            session = self._session(tls, request.url)
        except (OSError, ssl.SSLError, ValueError) as exc:
            return EngineResult.failure(
                call, "configuration_error", f"the TLS settings cannot be loaded: {exc}"
            )
        try:
            async with asyncio.timeout(limits.timeout):
                return await self._exchange(call, session, request, limits.max_bytes)
        except TimeoutError:
            return EngineResult.failure(
                call,
                "timeout",
                f"no answer from {request.method} {redact_url(request.url)} within "
                f"{limits.timeout:g} s",
            )
        except aiohttp.ClientError as exc:
            message = f"{request.method} {request.url} failed: {type(exc).__name__}: {exc}"
            return EngineResult.failure(
                call, "network_error", _hide(redact_text(message), request.secrets)
            )

    async def _exchange(
        self, call: EngineCall, session: aiohttp.ClientSession, request: Request, max_bytes: int
    ) -> EngineResult:
        async with session.request(
            request.method,
            request.url,
            params=request.params or None,
            data=request.json_body,
            headers=request.headers,
            allow_redirects=False,
        ) as resp:
            raw = await _read_bounded(resp, max_bytes)
            if raw is None:
                resp.close()  # the rest is not read: the connection cannot be reused
            if not 200 <= resp.status < 300:
                body = _as_text(raw, resp.charset) if raw is not None else "(body too large)"
                message = (
                    f"HTTP {resp.status} {resp.reason or ''}".rstrip()
                    + f" from {request.method} {redact_url(request.url)}: "
                    + body[:ERROR_BODY_CHARS]
                )
                return EngineResult.failure(
                    call,
                    "http_status",
                    _hide(message, request.secrets),
                    detail={"status": resp.status},
                )
            if raw is None:
                return EngineResult.failure(
                    call,
                    "response_too_large",
                    f"the answer of {request.method} {redact_url(request.url)} is larger than "
                    f"{max_bytes} bytes",
                )
            output = _hide(_as_text(raw, resp.charset), request.secrets)
            return EngineResult(call_id=call.call_id, output=output)
