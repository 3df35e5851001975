"""The catalog: which databases and buckets exist, and each bucket's declaration, persisted and versioned.

It lives in its own LMDB environment, ``DATA/catalog/``:

    key                        value (BSON)
    b"db:" + <db>              {name, created}
    b"bucket:" + <db> + b"\\0" + <bucket>
                               {name, db, type, options, fields, store_fields, indexes,
                                format, created}
    b"version"                 {version: n}   -- bumped by every change

A declaration is written in one transaction with the version bump, so a crash leaves the
catalog as it was before or after a change, never between. A declaration carries
``format``: the version of the declaration format that wrote it, so a later hoardDB can
tell what it can read.
"""

from __future__ import annotations

import datetime
import re
import threading
from pathlib import Path

from .errors import (BucketExistsError, BucketNotFoundError, CorruptDataError, DatabaseExistsError,
                     DatabaseNotFoundError, InvalidNameError)
from .operations import NAME_RULE
from .storage.kv import DAMAGE_ERRORS, KV, damage_hint
from .values.codec import DECODE_ERRORS, decode, encode

#: Bytes the catalog's LMDB file keeps allocated ahead of its pages (KV._keep_reserve): room
#: for dozens of catalog writes on a full disk.
CATALOG_RESERVE = 256 * 1024
#: The declaration format this version writes.
DECLARATION_FORMAT = 1

NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
#: Between a bucket's name and a partition's number in the name of a cluster node's hidden local bucket of one
#: partition of a partitioned queue (``Q~p3``): no name a user gives can hold it (NAME_RE), so it never clashes.
PART_SEP = "~p"
#: Folder names inside DATA that a database may not take.
RESERVED = frozenset({"catalog", "tls", "LOCK"})


def check_name(name, what: str) -> str:
    """``name`` if it is a valid database or bucket name; else InvalidNameError saying the rule."""
    # type, not isinstance: BSON decodes code as a str; fullmatch: "$" would let "abc\n" pass
    if type(name) is not str or not NAME_RE.fullmatch(name):
        raise InvalidNameError(f"invalid {what} name {name!r}: a {what} name is {NAME_RULE}")
    if what == "database" and name in RESERVED:
        raise InvalidNameError(f"{name!r} is reserved for hoardDB's own files; choose another database name")
    return name


def part_name(bucket: str, p: int) -> str:
    """The name of the hidden local bucket that keeps partition ``p`` of the partitioned queue ``bucket`` on a
    cluster node (hoarddb/cluster/queues.py): made only by :func:`hoarddb.catalog_operations.create_part`."""
    return f"{bucket}{PART_SEP}{p}"


def check_stored_name(name) -> str:
    """``name`` if it names a bucket a request may act on: a user's name (check_name), or a hidden partition's
    (:func:`part_name`, which only a cluster node's own requests carry: the server refuses it from a client)."""
    if type(name) is str and PART_SEP in name:
        base, _, p = name.rpartition(PART_SEP)
        if p.isdigit() and NAME_RE.fullmatch(base):
            return name
    return check_name(name, "bucket")


def is_part(name) -> bool:
    """Whether a bucket name is a hidden partition's (left out of every listing)."""
    return type(name) is str and PART_SEP in name


def parts_of(names, bucket: str) -> list[tuple[int, str]]:
    """``(p, name)`` of each hidden partition of ``bucket`` among ``names``."""
    prefix = bucket + PART_SEP
    return sorted((int(n[len(prefix):]), n) for n in names if n.startswith(prefix) and n[len(prefix):].isdigit())


class Catalog:
    """Catalog is the persisted list of databases and bucket declarations, cached in memory."""

    def __init__(self, data_dir: Path, sync: bool = True):
        # With a reserve of allocated room in its file: a bucket's drop (the way to give a
        # full disk room back) is a catalog write that a full disk must not refuse.
        self.kv = KV(Path(data_dir) / "catalog", map_size=64 * 1024 * 1024, sync=sync, reserve=CATALOG_RESERVE)
        self._lock = threading.RLock()  # re-entrant: bucket() lists the buckets when it refuses
        self._dbs: dict[str, dict] = {}
        self._buckets: dict[tuple[str, str], dict] = {}
        try:
            with self.kv.read() as txn:
                for key, value in txn.cursor():
                    if key.startswith(b"db:"):
                        doc = decode(value)
                        self._dbs[doc["name"]] = doc
                    elif key.startswith(b"bucket:"):
                        doc = decode(value)
                        self._buckets[(doc["db"], doc["name"])] = doc
        except (*DAMAGE_ERRORS, *DECODE_ERRORS, KeyError, TypeError) as exc:  # damaged bytes, or a damaged entry
            self.kv.close()
            raise CorruptDataError(f"{self.kv.path / 'data.mdb'} is damaged: an entry of the catalog does not read "
                                   f"({type(exc).__name__}: {exc}). {damage_hint(self.kv.path)}") from None

    # -- databases -------------------------------------------------------------------

    def databases(self) -> list[str]:
        with self._lock:  # another thread may be creating or dropping one: iterate a stable dict
            return sorted(self._dbs)

    def has_database(self, db: str) -> bool:
        return db in self._dbs

    def require_database(self, db: str) -> dict:
        check_name(db, "database")
        try:
            return self._dbs[db]
        except KeyError:
            raise DatabaseNotFoundError(
                f"database {db!r} does not exist; create it with create_database (or create a bucket in it)"
            ) from None

    def create_database(self, db: str, exist_ok: bool = False) -> dict:
        check_name(db, "database")
        with self._lock:
            if db in self._dbs:
                if exist_ok:
                    return self._dbs[db]
                raise DatabaseExistsError(f"database {db!r} already exists")
            doc = {"name": db, "created": _now()}
            self._commit([(b"db:" + db.encode(), doc)])
            self._dbs[db] = doc
            return doc

    def drop_database(self, db: str) -> list[dict]:
        """Remove a database and its buckets from the catalog; returns the dropped declarations."""
        with self._lock:
            if db not in self._dbs:  # under the lock: two drops of one database, the second is refused
                check_name(db, "database")
                raise DatabaseNotFoundError(f"database {db!r} does not exist, so there is nothing to drop; "
                                            "list_databases shows those that do")
            dropped = [d for (dbn, _), d in self._buckets.items() if dbn == db]
            self._commit([(b"db:" + db.encode(), None)] + [(_bucket_key(db, d["name"]), None) for d in dropped])
            del self._dbs[db]
            for d in dropped:
                del self._buckets[(db, d["name"])]
            return dropped

    # -- buckets ---------------------------------------------------------------------

    def buckets(self, db: str) -> list[str]:
        """The buckets of ``db`` a user sees (a cluster node's hidden partitions left out: :func:`is_part`)."""
        self.require_database(db)
        with self._lock:
            return sorted(name for (dbn, name) in self._buckets if dbn == db and not is_part(name))

    def parts(self, db: str, bucket: str) -> list[tuple[int, str]]:
        """``(p, name)`` of the hidden local buckets of ``bucket``'s partitions this node keeps."""
        with self._lock:
            return parts_of([name for (dbn, name) in self._buckets if dbn == db], bucket)

    def all_buckets(self) -> list[dict]:
        """Every bucket declaration of every database."""
        with self._lock:
            return list(self._buckets.values())

    def has_bucket(self, db: str, bucket: str) -> bool:
        return (db, bucket) in self._buckets

    def bucket(self, db: str, bucket: str) -> dict:
        """The declaration of ``db.bucket``; BucketNotFoundError names the buckets there are."""
        decl = self._buckets.get((db, bucket))
        if decl is None:
            self.require_database(db)
            check_name(bucket, "bucket")
            names = self.buckets(db)
            raise BucketNotFoundError(
                f"bucket {bucket!r} does not exist in database {db!r}"
                + (f"; its buckets: {', '.join(names)}" if names else "; it has no buckets yet")
                + ". Create it with create_bucket."
            )
        return decl

    def create_bucket(self, db: str, declaration: dict, prepare=None) -> dict:
        """Declare a bucket (and its database, if new); its declaration as stored.

        ``prepare(decl)``, if given, runs once the name is known to be free and before the
        declaration is written (it may change ``decl``): the engine makes the bucket's
        files there, so that a disk too full for them leaves no declaration behind. If it
        raises, nothing is written.
        """
        name = declaration["name"]
        with self._lock:
            if (db, name) in self._buckets:
                raise BucketExistsError(
                    f"bucket {name!r} already exists in database {db!r}; drop it first or choose another name"
                )
            decl = dict(declaration, db=db, format=DECLARATION_FORMAT, created=_now())
            if prepare is not None:
                prepare(decl)
            writes = [(_bucket_key(db, name), decl)]
            new_db = None
            if db not in self._dbs:
                new_db = {"name": db, "created": _now()}
                writes.append((b"db:" + db.encode(), new_db))
            self._commit(writes)  # (refused, e.g. by a full disk: nothing of it is remembered either)
            if new_db is not None:
                self._dbs[db] = new_db
            self._buckets[(db, name)] = decl
            return decl

    def replace_bucket(self, db: str, declaration: dict) -> dict:
        with self._lock:
            self.bucket(db, declaration["name"])  # dropped meanwhile: refused, not brought back
            self._commit([(_bucket_key(db, declaration["name"]), declaration)])
            self._buckets[(db, declaration["name"])] = declaration
            return declaration

    def drop_bucket(self, db: str, bucket: str) -> dict:
        with self._lock:  # the check under the lock: of two concurrent drops, the second is refused
            decl = self.bucket(db, bucket)
            self._commit([(_bucket_key(db, bucket), None)])
            del self._buckets[(db, bucket)]
            return decl

    # -- persistence -----------------------------------------------------------------

    def version(self) -> int:
        with self.kv.read() as txn:
            raw = txn.get(b"version")
        return decode(raw)["version"] if raw else 0

    def _commit(self, writes: list[tuple[bytes, dict | None]]) -> None:
        def fn(txn):
            raw = txn.get(b"version")
            version = decode(raw)["version"] + 1 if raw else 1
            for key, doc in writes:
                if doc is None:
                    txn.delete(key)
                else:
                    txn.put(key, encode(doc))
            txn.put(b"version", encode({"version": version}))

        self.kv.write(fn)

    def close(self) -> None:
        self.kv.close()


def _bucket_key(db: str, bucket: str) -> bytes:
    return b"bucket:" + db.encode() + b"\0" + bucket.encode()


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def check_entries(txn) -> tuple[list[str], list[str], list[dict]]:
    """``(problems, databases, bucket declarations)`` of the catalog read through ``txn`` (a
    read of its closed environment, hoarddb check): every entry decodes, its key names what
    it holds, each bucket's database is declared, and no key is outside the layout above."""
    from .operations import STORE_TYPES

    problems, dbs, buckets = [], [], []
    for key, value in txn.cursor():
        key = bytes(key)
        try:
            doc = decode(value) if key.startswith((b"db:", b"bucket:", b"version")) else None
        except DECODE_ERRORS as exc:
            problems.append(f"the entry {key[:80]!r} does not decode ({exc})")
            continue
        if key.startswith(b"db:"):
            if doc.get("name") != key[3:].decode("utf-8", "replace"):
                problems.append(f"the entry {key[:80]!r} declares database {doc.get('name')!r}")
            dbs.append(key[3:].decode("utf-8", "replace"))
        elif key.startswith(b"bucket:"):
            if _bucket_key(str(doc.get("db")), str(doc.get("name"))) != key:
                problems.append(f"the entry {key[:80]!r} declares bucket {doc.get('name')!r} of {doc.get('db')!r}")
            elif doc.get("type") not in STORE_TYPES:
                problems.append(f"bucket {doc.get('name')!r} of {doc.get('db')!r} has the type {doc.get('type')!r}, "
                                f"not one of {', '.join(STORE_TYPES)}")
            else:
                buckets.append(doc)
        elif key == b"version":
            if not isinstance(doc.get("version"), int):
                problems.append(f"the catalog's version entry holds {doc!r:.80}")
        else:
            problems.append(f"the key {key[:80]!r} is no part of the catalog's layout")
    for doc in buckets:
        if doc["db"] not in dbs:
            problems.append(f"bucket {doc['name']!r} belongs to database {doc['db']!r}, which is not declared")
    return problems, sorted(dbs), buckets
