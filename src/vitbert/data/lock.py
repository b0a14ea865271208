"""One builder at a time: several processes (DDP ranks, two runs on one machine) that find the
same cache missing wait for the first to build it, then read it, instead of all building it.

Under DDP every rank starts the script and builds its data module before any process group
exists (LightningCLI links the vocabulary size at instantiation), so a barrier is not available
yet; a file lock in the cache folder is. Writes are atomic anyway (temp file + rename): the lock
saves the duplicate work and the doubled memory, it is not what keeps the files whole.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock

LOCK_NAME = ".build.lock"
F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def build_lock(folder: str | Path) -> Iterator[None]:
    """Hold ``<folder>/.build.lock`` for the block (waiting for it as long as another holds it).

    A folder that cannot take a lock file (read-only, a shared finished cache) is used unlocked:
    nothing can be built there, and the builder, finding its cache current, only reads.
    """
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        lock = FileLock(Path(folder) / LOCK_NAME)
        lock.acquire()
    except OSError:
        yield
        return
    try:
        yield
    finally:
        lock.release()


def one_builder(folder_argument: str) -> Callable[[F], F]:
    """Run the decorated builder under :func:`build_lock` of its ``folder_argument`` argument.

    The builder must itself return early when its cache is current: the process that waited
    then finds the cache the first one built.
    """

    def decorate(builder: F) -> F:
        signature = inspect.signature(builder)

        @functools.wraps(builder)
        def locked(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            with build_lock(bound.arguments[folder_argument]):
                return builder(*args, **kwargs)

        return locked  # type: ignore[return-value]

    return decorate
