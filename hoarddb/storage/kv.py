"""The KV engine: one LMDB environment, its write transactions and write-ahead log,
checkpoints, and growing its map.

On disk a ``kv/`` folder is LMDB's ``data.mdb`` and ``lock.mdb`` and the log ``wal.0``, ``wal.1``
(its format, and why LMDB can run without its own syncs, in :mod:`.wal`).

Before the log, ``data.mdb`` was kept written ahead with zeros so that each durable
commit's fdatasync overwrote blocks instead of growing the file; with one fdatasync of
``data.mdb`` per checkpoint instead of one per commit that no longer paid (it cost a
relaxed insert a quarter of its time), and files written that way open unchanged.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import mmap
import os
import resource
import struct
import threading
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import lmdb

from ..errors import CorruptDataError, StorageError
from .oserrors import DiskFullError, reason, storage_error
from .wal import PUT, Recording, WriteAheadLog, decode_ops, encode_ops, newest_header, record_exceeds

T = TypeVar("T")

log = logging.getLogger("hoarddb.kv")

#: A checkpoint is made after this many commits since the last one ... (the pinned
#: snapshot keeps LMDB from reusing the pages freed meanwhile, so every commit takes new
#: ones; a count of commits, unlike a size the file grew by, bounds that: each checkpoint
#: frees the previous interval's pages for the next, and the file settles at its data
#: plus about two intervals' worth of copied pages)
CHECKPOINT_COMMITS = 1000
#: ... or LMDB's used pages grew this much since it (a few big commits) ...
CHECKPOINT_GROWTH = 32 << 20
#: ... or the log's records reach this size.
CHECKPOINT_LOG = 64 << 20
#: The map is doubled before a write transaction begins once LMDB uses this share of it,
#: so that a group of writes seldom finds it full midway (see _write_in_group).
GROW_AT = 0.75
#: A group's write is counted as taking this many pages of the map, plus its bytes twice
#: (see KV._write_in_group): generous, so that a group is committed before the map fills.
GROUP_WRITE_PAGES = 8
#: A transaction of more puts and deletes than this is not logged: it is committed and
#: checkpointed at once (one flush of its pages instead of writing them twice, and no
#: copy of it all in memory) ...
BIG_OPS = 20_000
#: ... nor, when it is to be durable at once (a synced write, a server's group), one whose
#: record would be bigger than this: a checkpoint's flushes then cost less than writing
#: and flushing the record (and flushing its pages again at the next checkpoint).
BIG_RECORD = 256 << 10
#: Read transactions an environment allows at once (LMDB's reader table in lock.mdb) ...
MAX_READERS = 254
#: ... and the bytes that table takes: LMDB's header (at most 256 bytes) and a 64-byte slot per reader.
LOCK_FILE_BYTES = 256 + 64 * MAX_READERS
_datasync = getattr(os, "fdatasync", os.fsync)
#: LMDB's errors that mean its file is not what LMDB wrote (damage), not a refusal of the
#: operating system: MDB_INVALID, MDB_VERSION_MISMATCH, MDB_CORRUPTED, MDB_PAGE_NOTFOUND.
DAMAGE_ERRORS = (lmdb.InvalidError, lmdb.VersionMismatchError, lmdb.CorruptedError, lmdb.PageNotFoundError)
#: An LMDB meta page (pages 0 and 1 of data.mdb, LMDB 0.9's layout), the fields checked
#: before LMDB maps the file (see check_meta_pages)::
#:
#:     0        8     10      12        16       20         24        32         40
#:     | pgno u64 | pad | flags u16 | lower/upper | magic u32 | version u32 | address | mapsize |
#:     40: free DB  (MDB_db: pad u32 = page size, flags u16, depth u16, branch, leaf, overflow,
#:     88: main DB                                                entries, root: u64 each)
#:     136: last_pg u64 | 144: txnid u64
_META_HEAD = struct.Struct("<QHH")
_META_MAGIC = struct.Struct("<II")
_META_DB = struct.Struct("<IHHQQQQQ")
_META_TAIL = struct.Struct("<QQ")
#: Where, in the meta pages' first 2 pages, each one's last page number and transaction id are
#: (offset 136 of each page, the drawing above): LMDB's used size, read as mdb_env_info reads it
#: (see KV._used); made per environment, since the second page starts one page size in.
_META_USED = "<136xQQ{}xQQ"
MDB_MAGIC, MDB_DATA_VERSION, P_META, P_INVALID, MDB_INTEGERKEY = 0xBEEFC0DE, 1, 0x08, (1 << 64) - 1, 0x08
#: The folder inside an environment's folder where ``hoarddb compact`` writes the compacted
#: ``data.mdb`` before it takes the place of the environment's own (hoarddb/tools/compact.py
#: draws the steps); an open removes what a compaction cut short left there.
COMPACTING = "compacting"
#: Where checkpoints flush LMDB's files, one at a time for every environment of the process,
#: while their writers go on.
_CHECKPOINTS = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hoarddb-checkpoint")
class _Deferring(threading.local):
    #: The environments whose commit this thread holds back: inside a commits_deferred() block.
    kvs: list | None = None


_deferring = _Deferring()


@contextlib.contextmanager
def commits_deferred() -> Iterator[None]:
    """Inside the block, a write on this thread logs its record and keeps its LMDB
    transaction open; the block's end commits it. A server wraps one write, its flush
    and its answer in it, so that LMDB's commit (copying a dozen pages into the page
    cache) happens after the answer has left, while the client reads it::

        with commits_deferred():
            kv.write(fn)        # record appended, transaction held (and the commit lock)
            kv.sync()           # the record is durable: the write may be acknowledged
            send(answer)
        # here: LMDB commits; a crash before it loses nothing, the log replays the record

    Until the block ends the write is invisible to other threads' reads, and their
    writes to the same environment wait, so it is only for a caller that serves no one
    else meanwhile. On this thread, a later write or :meth:`KV.read` of the environment
    commits the held transaction first. A held commit that LMDB then refuses (a full
    disk) cannot be answered any more: its record is applied again before the next write
    (writes are refused until that works), or by the next open (:meth:`KV._commit_held`).
    """
    if _deferring.kvs is not None:  # nested: the outer block commits
        yield
        return
    _deferring.kvs = held = []
    try:
        yield
    finally:
        _deferring.kvs = None
        for kv in held:
            kv._commit_held()


def damage_hint(path: Path) -> str:
    """What to do about damage to the LMDB environment at ``path``: the catalog's
    (``DATA/catalog``, a name no database may take) or a bucket's (``kv/``, ``claims/``)."""
    if Path(path).name == "catalog":
        return ("The catalog (the list of databases and buckets) cannot be read: restore the data directory "
                "from a backup, or open a new one and load your dumps into it (hoarddb restore)")
    return ("Restore the bucket from a backup or a dump (hoarddb restore), or drop it and create it again; the "
            "other buckets are not affected")


def check_meta_pages(path: Path, system_psize: int) -> None:
    """Check LMDB's two meta pages before LMDB maps ``data.mdb``; CorruptDataError if
    they cannot be LMDB's.

    LMDB trusts its meta pages: a meta page naming a page past the end of the file
    (a file cut short) makes LMDB read past its map (SIGBUS, the process dies), and
    a root or a last page number that a flipped bit changed sends it reading garbage
    (a segfault). LMDB keeps no checksums, so this is the only check there is before
    it reads: magic, version, page size, and every page number within the file.
    Damage inside other pages is not caught here (docs/user/durability.md).
    """
    data = path / "data.mdb"
    try:
        with open(data, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(_META_DB.size + 40)
            if size < 2 * system_psize and len(head) < _META_DB.size + 40:
                return  # a new file: LMDB writes its meta pages (see _forget_unfinished_creation)
            psize = _META_DB.unpack_from(head, 40)[0]
            if psize < 256 or psize > 65536 or psize & (psize - 1):
                raise _bad_meta(path, 0, f"it gives a page size of {psize}")
            f.seek(0)
            pages = f.read(2 * psize)
    except FileNotFoundError:
        return
    if len(pages) < 2 * psize:
        raise _bad_meta(path, 1, f"the file ({size} bytes) ends before it")
    for i in (0, 1):
        page = pages[i * psize:(i + 1) * psize]
        pgno, _pad, flags = _META_HEAD.unpack_from(page, 0)
        magic, version = _META_MAGIC.unpack_from(page, 16)
        if pgno != i or not flags & P_META or magic != MDB_MAGIC:
            raise _bad_meta(path, i, "it is not an LMDB meta page (its number, flags or magic are wrong)")
        if version != MDB_DATA_VERSION:
            raise _bad_meta(path, i, f"it gives LMDB data format {version}, not {MDB_DATA_VERSION}")
        free, main = _META_DB.unpack_from(page, 40), _META_DB.unpack_from(page, 88)
        last_pg, _txnid = _META_TAIL.unpack_from(page, 136)
        if free[0] != psize:
            raise _bad_meta(path, i, f"it gives a page size of {free[0]}, meta page 0 {psize}")
        if free[1] != MDB_INTEGERKEY or main[1] != 0:
            # LMDB's free-page tree is always keyed by integers, and hoardDB's trees are
            # plain (no duplicates, no reverse or integer keys): other flags would make
            # LMDB compare keys another way.
            raise _bad_meta(path, i, f"its trees' flags ({free[1]:#x}, {main[1]:#x}) are not LMDB's for a "
                            "hoardDB environment")
        if last_pg < 1 or (last_pg + 1) * psize > size:
            raise _bad_meta(path, i, f"it names page {last_pg} as the last, past the end of the file "
                            f"({size // psize} pages): the file was cut short")
        for name, db in (("free-page", free), ("main", main)):
            root, pages_used = db[7], db[3] + db[4] + db[5]
            if root != P_INVALID and not 2 <= root <= last_pg or pages_used > last_pg + 1 or db[2] > 64:
                raise _bad_meta(path, i, f"its {name} tree's root page ({root}), depth ({db[2]}) or page "
                                "count do not fit the file")


def _bad_meta(path: Path, i: int, why: str) -> CorruptDataError:
    return CorruptDataError(
        f"{path / 'data.mdb'}: LMDB's meta page {i} is damaged: {why}. LMDB would crash or read "
        f"garbage through it, so it was not opened, and nothing was changed. {damage_hint(path)}")


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[lmdb.Transaction]:
    """A read transaction on the closed LMDB environment in folder ``path``, for a check
    (hoarddb/tools/check.py): nothing of the folder is written, ``lock.mdb`` included.

    LMDB is opened read-only and without its lock file, which is safe only while no one
    else has the environment open (the caller holds the data directory's lock). The
    environment must have been closed cleanly (or never have had a log): one a crash left
    needs the recovery :class:`KV` runs when it opens, so it is refused (StorageError).
    ``data.mdb`` missing, too short or with damaged meta pages is CorruptDataError, as
    :class:`KV` refuses it; damage met while reading raises :data:`DAMAGE_ERRORS` (or
    stops the process: run this in a child).
    """
    path = Path(path)
    data = path / "data.mdb"
    psize = resource.getpagesize()
    header = newest_header(path)
    try:
        size = data.stat().st_size
    except FileNotFoundError:
        raise CorruptDataError(f"{data} is missing. {damage_hint(path)}") from None
    if size < 2 * psize:
        raise CorruptDataError(f"{data} has {size} bytes, less than LMDB's two meta pages. {damage_hint(path)}")
    if header is not None and not header[1]:
        raise StorageError(f"{path} was not closed cleanly (a crash): open the database once, which recovers it, "
                           "then check it")
    check_meta_pages(path, psize)
    env = lmdb.open(str(path), readonly=True, lock=False, subdir=True, max_dbs=0, readahead=False,
                    map_size=max(size, 1 << 20))
    try:
        with env.begin(write=False, buffers=False) as txn:
            yield txn
    finally:
        env.close()


class KV:
    """KV is one LMDB environment (a ``kv/`` folder) and its write-ahead log: ACID, and
    recovered on open after a crash.

    LMDB runs without its own syncs (``MDB_NOSYNC``); the log (:mod:`.wal`) makes commits
    durable with one append and one fdatasync, and a checkpoint (:meth:`checkpoint`)
    flushes LMDB's file now and then so that the log can start over. With ``sync`` every
    write's record is flushed before ``write`` returns: an acknowledged write survives a
    killed process and a power cut. Without it (group commit, or ``hoarddb.open(path,
    sync=False)``) records are flushed by :meth:`sync`, a checkpoint or :meth:`close`: a
    power cut may undo the last commits, never corrupt the database. The map starts at
    ``map_size`` and doubles whenever a write finds it full, so no one has to guess a
    database's size up front.
    """

    def __init__(self, path: Path, map_size: int, sync: bool = True, reserve: int = 0):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.sync_each = sync
        # Bytes of data.mdb kept allocated past LMDB's last page, so that the next commits
        # land on blocks the file has, even on a full disk (see _keep_reserve).
        self.reserve = reserve
        self._reserved_to = 0
        # Held from a write transaction's start to its commit and log record (and through a
        # checkpoint): records go to the log in commit order, and a checkpoint sees no commit.
        self._commit_lock = threading.Lock()
        self._outer: lmdb.Transaction | None = None  # a group's outer transaction (begin_group)
        self._outer_ops: list = []
        self._outer_thread: int | None = None
        self._group_error: StorageError | None = None  # a group whose earlier writes were lost
        self._commits = 0  # commits since the last checkpoint
        self._inflight: concurrent.futures.Future | None = None  # a checkpoint flushing in the background
        self._next_pin: lmdb.Transaction | None = None  # its snapshot, the pin once it is done
        self._broken: StorageError | None = None  # a checkpoint's flush failed: writes are refused
        self._held: lmdb.Transaction | None = None  # logged, not committed yet (commits_deferred)
        self._held_by: int | None = None  # the thread that holds it (and the commit lock)
        self._held_body: bytes | None = None  # its record's body
        self._pin: lmdb.Transaction | None = None
        # The record of an acknowledged write whose held commit LMDB refused (a full disk):
        # it is in the log, not in LMDB, and is applied before anything else (_catch_up).
        self._unapplied: bytes | None = None
        self.wal: WriteAheadLog | None = None
        self.env: lmdb.Environment | None = None
        self._data_fd: int | None = None
        # LMDB's two meta pages, mapped read-only, from which the used size is read (see _used);
        # None where that cannot be trusted, and env.info() is asked instead.
        self._metas: mmap.mmap | None = None
        self._map_size = 0  # the map's size (LMDB's; changed only by _grow)
        self._psize = resource.getpagesize()
        try:
            self._open_and_recover(map_size)
        except BaseException as exc:
            # Nothing stays open (an environment left open in this process could never be
            # opened again by it), and nothing on disk was changed that the next open
            # does not redo: the log's header still names the checkpoint to recover from.
            self._abandon()
            if isinstance(exc, DAMAGE_ERRORS):
                raise CorruptDataError(
                    f"{self.path / 'data.mdb'} is damaged: LMDB says {exc}. {damage_hint(self.path)}") from None
            if isinstance(exc, (lmdb.Error, OSError)):
                raise storage_error(f"opening {self.path}", exc, "the bucket was not opened; nothing "
                                    "acknowledged was lost: open it again once this is fixed", self.path) from None
            raise

    def _open_and_recover(self, map_size: int) -> None:
        self._forget_unfinished_compaction()
        self._check_data_file()
        restored = self._restore_checkpoint()
        if restored is not None:  # the map must hold the file, whatever the meta pages say
            map_size = max(map_size, (self.path / "data.mdb").stat().st_size)
        while True:
            self.env = self._open(map_size)
            # The pin: a snapshot held until the next checkpoint, so that LMDB reuses none
            # of its pages (the module's docstring of .wal says why).
            self._pin = self.env.begin(write=False)
            try:
                if restored is not None:
                    self._replay()
                break
            except lmdb.MapFullError:  # start again from the checkpoint with a bigger map
                self._pin.abort()
                self._pin = None
                self.env.close()
                self.env = None
                map_size *= 2
                self._restore_checkpoint()
        self._psize = self.env.stat()["psize"]
        self._data_fd = os.open(self.path / "data.mdb", os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        if self.wal is None or self.wal.psize != self._psize:
            if self.wal is not None:
                self.wal.close()
            self.wal = WriteAheadLog(self.path, self._psize)
        self._map_size = self.env.info()["map_size"]
        self._map_metas()
        self._last_used = self._used_at_checkpoint = self._used()
        self._keep_reserve()
        # Always a fresh log whose header is the state on disk now: after a crash even
        # when nothing was replayed, since the log may hold records past a gap (a power
        # cut), which appending on in the same generation could line up with and replay.
        self._checkpoint()

    def _abandon(self) -> None:
        """Close what a failed open had opened (and write nothing)."""
        for pin in (self._pin, self._next_pin):
            if pin is not None:
                pin.abort()
        self._pin = self._next_pin = None
        self._unmap_metas()
        if self.env is not None:
            self.env.close()
        if self.wal is not None:
            self.wal.close()
        if self._data_fd is not None:
            os.close(self._data_fd)
            self._data_fd = None

    def _open(self, map_size: int) -> lmdb.Environment:
        try:
            self._allocate_lock_file()
            self._forget_unfinished_creation()
            self._check_meta_pages()
            return lmdb.open(
                str(self.path), map_size=map_size, subdir=True, sync=False, metasync=False,
                max_dbs=0, max_readers=MAX_READERS, readahead=False, lock=True,
            )
        except (lmdb.Error, OSError) as exc:
            if self.wal is not None:
                self.wal.close()
            if isinstance(exc, DAMAGE_ERRORS):
                raise
            raise storage_error(f"opening {self.path}", exc, "the bucket was not opened", self.path) from None

    def _check_data_file(self) -> None:
        """Refuse a ``data.mdb`` that is missing, empty or shorter than its two meta pages
        when the log beside it has a whole header: LMDB would make a new, empty file, and
        the bucket would open empty, as if its data had never been.

        A header is written only after a checkpoint flushed ``data.mdb`` with both meta
        pages (at the latest when the environment was created), so no crash leaves a log
        with a header and no data file: such a file was deleted, or cut (a careless copy,
        a half-restored backup). Without a header, a missing or short file is a creation
        that never finished (see :meth:`_forget_unfinished_creation`).
        """
        data = self.path / "data.mdb"
        try:
            size = data.stat().st_size
        except FileNotFoundError:
            size = None
        if size is not None and size >= 2 * self._psize:
            return
        if newest_header(self.path) is None:
            return
        what = "is missing" if size is None else f"has {size} bytes, less than its two meta pages"
        raise CorruptDataError(
            f"{data} {what}, but the write-ahead log beside it (wal.0, wal.1) shows that it held data: the file "
            f"was deleted or cut short, not by a crash. Nothing was changed. {damage_hint(self.path)}")

    def _forget_unfinished_compaction(self) -> None:
        """Remove what a compaction cut short left in :data:`COMPACTING`, before anything reads
        ``data.mdb``: a copy that never took the place of ``data.mdb`` (the compaction is
        undone: ``data.mdb`` is the old file, whole), or the empty folder of one that did
        (it is finished: ``data.mdb`` is the new file, whole, and its log's header says it
        was closed cleanly, so it is opened as found). hoarddb/tools/compact.py draws the steps.
        """
        staging = self.path / COMPACTING
        if not staging.is_dir():
            return
        try:
            copy = staging / "data.mdb"
            if copy.exists():
                log.warning("%s: a compaction did not finish; its copy is removed, and the environment "
                            "opens as it was before it", self.path)
                copy.unlink()
            staging.rmdir()
        except OSError as exc:  # only room it takes: the next open, or compaction, tries again
            log.warning("%s: could not remove %s left by a compaction: %s", self.path, staging, reason(exc))

    def _check_meta_pages(self) -> None:
        """Check LMDB's two meta pages before LMDB maps ``data.mdb`` (:func:`check_meta_pages`)."""
        check_meta_pages(self.path, self._psize)

    def _forget_unfinished_creation(self) -> None:
        """Empty a ``data.mdb`` shorter than LMDB's two meta pages, so that LMDB makes it anew.

        LMDB creates an environment by writing its two meta pages; a disk that filled up (or
        a crash) in the middle leaves a file with less than both, which LMDB then refuses
        for good ("MDB_INVALID: File is not an LMDB file"): a bucket created on a nearly
        full disk could never be opened again, even with space. Such a file never held a
        commit (the first commit writes past the two meta pages), so nothing is lost::

            data.mdb: | meta 0 (part) |        -> emptied -> LMDB writes | meta 0 | meta 1 | again
        """
        data = self.path / "data.mdb"
        try:
            size = data.stat().st_size
        except FileNotFoundError:
            return
        if 0 < size < 2 * self._psize:
            log.warning("%s: data.mdb has %d bytes, less than LMDB's two meta pages: its creation did not "
                        "finish (a full disk, or a crash); it is made anew", self.path, size)
            os.truncate(data, 0)

    def _allocate_lock_file(self) -> None:
        """Give ``lock.mdb`` real blocks for its whole reader table before LMDB maps it.

        LMDB sizes a new lock file with ``ftruncate`` (a file of holes) and then writes its
        header and reader slots through a shared memory map. A write to a hole of a mapped
        file needs a block, and on a full disk the kernel answers a page fault with no
        block by killing the process (SIGBUS): creating a bucket, or opening one whose
        lock file had never been written that far, crashed the process on a full disk.
        With the blocks allocated first, a full disk is an ENOSPC here instead, and LMDB
        (which keeps a lock file at least its size) never writes a hole::

            lock.mdb: | header | reader 0 | reader 1 | ... | reader MAX_READERS - 1 |  every byte allocated

        Nothing in it outlives the processes that have it open; zeros are what LMDB starts from.
        """
        fd = os.open(self.path / "lock.mdb", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            size = -(-LOCK_FILE_BYTES // self._psize) * self._psize
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)

    # -- opening: the checkpoint's meta pages back, then the log's records ---------------------

    def _restore_checkpoint(self) -> bool | None:
        """Before LMDB opens: put the last checkpoint's meta pages back into ``data.mdb``.

        None when there is nothing to recover: no log header (a new environment, or one
        last written by a hoardDB without the log, whose commits LMDB synced itself), or
        one a clean close wrote (LMDB's file was flushed then, and is taken as found: LMDB's
        own tools may have changed it since). Otherwise whether the meta pages on disk
        differed from the checkpoint's (commits since it, to be replayed from the log).
        """
        data = self.path / "data.mdb"
        if not data.exists():
            return None
        if self.wal is not None:  # a second try, with a bigger map
            self.wal.close()
        self.wal = wal = WriteAheadLog.open_existing(self.path, self._psize)
        if wal is None:
            return None
        if wal.closed:
            return None
        try:
            fd = os.open(data, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
            try:
                if os.pread(fd, len(wal.metas), 0) == wal.metas:
                    return False
                os.pwrite(fd, wal.metas, 0)
                _datasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            wal.close()
            raise storage_error(f"recovering {data}", exc, "the bucket was not opened; nothing acknowledged "
                                "was lost: open it again once this is fixed") from None
        log.info("%s: recovering from the checkpoint of generation %d", self.path, wal.generation)
        return True

    def _replay(self) -> int:
        """Apply the log's records since the checkpoint, in order; how many there were."""
        count, batch = 0, []
        for ops in self.wal.records():
            batch.append(ops)
            count += 1
            if len(batch) >= 1000:
                self._apply(batch)
                batch = []
        if batch:
            self._apply(batch)
        if count:
            log.info("%s: replayed %d records of the write-ahead log", self.path, count)
        return count

    def _apply(self, batch: list) -> None:
        # No growing here: a new map size ends the pin (py-lmdb ends every transaction),
        # and until the replay's checkpoint the pinned pages are the only durable ones. A
        # full map ends the replay, and the caller starts over with a bigger one.
        with self.env.begin(write=True) as txn:
            for ops in batch:
                for op in ops:
                    if op[0] == PUT:
                        txn.put(op[1], op[2])
                    else:
                        txn.delete(op[1])

    # -- writing ---------------------------------------------------------------------------

    def write(self, fn: Callable[[lmdb.Transaction], T]) -> T:
        """Run ``fn(txn)`` in one write transaction and commit it; all of it or none.

        If the map is full, the transaction is aborted, the map doubled and ``fn`` run
        again from the start, so ``fn`` must not keep effects outside the transaction.
        Inside a group (:meth:`begin_group`, on the group's thread) the transaction is a
        child of the group's: its commit costs no fsync, and its abort undoes only it.
        """
        if self._outer_thread is not None and self._outer_thread == threading.get_ident():  # (even if it failed)
            return self._write_in_group(fn)
        if self._held_by is not None:
            self._commit_held_here()
        made_room = False
        while True:
            self._commit_lock.acquire()
            held = False
            try:
                if self._broken is not None:
                    raise self._broken
                if self._unapplied is not None:
                    self._catch_up()
                self._note_used()
                try:
                    txn = self.env.begin(write=True)
                except lmdb.Error as exc:
                    raise storage_error(f"writing {self.path}", exc, path=self.path) from None
                try:
                    recording = Recording(txn)
                    result = fn(recording)
                except lmdb.MapFullError:
                    txn.abort()
                    self._grow()
                    continue
                except BaseException:
                    txn.abort()
                    raise
                try:
                    held = self._commit(txn, recording.ops, self.sync_each, may_hold=True)
                except lmdb.MapFullError:  # the commit's own pages did not fit
                    self._grow()
                    continue
                except DiskFullError:
                    if made_room or not self._make_room():
                        raise
                    made_room = True
                    continue
            finally:
                if not held:
                    self._commit_lock.release()
            if self.sync_each:
                self.sync()
            return result

    def _commit(self, txn: lmdb.Transaction, ops: list, durable: bool, may_hold: bool = False) -> bool:
        """Log and commit a write transaction (holding the commit lock); checkpoint if due.
        True if the commit is held instead (``may_hold``, inside :func:`commits_deferred`):
        the transaction and the commit lock are kept until the block ends.

        The record goes to the log before LMDB commits, so that the log's order is the
        commit order; a commit that fails takes its record back. A transaction too big to
        be worth logging is committed and checkpointed at once instead — when it is to be
        made ``durable`` now (a synced write, a group): a checkpoint flushes its pages once,
        where a record would be written and flushed and its pages flushed again later.
        Unsynced, a big record costs one write to the page cache and is kept.
        """
        if not ops:
            txn.abort()
            return False
        # Sized before it is encoded: a record that will not be written is not built (it
        # took 4 of a durable 1,000-document batch's 25 ms).
        big = len(ops) > BIG_OPS or (durable and record_exceeds(ops, BIG_RECORD))
        body = None if big else encode_ops(ops)
        try:
            at = None if big else self.wal.append(body)
        except BaseException:  # the disk refused the record (nothing of it stays): nor does the write
            txn.abort()
            raise
        if may_hold and at is not None:
            holders = _deferring.kvs
            if holders is not None:
                self._held, self._held_body, self._held_by = txn, body, threading.get_ident()
                holders.append(self)
                return True
        try:
            txn.commit()
        except lmdb.Error as exc:
            # LMDB wrote none of it that counts (its meta page is written last), and the
            # record is zeroed: nothing of the write stays, in memory or on disk.
            if at is not None:
                self.wal.take_back(at)
            if isinstance(exc, lmdb.MapFullError):
                raise
            if isinstance(exc, DAMAGE_ERRORS):  # LMDB met a page that is not what it wrote
                raise CorruptDataError(f"writing {self.path / 'data.mdb'} failed: the file is damaged (LMDB says "
                                       f"{exc}); nothing of this write was kept. {damage_hint(self.path)}") from None
            raise storage_error(f"writing {self.path / 'data.mdb'}", exc, path=self.path) from None
        if big:  # durable only once checkpointed: a checkpoint that fails refuses this write too
            self._commits += 1
            self._checkpoint()
        else:
            self._after_commit()
        return False

    def _make_room(self) -> bool:
        """After a commit the disk had no room for (holding the commit lock): checkpoint, if
        anything was committed since the last one; whether it did (and the write may try again).

        Until a checkpoint, the pin keeps LMDB from reusing the pages the commits since
        the last one freed, so each commit takes new pages, which a full disk does not
        have. A checkpoint moves the pin: those pages may be reused, and a small write (a
        delete, a bucket's drop in the catalog) often fits in them. The checkpoint itself
        needs no room (the log's headers have theirs from the start).
        """
        if self._commits == 0 and self._inflight is None:
            return False
        try:
            self._checkpoint()
        except StorageError as exc:  # (it has made writes refused: the caller hears its own error)
            log.warning("%s: could not checkpoint to make room: %s", self.path, exc.message)
            return False
        return True

    def _after_commit(self) -> None:
        """After a commit whose record is in the log: count it, finish a checkpoint that is
        done, begin one that is due. The write stands whatever happens to the checkpoint (a
        failed one refuses the writes after it)."""
        self._commits += 1
        try:
            if self._inflight is not None:
                self._settle()
            if self._inflight is None and (
                    self._commits >= CHECKPOINT_COMMITS
                    or self._last_used - self._used_at_checkpoint > CHECKPOINT_GROWTH
                    or self.wal.end - self.wal.records_at > CHECKPOINT_LOG):
                self._begin_checkpoint()
        except Exception:
            log.exception("%s: a checkpoint after a commit failed", self.path)
        if self.reserve:
            self._keep_reserve()

    def _keep_reserve(self) -> None:
        """Keep :attr:`reserve` bytes of data.mdb allocated past LMDB's last page (when there is room).

        LMDB writes a commit's new pages past its last one; where the file already has
        blocks there (allocated, never written: ``posix_fallocate``) the write needs none,
        so a few small commits still fit on a full disk. The catalog keeps such a reserve:
        dropping a bucket, which is how a full disk is given room back, must never be
        refused for want of the room it would give::

            data.mdb: | meta | meta | pages LMDB uses ... | allocated, unused (reserve) |
                                                          ^ last page + 1

        LMDB reads nothing past its last page, so what lies there is never data: a crash
        leaves it as it leaves any page past the last checkpoint's. Refilled when half is used.
        """
        if not self.reserve:
            return
        used = self._used()
        if self._reserved_to - used >= self.reserve // 2:
            return
        want = used + self.reserve
        try:
            os.posix_fallocate(self._data_fd, 0, want)
        except OSError:  # no room for it now: the next commit tries again
            return
        self._reserved_to = want

    def _commit_held(self) -> None:
        """Commit the transaction a :func:`commits_deferred` block held, and release the
        commit lock (on the thread that holds them; nothing to do if none is held).

        Its record is in the log, and was acknowledged once flushed: a commit that fails
        now (a disk too full for LMDB's new pages) cannot be taken back or answered. The
        record is kept (:attr:`_unapplied`) and applied again before any other write, as
        the replay of an open would (:meth:`_catch_up`): once the disk has room, writes
        go on; until then they are refused, and reads miss that write. No checkpoint runs
        meanwhile, close included, so the record stays in the log's current generation
        and the next open replays it if no catch-up did.
        """
        txn, body = self._held, self._held_body
        self._held, self._held_body, self._held_by = None, None, None
        if txn is None:
            return
        try:
            try:
                txn.commit()
            except lmdb.Error as exc:
                self._unapplied = body
                log.critical("%s: an acknowledged write could not be committed (%s); it is kept in the "
                             "write-ahead log and applied before the next write once there is room; until "
                             "then writes are refused and reads miss it", self.path, reason(exc))
                return
            self._after_commit()
        finally:
            self._commit_lock.release()

    def _catch_up(self) -> None:
        """Apply the record of an acknowledged write whose held commit failed (holding the
        commit lock); StorageError if LMDB still refuses it (the write that asked is refused).

        The record is applied as an open's replay applies it: its puts and deletes in one
        transaction, with no new record (it is in the log already). A full map cannot be
        grown here: growing checkpoints, and a checkpoint now would leave the record
        behind in the older generation; only reopening, whose replay grows the map, helps then.
        """
        if self._unapplied is None:
            return
        txn = None
        try:
            txn = self.env.begin(write=True)
            for op in decode_ops(memoryview(self._unapplied)):
                if op[0] == PUT:
                    txn.put(op[1], op[2])
                else:
                    txn.delete(op[1])
            txn.commit()
        except lmdb.Error as exc:
            if txn is not None:
                txn.abort()  # (nothing to do after a commit that failed: LMDB aborted it)
            outcome = ("writes are refused until it is applied: free space, then retry (or reopen the "
                       "database, which applies it)")
            if isinstance(exc, lmdb.MapFullError):
                outcome = "writes are refused until the database is opened again, which applies it"
            raise storage_error(f"{self.path}: applying an acknowledged write that LMDB refused before",
                                exc, outcome, self.path) from None
        self._unapplied = None
        log.warning("%s: the acknowledged write LMDB had refused is applied now", self.path)
        self._after_commit()

    def behind(self) -> bool:
        """Whether LMDB lacks an acknowledged write: a held commit it refused, whose record
        :meth:`_catch_up` applies before the next write (or a read), or the next open does."""
        return self._unapplied is not None

    def _commit_held_here(self) -> None:
        """Commit this thread's held transaction, if it holds one (before it writes or reads again)."""
        if self._held_by is not None and self._held_by == threading.get_ident():
            self._commit_held()

    # -- groups: many writes, one commit ---------------------------------------------------
    #
    # A server runs the writes that arrive together as one group: each in a child transaction
    # of one outer transaction, committed once at the end and flushed by sync(). Only one
    # thread writes to the environment meanwhile (the commit lock is held by the group).

    def begin_group(self) -> None:
        """Open the outer transaction of a group of writes on this thread (a group is
        made durable right after it ends: a server syncs each one)."""
        self._commit_held_here()
        self._commit_lock.acquire()
        try:
            if self._broken is not None:
                raise self._broken
            self._catch_up()
            self._note_used()
            try:
                self._outer = self.env.begin(write=True)
            except lmdb.Error as exc:
                raise storage_error(f"writing {self.path}", exc, path=self.path) from None
            self._outer_ops = []
            self._outer_thread = threading.get_ident()
            self._group_error = None
            self._budget_group()
        except BaseException:
            self._outer, self._outer_thread = None, None
            self._commit_lock.release()
            raise

    def in_group(self) -> bool:
        """Whether this thread has a group open (its writes are children of the group's transaction)."""
        return self._outer_thread == threading.get_ident()

    def end_group(self) -> None:
        """Commit the group's writes: one commit (and one log record) for all of them.

        Raises StorageError if they could not all be committed (then none of the writes
        answered so far in the group is known to be there: the caller fails them all).
        The commit lock is released whatever happens.
        """
        outer, self._outer, self._outer_thread = self._outer, None, None
        ops, self._outer_ops = self._outer_ops, []
        error, self._group_error = self._group_error, None
        try:
            if error is not None:
                if outer is not None:
                    outer.abort()
                raise error
            if outer is not None:
                try:
                    self._commit(outer, ops, True)
                except DiskFullError:
                    self._make_room()  # so that the next group may reuse the pages freed so far
                    raise
                except lmdb.MapFullError as exc:  # the next group grows the map before it begins
                    raise StorageError(f"writing {self.path} failed: its map filled up ({exc}); none of the "
                                       "writes of the group was kept; retry them") from None
        finally:
            self._commit_lock.release()

    def _budget_group(self) -> None:
        """How much of the map the group may take before it is committed and the map grown:
        half of what is free, so that its commit always finds room for its own pages."""
        self._group_room = (self._map_size - self._used()) // 2
        self._group_spent = 0

    def _write_in_group(self, fn):
        if self._group_error is not None:
            raise self._group_error
        if self._group_spent > self._group_room:
            self._regroup()
        while True:
            child = self.env.begin(write=True, parent=self._outer)
            recording = Recording(child)
            try:
                result = fn(recording)
                child.commit()
                ops = recording.ops
                self._outer_ops += ops
                # What the write may have taken of the map, generously: the pages a tree
                # copies on its way to a key (a few), and its bytes twice over.
                spent = GROUP_WRITE_PAGES * self._psize
                for op in ops:
                    spent += 2 * (len(op[1]) + len(op[2])) if op[0] == PUT else 0
                self._group_spent += spent
                return result
            except lmdb.MapFullError:
                child.abort()
                self._regroup()
            except BaseException:
                child.abort()
                raise

    def _regroup(self) -> None:
        """A write of a group found the map full: commit what the group wrote so far, grow
        the map, and go on in a new outer transaction (the commit lock is held throughout).

        Growing needs no transaction open, hence the commit. If that commit fails, the
        group's earlier writes are gone: the group is failed (end_group raises), and so is
        every later write of it.
        """
        outer, self._outer = self._outer, None
        ops, self._outer_ops = self._outer_ops, []
        try:
            self._commit(outer, ops, True)
            self._grow()
            self._outer = self.env.begin(write=True)
            self._budget_group()
        except (lmdb.Error, StorageError) as exc:
            if isinstance(exc, StorageError):
                self._group_error = StorageError(f"{exc.message} (the writes of its group were not kept)")
            else:
                self._group_error = storage_error(f"writing {self.path}", exc,
                                                  "the writes of its group were not kept", self.path)
            try:
                self._grow()  # no transaction is open now: the next group finds room
            except (lmdb.Error, StorageError) as grow_error:  # the group's own error is what it hears
                log.warning("%s: could not grow the map after a failed group: %s", self.path, grow_error)
            raise self._group_error from None

    def sync(self) -> None:
        """Make every commit so far durable: flush the log (nothing to do if it is).

        A flush that fails refuses every later write until the environment is opened
        again: after a failed fdatasync the kernel may have dropped the records it could
        not write, and a later flush that succeeds would not say so.
        """
        try:
            self.wal.flush()
        except StorageError as exc:
            raise self._break(f"flushing its write-ahead log failed ({exc.message})") from None

    def checkpoint(self) -> None:
        """Flush LMDB's file and start the log over (it is then empty)."""
        self._commit_held_here()
        with self._commit_lock:
            if self._broken is not None:
                raise self._broken
            self._catch_up()
            self._checkpoint()

    def _break(self, why: str) -> StorageError:
        """Refuse every later write until the environment is opened again (whose recovery
        replays the log from the last checkpoint that finished); the error they hear."""
        if self._broken is None:
            self._broken = StorageError(
                f"{self.path}: {why}; writes to it are refused until the database is opened again, "
                "which recovers every acknowledged write")
            log.critical("%s", self._broken.message)
        return self._broken

    # A checkpoint, in three steps, holding the commit lock for the first and the last:
    #
    # 1. Copy LMDB's meta pages (the state after the last commit), pin that snapshot, and
    #    switch the log to the next generation (in the other file).
    # 2. fdatasync data.mdb, then write the new generation's header with the copied meta
    #    pages and flush it (_seal): from then on a recovery starts there. A crash before
    #    recovers from the previous header (the previous pin still protects its pages)
    #    and replays both generations' records.
    # 3. The new pin replaces the previous one, whose pages may now be reused.
    #
    # Normally step 2 runs on the checkpoint thread while writes go on (_begin_checkpoint,
    # then _settle at a later commit); at open, close, a map growth and after a big
    # transaction, all three run at once (_checkpoint).

    def _begin_checkpoint(self) -> None:
        # What can fail without changing anything comes first (a later commit tries again).
        try:
            metas = os.pread(self._data_fd, 2 * self._psize, 0)
            next_pin = self.env.begin(write=False)
        except (OSError, lmdb.Error) as exc:
            log.warning("%s: could not begin a checkpoint (%s); the next commit tries again", self.path, reason(exc))
            return
        try:
            # From the switch on, the next generation's records go to the other file, whose
            # header only the flush in the background makes the recovery's start: until it
            # is written no other checkpoint may begin (it would reuse this generation's file).
            self.wal.switch()
            self._inflight = _CHECKPOINTS.submit(self._seal, metas)
        except BaseException as exc:
            next_pin.abort()
            raise self._break(f"a checkpoint could not begin ({getattr(exc, 'message', None) or reason(exc)})") from None
        self._next_pin = next_pin
        self._commits = 0
        self._used_at_checkpoint = self._used_checked()

    def _seal(self, metas: bytes, closed: bool = False) -> None:
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            raise storage_error(f"flushing {self.path / 'data.mdb'}", exc, "a checkpoint did not finish",
                                self.path) from None
        self.wal.commit_generation(metas, closed)

    def _settle(self, wait: bool = False) -> None:
        """Finish a background checkpoint that is done (or wait for it): move the pin."""
        inflight = self._inflight
        if inflight is None or not (wait or inflight.done()):
            return
        self._inflight = None
        try:
            inflight.result()
        except Exception as exc:  # the disk refused a flush: recovery must start from the older header
            raise self._break(f"a checkpoint could not flush ({getattr(exc, 'message', None) or exc})") from None
        pin, self._pin, self._next_pin = self._pin, self._next_pin, None
        if pin is not None:
            pin.abort()

    def _checkpoint(self, closed: bool = False) -> None:
        """A whole checkpoint now (holding the commit lock): no commit happens meanwhile.

        One that fails refuses every later write (:meth:`_break`): the log may have been
        switched to the next generation, whose header is not written, and another
        checkpoint would reuse the file the recovery still needs; and after a map growth
        no pin protects the last checkpoint's pages until this one pins again.
        """
        self._settle(wait=True)
        try:
            metas = os.pread(self._data_fd, 2 * self._psize, 0)
            self.wal.switch()
            self._seal(metas, closed)
            pin, self._pin = self._pin, self.env.begin(write=False)
        except (OSError, lmdb.Error, StorageError) as exc:
            raise self._break(f"a checkpoint could not finish ({getattr(exc, 'message', None) or reason(exc)})") \
                from None
        if pin is not None:
            pin.abort()
        self._used_at_checkpoint = self._used_checked()
        self._commits = 0

    def _used(self) -> int:
        """LMDB's used size, ``(last page + 1) * page size``, as ``env.info()`` gives it:
        read from the newer of the two meta pages (the one with the higher transaction id,
        meta 0 on a tie: LMDB's ``mdb_env_pick_meta``), through :attr:`_metas`.

        ``env.info()`` costs ~7,000 instructions (py-lmdb builds a dict of six fields), and
        every write asks for the used size before it begins (:meth:`_note_used`); this is a
        few hundred. It reads the same bytes ``mdb_env_info`` reads: LMDB keeps no copy of
        its meta pages, it reads them through its own read-only shared map of ``data.mdb``,
        and (without ``MDB_WRITEMAP``) writes them with ``pwrite``; a shared map of the same
        file sees those writes at once (the page cache, which LMDB itself requires to be
        unified). Asked holding the commit lock, or with no writer (open), so no commit
        writes the meta pages meanwhile. Where the map could not be made, or at open did not
        agree with ``env.info()`` (another LMDB's layout), ``env.info()`` is asked
        (:meth:`_map_metas`).
        """
        metas = self._metas
        if metas is None:
            return (self.env.info()["last_pgno"] + 1) * self._psize
        last0, txnid0, last1, txnid1 = self._meta_used.unpack_from(metas)
        return ((last1 if txnid0 < txnid1 else last0) + 1) * self._psize

    def _used_checked(self) -> int:
        """:meth:`_used` asked of ``env.info()`` (at each checkpoint: once per up to 1,000
        commits), and compared with what the meta map says: should they ever differ, the map
        is dropped and every later write asks ``env.info()``, as before the map."""
        used = (self.env.info()["last_pgno"] + 1) * self._psize
        if self._metas is not None and self._used() != used:
            log.warning("%s: the used size read from LMDB's meta pages (%d) is not LMDB's (%d); it is asked "
                        "of env.info() before every write from now on (slower)", self.path, self._used(), used)
            self._unmap_metas()
        return used

    def _map_metas(self) -> None:
        """Map LMDB's two meta pages read-only for :meth:`_used` (at open, LMDB open, no
        write transaction), if the used size read there is ``env.info()``'s."""
        self._unmap_metas()
        try:
            if os.fstat(self._data_fd).st_size < 2 * self._psize:  # (LMDB wrote both when it opened)
                raise ValueError("data.mdb is shorter than its two meta pages")
            self._meta_used = struct.Struct(_META_USED.format(self._psize - 16))
            self._metas = mmap.mmap(self._data_fd, 2 * self._psize, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            if self._used() == (self.env.info()["last_pgno"] + 1) * self._psize:
                return
            why = "the used size read from its meta pages is not LMDB's"
        except (OSError, ValueError, struct.error) as exc:
            why = str(exc)
        self._unmap_metas()
        log.warning("%s: LMDB's used size is asked of env.info() before every write (slower): %s", self.path, why)

    def _unmap_metas(self) -> None:
        metas, self._metas = self._metas, None
        if metas is not None:
            metas.close()

    def read(self) -> lmdb.Transaction:
        """A read transaction (a snapshot); use as a context manager. It sees this thread's
        held write (:func:`commits_deferred`): that is committed first."""
        self._commit_held_here()
        if self._unapplied is not None and self._commit_lock.acquire(blocking=False):
            try:  # the disk may have room again: the read then sees the acknowledged write
                self._catch_up()
            except StorageError:
                pass
            finally:
                self._commit_lock.release()
        return self.env.begin(write=False, buffers=False)

    def _note_used(self) -> None:
        """Before a write transaction (holding the commit lock): remember LMDB's used size,
        which checkpoints follow, and double the map if most of it is used."""
        self._last_used = used = self._used()
        if used > self._map_size * GROW_AT:
            self._grow()

    def _grow(self) -> None:
        """Double the map (holding the commit lock, no write transaction open).

        py-lmdb ends every transaction of the environment on a new map size, the pin too;
        a checkpoint pins again before any commit could reuse the pinned pages.
        """
        self._settle(wait=True)
        size = self.env.info()["map_size"]
        self.env.set_mapsize(size * 2)
        self._map_size = self.env.info()["map_size"]
        self._pin = None
        self._checkpoint()

    def close(self) -> None:
        """Checkpoint (so the next open replays nothing), then close the files."""
        if self._data_fd is None:
            return
        self._commit_held_here()
        try:
            with self._commit_lock:
                try:
                    self._settle(wait=True)
                finally:
                    if self._broken is None:
                        try:
                            self._catch_up()
                        except StorageError as exc:  # no checkpoint: the next open replays the write
                            log.warning("%s", exc.message)
                        if self._unapplied is None:
                            self._checkpoint(closed=True)
        finally:
            for pin in (self._pin, self._next_pin):
                if pin is not None:
                    pin.abort()
            self._pin = self._next_pin = None
            self._unmap_metas()
            self.env.close()
            self.wal.close()
            os.close(self._data_fd)
            self._data_fd = None
