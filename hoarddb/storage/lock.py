"""The lock that lets one process at a time open a data directory."""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from ..errors import DataDirLockedError

LOCK_NAME = "LOCK"
#: The bytes of the pid note in LOCK (the pid, a newline, spaces).
PID_BYTES = 32

log = logging.getLogger("hoarddb.engine")


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
            holder = os.pread(fd, PID_BYTES, 0).decode("ascii", "replace").strip() or "unknown"
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
        # The pid is only a note for the error a second opener reads, so writing it is no
        # reason to refuse the open: on a full disk the lock holds without it. It is written
        # over the file in place, padded to a fixed width, so that it never needs a block
        # the file does not have once it was written once:
        #
        #     LOCK: | "12345\n" | spaces to 32 bytes |     (a crash halfway: a torn pid, read as unknown)
        try:
            os.pwrite(fd, f"{os.getpid()}\n".encode().ljust(PID_BYTES), 0)
            os.ftruncate(fd, PID_BYTES)
        except OSError as exc:
            log.warning("%s: could not write this process's pid into it (%s); the directory is locked all the "
                        "same", self.path, exc.strerror or exc)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
