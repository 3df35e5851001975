"""The lock that lets one process at a time open a data directory."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from pathlib import Path

from ..errors import DataDirLockedError

LOCK_NAME = "LOCK"
#: The bytes of the pid note in LOCK (the pid, a newline, spaces).
PID_BYTES = 32

log = logging.getLogger("hoarddb.engine")

#: The data directories this process holds, by their LOCK file's (device, inode), and the
#: pid that took each: a second open in the same process is refused from here, before the
#: pid note is read (another thread's open may have the flock and not have written it yet),
#: and an entry a forked child inherited names its parent, not the child.
_HELD: dict[tuple[int, int], int] = {}
_HELD_MUTEX = threading.Lock()


def _new_mutex_after_fork() -> None:
    global _HELD_MUTEX
    _HELD_MUTEX = threading.Lock()  # a thread of the parent may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_mutex_after_fork)


def held_here(directory: Path) -> bool:
    """Whether this process holds the lock of the data directory at ``directory``."""
    try:
        st = os.stat(Path(directory) / LOCK_NAME)
    except OSError:
        return False
    with _HELD_MUTEX:
        return _HELD.get((st.st_dev, st.st_ino)) == os.getpid()


class DirectoryLock:
    """DirectoryLock holds an exclusive ``flock`` on ``DATA/LOCK`` holding the owner's pid.

    The kernel drops the lock when the process dies (even by SIGKILL), so a stale LOCK
    file never blocks a restart; only a live holder does.
    """

    def __init__(self, directory: Path):
        self.path = Path(directory) / LOCK_NAME
        self._fd: int | None = None
        self._key: tuple[int, int] | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            with _HELD_MUTEX:
                if _HELD.get(key) == os.getpid():
                    raise self._held_here(str(os.getpid()))
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = os.pread(fd, PID_BYTES, 0).decode("ascii", "replace").strip() or "unknown"
                    if holder == str(os.getpid()):
                        raise self._held_here(holder) from None
                    raise DataDirLockedError(
                        f"data directory {self.path.parent} is open in another process (pid {holder}); "
                        "close that process, or connect to it as a server instead of opening the directory",
                        pid=holder,
                    ) from None
                _HELD[key] = os.getpid()
        except BaseException:
            os.close(fd)
            raise
        self._key = key
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

    def _held_here(self, pid: str) -> DataDirLockedError:
        return DataDirLockedError(
            f"data directory {self.path.parent} is open already in this process; use the client that "
            "opened it (one hoarddb.open per directory and process), or close it first",
            pid=pid,
        )

    def release(self) -> None:
        with _HELD_MUTEX:
            if self._key is not None and _HELD.get(self._key) == os.getpid():
                del _HELD[self._key]
            self._key = None
            if self._fd is not None:
                os.close(self._fd)  # closing the descriptor drops the flock
                self._fd = None

    def forget(self) -> None:
        """In a child forked while the lock was held: close the child's copy of the descriptor.

        The lock stays the parent's (a flock belongs to the open file, which the parent's
        descriptor still holds), and the parent's release then really unlocks it: with the
        child's copy left open, the directory would stay locked until the child exited.
        """
        self._key = None
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
