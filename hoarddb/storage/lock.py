"""The lock that lets one process at a time open a data directory."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..errors import DataDirLockedError

LOCK_NAME = "LOCK"


class DirectoryLock:
    """DirectoryLock holds an exclusive ``flock`` on ``DATA/LOCK`` holding the owner's pid.

    The kernel drops the lock when the process dies (even by SIGKILL), so a stale LOCK
    file never blocks a restart; only a live holder does.
    """

    def __init__(self, directory: Path):
        self.path = Path(directory) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            if holder == str(os.getpid()):
                raise DataDirLockedError(
                    f"data directory {self.path.parent} is open already in this process; use the client that "
                    "opened it (one hoarddb.open per directory and process), or close it first",
                    pid=holder,
                ) from None
            raise DataDirLockedError(
                f"data directory {self.path.parent} is open in another process (pid {holder}); "
                "close that process, or connect to it as a server instead of opening the directory",
                pid=holder,
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
