"""The floor: a bare Starlette pass-through proxy for ``POST /v1/responses`` (no gateway logic).

    python bench/minimal_proxy.py --upstream-url http://127.0.0.1:18000 --port 9100 \
        --client aiohttp|httpx

It forwards the client's bytes and returns the upstream's bytes (SSE streamed through
unchanged), under uvicorn with the same options as ``respgate serve``. It is the kind of
20-line proxy the issue's httpx-vs-aiohttp figures came from; bench/upstream_clients.py runs
it next to the gateway to separate what the HTTP client costs from what the gateway adds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from typing import Any


def build(upstream_url: str, client: str) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    url = upstream_url.rstrip("/") + "/v1/responses"
    state: dict[str, Any] = {}
    headers = {"content-type": "application/json"}

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    if client == "aiohttp":
        import aiohttp

        async def responses(request: Request) -> Response:
            body = await request.body()
            session: aiohttp.ClientSession = state["session"]
            resp = await session.post(url, data=body, headers=headers)
            ctype = resp.headers.get("content-type", "application/json")
            if ctype.startswith("text/event-stream"):

                async def relay() -> AsyncIterator[bytes]:
                    try:
                        async for chunk in resp.content.iter_any():
                            yield chunk
                    finally:
                        resp.release()

                return StreamingResponse(relay(), media_type="text/event-stream")
            raw = await resp.read()
            resp.release()
            return Response(raw, status_code=resp.status, media_type="application/json")

        async def startup() -> None:
            state["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))

        async def shutdown() -> None:
            await state["session"].close()

    else:
        import httpx

        async def responses(request: Request) -> Response:
            body = await request.body()
            cl: httpx.AsyncClient = state["client"]
            resp = await cl.send(
                cl.build_request("POST", url, content=body, headers=headers), stream=True
            )
            ctype = resp.headers.get("content-type", "application/json")
            if ctype.startswith("text/event-stream"):

                async def relay() -> AsyncIterator[bytes]:
                    try:
                        async for chunk in resp.aiter_raw():
                            yield chunk
                    finally:
                        await resp.aclose()

                return StreamingResponse(relay(), media_type="text/event-stream")
            raw = await resp.aread()
            await resp.aclose()
            return Response(raw, status_code=resp.status_code, media_type="application/json")

        async def startup() -> None:
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
            state["client"] = httpx.AsyncClient(limits=limits, trust_env=False)

        async def shutdown() -> None:
            await state["client"].aclose()

    import contextlib

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        await startup()
        try:
            yield
        finally:
            await shutdown()

    return Starlette(
        routes=[Route("/v1/responses", responses, methods=["POST"]), Route("/health", health)],
        lifespan=lifespan,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--upstream-url", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--client", choices=("aiohttp", "httpx"), default="aiohttp")
    args = ap.parse_args()
    import uvicorn

    uvicorn.run(
        build(args.upstream_url, args.client),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
