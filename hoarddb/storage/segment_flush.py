"""Making the unflushed writes of many segment logs durable at once: one device flush for every overwrite.

With ``sync`` off (a server's group commit), one group of writes may touch many logs: a
partitioned queue keeps a log per partition, so pushes and pops to eight partitions leave
eight segment files and eight state files to make durable. An fdatasync of each costs a
flush of the device's write cache each (measured: 1.6–2.1 ms a group for eight files
against 0.3–0.45 ms this way; docs/benchmarks.md). :func:`flush` makes them durable
together, in rounds — the logs' segments, then their state files, then their directories,
the order :meth:`SegmentLog.flush` has always kept, so a state never reaches the disk
before the entries it points past — and in each round:

1. each file whose unflushed writes only **overwrite blocks already on disk** is written
   back with ``sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)``: its dirty pages are
   written and the call waits until the device has them, but flushes neither the
   device's cache nor any metadata;
2. every other file gets its fdatasync, as before;
3. if step 2 ran none, one fdatasync of one of step 1's files. On ext4 and XFS an
   fdatasync with no metadata to commit still flushes the device's write cache (ext4's
   ``blkdev_issue_flush`` in ``ext4_sync_file``, XFS's in ``xfs_file_fsync``), and a
   journal commit starts with one, so every write the device completed before it —
   the other files' too — is durable when it returns.

**Which writes overwrite blocks already on disk.** A fifo's appends over the zeros its
log preallocated (segment.py, *Preallocation*: real zeros, written and synced, so the
blocks are allocated and no extent is left unwritten), and the fixed slots of a state
file. Reading them back needs no metadata that is not on disk already: the file's size
and its block map were made durable by an earlier fdatasync. The log keeps, per file, the
size its last fdatasync here made durable (``SegmentLog._durable``), and a file is an
overwrite while its size is no more than that. A file truncated or created since is not
(``SegmentLog._reshaped`` forgets its size: the blocks past a truncation are freed, and
an append that grows it again must be fdatasynced), nor is any file at its first flush
after an open (after a crash, the size the kernel shows may not be the disk's).

**Where it is trusted.** Only on ext4 (in its default ``data=ordered`` or
``data=writeback``, not ``data=journal``, where data goes through the journal) and XFS,
read from /proc/self/mountinfo for the log's directory. Elsewhere — btrfs and the other
copy-on-write file systems write an overwrite to new blocks, which needs metadata; an
unknown file system, or a platform without ``sync_file_range`` — every file gets its
own fdatasync, exactly as one log's flush did.

A crash inside leaves what an interrupted fdatasync of each file would: any subset of
the dirty pages on disk, segments' before states' (each round waits for the previous).
An error fails every log of the batch (their writes' durability is unknown): each takes
no more calls until the database is opened again, as after any failed write.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

from . import segment_format
from .oserrors import fsync_directory

_WAIT_BEFORE, _WRITE, _WAIT_AFTER = 1, 2, 4  # <linux/fs.h>: SYNC_FILE_RANGE_*


@functools.cache
def _sync_file_range():
    """libc's ``sync_file_range``, or None where there is none (not Linux)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _write_back(fd: int, flags: int) -> None:
    """sync_file_range over the whole file (only its dirty pages are written)."""
    if _sync_file_range()(fd, 0, 0, flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, file system type, super options) of every mount, from /proc/self/mountinfo."""
    mounts = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rest = left.split(), right.split()
                if len(fields) < 5 or len(rest) < 3:
                    continue
                point = fields[4].encode().decode("unicode_escape")  # (\040 for a space, as the kernel writes it)
                mounts.append((point, rest[0], rest[2]))
    except OSError:  # (no /proc: no file system is known, so every log keeps its own fdatasync)
        return []
    return mounts


@functools.cache
def overwrites_flush_once(directory: Path) -> bool:
    """Whether files under ``directory`` may be flushed together (see the module's docstring): on ext4
    (not ``data=journal``) or XFS, with ``sync_file_range`` at hand."""
    if _sync_file_range() is None:
        return False
    path = os.path.realpath(directory)
    best = None
    for point, fstype, options in _mounts():
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, fstype, options)
    if best is None:
        return False
    _, fstype, options = best
    if fstype in ("ext4", "ext3"):
        return "data=journal" not in options.split(",")
    return fstype == "xfs"


@dataclass
class File:
    """A file of a log to make durable: a duplicated descriptor (valid even if the log closes its own
    meanwhile), its size when taken, and whether its writes only overwrite blocks on disk."""
    fd: int
    size: int
    overwrite: bool
    key: int = 0  #: the log's name for it: a segment number, or STATE for the state file


@dataclass
class Taken:
    """What one log had unflushed, taken under its lock (SegmentLog._take_dirty)."""
    segments: list[File] = field(default_factory=list)
    state: File | None = None
    directory: bool = False
    reshapes: int = 0  #: the log's count of truncations and creations then (SegmentLog._reshaped)

    def files(self) -> list[File]:
        return self.segments + ([self.state] if self.state is not None else [])


def flush(logs: list) -> None:
    """Make every write the ``logs`` (SegmentLogs) made so far durable, together (see the module's docstring).

    Raises StorageError if any file could not be made durable; every log of the batch then
    takes no more calls (SegmentLog._fail)."""
    logs = list(dict.fromkeys(logs))
    taken = []
    try:
        for log in logs:
            with log._lock:
                log._check_open()
                taken.append((log, log._take_dirty()))
    except BaseException:
        for _log, t in taken:
            _close(t)
        raise
    try:
        write_through(taken)
    except OSError as exc:
        error = None
        for log in logs:
            with log._lock:
                error = error or log._fail(exc, log.directory)
        raise error from None
    for log, t in taken:
        log._flushed(t)


def write_through(taken: list[tuple]) -> None:
    """Make durable what was taken of each log (``(log, Taken)`` pairs), in rounds, and close the
    duplicated descriptors; raises the OSError of a file that could not be."""
    try:
        once = all(overwrites_flush_once(log.directory) for log, _t in taken)
        _round([f for _log, t in taken for f in t.segments], once)
        _round([t.state for _log, t in taken if t.state is not None], once)
        for log, t in taken:
            if t.directory:
                fsync_directory(log.directory)
    finally:
        for _log, t in taken:
            _close(t)


def _close(t: Taken) -> None:
    for f in t.files():
        os.close(f.fd)


def _round(files: list[File], once: bool) -> None:
    """Make ``files`` durable: write back the overwrites, fdatasync the others, and one flush if none was."""
    ranged = [f for f in files if f.overwrite] if once else []
    for f in ranged:  # start every write-back, then wait for each: the device works on them together
        _write_back(f.fd, _WRITE)
    for f in ranged:
        _write_back(f.fd, _WAIT_BEFORE | _WRITE | _WAIT_AFTER)
    synced = False
    for f in files:
        if not (once and f.overwrite):
            segment_format.datasync(f.fd)
            synced = True
    if ranged and not synced:
        segment_format.datasync(ranged[0].fd)  # the device's cache flushed: every write above is durable
