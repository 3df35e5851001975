"""The engine's own operations (the catalog's, the data directory's), one function of ``(engine, request)`` each.

These are the table's ``runs=ENGINE`` entries (hoarddb/operations.py): creating, altering,
listing and dropping databases and buckets, a bucket's stats and description, and the data
directory's metrics, TTL sweep, online check and backup. ``engine.HANDLERS`` maps each
operation's name to the function of that name here, and ``Engine.execute`` runs it (a
catalog change under the engine's mutex, its cache of declarations emptied around it).
They are the engine's own code, written apart so that the Engine class holds only running
requests: they use its parts (its catalog, its open stores and the mutex that guards them,
``_store`` and ``_close_store``) as its methods did.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import operations
from .catalog import check_name, is_part, part_name
from .declaration import addresses, check_fields, check_placement, declare_bucket
from .errors import BadValueError, BucketNotFoundError, InvalidArgumentError, UnknownOptionError
from .indexes.declaration import OPTIONAL_KEYS as INDEX_OPTIONS
from .indexes.declaration import describe as describe_index
from .indexes.maintenance import Index
from .storage.oserrors import fsync_directory, storage_error
from .stores import store_class
from .stores.base import Store

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("hoarddb.engine")

# -- databases and buckets -------------------------------------------------------------

def create_database(engine: Engine, request: dict) -> None:
    engine.catalog.create_database(db_of(request))


def drop_database(engine: Engine, request: dict) -> dict:
    db = db_of(request)
    with engine._mutex:
        dropped = engine.catalog.drop_database(db)
        for decl in dropped:
            engine._close_store(db, decl["name"])
        shutil.rmtree(engine.path / db, ignore_errors=True)
    return {"dropped": db, "buckets": sum(1 for d in dropped if not is_part(d["name"]))}


def list_databases(engine: Engine, request: dict) -> list:
    return engine.catalog.databases()


def list_buckets(engine: Engine, request: dict) -> list:
    return engine.catalog.buckets(db_of(request))


def create_bucket(engine: Engine, request: dict) -> dict:
    db, name = db_of(request), bucket_of(request)
    declaration, warnings = declare_bucket(name, request.get("options") or {}, engine.options.max_nesting_depth)
    answer = {"ok": 1, "result": _create(engine, db, name, declaration)}
    if warnings:
        answer["warnings"] = warnings
    return answer


def create_part(engine: Engine, db: str, bucket: str, p: int) -> bool:
    """Make the hidden local bucket of partition ``p`` of the partitioned queue ``bucket`` (a cluster node's:
    hoarddb/cluster/queues.py), declared as ``bucket`` is; False when it exists. The one way such a name is made:
    a user's create_bucket refuses it (check_name)."""
    name = part_name(bucket, p)
    with engine._mutex:
        if engine.catalog.has_bucket(db, name):
            return False
        base = engine.catalog.bucket(db, bucket)
        declaration = {k: v for k, v in base.items() if k not in ("db", "format", "created")}
        declaration["name"] = name
        engine._hot.clear()
        try:
            _create(engine, db, name, declaration)
        finally:
            engine._hot.clear()
    return True


def drop_part(engine: Engine, db: str, name: str) -> bool:
    """Drop a hidden partition's local bucket (handed over, or its queue dropped); False when it is not here."""
    if not is_part(name):
        raise InvalidArgumentError(f"{name!r} is not a partition's local bucket")
    with engine._mutex:
        if not engine.catalog.has_bucket(db, name):
            return False
        engine._hot.clear()
        try:
            engine.catalog.drop_bucket(db, name)
            engine._close_store(db, name)
            shutil.rmtree(engine.path / db / name, ignore_errors=True)
        finally:
            engine._hot.clear()
    return True


def _create(engine: Engine, db: str, name: str, declaration: dict) -> dict:
    type_name = declaration["type"]
    with engine._mutex:
        directory = engine.path / db / name
        if not engine.catalog.has_bucket(db, name) and directory.exists():  # left by a drop that crashed before removing it
            shutil.rmtree(directory)
        opened: list[Store] = []

        def prepare(decl: dict) -> None:
            # The bucket's files first, its declaration after: a disk too full for
            # either leaves neither (a crash between leaves a folder no declaration
            # names, removed as above by the next create of that name).
            directory.mkdir(parents=True, exist_ok=True)
            store = store_class(decl["type"])(directory, decl, engine.options)
            opened.append(store)
            try:  # the folder's entry (and its database's) on disk before the declaration names them (_store)
                fsync_directory(directory.parent)
                fsync_directory(engine.path)
            except OSError as exc:
                raise storage_error(f"creating {directory}", exc, "the bucket was not created") from None
            rebuilt = store.open_indexes() if hasattr(store, "open_indexes") else None
            if rebuilt is not None:
                decl["indexes"] = rebuilt

        try:
            engine.catalog.create_bucket(db, declaration, prepare)
        except BaseException:
            for store in opened:
                try:
                    store.close()
                except Exception as exc:  # the create's own error is what the caller hears
                    log.warning("closing the store of a bucket not created: %s", exc)
            if opened or (directory.exists() and not engine.catalog.has_bucket(db, name)):
                shutil.rmtree(directory, ignore_errors=True)
            raise
        engine._stores[(db, name)] = opened[0]
    return {"name": name, "type": type_name}


#: What alter_bucket may change of a bucket (each replaced whole by the value given).
ALTERABLE = ("fields", "placement")


def alter_bucket(engine: Engine, request: dict) -> dict:
    db, name = db_of(request), bucket_of(request)
    decl = engine.catalog.bucket(db, name)
    raw = request.get("options") or {}
    changed, warnings = alter_declaration(decl, raw)
    engine.catalog.replace_bucket(db, changed)
    answer = {"ok": 1, "result": {"name": name, "altered": sorted(k for k in raw if k != "type")}}
    if warnings:
        answer["warnings"] = warnings
    return answer


def alter_declaration(decl: dict, raw) -> tuple[dict, list[str]]:
    """The declaration ``decl`` changed by alter_bucket's options ``raw``, checked whole, and its warnings;
    nothing is written (a cluster node checks an alter against the cluster's declaration with it)."""
    if not isinstance(raw, dict) or not raw:
        raise InvalidArgumentError("alter_bucket: 'options' must be a non-empty document of changes")
    if "indices" in raw or any("unique" in (f.get("keywords") or []) for f in raw.get("fields") or [] if isinstance(f, dict)):
        raise BadValueError(
            "alter bucket cannot add an index to an existing bucket; declare indexes when you create the bucket"
        )
    if "type" in raw and raw["type"] != decl["type"]:
        raise BadValueError(
            f"alter bucket cannot change a bucket's type ({decl['type']}); create a new bucket and move the data"
        )
    changed = dict(decl)
    warnings: list[str] = []
    for key, value in raw.items():
        if key == "type":
            continue
        if key == "fields":
            changed["fields"] = check_fields(value, warnings)
        elif key == "placement":
            if (decl.get("partitions") or 1) > 1:
                raise BadValueError(f"alter bucket cannot make a bucket of {decl['partitions']} partitions whole "
                                    "(moving its partitions together is not built yet); create a new bucket "
                                    "with placement: whole and copy the documents")
            changed.update(check_placement({"placement": value}, decl["type"], decl.get("indexes") or []))
        else:
            raise UnknownOptionError(
                f"alter bucket may change: {', '.join(ALTERABLE)}; not {key!r} "
                "(a bucket's type, options and indexes are fixed when it is created)"
            )
    return changed, warnings


def drop_bucket(engine: Engine, request: dict) -> dict:
    db, name = db_of(request), bucket_of(request)
    with engine._mutex:
        engine.catalog.drop_bucket(db, name)  # durable first: a crash after it leaves only a folder
        engine._close_store(db, name)
        shutil.rmtree(engine.path / db / name, ignore_errors=True)
        for _p, part in engine.catalog.parts(db, name):  # a cluster node's partitions of a partitioned queue
            engine.catalog.drop_bucket(db, part)
            engine._close_store(db, part)
            shutil.rmtree(engine.path / db / part, ignore_errors=True)
    return {"dropped": name}


def describe_bucket(engine: Engine, request: dict) -> dict:
    db, name = db_of(request), bucket_of(request)
    decl = engine.catalog.bucket(db, name)
    store = engine._store(db, name, decl)
    try:
        stats = _with_parts(engine, db, name, store.stats())
    except Exception as exc:
        engine._check_still_open(db, name, store, exc)
        raise
    return {
        "name": name, "db": db, "type": decl["type"], "options": decl.get("options", {}),
        "fields": decl.get("fields", []), "store_fields": decl.get("store_fields", []),
        **({"stores": addresses(name, decl["store_fields"])} if decl.get("store_fields") else {}),
        "indexes": index_states(store, decl), "verbs": operations.verbs_for(decl["type"]),
        **({"placement": decl["placement"]} if "placement" in decl else {}),
        "entries": stats["entries"], "bytes": stats["bytes"], "data_bytes": stats["data_bytes"],
    }


def stats(engine: Engine, request: dict) -> dict:
    db, name = db_of(request), bucket_of(request)
    decl = engine.catalog.bucket(db, name)
    store = engine._store(db, name, decl)
    try:
        return {"name": name, "type": decl["type"], **_with_parts(engine, db, name, store.stats()),
                "indexes": index_states(store, decl),
                **({"stores": addresses(name, decl["store_fields"])} if decl.get("store_fields") else {})}
    except Exception as exc:
        engine._check_still_open(db, name, store, exc)
        raise


# -- the data directory -----------------------------------------------------------------

def metrics(engine: Engine, request: dict) -> dict:
    counts = dict.fromkeys(("ready", "building", "conflicted", "unreadable"), 0)
    for decl in engine.catalog.all_buckets():
        store = engine._stores.get((decl["db"], decl["name"]))
        for ix in index_states(store, decl) if store is not None else \
                [{"state": Index(d).state} for d in decl.get("indexes") or []]:
            counts[ix["state"]] = counts.get(ix["state"], 0) + 1
    for state, n in counts.items():
        engine.metrics.indexes.labels(state).set(n)
    return engine.metrics.snapshot()


def sweep_ttl(engine: Engine, request: dict) -> dict:
    return engine.sweeper.sweep()


def check(engine: Engine, request: dict) -> dict:
    """check (admin): each bucket of ``db`` (or of every database, or ``db.bucket``) checked over
    one moment of it while it serves (``Store.check_open``: a read transaction, a queue's log
    as its lock gave it, a blob bucket's index as it was): ``{buckets: [{db, bucket, type,
    checked, problems: [[file, what, todo], ...], more}]}``. A store type without such a
    check would say ``checked: false``, for ``hoarddb check DIR``."""
    db, bucket = request.get("db"), request.get("bucket")
    if bucket is not None and db is None:
        raise InvalidArgumentError("check: a bucket is named within a database: give db too")
    out = []
    for name in [db] if db is not None else engine.catalog.databases():
        for b in [bucket] if bucket is not None else engine.catalog.buckets(name):
            decl = engine.catalog.bucket(name, b)
            store = engine._store(name, b, decl)
            entry = {"db": name, "bucket": b, "type": decl["type"], "checked": False, "problems": [], "more": 0}
            try:
                problems = store.check_open({**decl, "db": name, "name": b})
            except NotImplementedError:
                pass
            else:
                entry.update(checked=True, problems=[list(p) for p in problems], more=getattr(problems, "more", 0))
            out.append(entry)
    return {"buckets": out}


def backup(engine: Engine, request: dict) -> dict:
    """backup (admin): copy the open data directory into ``path`` (a new folder, absolute, outside
    it) while it serves: the catalog, then each bucket as one moment of that bucket
    (:meth:`Store.backup`), then the server's own files (``_users/``, ``tls/``). ``path`` then
    opens as a data directory. Consistent per bucket, not across buckets."""
    raw = request.get("path")
    if not isinstance(raw, str) or not raw or not Path(raw).is_absolute():
        raise BadValueError("backup: 'path' is an absolute path of a new folder on the server's machine, "
                            f"got {raw!r}")
    target = Path(raw)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise BadValueError(f"backup: {target} exists and is not an empty folder; give a new one")
    here = engine.path.resolve()
    if target.resolve() == here or here in target.resolve().parents:
        raise BadValueError(f"backup: {target} is inside the data directory {here}; give a folder outside it")
    started = time.monotonic()
    target.mkdir(parents=True, exist_ok=True)
    with engine._mutex:  # the catalog and the list of buckets of one moment: no bucket declared or dropped between
        (target / "catalog").mkdir()
        engine.catalog.kv.env.copy(str(target / "catalog"), compact=True)
        decls = sorted(((d["db"], d["name"], d) for d in engine.catalog.all_buckets()), key=lambda t: t[:2])
        for db in engine.catalog.databases():
            (target / db).mkdir()
    copied = []
    for db, name, decl in decls:
        store = engine._store(db, name, decl)
        store.backup(target / db / name)
        copied.append({"db": db, "bucket": name, "type": decl["type"]})
    for folder in ("_users", "tls"):
        if (engine.path / folder).is_dir():
            shutil.copytree(engine.path / folder, target / folder, ignore=shutil.ignore_patterns("LOCK"))
    return {"path": str(target), "buckets": copied, "seconds": round(time.monotonic() - started, 3)}


# -- helpers -----------------------------------------------------------------------------

def _with_parts(engine: Engine, db: str, name: str, stats: dict) -> dict:
    """A bucket's store stats with those of the hidden partitions a cluster node keeps of it (a partitioned queue's:
    hoarddb/cluster/queues.py) added in: what the node holds of the bucket, counted as one."""
    for _p, part in engine.catalog.parts(db, name):
        try:
            theirs = engine._store(db, part).stats()
        except BucketNotFoundError:
            continue  # (dropped meanwhile: handed over)
        for k, v in theirs.items():
            if type(v) is int and type(stats.get(k)) is int:
                stats[k] += v
    return stats


def index_states(store: Store, decl: dict) -> list[dict]:
    """The bucket's indexes as describe and stats show them, each with its current state."""
    states = store.index_states() if hasattr(store, "index_states") else decl.get("indexes", [])
    return [
        {"name": ix["name"], "fields": ix["fields"], "unique": ix.get("unique", False),
         "expire_after_seconds": ix.get("expire_after_seconds"), "state": ix.get("state", "ready"),
         **{k: ix[k] for k in (*INDEX_OPTIONS, "progress") if k in ix}, "summary": describe_index(ix)}
        for ix in states
    ]


def db_of(request: dict) -> str:
    """The request's database name, checked."""
    return check_name(request.get("db"), "database")


def bucket_of(request: dict) -> str:
    """The request's bucket name, checked."""
    return check_name(request.get("bucket"), "bucket")
