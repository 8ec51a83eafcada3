"""The key that signs compaction items (``app.core.compaction``): ``compaction_key`` when it is
set, else a random key kept in ``data_dir/compaction.key``, made on first start. Replicas share
it (the setting, or the file): items one signs, another opens."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path

from app.core.compaction import CompactionCodec
from app.settings import Settings


def compaction_codec(settings: Settings) -> CompactionCodec:
    """The signer of compaction items: ``compaction_key`` when it is set, else a random key
    kept in ``data_dir/compaction.key`` (made on first start, readable by its owner only).
    Replicas share it (the setting, or the file): items one signs, another opens."""
    if settings.compaction_key is not None:
        return CompactionCodec(settings.compaction_key.get_secret_value().encode())
    path = settings.data_dir / "compaction.key"
    if not path.exists():
        _create_key_file(path)
    return CompactionCodec(path.read_text().strip().encode())


def _create_key_file(path: Path) -> None:
    """Write a new random key to ``path`` unless another process got there first. The key is
    written whole to a private temporary file that is then linked into place (``link`` fails
    when ``path`` exists), so a worker starting beside this one never reads a half-written key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".compaction.key.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        os.unlink(temporary)
