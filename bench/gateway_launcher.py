"""Run the gateway like ``respgate serve``, with a chosen upstream client and optional profiler.

    python bench/gateway_launcher.py --upstream-url http://127.0.0.1:18000 --port 9000 \
        [--client aiohttp|httpx] [--profile cprofile|pyinstrument --profile-out FILE]

Settings are built with ``app.settings.load_settings`` and the app with
``create_app(settings, upstream=...)``; uvicorn gets the same options as ``app.cli._serve``
(uvicorn's defaults otherwise: uvloop and httptools when installed, one worker).
``--client aiohttp`` injects the gateway's own ``ResponsesUpstream`` (the same object
``create_app`` would build); ``--client httpx`` injects ``bench/httpx_upstream.HttpxUpstream``.
SIGINT or SIGTERM stops uvicorn gracefully; the profile is written after it returned.

``--whatif a,b,...`` patches the app at run time to measure proposed optimizations before
anyone writes them (benchmark only; app/ is not changed):

  starlette-route   POST /v1/responses served by a plain Starlette Route (no FastAPI
                    dependency solving / request-model machinery); same endpoint function
  json-copy         copy.deepcopy in app.core.* replaced by orjson.loads(orjson.dumps(x))
                    (the data is JSON-derived, so the result is the same)
  streaming-response  Starlette StreamingResponse instead of sse-starlette's EventSourceResponse
                    for the same frames (no keep-alive pings, no per-event cancel scope)
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _starlette_route(app: Any) -> None:
    from starlette.routing import Route

    from app.api.routes.responses import create_response

    # FastAPI keeps included routers as nested objects; a Route placed first wins the full
    # match for POST /v1/responses, everything else is routed as before.
    app.router.routes.insert(0, Route("/v1/responses", create_response, methods=["POST"]))


def _json_copy(app: Any) -> None:
    import importlib

    import orjson

    class JsonCopy:
        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            return orjson.loads(orjson.dumps(value))

    import pkgutil

    import app.core

    for info in pkgutil.iter_modules(app.core.__path__, "app.core."):
        module = importlib.import_module(info.name)
        if getattr(module, "copy", None) is not None:
            setattr(module, "copy", JsonCopy)  # noqa: B010 (module attribute swap)


def _streaming_response(app: Any) -> None:
    from collections.abc import AsyncIterator

    from starlette.responses import StreamingResponse

    import app.api.routes.responses as routes
    from app.api import sse

    def event_stream_response(events: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
        return StreamingResponse(
            sse._frames(events),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )

    if not hasattr(routes, "event_stream_response"):
        raise SystemExit("what-if streaming-response: routes.event_stream_response not found")
    routes.event_stream_response = event_stream_response


WHATIF = {
    "starlette-route": _starlette_route,
    "json-copy": _json_copy,
    "streaming-response": _streaming_response,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--upstream-url", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--client", choices=("aiohttp", "httpx"), default="aiohttp")
    ap.add_argument("--log-level", default="warning")
    ap.add_argument(
        "--whatif", default="", help="comma list: starlette-route,json-copy,streaming-response"
    )
    ap.add_argument("--profile", choices=("none", "cprofile", "pyinstrument"), default="none")
    ap.add_argument("--profile-out", type=Path)
    ap.add_argument(
        "--profile-signals",
        action="store_true",
        help="profile only between SIGUSR1 (start) and SIGUSR2 (stop and write the profile)",
    )
    args = ap.parse_args()

    import uvicorn

    from app.core.ports import Upstream
    from app.main import build_upstream, create_app
    from app.settings import load_settings

    settings = load_settings(
        None,
        host=args.host,
        port=args.port,
        upstream_url=args.upstream_url,
        log_level=args.log_level,
    )
    upstream: Upstream
    if args.client == "httpx":
        from httpx_upstream import HttpxUpstream

        upstream = HttpxUpstream(
            settings.upstream_url,
            api_key=settings.upstream_api_key,
            connect_timeout=settings.upstream_connect_timeout,
            read_timeout=settings.upstream_read_timeout,
            max_connections=settings.upstream_max_connections,
        )
    else:
        upstream = build_upstream(settings)
    app = create_app(settings, upstream=upstream)
    for patch in filter(None, (p.strip() for p in args.whatif.split(","))):
        WHATIF[patch](app)
        print(f"what-if patch applied: {patch}", file=sys.stderr, flush=True)

    def serve() -> None:
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level.lower(),
            access_log=False,
            timeout_graceful_shutdown=10,
        )

    out = args.profile_out
    if args.profile == "none":
        serve()
        return 0
    if args.profile == "cprofile":
        import cProfile

        prof = cProfile.Profile()
        out = out or Path("/tmp/respgate-gateway.prof")

        def start() -> None:
            prof.enable()

        def stop() -> None:
            prof.disable()
            prof.dump_stats(str(out))

    else:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.001, async_mode="disabled")
        out = out or Path("/tmp/respgate-gateway.pyisession")

        def start() -> None:
            profiler.start()

        def stop() -> None:
            session = profiler.stop()
            session.save(str(out))

    if args.profile_signals:
        # The handlers run on the main thread, between bytecodes of the event loop's callbacks.
        signal.signal(signal.SIGUSR1, lambda *_: start())
        signal.signal(signal.SIGUSR2, lambda *_: stop())
        serve()
    else:
        start()
        try:
            serve()
        finally:
            stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
