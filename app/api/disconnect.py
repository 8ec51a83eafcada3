"""Work for a client that has gone is cancelled.

Starlette runs an endpoint to its end whether or not its client is still there, and a stream
starts listening for ``http.disconnect`` only once its ``EventSourceResponse`` exists. So the
routes that wait on the upstream (a non-streaming create, a stream's opening until the
upstream's first bytes, the chat-completions passthrough, the Messages front end) await that
work through :func:`unless_gone`: while it runs, one task waits on the ASGI ``receive()``; the
body was read whole before, so the next message there is ``http.disconnect``. When it comes the
work is cancelled where it waits (the upstream request is dropped and its pooled connection
closed, gateway tool calls stop, nothing is stored), one line is logged (route, stage, the
request id when the client sent one), and the route answers :class:`ClientGoneError`, which
``app.api.errors`` turns into an empty 499 nobody reads. Background responses do not come
here: they go on without their client (``core.background``).

The work runs in the request's own task, as under ``asyncio.timeout``: the watcher cancels that
task and :func:`unless_gone` takes the cancellation back (``Task.uncancel``), so a cancellation
from elsewhere (a drain, the server stopping) still propagates. Cost: one task per request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request
from starlette.types import Message

from app.core.request_id import current_request_id

logger = logging.getLogger(__name__)

T = TypeVar("T")

# What the route was doing when its client went, as the log line says it.
WAITING_FOR_ANSWER = "waiting for the upstream's answer"
OPENING_STREAM = "opening the stream (before the upstream's first bytes)"


class ClientGoneError(Exception):
    """The client closed its connection before its answer was ready; its work was cancelled."""


class _Watch:
    """Cancels ``task`` when the client's ``http.disconnect`` arrives while ``active``."""

    __slots__ = ("active", "fired", "task")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task = task
        self.active = True
        self.fired = False

    def on_message(self, watcher: asyncio.Future[Message]) -> None:
        if watcher.cancelled() or watcher.exception() is not None or not self.active:
            return
        if watcher.result().get("type") == "http.disconnect":
            self.fired = True
            self.task.cancel()


async def unless_gone(request: Request, work: Awaitable[T], stage: str) -> T:
    """``await work``, cancelled if the client disconnects meanwhile (then
    :class:`ClientGoneError`). Call it only once the request's body has been read."""
    task = asyncio.current_task()
    if task is None:  # not in a task: nothing to cancel
        return await work
    watch = _Watch(task)
    watcher = asyncio.ensure_future(request.receive())
    watcher.add_done_callback(watch.on_message)
    try:
        result = await work
    except asyncio.CancelledError:
        watch.active = False
        # Cancelled for another reason too (a drain, the server stopping): that goes on.
        if not watch.fired or task.uncancel() > 0:
            raise
        _log_gone(request, stage)
        raise ClientGoneError from None
    finally:
        watch.active = False
        watcher.cancel()
    if watch.fired:  # the work ended (or swallowed the cancellation) as the client left
        task.uncancel()
        await _drop(result)
        _log_gone(request, stage)
        raise ClientGoneError
    return result


async def _drop(result: object) -> None:
    """Release what finished work holds for a client that has gone: an opened stream (its
    ``aclose``), a response's clean-up (its ``background``: a passthrough stream's close)."""
    aclose = getattr(result, "aclose", None)
    if aclose is not None:
        await aclose()
        return
    background = getattr(result, "background", None)
    if background is not None:
        await background()


def _log_gone(request: Request, stage: str) -> None:
    request_id = current_request_id() or request.headers.get("x-request-id")
    logger.info(
        "%s %s: the client closed the connection while %s; its work was cancelled%s",
        request.method,
        request.url.path,
        stage,
        f" (request id {request_id})" if request_id else "",
    )
