"""Requests and tokens per minute per caller, counted with the ``limits`` library: in this
process's memory, or in Redis when ``redis_url`` is set (replicas then share the counts).

One fixed window of a minute per caller and kind: every request counts one when it is admitted;
the tokens of a completed response count when it completes, even past the limit (the caller is
then refused until the window ends). A request is admitted while its caller has tokens left and
requests left. When Redis cannot be reached the gateway lets requests through and logs it (at most
once a minute): a rate limit is no reason to stop serving.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Literal

from limits import RateLimitItem, RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import FixedWindowRateLimiter

logger = logging.getLogger(__name__)

Kind = Literal["requests", "tokens"]


@dataclass(frozen=True, slots=True)
class Bucket:
    """One caller's counters: its key in the store, and its limits (0: none)."""

    key: str
    requests: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Window:
    """One kind's state for a caller, as the ``x-ratelimit-*`` headers report it."""

    limit: int
    remaining: int
    reset_at: float  # epoch seconds

    def reset_in(self, now: float) -> float:
        return max(0.0, self.reset_at - now)


@dataclass(slots=True)
class Admission:
    """A request's admission: refused for ``refused`` (None: admitted), and the windows."""

    refused: Kind | None = None
    windows: dict[Kind, Window] = field(default_factory=dict)

    def headers(self) -> list[tuple[bytes, bytes]]:
        """OpenAI's ``x-ratelimit-*`` headers (and ``retry-after`` when refused)."""
        now = time.time()
        out: list[tuple[bytes, bytes]] = []
        for kind, window in self.windows.items():
            out.append((f"x-ratelimit-limit-{kind}".encode(), str(window.limit).encode()))
            out.append((f"x-ratelimit-remaining-{kind}".encode(), str(window.remaining).encode()))
            reset = duration(window.reset_in(now))
            out.append((f"x-ratelimit-reset-{kind}".encode(), reset.encode()))
        if self.refused is not None:
            wait = self.windows[self.refused].reset_in(now)
            out.append((b"retry-after", str(max(1, math.ceil(wait))).encode()))
            out.append((b"retry-after-ms", str(max(1, math.ceil(wait * 1000))).encode()))
        return out


# Seconds requests go uncounted after the store failed, and how long one call to Redis may take.
_RETRY_STORE_AFTER = 5.0
_REDIS_TIMEOUT = 1.0


def _redis_storage(redis_url: str) -> Storage:
    """The counters in Redis (redis-py's asyncio client): short timeouts and no retries, so an
    unreachable Redis costs a request at most about a second, then nothing for a while."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return RedisStorage(
        f"async+{redis_url}",
        implementation="redispy",
        key_prefix="respgate-limits",
        socket_connect_timeout=_REDIS_TIMEOUT,
        socket_timeout=_REDIS_TIMEOUT,
        retry=Retry(NoBackoff(), 0),  # type: ignore[arg-type]
    )


def duration(seconds: float) -> str:
    """OpenAI's reset format: ``350ms``, ``12s``, ``1m3s``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    minutes, rest = divmod(whole, 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


class RateCounter:
    """Counts requests and tokens per caller per minute (see the module docstring)."""

    def __init__(self, redis_url: str | None = None) -> None:
        self._storage = _redis_storage(redis_url) if redis_url else MemoryStorage()
        self._limiter = FixedWindowRateLimiter(self._storage)
        self._items: dict[tuple[Kind, int], RateLimitItem] = {}
        self._warned_at = -math.inf
        # After a failure of the store, requests are let through without asking it for a while
        # (a store that is down must not add its timeouts to every request).
        self._down_until = -math.inf

    def _item(self, kind: Kind, amount: int) -> RateLimitItem:
        item = self._items.get((kind, amount))
        if item is None:
            item = self._items[(kind, amount)] = RateLimitItemPerMinute(amount, namespace=kind)
        return item

    async def admit(self, bucket: Bucket) -> Admission:
        """Count one request for ``bucket`` unless it is out of tokens or of requests."""
        admission = Admission()
        if time.monotonic() < self._down_until:
            return admission
        try:
            if bucket.tokens:
                tokens = await self._window("tokens", bucket)
                admission.windows["tokens"] = tokens
                if tokens.remaining <= 0:
                    admission.refused = "tokens"
            if bucket.requests:
                item = self._item("requests", bucket.requests)
                if admission.refused is None and not await self._limiter.hit(item, bucket.key):
                    admission.refused = "requests"
                admission.windows["requests"] = await self._window("requests", bucket)
        except Exception as exc:  # the store is down: serve, and say so
            self._warn(exc)
            return Admission()
        return admission

    async def charge(self, bucket: Bucket, tokens: int) -> None:
        """Count ``tokens`` of a completed response for ``bucket``."""
        if not bucket.tokens or tokens <= 0 or time.monotonic() < self._down_until:
            return
        try:
            await self._limiter.hit(self._item("tokens", bucket.tokens), bucket.key, cost=tokens)
        except Exception as exc:
            self._warn(exc)

    async def _window(self, kind: Kind, bucket: Bucket) -> Window:
        amount = bucket.requests if kind == "requests" else bucket.tokens
        stats = await self._limiter.get_window_stats(self._item(kind, amount), bucket.key)
        reset = stats.reset_time if stats.remaining < amount else time.time() + 60.0
        return Window(amount, stats.remaining, reset)

    def _warn(self, exc: Exception) -> None:
        now = time.monotonic()
        self._down_until = now + _RETRY_STORE_AFTER
        if now - self._warned_at >= 60.0:
            self._warned_at = now
            logger.warning("rate limits not counted (their store failed): %r", exc)

    async def aclose(self) -> None:
        """Release the Redis connections (a no-op in memory)."""
        bridge = getattr(self._storage, "bridge", None)
        storage = getattr(bridge, "storage", None)
        close = getattr(storage, "aclose", None)
        if close is not None:
            with contextlib.suppress(OSError, RuntimeError):
                await close()
