"""LMDB's files as hoardDB checks them: data.mdb's meta pages, lock.mdb's reader table, what damage is, a read-only look.

LMDB keeps no checksums and trusts its files; these are the checks hoardDB makes before
LMDB maps them (:func:`check_meta_pages`), the errors that mean a file is not what LMDB
wrote (:data:`DAMAGE_ERRORS`, and what to do: :func:`damage_hint`), and a read
transaction on a closed environment that writes nothing (:func:`read_only`, for
``hoarddb check``). :class:`hoarddb.storage.kv.KV` is what opens and writes them.
"""

from __future__ import annotations

import contextlib
import os
import resource
import struct
from pathlib import Path
from typing import Iterator

import lmdb

from ..errors import CorruptDataError, StorageError
from .wal import newest_header

#: Read transactions an environment allows at once (LMDB's reader table in lock.mdb) ...
MAX_READERS = 254
#: ... and the bytes that table takes: LMDB's header (at most 256 bytes) and a 64-byte slot per reader.
LOCK_FILE_BYTES = 256 + 64 * MAX_READERS
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
MDB_MAGIC, MDB_DATA_VERSION, P_META, P_INVALID, MDB_INTEGERKEY = 0xBEEFC0DE, 1, 0x08, (1 << 64) - 1, 0x08
#: The folder inside an environment's folder where ``hoarddb compact`` writes the compacted
#: ``data.mdb`` before it takes the place of the environment's own (hoarddb/tools/compact.py
#: draws the steps); an open removes what a compaction cut short left there.
COMPACTING = "compacting"


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
