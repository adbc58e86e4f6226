"""An exclusive lock on a run's or a sweep's directory while a process works in it.

Two processes in one directory (a second ``ccjax sweep --resume`` or ``ccjax train --resume``
started while the first still runs) would each take the other's running trials for interrupted
ones, train them again and write the same files. ``flock`` on ``DIR/.lock`` makes the second one
stop with a one-line error instead. The kernel drops the lock when the holder exits, however it
exits (a ``kill -9`` included), so a killed run never leaves a stale lock behind for its resume.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ccjax.errors import ConfigError

LOCK_NAME = ".lock"


def nearest_folder(path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """The nearest path that exists on the way up from ``path`` (to be created below it), and
    whether it is a folder this process can create entries in."""
    up = Path(path).absolute().parent
    while not up.exists():
        up = up.parent
    return up, up.is_dir() and os.access(up, os.W_OK | os.X_OK)


class DirLock:
    """``with DirLock(folder, "sweep"):`` holds ``folder``'s lock (creating the folder) or
    raises ``ConfigError`` naming the process that holds it."""

    def __init__(self, folder: str | os.PathLike[str], what: str) -> None:
        self.folder = Path(folder)
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> DirLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(f"out={str(self.folder)!r} is in use: another process (pid "
                              f"{holder}) is running this {self.what}; wait for it to end or "
                              "stop it, then resume") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
