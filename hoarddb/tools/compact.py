"""compact: give back the disk space deleted data left in the LMDB files of a data directory nothing has open.

    >>> from hoarddb.tools.compact import compact
    >>> report = compact("./data")                        # every LMDB environment
    >>> report = compact("./data", db="app", bucket="Users")
    >>> report.ok, report.before, report.after           # bytes, all environments together
    (True, 52428800, 6291456)
    >>> print("\\n".join(report.lines()))                 # one line per environment

An LMDB file never shrinks: pages freed by deletes are reused by later writes, and a page
that deletes left partly empty stays so (LMDB merges only pages under a quarter full).
This module rewrites each LMDB environment of a data directory — a hash, btree or heap
bucket's ``kv/`` (its store fields included), a fifo's ``claims/``, the ``catalog/`` —
into a new ``data.mdb`` that holds the same keys and values in as few pages as they fit,
and swaps it in. Queue segments and blob files give their space back as they go
(docs/user/durability.md) and are left alone.

1. Like :func:`~hoarddb.tools.check.check`, it first lets an ordinary open repair what a
   crash left (shared with check.py), then takes the directory's lock: DataDirLockedError
   while a server or another process has the directory open.
2. Each environment is rewritten, compared with the original entry by entry, and swapped
   in by :func:`compact_environment` (its comment draws the steps on disk and what a crash
   at each leaves).

Why a rewrite rather than LMDB's own compacting copy (``Environment.copy(compact=True)``,
``mdb_copy -c``): that copy leaves out the free pages but copies every other page as it
is, so pages that deletes left nearly empty stay nearly empty. Reading the entries in key
order and appending them to a new environment fills each page. With nine in ten of 50,000
200-byte values deleted (all keys but every tenth), the 16.6 MB file became 4.4 MB by
LMDB's copy and 1.3 MB by the rewrite, which took 11 ms.
"""

from __future__ import annotations

import itertools
import os
import resource
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import lmdb

from ..errors import CorruptDataError, HoardError, StorageError
from ..storage.kv import COMPACTING, DAMAGE_ERRORS, check_meta_pages
from ..storage.oserrors import fsync_directory, reason
from ..storage.wal import WriteAheadLog, newest_header

#: The store types whose bucket keeps its data in LMDB (``kv/``), and the fifo's claims (``claims/``).
LMDB_FOLDERS = {"hash": "kv", "btree": "kv", "heap": "kv", "fifo": "claims"}
#: Why the other store types are not compacted (they give space back by themselves).
GIVES_BACK = {
    "fifo": "a fifo removes each segment file once all of its elements are popped",
    "lifo": "a lifo gives back the space of what it pops",
    "blob": "deleting a blob removes its file, and the index compacts itself",
}
#: The rewrite commits every this many bytes of keys and values, or entries (a few big
#: transactions rather than one that LMDB would have to spill to disk, and a bounded list of
#: entries in memory).
CHUNK_BYTES = 64 << 20
CHUNK_ENTRIES = 100_000
#: Bytes the disk must have free beyond the new file's size before a rewrite begins.
MARGIN = 1 << 20
_datasync = getattr(os, "fdatasync", os.fsync)
#: Called with the name of each step as :func:`compact_environment` finishes it
#: ("copying" after each transaction of the rewrite, "copied", "verified", "swapped",
#: "logged", "trimmed") and the environment's folder; the crash tests kill the process there.
_step_hook: Callable[[str, Path], None] | None = None


@dataclass
class Compacted:
    """Compacted is what :func:`compact` did to one LMDB environment: which (``db`` and
    ``bucket`` None for the catalog), its folder relative to the data directory, its
    files' bytes ``before`` and ``after``, and ``status``: ``"compacted"``, ``"already
    compact"`` (no smaller: nothing was changed), or ``"failed"`` (``problem`` says why and
    what to do; nothing was changed, unless it says the compacted file is in place)."""

    db: str | None
    bucket: str | None
    type: str
    folder: str
    before: int = 0
    after: int = 0
    status: str = "compacted"
    problem: str = ""

    def line(self) -> str:
        """``app.Users: app/Users/kv: 48.0 MiB -> 3.1 MiB`` (or what went wrong)."""
        where = "catalog" if self.db is None else f"{self.db}.{self.bucket}"
        if self.status == "failed":
            return f"{where}: {self.folder}: not compacted: {self.problem}"
        said = f"{where}: {self.folder}: {_size(self.before)} -> {_size(self.after)}"
        return said + (" (already compact)" if self.status == "already compact" else "")


@dataclass
class CompactReport:
    """CompactReport is what :func:`compact` did: one :class:`Compacted` per LMDB environment
    (``environments``), the buckets with nothing to compact (``skipped``: ``{db, bucket,
    type, why}``), the folders whose crash repairs ran first (``repaired``), problems that
    stopped it before any environment (``problems``), and the time taken."""

    path: str
    environments: list[Compacted] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every environment was compacted (or already was)."""
        return not self.problems and all(e.status != "failed" for e in self.environments)

    @property
    def before(self) -> int:
        """The bytes of every environment's files before."""
        return sum(e.before for e in self.environments)

    @property
    def after(self) -> int:
        """... and after (those not compacted count as they are)."""
        return sum(e.after for e in self.environments)

    def lines(self) -> list[str]:
        """A line per problem, per environment, and one for the buckets with nothing to compact."""
        out = list(self.problems) + [e.line() for e in self.environments]
        if self.skipped:
            out.append("nothing to compact (they give space back as they go): " + ", ".join(
                f"{s['db']}.{s['bucket']} ({s['type']})" for s in self.skipped))
        return out

    def summary(self) -> str:
        failed = sum(e.status == "failed" for e in self.environments)
        done = sum(e.status == "compacted" for e in self.environments)
        already = sum(e.status == "already compact" for e in self.environments)
        said = (f"compacted {done} of {len(self.environments)} LMDB environment(s) of {self.path} in "
                f"{self.seconds:.1f} s: {_size(self.before)} -> {_size(self.after)}, "
                f"{_size(self.before - self.after)} given back")
        if already:
            said += f"; {already} already compact"
        if self.problems or failed:
            said += f"; {len(self.problems) + failed} problem(s)"
        return said

    def to_dict(self) -> dict:
        """The report as plain JSON-able values (``hoarddb compact --json``)."""
        return {"path": self.path, "ok": self.ok, "before": self.before, "after": self.after,
                "environments": [{"db": e.db, "bucket": e.bucket, "type": e.type, "folder": e.folder,
                                  "before": e.before, "after": e.after, "status": e.status,
                                  "problem": e.problem} for e in self.environments],
                "skipped": self.skipped, "repaired": self.repaired, "problems": self.problems,
                "seconds": round(self.seconds, 3)}


def compact(path, db: str | None = None, bucket: str | None = None) -> CompactReport:
    """Compact the LMDB environments of the data directory ``path``: every bucket's and the
    catalog's, or those of database ``db`` (the catalog is then left as it is), or bucket ``db.bucket``.

    Nothing may have the directory open. An environment whose rewrite fails (a disk too
    full for the new file, damage LMDB finds while reading) is left as it was, and the
    others are compacted.

    :raises InvalidArgumentError: ``path`` is not a data directory, or ``bucket`` is given without ``db``.
    :raises DataDirLockedError: a server or another process has the directory open.
    :raises DatabaseNotFoundError, BucketNotFoundError: ``db`` or ``bucket`` is not declared.
    :return: a :class:`CompactReport` (bytes before and after per environment); what
        could not be compacted is in it, never raised.
    """
    from ..storage.lock import DirectoryLock
    from .check import CheckReport, chosen_buckets, data_directory, repair_first

    started = time.monotonic()
    root = data_directory(path, db, bucket)
    report = CompactReport(str(root))
    repairs = CheckReport(str(root))
    repair_first(root, db, bucket, repairs)  # (DataDirLockedError when the directory is in use and a crash left work)
    report.repaired = repairs.repaired
    if repairs.problems:  # the catalog: the open refused it
        report.problems += [f"{p.file}: {p.problem}; run hoarddb check {root}" for p in repairs.problems]
        report.seconds = time.monotonic() - started
        return report
    lock = DirectoryLock(root)
    lock.acquire()
    try:
        found = _declarations(root, report)
        if found is not None:
            dbs, decls = found
            for decl in chosen_buckets(decls, dbs, db, bucket):
                kind, name = decl["type"], LMDB_FOLDERS.get(decl["type"])
                folder = root / decl["db"] / decl["name"]
                if name is None or (kind == "fifo" and not (folder / name).is_dir()):  # (a fifo never claimed from)
                    report.skipped.append({"db": decl["db"], "bucket": decl["name"], "type": kind,
                                           "why": GIVES_BACK[kind]})
                    continue
                report.environments.append(_compact(root, folder / name, decl["db"], decl["name"], kind))
            if db is None:
                report.environments.append(_compact(root, root / "catalog", None, None, "catalog"))
    finally:
        lock.release()
    report.seconds = time.monotonic() - started
    return report


def _declarations(root: Path, report: CompactReport) -> tuple[list[str], list[dict]] | None:
    """``(databases, bucket declarations)`` of the catalog, or None (a problem in ``report``)."""
    from ..catalog import check_entries
    from ..storage.kv import read_only

    try:
        with read_only(root / "catalog") as txn:
            _problems, dbs, decls = check_entries(txn)
    except (CorruptDataError, StorageError) as exc:
        report.problems.append(f"catalog/data.mdb: {exc.message}")
        return None
    except DAMAGE_ERRORS as exc:
        report.problems.append(f"catalog/data.mdb: LMDB found its pages are not what it wrote ({exc}); run "
                               f"hoarddb check {root}")
        return None
    return dbs, decls


def _compact(root: Path, folder: Path, db: str | None, bucket: str | None, kind: str) -> Compacted:
    done = Compacted(db, bucket, kind, str(folder.relative_to(root)))
    if not folder.is_dir():
        done.status, done.problem = "failed", f"{folder} is missing: run hoarddb check {root}"
        return done
    try:
        done.before, done.after, changed = compact_environment(folder)
        done.status = "compacted" if changed else "already compact"
    except HoardError as exc:
        done.before = done.after = _bytes(folder)
        done.status, done.problem = "failed", exc.message
    return done


# -- one environment ---------------------------------------------------------------------------


def compact_environment(folder) -> tuple[int, int, bool]:
    """Rewrite the closed LMDB environment in ``folder`` (a ``kv/``, ``claims/`` or
    ``catalog/``) into as few pages as its entries fit, and swap the new file in, if it is
    smaller; the caller holds the data directory's lock.

    :return: ``(bytes before, bytes after, whether it was swapped)``: the bytes of the
        folder's files (``data.mdb``, its log ``wal.0``, ``wal.1``, ``lock.mdb``).
    :raises StorageError: the environment was not closed cleanly, or the disk has no room
        for the new file (or refused it): nothing was changed.
    :raises CorruptDataError: LMDB found damage while reading it: nothing was changed.
    """
    # The steps on disk, and what a crash (a kill, a power cut) at each leaves. Before
    # step 1 the environment was closed cleanly: its log holds no record to replay, and its
    # newest header says so (closed), so an open takes data.mdb as it finds it.
    #
    #   folder/                                     a crash leaves                  the next open
    #   0. compacting/ removed if a crash left it   old data.mdb, whole             -
    #   1. compacting/data.mdb: a new environment   old data.mdb, whole;            removes compacting/
    #      (no lock file), the entries appended     a copy, or part of one,         and its data.mdb:
    #      in key order, then flushed (fdatasync)   in compacting/                  undone
    #   2. the copy's meta pages checked, and       as in 1                         as in 1
    #      every entry compared with the original
    #   3. rename(compacting/data.mdb, data.mdb),   new data.mdb, whole (flushed    opens data.mdb as
    #      then fsync(folder): the one atomic       in 1; rename swaps the name     found (the header
    #      step, old or new                         at once); the log's newest      is closed), and
    #                                               header: closed, with the old    its checkpoint writes
    #                                               file's meta pages               a header of the new
    #                                                                               file; removes the
    #                                                                               empty compacting/:
    #                                                                               finished
    #   4. the log's next header: closed, with      new data.mdb, and a header      as in 3
    #      the new file's meta pages; flushed       that matches it (a torn one
    #                                               fails its crc: as in 3)
    #   5. wal.0, wal.1 cut to their headers        as in 4, a shorter log          as in 3
    #      (past them: records already applied)
    #   6. compacting/ removed                      done                            -
    #
    # The old and the new file hold the same entries (2 compared them), and nothing writes
    # to the environment meanwhile (the directory's lock), so whichever a crash leaves has
    # every acknowledged write. Only a header that is not closed makes an open write its
    # meta pages back over data.mdb (docs/dev/wal.md), so the new file is never given the
    # old one's: a log that is not closed is refused before step 1, and 4 writes a closed
    # header of the new file's own. The new file's transaction ids start again from 1
    # (LMDB numbers a new environment's); nothing outside data.mdb keeps one: lock.mdb's
    # table is set again from the meta pages by the first process that opens the environment.
    folder = Path(folder)
    header = newest_header(folder)
    if header is not None and not header[1]:
        raise StorageError(f"{folder} was not closed cleanly (a crash): open the database once, which recovers it, "
                           "then compact it")
    staging = folder / COMPACTING
    _remove(staging)  # 0
    before = _bytes(folder)
    wal = None
    try:
        new_psize = _copy(folder, staging)  # 1, 2
        new = staging / "data.mdb"
        after = new.stat().st_size + (2 * (64 + 2 * new_psize) if header is not None else 0) + _lock_bytes(folder)
        if after >= before:
            _remove(staging)
            return before, before, False
        if header is not None:
            wal = WriteAheadLog.open_existing(folder, new_psize)
            if wal is not None and wal.psize != new_psize:
                raise StorageError(f"{folder}: its log's page size ({wal.psize}) is not the one LMDB uses here "
                                   f"({new_psize}): not compacted; open the database once, then compact it")
        with open(new, "rb") as f:
            metas = f.read(2 * new_psize)
    except BaseException as exc:
        if wal is not None:
            wal.close()
        _remove(staging)
        if isinstance(exc, DAMAGE_ERRORS):
            raise CorruptDataError(f"{folder / 'data.mdb'}: LMDB found its pages are not what it wrote ({exc}): "
                                   "not compacted; run hoarddb check") from None
        if isinstance(exc, (OSError, lmdb.Error)):
            raise StorageError(f"{folder}: compacting it failed ({reason(exc)}); nothing was changed") from None
        raise
    try:
        try:
            os.rename(new, folder / "data.mdb")  # 3
            fsync_directory(folder)
        except OSError as exc:  # (the rename is the one step that may or may not have happened)
            raise StorageError(f"{folder}: swapping in its compacted data.mdb failed ({reason(exc)}); it holds "
                               "either file, whole: compact again") from None
        _reached("swapped", folder)
        if wal is not None:
            wal.switch()  # 4 (nothing to flush: no record was appended)
            wal.commit_generation(metas, closed=True)
            _reached("logged", folder)
            try:
                for fd in wal.fds:  # 5
                    os.ftruncate(fd, wal.header_size)
                    _datasync(fd)
            except OSError as exc:
                raise StorageError(f"{folder}: cutting its log after compacting it failed ({reason(exc)}); the "
                                   "compacted data.mdb is in place, and its log is whole") from None
            _reached("trimmed", folder)
    finally:
        if wal is not None:
            wal.close()
    _remove(staging)  # 6
    return before, _bytes(folder), True


def _copy(folder: Path, staging: Path) -> int:
    """Steps 1 and 2: the compacted copy of the environment in ``folder``, written to
    ``staging`` and compared with it; the copy's page size. StorageError if the disk has
    no room for it, CorruptDataError if LMDB finds damage."""
    psize = resource.getpagesize()
    data = folder / "data.mdb"
    try:
        size = data.stat().st_size
    except FileNotFoundError:
        size = 0
    if size < 2 * psize:
        raise CorruptDataError(f"{data} is missing or has less than LMDB's two meta pages: not compacted; run "
                               f"hoarddb check")
    check_meta_pages(folder, psize)
    try:
        env = lmdb.open(str(folder), readonly=True, lock=False, subdir=True, max_dbs=0, readahead=False,
                        map_size=max(size, 1 << 20))
    except DAMAGE_ERRORS as exc:
        raise CorruptDataError(f"{data}: LMDB refuses it ({exc}): not compacted; run hoarddb check") from None
    except lmdb.Error as exc:
        raise StorageError(f"{folder}: opening it failed ({reason(exc)}): not compacted") from None
    try:
        stat = env.stat()
        # What LMDB's tree takes now, meta pages included: the new file is no bigger.
        need = (2 + stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]) * stat["psize"]
        free = shutil.disk_usage(folder).free
        if free < need + MARGIN:
            raise StorageError(f"{folder}: the disk has {free} bytes free, and compacting it needs up to "
                               f"{need + MARGIN}: free space on it, then compact again")
        new_psize = _rewrite(env, staging, need)
        _same(env, staging)
    finally:
        env.close()
    return new_psize


def _rewrite(env: lmdb.Environment, staging: Path, need: int) -> int:
    """Step 1: append every entry of ``env`` in key order to a new environment in ``staging``,
    and flush it; the new environment's page size."""
    os.mkdir(staging)
    # A map as big as the tree, twice, and more: LMDB's file grows only as pages are
    # written, and the few pages each commit frees are not reused within the rewrite.
    dst = lmdb.open(str(staging), map_size=2 * need + (64 << 20), subdir=True, sync=False, metasync=False,
                    lock=False, max_dbs=0, readahead=False)
    try:
        with env.begin(write=False) as src:
            entries = src.cursor().iternext()
            while True:
                chunk, size = [], 0
                for key, value in entries:
                    chunk.append((key, value))
                    size += len(key) + len(value)
                    if size >= CHUNK_BYTES or len(chunk) >= CHUNK_ENTRIES:
                        break
                if not chunk:
                    break
                with dst.begin(write=True) as txn:
                    _consumed, added = txn.cursor().putmulti(chunk, append=True)
                if added != len(chunk):
                    raise CorruptDataError(f"{staging.parent}: LMDB took {added} of {len(chunk)} entries in order "
                                           "while compacting it (its keys are not in order): not compacted; run "
                                           "hoarddb check")
                _reached("copying", staging.parent)
        dst.sync(True)
        psize = dst.stat()["psize"]
    except DAMAGE_ERRORS as exc:
        raise CorruptDataError(f"{staging.parent / 'data.mdb'}: LMDB found its pages are not what it wrote ({exc}): "
                               "not compacted; run hoarddb check") from None
    except lmdb.Error as exc:
        raise StorageError(f"{staging.parent}: writing its compacted copy failed ({reason(exc)}); nothing was "
                           "changed: free space on the disk (the copy needs up to the environment's size), "
                           "then compact again") from None
    finally:
        dst.close()
    fd = os.open(staging / "data.mdb", os.O_RDONLY)
    try:
        _datasync(fd)
    finally:
        os.close(fd)
    _reached("copied", staging.parent)
    return psize


def _same(env: lmdb.Environment, staging: Path) -> None:
    """Step 2: the copy's meta pages are sound, and it holds every entry of ``env``, and only them."""
    check_meta_pages(staging, resource.getpagesize())
    size = (staging / "data.mdb").stat().st_size
    copy = lmdb.open(str(staging), readonly=True, lock=False, subdir=True, max_dbs=0, readahead=False,
                     map_size=max(size, 1 << 20))
    try:
        with env.begin(write=False) as a, copy.begin(write=False) as b:
            for one, other in itertools.zip_longest(a.cursor().iternext(), b.cursor().iternext()):
                if one != other:
                    key = (one or other)[0]
                    raise StorageError(f"{staging.parent}: its compacted copy differs from it at key {key[:80]!r}: "
                                       "not compacted (report this as a bug of hoardDB)")
    except DAMAGE_ERRORS as exc:
        raise CorruptDataError(f"{staging.parent / 'data.mdb'}: LMDB found its pages are not what it wrote ({exc}): "
                               "not compacted; run hoarddb check") from None
    finally:
        copy.close()
    _reached("verified", staging.parent)


def _remove(staging: Path) -> None:
    """Remove the staging folder and the copy in it, if there are."""
    try:
        (staging / "data.mdb").unlink()
    except FileNotFoundError:
        pass
    try:
        staging.rmdir()
    except FileNotFoundError:
        pass


def _bytes(folder: Path) -> int:
    """The bytes of the environment's files (not of a staging folder in it)."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def _lock_bytes(folder: Path) -> int:
    try:
        return (folder / "lock.mdb").stat().st_size
    except FileNotFoundError:
        return 0


def _reached(step: str, folder: Path) -> None:
    if _step_hook is not None:
        _step_hook(step, folder)


def _size(n: int) -> str:
    """``812 bytes``, ``96.0 KiB``, ``48.2 MiB``, ``1.5 GiB``."""
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"
    raise AssertionError  # (unreachable)


def format_json(report: CompactReport) -> str:
    """The report as one line of JSON."""
    import json

    return json.dumps(report.to_dict(), default=str)


__all__ = ["compact", "compact_environment", "CompactReport", "Compacted", "format_json"]
