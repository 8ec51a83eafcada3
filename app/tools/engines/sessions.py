"""The session bookkeeping engines share lives in the kernel (``core.session_book``) so that
every tool kind's engine can use it; this name is kept for the engines of this package."""

from app.core.session_book import DEFAULT_MAX_HISTORY, SessionBook, timed

__all__ = ["DEFAULT_MAX_HISTORY", "SessionBook", "timed"]
