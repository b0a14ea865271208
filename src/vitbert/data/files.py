"""Atomic file writes: a reader (or a parallel rank) sees the old file or the whole new one,
never a half-written one.

The data goes to a temporary file beside the target (same folder, so same file system) and
`os.replace` puts it in place in one step; a failure leaves the target as it was and no
temporary file behind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def temp_path(path: str | Path) -> Path:
    """The temporary name beside `path` this process writes to: hidden, and unique per process
    so parallel ranks never share one."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, permissions: int | None = None,
                **open_kwargs: Any) -> Iterator[IO[Any]]:
    """`open(path, mode)` whose result appears at `path` only when the block ends without error.

    For writers that stream (JSON Lines, many chunks); `atomic_write` for one piece of data.
    `permissions` (e.g. 0o644 for files meant to be shared) overrides what the umask gives.
    """
    if not mode.startswith("w"):
        raise ValueError(f"atomic_open writes a new file; mode {mode!r} must start with 'w'")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        with open(tmp, mode, **open_kwargs) as fh:
            yield fh
        if permissions is not None:
            tmp.chmod(permissions)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path: str | Path, data: str | bytes, permissions: int | None = None) -> Path:
    """Write `data` (text as UTF-8, or bytes) to `path` atomically; returns `path`."""
    if isinstance(data, bytes):
        with atomic_open(path, "wb", permissions=permissions) as fh:
            fh.write(data)
    else:
        with atomic_open(path, "w", permissions=permissions, encoding="utf-8") as fh:
            fh.write(data)
    return Path(path)
