"""The contract every store type keeps: how it is opened, the verbs it serves, and its stats.

A store type is one module in this package with one ``Store`` subclass. The engine
opens a store with the bucket's directory and declaration, and calls its verbs by the
operation's name (``store.push(doc=...)``); argument kinds are already checked by
:mod:`hoarddb.operations`, so a store checks only what its type means (a priority that
is not a number, a document without its sort key). A store owns its own durability:
when a write verb returns, the write is on disk (fsync) unless ``options.sync`` is off.

Adding a store type: subclass :class:`Store`, set ``type_name`` and ``bucket_options``,
give it a method for each verb :mod:`hoarddb.operations` lists for the type, register it
in ``hoarddb/stores/__init__.py``; ``tests/stores/test_contract.py`` then holds it to the
contract every type keeps.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from collections.abc import Mapping
from typing import Any, ClassVar, Iterator, NamedTuple

from bson.raw_bson import RawBSONDocument

from ..errors import (BadValueError, CorruptDataError, DocumentTooLargeError, LimitExceededError, NotADocumentError,
                      StorageError)
from ..options import Options
from ..storage.kv import DAMAGE_ERRORS, damage_hint
from ..values.codec import DECODE_ERRORS, MAX_DOCUMENT_SIZE, decode, encode, encode_checked

log = logging.getLogger("hoarddb.stores")

#: What reading damaged bytes raises below a store: LMDB finding that its pages are not
#: what it wrote (it keeps no checksums, so it finds only some damage), and a stored
#: document that does not decode. Whoever calls a store's verbs turns them into
#: CORRUPT_DATA naming the bucket (:meth:`Store.damaged`), never a traceback of the
#: library's own error: the engine where it already catches a verb's exceptions (a
#: ``try`` costs nothing until something is raised; a wrapper around every verb cost a
#: get 5-10%), the store itself while it opens, and store fields in FieldStores.call.
DAMAGE = (*DAMAGE_ERRORS, *DECODE_ERRORS)

#: What to do about entries that disagree with the documents (index entries, counts): a
#: dump reads the documents alone, and its restore writes every entry and count again.
REBUILD = ("dump the bucket and restore it (hoarddb dump, then hoarddb restore --drop), which writes its index "
           "entries and counts again from its documents")


def answer_too_large(total: int, limit: int, verb: str) -> DocumentTooLargeError:
    """The refusal of a read whose documents passed ``limit`` bytes (``total`` so far):
    ``Options.max_answer_bytes``, which a server sets to its message limit."""
    return DocumentTooLargeError(
        f"the documents this {verb} matches are over the {limit}-byte limit of one answer (it stopped "
        f"reading at {total} bytes); ask for fewer with limit, narrow the filter, or read the whole "
        "bucket in pages with export", size=total)


class Problems(list):
    """Problems is the list a check fills: it keeps the first ``limit`` and counts the rest
    (``more``), so that a bucket damaged everywhere costs a check no more memory than that."""

    def __init__(self, limit: int = 1000):
        super().__init__()
        self.limit = limit
        self.more = 0

    def append(self, problem) -> None:
        if len(self) < self.limit:
            super().append(problem)
        else:
            self.more += 1


class Problem(NamedTuple):
    """Problem is one thing a check found wrong in a bucket: the file (relative to the
    bucket's folder), what is wrong, and what to do (None: restore the bucket, the remedy
    for damaged data; the check tool says how)."""

    file: str
    what: str
    todo: str | None = None


def _opening(method):
    """A store's constructor (or its other once-per-open step, ``open_indexes``) that
    answers damaged bytes with CORRUPT_DATA, closing what it had opened."""
    @functools.wraps(method)
    def opening(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except DAMAGE as exc:
            try:
                self.close()
            except Exception:  # (half opened: what it has, it closes; the damage is what the caller hears)
                pass
            raise self.damaged(exc) from exc

    opening.opens = True
    return opening


class Store(ABC):
    """Store is one bucket's data of one store type.

    ``directory`` is the bucket's own folder (it exists); ``declaration`` is the
    bucket's catalog entry (``{"type": ..., "options": {...}}``); ``options`` are the
    database-wide knobs. Every verb is a method named as its operation. Verbs that
    read return plain Python values (dicts, lists, ints, None when empty); verbs that
    write are atomic: all of their effect, or none of it, is on disk.
    """

    #: The name of the type in ``create_bucket(type=...)``.
    type_name: ClassVar[str] = ""
    #: Bucket options this type accepts besides ``type``, with a one-line meaning each.
    bucket_options: ClassVar[dict[str, str]] = {}
    #: Whether writes to it can share one transaction in a group (:meth:`begin_group`).
    groups: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        # Opening a store reads what it keeps in memory (a count, a heap, claims, index
        # states): damaged bytes met there are CORRUPT_DATA too (see DAMAGE; the verbs'
        # are the engine's to answer, at no cost to each call).
        super().__init_subclass__(**kwargs)
        for name in ("__init__", "open_indexes"):
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "opens", False):
                setattr(cls, name, _opening(method))

    def __init__(self, directory: Path, declaration: Mapping[str, Any], options: Options):
        self.directory = Path(directory)
        self.declaration = declaration
        self.options = options

    @classmethod
    def validate_options(cls, bucket_options: Mapping[str, Any]) -> dict:
        """The bucket options, checked; raise on a value this type cannot take.

        Unknown names are refused by the catalog before this is called.
        """
        return dict(bucket_options)

    def close(self) -> None:
        """Release files and memory; the store is not used again."""

    @classmethod
    def check(cls, directory: Path, declaration: Mapping[str, Any]) -> list[Problem]:
        """Read every file of the bucket in ``directory`` (closed, and not open anywhere) and
        say what is wrong with it; an empty list when it is sound. Writes nothing.

        A check reads what a read of the bucket would not (every entry, every index entry,
        every count, every blob's bytes) and goes on past what it finds. The check tool
        (hoarddb/tools/check.py) runs it in a child process when the bucket keeps data in
        LMDB, whose damaged pages can stop the process.
        """
        raise NotImplementedError(f"{cls.__name__} has no check")

    def check_open(self, declaration: Mapping[str, Any]) -> list[Problem]:
        """:meth:`check` on the open bucket, while it serves (the ``check`` operation): the same
        problems, found over one moment of the bucket while writes go on, each type taking that
        moment its own way (a read transaction, a queue's state under its lock, a blob index's
        length). Writes nothing; holds writers back no longer than it takes to note the moment.
        A write made after it is not read, and what a write removes meanwhile is not reported."""
        raise NotImplementedError(f"{type(self).__name__} has no check while it serves")

    def damaged(self, exc: BaseException) -> CorruptDataError:
        """The error for damaged bytes that reading this store met (``exc``, one of :data:`DAMAGE`)."""
        if isinstance(exc, DAMAGE_ERRORS):
            what = f"LMDB found its file is not what it wrote ({exc})"
        else:
            what = f"a stored document does not decode ({type(exc).__name__}: {exc})"
        return CorruptDataError(f"the data of bucket {self.directory} is damaged on disk: {what}. "
                                f"{damage_hint(self.directory)}")

    def sync(self, logs: list | None = None) -> None:
        """Make every write so far durable; a no-op unless ``options.sync`` is off (group commit).

        ``logs``: given by an engine that syncs many stores at once, a store whose writes are
        in segment logs makes its other files durable and appends its logs to it, and the
        engine flushes every store's logs together (hoarddb.storage.segment_flush), after
        every store's other files."""

    def backup(self, target: Path) -> None:
        """Copy the open bucket's files into the new folder ``target`` as one moment of the bucket,
        while it serves (a hot backup): what a later open of ``target`` reads is the bucket as it
        was at some instant during the call, every write before it whole and none after it."""
        raise NotImplementedError(f"{type(self).__name__} has no backup")

    def stats(self) -> dict:
        """``{"entries": n, "bytes": bytes on disk, "data_bytes": bytes of the data}`` for this store.

        ``bytes`` is what the bucket's files take on disk (allocated blocks: free pages,
        logs and preallocated space included); ``data_bytes`` what its entries fill of
        them (each store type says how it counts).
        """
        return {"entries": self.length(), "bytes": directory_bytes(self.directory),
                "data_bytes": apparent_bytes(self.directory)}

    @abstractmethod
    def length(self) -> int:
        """How many entries the store holds (every type has a length)."""

    # -- group commit (Engine.execute_group), for a type whose ``groups`` is true

    def begin_group(self) -> None:
        """Begin a group: the writes that follow, until :meth:`end_group`, share one
        transaction, each in a nested one of its own (a refused write undoes only itself),
        and the store is the group's alone meanwhile (other writers wait). Raises
        StorageError if the disk refuses to begin one; then no group is open."""
        raise NotImplementedError(f"{type(self).__name__} writes alone, never in a group")

    def end_group(self) -> None:
        """Commit the group :meth:`begin_group` began and let other writers in again, whatever
        happens. Raises StorageError if the group could not be kept: then none of its
        writes is, and what the store keeps in memory is read again from the last commit."""
        raise NotImplementedError(f"{type(self).__name__} writes alone, never in a group")


def link_files(source: Path, target: Path, names=None) -> int:
    """Hard-link the files of folder ``source`` (or only ``names``) into ``target`` (made if missing),
    copying where a link cannot be made (another file system); those already there are kept.
    For files never changed once written (blobs). How many were added."""
    import shutil

    target.mkdir(parents=True, exist_ok=True)
    added = 0
    for name in sorted(names if names is not None else os.listdir(source)):
        src, dst = source / name, target / name
        if dst.exists() or not src.is_file():
            continue
        try:
            os.link(src, dst)
        except FileNotFoundError:  # deleted meanwhile
            continue
        except OSError:
            try:
                shutil.copy2(src, dst)
            except FileNotFoundError:
                continue
        added += 1
    return added


def apparent_bytes(directory: Path) -> int:
    """Bytes of the files below ``directory`` as they read (their sizes, not the blocks they take)."""
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
    return total


def kv_data_bytes(kv) -> int:
    """Bytes of the LMDB pages a KV's entries fill (documents, index entries, store-field elements):
    its B-tree's branch, leaf and overflow pages, without free pages, the log or the lock file."""
    stat = kv.env.stat()
    return stat["psize"] * (stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"])


def directory_bytes(directory: Path) -> int:
    """Bytes the files below ``directory`` take on disk (allocated blocks, not apparent size)."""
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            total += st.st_blocks * 512
    return total


def encode_document(doc: Any, what: str = "document") -> bytes:
    """The BSON of ``doc``, refusing a non-mapping, a value BSON cannot hold, a field name that begins with
    ``$`` or holds a ``.`` (see codec.encode_checked), or over 16 MiB."""
    if type(doc) is dict:  # the common case, a mapping without asking the ABC (two calls in Python)
        data = encode_checked(doc, what, True)
        if len(data) > MAX_DOCUMENT_SIZE:
            raise DocumentTooLargeError(_too_large(what, len(data)))
        return data
    if type(doc) is RawBSONDocument:  # already BSON (a loader's document): its bytes as they are
        data = doc.raw
        if len(data) > MAX_DOCUMENT_SIZE:
            raise DocumentTooLargeError(_too_large(what, len(data)))
        if b"." in data or b"$" in data:  # (a name may hold one: check them as a decoded document's are)
            encode_checked(decode(data), what, True)
        return data
    if not isinstance(doc, Mapping):
        raise NotADocumentError(
            f"{what} must be a document (a mapping such as {{Name: \"x\"}}), got {type(doc).__name__}: {doc!r:.80}"
        )
    data = encode_checked(doc, what, True)
    if len(data) > MAX_DOCUMENT_SIZE:
        raise DocumentTooLargeError(_too_large(what, len(data)))
    return data


def _too_large(what: str, size: int) -> str:
    return (f"{what} is {size} bytes of BSON; the limit is {MAX_DOCUMENT_SIZE} (16 MiB). "
            "Store large binary data in a blob bucket and keep its id in the document.")


def check_limit(limit: Any, maximum: int, verb: str) -> int:
    """A count argument: a positive integer no larger than ``maximum``."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise BadValueError(f"{verb} limit must be an integer from 1 to {maximum}, got {limit!r}")
    if limit < 1:
        raise BadValueError(f"{verb} limit must be an integer from 1 to {maximum}, got {limit}")
    if limit > maximum:
        raise LimitExceededError(
            f"{verb} limit is at most {maximum}, got {limit}; read in pages of {maximum} or fewer"
        )
    return limit


class KVStore(Store):
    """KVStore is a store kept in the bucket's LMDB environment (``kv/``): hash, btree and heap.

    Keys in the environment carry a one-byte namespace, so documents, index entries and
    store-field elements of one bucket live side by side and each is one range:

        b"D" + <encoded key>     documents (or elements) of the bucket
        b"M" + <name>            the store's own counters (b"Mcount": uint64 LE), and
                                 b"Mbucket": {db, bucket}, whose data this is (see _check_owner)

    The count of entries is kept in the same transaction as each write, so ``length``
    is O(1) and never drifts after a crash.
    """

    DOC = b"D"
    COUNT_KEY = b"Mcount"
    OWNER_KEY = b"Mbucket"
    groups = True

    def __init__(self, directory, declaration, options):
        super().__init__(directory, declaration, options)
        from ..storage.kv import KV

        self.kv = KV(self.directory / "kv", map_size=options.map_size, sync=options.sync)
        self._wlock = threading.RLock()
        try:
            with self.kv.read() as txn:
                raw, owner = txn.get(self.COUNT_KEY), txn.get(self.OWNER_KEY)
            self._check_owner(owner)
        except BaseException:
            self.kv.close()
            raise
        self._count = int.from_bytes(raw, "little") if raw else 0

    def _check_owner(self, raw: bytes | None) -> None:
        """Refuse an environment that holds another bucket's data (``raw``: what its owner key
        holds); record whose it is in one that does not say yet (a new bucket, or one made
        before this check).

        Every file of a bucket checks on its own, so a ``data.mdb`` copied over from
        another bucket (a careless ``cp``) would open as if it were this bucket's data,
        its documents and index entries answering this bucket's reads. The owner is
        ``{db, bucket}``: a bucket's files restored from a backup of the same bucket
        (another copy of the same data directory) are still its own.
        """
        db, name = (self.declaration or {}).get("db"), (self.declaration or {}).get("name")
        if not db or not name:
            return  # a store opened outside the engine (tests)
        if raw is None:
            owner = encode({"db": db, "bucket": name})
            try:
                self.kv.write(lambda txn: txn.put(self.OWNER_KEY, owner))
            except StorageError as exc:  # (a full disk): the next open records it
                log.warning("%s: could not record whose data it holds: %s", self.kv.path, exc.message)
            return
        other = decode(raw)
        if (other.get("db"), other.get("bucket")) != (db, name):
            raise CorruptDataError(
                f"{self.kv.path / 'data.mdb'} holds the data of bucket {other.get('bucket')!r} of database "
                f"{other.get('db')!r}, not of {name!r} of {db!r}: it was copied or moved here from that bucket. "
                f"Nothing was changed. {damage_hint(self.directory)}")

    def length(self) -> int:
        return self._count

    def _write(self, fn):
        """Run ``fn(txn)`` in one write transaction; ``fn`` returns ``(result, change in count)``.

        The count is read and stored in the same transaction, and kept in memory after the
        commit, under one lock, so concurrent writers never lose a change. It is read from
        the transaction, not taken from memory, so that it stays right whatever the memory
        missed: a write applied late (an acknowledged write whose commit a full disk had
        refused, applied before this one: see KV._catch_up), or a group not kept.
        """
        def counted(txn):
            result, delta = fn(txn)
            raw = txn.get(self.COUNT_KEY)
            count = int.from_bytes(raw, "little") if raw else 0
            if delta:
                count += delta
                txn.put(self.COUNT_KEY, count.to_bytes(8, "little"))
            return result, count

        with self._wlock:
            try:
                result, count = self.kv.write(counted)
            except StorageError:
                # The disk refused it. What this store keeps in memory is read again from
                # what was committed: a write refused after its commit (a flush that
                # failed) is in LMDB, and in a group... see end_group. Not while LMDB is
                # behind (KV.behind): then the late apply of an acknowledged write refused
                # this one before it ran, and the memory already holds that write, which
                # LMDB lacks until it is applied (read again, the count was one short after
                # the late apply, and a heap lost the element and gave its sequence number
                # to the next push).
                if not self.kv.in_group() and not self.kv.behind():
                    self.reload()
                raise
            self._count = count
            return result

    def begin_group(self) -> None:
        """Take the write lock and begin LMDB's group transaction (see Store.begin_group)."""
        self._wlock.acquire()
        try:
            self.kv.begin_group()
        except BaseException:
            self._wlock.release()
            raise

    def end_group(self) -> None:
        """Commit the group begun by :meth:`begin_group`, and release the write lock.

        If the group could not be kept, its writes are gone although each was counted when
        it ran: what this store keeps in memory is read again from what was committed
        (:meth:`reload`), so that the count never includes a write that was refused.
        """
        try:
            self.kv.end_group()
        except BaseException:
            self.reload()
            raise
        finally:
            self._wlock.release()

    def reload(self) -> None:
        """Read again what the store keeps in memory of its data (its count) from the last
        commit: after writes that were counted and then not kept (a failed group)."""
        with self._wlock:
            with self.kv.read() as txn:
                raw = txn.get(self.COUNT_KEY)
            self._count = int.from_bytes(raw, "little") if raw else 0

    def stats(self) -> dict:
        """``{"entries": n, "bytes": bytes on disk, "data_bytes": LMDB pages its entries fill}``."""
        return {"entries": self._count, "bytes": directory_bytes(self.directory), "data_bytes": kv_data_bytes(self.kv)}

    def export(self, cursor: Any = None, limit: int = 1000) -> dict:
        """A page of every entry in storage (key) order: ``{docs, next}``; pass ``next`` back as ``cursor``.

        ``next`` is None on the last page. Unlike ``list`` it never skips entries with
        equal keys, so a dump built on it is complete.
        """
        check_limit(limit, 10_000, "export")
        from ..values.codec import decode

        out, last = [], None
        start = self.DOC if cursor is None else self.DOC + bytes(cursor)
        with self.kv.read() as txn:
            c = txn.cursor()
            if c.set_range(start):
                for key, raw in c:
                    if not key.startswith(self.DOC):
                        break
                    if cursor is not None and key == start:
                        continue
                    out.append(decode(raw))
                    last = key
                    if len(out) >= limit:
                        break
        return {"docs": out, "next": last[len(self.DOC):] if len(out) == limit else None}

    def sync(self, logs: list | None = None) -> None:
        """Make every committed write durable (what each commit does itself when ``options.sync`` is on)."""
        self.kv.sync()

    def close(self) -> None:
        self.kv.close()

    # -- checking (hoarddb check): the store closed, its environment read only --------------

    #: The file a check of an LMDB store names, relative to the bucket's folder.
    KV_FILE = "kv/data.mdb"
    #: The key namespaces this type keeps in its environment (see the class docstring).
    NAMESPACES: ClassVar[bytes] = b"DM"

    @classmethod
    def check(cls, directory, declaration):
        """Walk every key of the bucket's environment (see :meth:`check_kv`); refuse nothing."""
        from ..storage.kv import read_only

        problems = Problems()
        try:
            with read_only(Path(directory) / "kv") as txn:
                cls.check_kv(txn, declaration, Path(directory), problems)
        except (CorruptDataError, StorageError) as exc:
            problems.append(Problem(cls.KV_FILE, exc.message))
        except DAMAGE_ERRORS as exc:
            problems.append(Problem(cls.KV_FILE, f"LMDB found its pages are not what it wrote ({exc}); what "
                                                 "comes after the damage was not checked"))
        return problems

    def backup(self, target: Path) -> None:
        """LMDB's own copy of the environment, made from one read transaction (writes go on
        meanwhile), and the files of blob store fields (``fields/``, written before the commit
        that names them, never changed after): linked before the copy, and again after it for
        those written meanwhile."""
        fields = self.directory / "fields"
        if fields.is_dir():
            link_files(fields, target / "fields")
        (target / "kv").mkdir(parents=True)
        self.kv.env.copy(str(target / "kv"), compact=True)
        if fields.is_dir():
            link_files(fields, target / "fields")

    def check_open(self, declaration: Mapping[str, Any]) -> list[Problem]:
        """:meth:`check` on the open bucket, while it serves: the same walk, in one read
        transaction, so it sees one moment of the bucket and writes go on meanwhile."""
        problems = Problems()
        try:
            with self.kv.read() as txn:
                type(self).check_kv(txn, declaration, self.directory, problems)
        except DAMAGE_ERRORS as exc:
            problems.append(Problem(self.KV_FILE, f"LMDB found its pages are not what it wrote ({exc}); what "
                                                  "comes after the damage was not checked"))
        return problems

    @classmethod
    def check_kv(cls, txn, declaration: Mapping[str, Any], directory: Path, problems: list[Problem]) -> None:
        """What every LMDB store keeps right: no key outside the type's namespaces, and the
        owner key naming this bucket. A type adds its entries' own checks (and the count)."""
        check_namespaces(txn, cls.NAMESPACES, cls.KV_FILE, problems)
        raw = txn.get(cls.OWNER_KEY)
        if raw is not None:
            try:
                owner = decode(raw)
            except DECODE_ERRORS as exc:
                problems.append(Problem(cls.KV_FILE, f"the record of whose data it holds does not decode ({exc})"))
                return
            want = ((declaration or {}).get("db"), (declaration or {}).get("name"))
            if (owner.get("db"), owner.get("bucket")) != want and all(want):
                problems.append(Problem(cls.KV_FILE, f"it holds the data of bucket {owner.get('bucket')!r} of "
                                                     f"database {owner.get('db')!r}: it was copied here from there"))

    @classmethod
    def check_count(cls, txn, found: int, problems: list[Problem]) -> None:
        """The stored count (``b"Mcount"``) must be the number of entries ``found``."""
        raw = txn.get(cls.COUNT_KEY)
        stored = int.from_bytes(raw, "little") if raw else 0
        if raw is not None and len(raw) != 8:
            problems.append(Problem(cls.KV_FILE, f"its count is {len(raw)} bytes, not 8", REBUILD))
        elif stored != found:
            problems.append(Problem(cls.KV_FILE, f"its count says {stored} entries, and {found} are there", REBUILD))


def scan(txn, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of every key of an LMDB transaction that starts with ``prefix``, in order."""
    cursor = txn.cursor()
    if not cursor.set_range(prefix):
        return
    for key, value in cursor:
        if not key.startswith(prefix):
            return
        yield key, value


def check_namespaces(txn, namespaces: bytes, file: str, problems: list[Problem]) -> None:
    """Walk every key of the environment (keys only) and report those outside ``namespaces``
    (first bytes), one line per stray namespace."""
    stray: dict[int, list] = {}
    for key in txn.cursor().iternext(values=False):
        if not key or key[0] not in namespaces:
            first = key[0] if key else -1
            if first in stray:
                stray[first][1] += 1
            else:
                stray[first] = [bytes(key), 1]
    for first, (key, n) in stray.items():
        problems.append(Problem(file, f"{n} key(s) that are no part of this bucket's layout, such as {key[:40]!r}"))


class Reply:
    """Reply is a verb's result with extra answer fields, such as ``index_used`` of a search.

    The engine answers ``{ok: 1, result: reply.result, **reply.extras}``.
    """

    __slots__ = ("result", "extras")

    def __init__(self, result, **extras):
        self.result = result
        self.extras = extras
