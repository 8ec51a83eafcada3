"""Background mode's cost per request against the same request in the foreground, in one run:
the gateway in this process (Starlette's test client, no socket) over an upstream that answers
at once (tests.fakes.FakeUpstream), with its embedded SQLite store in a temporary directory.

    python bench/background_bench.py              # 300 requests per case
    python bench/background_bench.py --requests 100

Cases (each request sequential, so the figures are one request's latency):
- ``json``: ``POST /v1/responses`` (foreground), against ``background: true`` then ``GET`` until
  the response is ``completed`` (the polls are counted);
- ``sse``: a streamed create read to its end, against ``background: true, stream: true`` read to
  its end (the background run's events go through the store's event log first).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.main import create_app
from app.settings import Settings
from tests.fakes import FakeUpstream, message, round_events, text_response
from tests.helpers import in_process

BODY = {"model": "m", "input": "hello"}


def timed(count: int, one: Callable[[], None]) -> list[float]:
    for _ in range(min(20, count)):  # warm up
        one()
    out = []
    for _ in range(count):
        start = time.perf_counter()
        one()
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    upstream = FakeUpstream(
        events=round_events([message("hi there")]), body=text_response("hi there")
    )
    polls: list[int] = []
    with tempfile.TemporaryDirectory() as data:
        settings = Settings(database_url=f"sqlite+aiosqlite:///{data}/respgate.db")
        with in_process(create_app(settings, upstream=upstream)) as http:

            def fg_json() -> None:
                assert http.post("/v1/responses", json=BODY).json()["status"] == "completed"

            def bg_json() -> None:
                response: dict[str, Any] = http.post(
                    "/v1/responses", json={**BODY, "background": True}
                ).json()
                count = 0
                while response["status"] != "completed":
                    response = http.get(f"/v1/responses/{response['id']}").json()
                    count += 1
                polls.append(count)

            def sse(body: dict[str, Any]) -> Callable[[], None]:
                def run() -> None:
                    with http.stream("POST", "/v1/responses", json=body) as reply:
                        text = "".join(reply.iter_text())
                    assert "response.completed" in text

                return run

            cases = {
                "json foreground": timed(args.requests, fg_json),
                "json background (create + polls)": timed(args.requests, bg_json),
                "sse foreground": timed(args.requests, sse({**BODY, "stream": True})),
                "sse background": timed(
                    args.requests, sse({**BODY, "stream": True, "background": True})
                ),
            }
    medians = {name: statistics.median(values) for name, values in cases.items()}
    for name, value in medians.items():
        print(f"{name:36s} median {value:7.3f} ms")
    json_ratio = medians["json background (create + polls)"] / medians["json foreground"]
    sse_ratio = medians["sse background"] / medians["sse foreground"]
    print(f"json: background / foreground = {json_ratio:.2f}x, polls {statistics.median(polls):g}")
    print(f"sse:  background / foreground = {sse_ratio:.2f}x")


if __name__ == "__main__":
    main()
