"""What the storage layer says when the operating system refuses a read or write (a StorageError with a
hint), the write that goes on after a short one (:func:`pwrite_all`), and the flush of a
directory's entries (:func:`fsync_directory`).

Every file hoardDB writes can meet a full disk. Whoever catches the refusal (an
``OSError``, or an ``lmdb.Error`` that carries the same errno text) turns it into one
:class:`~hoarddb.errors.StorageError` through :func:`storage_error`, so that a user
always reads the same words: what failed, why, what to do, and what became of the
write::

    writing /data/app/Jobs/seg_00003.fifo failed: No space left on device; the disk is
    full: free space on it, then retry; nothing of this write was kept

A full disk is told apart from other failures (:func:`is_full`) because its remedy is
simple and the store stays usable: free space and retry, no reopen. The few cases that
do need a reopen say so in their own words (docs/user/durability.md, "When the disk is full").
"""

from __future__ import annotations

import errno
import os

from ..errors import StorageError

#: The errnos of a disk that has no room: full, over quota, or a file past its size limit.
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
#: How those read in an error's text (LMDB's errors carry only the text of the errno).
_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "File too large")

#: What to do about a full disk.
FULL_HINT = "the disk is full: free space on it, then retry"
#: What to do about any other refusal of the operating system.
OTHER_HINT = "check the disk and the permissions of the data directory, then retry"


#: Free bytes under which an I/O error of LMDB is taken for a full disk (see is_full).
NEARLY_FULL = 1 << 20


def is_full(exc: BaseException, path=None) -> bool:
    """Whether ``exc`` says the disk (or the quota, or the file size limit) has no room.

    LMDB reports a write the disk cut short as an I/O error (``EIO``: its page flush takes
    a short ``pwrite`` for one), which is how a full disk shows in its commits. So an I/O
    error of LMDB counts as a full disk when ``path``'s file system has less than
    :data:`NEARLY_FULL` bytes left (a short write takes the disk's last bytes).
    """
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno in FULL_ERRNOS
    text = str(exc)
    if any(t in text for t in _FULL_TEXTS):
        return True
    if path is not None and "Input/output error" in text:
        try:
            st = os.statvfs(path)
        except OSError:
            return False
        return st.f_bavail * st.f_frsize < NEARLY_FULL
    return False


def reason(exc: BaseException) -> str:
    """The operating system's words for ``exc``, without Python's decoration."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


class DiskFullError(StorageError):
    """DiskFullError is a StorageError whose cause is a disk with no room (same code, STORAGE_ERROR):
    what the storage layer may retry after making room of its own (see KV.write)."""


def storage_error(what: str, exc: BaseException, outcome: str = "nothing of this write was kept",
                  path=None) -> StorageError:
    """The StorageError for ``what`` (``"writing /path"``) refused with ``exc``; ``outcome``
    says what became of the write (or what must happen before the next one). ``path``: a
    file or folder on the disk written to, for an LMDB error (see :func:`is_full`)."""
    full = is_full(exc, path)
    text = reason(exc)
    if full and "Input/output error" in text:
        text += " (a write the disk cut short: it is full)"
    if full:
        return DiskFullError(f"{what} failed: {text}; {FULL_HINT}; {outcome}")
    return StorageError(f"{what} failed: {text}; {OTHER_HINT}; {outcome}")


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset``: a disk that fills up midway gives a short write
    first, and only the next call raises (ENOSPC)."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def fsync_directory(directory) -> None:
    """Make the directory's entries (files and folders created, renamed, removed in it) durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
