"""restore: declare each bucket of a dump from its metadata, then load its entries as the dump holds them.

    >>> from hoarddb.tools import restore
    >>> report = restore(client, "./backup/app", db="app2")
    >>> report.buckets[0].conflicts      # unique indexes the data left conflicted, if any

Restore works in three steps, and writes nothing until the first two pass:

1. Check the whole dump (the layout is in :mod:`hoarddb.tools.dump`): every
   ``<bucket>.metadata.json`` reads, names a store type, and its ``.bson`` file is
   there, has the size and SHA-256 the metadata recorded, and frames into the number
   of documents it recorded (a format-1 file, without a SHA-256, is decoded whole); a blob
   bucket's files are all there, and so are the store-field files, with their SHA-256; and
   each bucket's declaration is one this hoardDB accepts (:func:`check_declarations`). A
   bucket that exists in the target database is refused unless ``drop`` is given. What
   fails after that ends the run, and the report says exactly what was written.
2. Declare each bucket with the type, options, fields, store fields and indexes of its
   metadata — so a restored unique index is still unique and a TTL index still
   expires. A format-1 metadata (older versions: ``"indexes": ["Email", "Name"]``)
   declares plain single-field indexes, which is all it recorded.
3. Load the entries in batches with ``load``: a hash bucket puts each document, and a
   value a unique index already holds does not refuse the load — the index becomes
   ``conflicted`` naming both documents (see docs/user/indexes.md), and the report
   lists it. Heaps keep their priorities and ties their order; fifo, lifo and btree
   their order. Blobs keep their ids, and each one's SHA-256 is checked as it is
   written. Then the store fields' elements are loaded into their documents
   (:mod:`hoarddb.tools.fields`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bson import json_util

from ..catalog import check_name
from ..declaration import DEFAULT_MAX_DEPTH, declare_bucket
from ..errors import (BadValueError, BucketExistsError, CorruptDataError, DatabaseNotFoundError, HoardError,
                      InvalidArgumentError, NotFoundError, VerbNotSupportedError)
from ..indexes.declaration import OPTIONAL_KEYS as INDEX_OPTIONS
from ..operations import QUEUES, STORE_TYPES
from . import fields as field_contents
from .batches import BATCH_SIZE, BatchWriter, Stop, blob_data, fewer_collections
from .dump import FORMAT
from .readers import JSON_OPTIONS, InputFile, file_sha256, read_bson
from .report import BucketReport, Report

METADATA_SUFFIX = ".metadata.json"


@dataclass
class DumpedBucket:
    """DumpedBucket is one bucket of a dump folder: its metadata, read and checked."""

    name: str
    metadata: dict
    data: Path
    format: int
    type: str
    documents: int | None
    indices: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The metadata's ``store_field_contents``: the store fields' elements to load after the documents.
    fields: dict | None = None
    #: The metadata file's name, for messages.
    source: str = ""


def read_dump(path: str | os.PathLike, buckets: list[str] | None = None) -> list[DumpedBucket]:
    """Every bucket of a dump folder, checked (step 1); raises CorruptDataError listing every problem."""
    folder = Path(path)
    if not folder.is_dir():
        raise NotFoundError(f"no dump folder {folder}: give a dump's folder (./backup), or one database's "
                            "(./backup/app)")
    metas = sorted(p for p in folder.iterdir() if p.name.endswith(METADATA_SUFFIX) and p.is_file())
    if not metas:
        where, hint = str(folder), ""
        subs = sorted(p for p in folder.iterdir() if p.is_dir())
        if any(p.suffix == ".bson" for p in folder.iterdir()):
            hint = " (.bson files without metadata: load them with hoarddb ingest)"
        elif subs:
            where += " nor in its folders (" + ", ".join(p.name for p in subs[:5]) + (", ..." if subs[5:] else "") + ")"
            mongo = next((p for p in subs if any(q.suffix == ".bson" for q in p.iterdir())), None)
            if mongo is not None:
                hint = (f"; {mongo} holds .bson files without metadata: load them with "
                        f"hoarddb ingest {mongo} --into-db {mongo.name}")
        raise InvalidArgumentError(f"no <bucket>.metadata.json in {where}: not a hoardDB dump{hint}")
    found: list[DumpedBucket] = []
    problems: list[str] = []
    for meta in metas:
        name = meta.name[: -len(METADATA_SUFFIX)]
        if buckets and name not in buckets:
            continue
        try:
            found.append(_read_bucket(folder, name, meta))
        except (CorruptDataError, BadValueError) as exc:
            problems.append(exc.message)
    if buckets:
        missing = sorted(set(buckets) - {b.name for b in found} - {p.split(":")[0] for p in problems})
        if missing:
            raise NotFoundError(f"no bucket {', '.join(missing)} in the dump {folder}")
    if problems:
        raise CorruptDataError(f"the dump {folder} cannot be restored; nothing was written:\n  "
                               + "\n  ".join(problems))
    return found


def _read_bucket(folder: Path, name: str, meta: Path) -> DumpedBucket:
    try:
        metadata = json_util.loads(meta.read_text(encoding="utf-8"), json_options=JSON_OPTIONS)
    except (ValueError, TypeError, OSError) as exc:
        raise CorruptDataError(f"{meta.name}: not readable JSON ({exc})") from None
    if not isinstance(metadata, dict):
        raise CorruptDataError(f"{meta.name}: not a JSON object")
    indexes = metadata.get("indexes") or []
    if any(isinstance(ix, dict) and "key" in ix for ix in indexes):
        raise BadValueError(f"{meta.name}: this is a mongodump file, not a hoardDB dump; load the folder with "
                            "hoarddb ingest DIR --into-db DB")
    fmt = metadata.get("format", 1)
    if not isinstance(fmt, int) or fmt > FORMAT:
        raise BadValueError(f"{meta.name}: dump format {fmt!r} was written by a newer hoardDB; this version reads "
                            f"formats 1 to {FORMAT}")
    type_name = metadata.get("type", "hash")
    if type_name not in STORE_TYPES:
        raise CorruptDataError(f"{meta.name}: type {type_name!r} is not a store type ({', '.join(STORE_TYPES)})")
    data_info = metadata.get("data") or {}
    data = folder / (data_info.get("file") or f"{name}.bson")
    bucket = DumpedBucket(name=str(metadata.get("bucket") or name), metadata=metadata, data=data, format=fmt,
                          type=type_name, documents=metadata.get("documents"), source=meta.name)
    bucket.indices = _indices(metadata, meta.name)
    if not data.is_file():
        raise CorruptDataError(f"{name}: {data.name} is missing beside {meta.name}")
    if "sha256" in data_info:
        digest, size = file_sha256(data)
        if size != data_info.get("bytes", size) or digest != data_info["sha256"]:
            raise CorruptDataError(f"{name}: {data.name} is {size} bytes with SHA-256 {digest}, but the dump recorded "
                                   f"{data_info.get('bytes')} bytes with {data_info['sha256']}: the file was changed "
                                   "or damaged since the dump")
    count = 0
    with InputFile(data) as f:
        # a file without a recorded SHA-256 (format 1) is decoded too, so a damaged document is found now
        for record in read_bson(f, decode="sha256" not in data_info):
            if record.error is not None:
                raise CorruptDataError(f"{name}: {data.name}: document {record.number} (byte {record.offset}): "
                                       f"{record.error}")
            count += 1
    if bucket.documents is not None and count != bucket.documents:
        raise CorruptDataError(f"{name}: {data.name} holds {count} documents, the metadata recorded "
                               f"{bucket.documents}: the file is incomplete")
    if type_name == "blob":
        blobs = metadata.get("blobs") or {}
        blob_dir = folder / (blobs.get("folder") or f"{name}.blobs")
        sums = blobs.get("sha256") or {}
        missing = [i for i in sums if not (blob_dir / i).is_file()]
        if missing:
            raise CorruptDataError(f"{name}: {len(missing)} blob file(s) missing from {blob_dir.name}: "
                                   f"{', '.join(missing[:5])}")
        changed = [i for i, digest in sums.items() if file_sha256(blob_dir / i)[0] != digest]
        if changed:
            raise CorruptDataError(f"{name}: {len(changed)} blob file(s) in {blob_dir.name} do not have the SHA-256 "
                                   f"the dump recorded (changed or damaged since the dump): {', '.join(changed[:5])}")
    contents = metadata.get("store_field_contents")
    if contents:
        problems = field_contents.check(folder / contents.get("folder", f"{name}.fields"), contents)
        if problems:
            raise CorruptDataError(f"{name}: " + "; ".join(problems))
        bucket.fields = contents
    return bucket


def _indices(metadata: dict, where: str) -> list:
    """The ``indices`` to declare: format 2's whole declarations, format 1's field names as plain indexes.

    Indexes that a ``unique`` field line declares are left out: the field line
    declares them again (a format-1 name of such a field too, and a name listed twice).
    """
    unique_fields = {f["name"] for f in metadata.get("fields") or []
                     if isinstance(f, dict) and "unique" in (f.get("keywords") or [])}
    out: list = []
    for ix in metadata.get("indexes") or []:
        if isinstance(ix, str):
            # format 1: a field name; a unique field line (or an earlier entry) declares it already
            if ix not in unique_fields and {"field": ix} not in out:
                out.append({"field": ix})
            continue
        if not isinstance(ix, dict) or not isinstance(ix.get("fields"), list):
            raise CorruptDataError(f"{where}: index {ix!r} is neither a field name nor {{name, fields, ...}}")
        fields = list(ix["fields"])
        if len(fields) == 1 and ix.get("unique") and fields[0] in unique_fields and \
                ix.get("name") in (None, f"{fields[0]}_1"):
            continue
        entry: dict[str, Any] = {"fields": fields}
        if ix.get("name"):
            entry["name"] = ix["name"]
        if ix.get("unique"):
            entry["unique"] = True
        if ix.get("expire_after_seconds") is not None:
            entry["expire_after_seconds"] = ix["expire_after_seconds"]
        entry.update({k: ix[k] for k in INDEX_OPTIONS if k in ix})
        out.append(entry)
    return out


def restore(client, path: str | os.PathLike, *, db: str | None = None, buckets: list[str] | None = None,
            drop: bool = False, batch_size: int = BATCH_SIZE,
            progress: Callable[[BucketReport], None] | None = None,
            max_nesting_depth: int = DEFAULT_MAX_DEPTH) -> Report:
    """Restore the dump folder ``path`` into database ``db``; a :class:`~hoarddb.tools.report.Report`.

    ``path`` is the folder of one database (``OUT/app``), or a dump's top folder
    (``OUT``, as ``dump`` without a database writes it): then every database folder in it
    is restored into the database of its name, and an empty one is created empty.

    :param db: the target database of one database's folder (default: the folder's name).
    :param buckets: only these buckets of one database's folder.
    :param drop: drop a bucket of the same name first; without it, one that exists refuses the restore.
    :param batch_size: entries per ``load`` write.
    :param progress: called with the current bucket's report after each write.
    :param max_nesting_depth: the deepest store fields the dump's declarations may nest, as the
        target's ``max_nesting_depth`` allows (the check before anything is written uses it).

    A damaged dump, a declaration this hoardDB refuses, or a bucket that exists without
    ``drop`` raises before anything is written — of any database, for a top folder: all
    of it is checked first. What fails later (the database refuses a write, a file goes
    missing) ends the run: the report's ``error`` and notes say which buckets (and
    databases) were restored, which one is partly there and which were not touched.
    ``report.buckets[i].conflicts`` lists unique indexes the data left conflicted.
    """
    folder = Path(path)
    databases = dump_databases(folder)
    if databases is None:
        plans = [_plan(client, folder, db or folder.name, buckets, drop, max_depth=max_nesting_depth)]
    else:
        if db is not None or buckets:
            option = "--db" if db is not None else "--bucket"
            raise InvalidArgumentError(
                f"{folder} is the top folder of a dump of {len(databases)} database(s) "
                f"({', '.join(d.name for d in databases)}), each restored into the database of its name; "
                f"{option} applies to one database: give its folder, such as {databases[0]}")
        # every database checked before anything is written
        plans = [_plan(client, sub, sub.name, None, drop, in_top=True, max_depth=max_nesting_depth)
                 for sub in databases]
    report = Report("restore")
    for i, plan in enumerate(plans):
        if not _restore_database(client, plan, report, batch_size, progress):
            rest = [p.db for p in plans[i + 1:]]
            if rest:
                report.notes.append(f"Databases not restored, as the run ended before them: {', '.join(rest)}")
            break
    return report


def dump_databases(folder: Path) -> list[Path] | None:
    """The database folders of a dump's top folder, or None when ``folder`` is not one (it is one
    database's folder, or not a dump: :func:`read_dump` then says which).

    A top folder holds folders with ``<bucket>.metadata.json`` files, and maybe empty folders
    (databases without buckets); a folder holding anything else refuses the restore.
    """
    if not folder.is_dir() or any(p.name.endswith(METADATA_SUFFIX) for p in folder.iterdir()):
        return None
    subs = sorted(p for p in folder.iterdir() if p.is_dir())
    dumps = [p for p in subs if any(q.name.endswith(METADATA_SUFFIX) for q in p.iterdir())]
    if not dumps:
        return None
    other = [p for p in subs if p not in dumps and any(p.iterdir())]
    if other:
        raise InvalidArgumentError(
            f"{folder} is the top folder of a dump, but {', '.join(p.name for p in other)} holds no "
            "<bucket>.metadata.json: not a database's dump. Move it out, or restore the databases one by one "
            f"(hoarddb restore {dumps[0]})")
    return subs


@dataclass
class _Plan:
    """One database's restore, checked: its dumped buckets, their options, and the buckets it has now."""

    folder: Path
    db: str
    dumped: list[DumpedBucket]
    declarations: list[dict]
    existing: set
    drop: bool


def _plan(client, folder: Path, db: str, buckets: list[str] | None, drop: bool, in_top: bool = False,
          max_depth: int = DEFAULT_MAX_DEPTH) -> _Plan:
    """Check one database's dump folder (steps 1 and 2 of the module's list); raises, writing nothing.
    ``in_top``: the folder is in a dump's top folder, where an empty one is a database without buckets."""
    check_name(db, "database")
    if in_top and not any(folder.iterdir()):
        dumped = []  # a database that had no buckets: dump left its folder empty
    else:
        dumped = read_dump(folder, buckets)
    declarations = check_declarations(dumped, folder, max_depth)
    try:
        existing = set(client[db].buckets())
    except DatabaseNotFoundError:
        existing = None
    clash = [b.name for b in dumped if b.name in (existing or ())]
    if clash and not drop:
        raise BucketExistsError(f"database {db!r} has bucket(s) {', '.join(clash)} already; restore declares each "
                                "bucket itself: restore into another database, or pass --drop to replace them")
    return _Plan(folder, db, dumped, declarations, existing, drop)


def _restore_database(client, plan: _Plan, report: Report, batch_size: int, progress) -> bool:
    """Restore one checked database into ``report``; False when the run ended in it."""
    db, dumped, drop = plan.db, plan.dumped, plan.drop
    existing = plan.existing or set()
    if not dumped:
        if plan.existing is None:
            client.create_database(db)
            report.notes.append(f"database {db}: created empty, as the dump holds no bucket of it")
        return True
    for b, options in zip(dumped, plan.declarations):
        rep = BucketReport(db=db, bucket=b.name, type=b.type, file=str(b.data), created=True,
                           total_bytes=b.data.stat().st_size)
        rep.notes.extend(b.notes)
        report.buckets.append(rep)
        if b.format < FORMAT and b.indices:
            rep.notes.append(f"a format-{b.format} dump records index field names only: "
                             f"{', '.join(i['field'] if 'field' in i else str(i['fields']) for i in b.indices)} "
                             "restored as plain single-field indexes")
        step = "dropping the bucket that was there"
        try:
            if b.name in existing:
                client[db].drop_bucket(b.name)
                rep.notes.append("the bucket that was there was dropped first (--drop)")
            step = "declaring the bucket"
            created = client[db].create_bucket(b.name, type=b.type, **options)
            rep.notes.extend(f"declaring: {w}" for w in getattr(created, "warnings", []) or [])
            step = "loading its entries"
            with fewer_collections():
                if b.type == "blob":
                    _load_blobs(client[db][b.name], b, rep, progress)
                else:
                    _load_entries(client[db][b.name], b, rep, batch_size, progress)
                    if b.fields:
                        step = "loading its store fields"
                        field_contents.restore_fields(client[db][b.name], b.data.parent / b.fields.get("folder", ""),
                                                      b.fields, rep)
            step = "checking the restored bucket"
            _check_after(client[db][b.name], b, rep)
        except Stop:
            pass
        except (HoardError, OSError) as exc:
            reason = f"{exc.codeName}: {exc.message}" if isinstance(exc, HoardError) else f"{type(exc).__name__}: {exc}"
            rep.error = f"{step}: {reason}"
            rep.stopped = rep.stopped or f"the restore ended while {step}"
        if rep.error is not None or rep.stopped is not None:  # the run ends at this bucket
            _what_was_written(report, [r for r in report.buckets if r.db == db],
                              dumped[dumped.index(b) + 1:], existing, drop)
            return False
    return True


def _what_was_written(report: Report, done: list[BucketReport], rest: list[DumpedBucket], existing: set,
                      drop: bool) -> None:
    """The notes of a restore that ended midway: what is in the database now, exactly, and how to finish."""
    last = done[-1]
    lines = [f"The restore of {last.db} ended at bucket {last.bucket}. What was written:"]
    for r in done[:-1]:
        lines.append(f"  {r.bucket}: restored ({r.documents:,} entries)")
    lines.append(f"  {last.bucket}: declared, {last.documents:,} entries loaded — incomplete")
    if rest:
        kept = [r.name for r in rest if r.name in existing]
        lines.append("Not written: " + ", ".join(r.name for r in rest)
                     + (f" ({', '.join(kept)} still hold what they held before)" if kept and drop else ""))
    again = " ".join(f"--bucket {name}" for name in [last.bucket] + [r.name for r in rest])
    lines.append(f"To finish: fix the cause above, then run the restore again with --drop {again}")
    report.notes.append("\n".join(lines))


def check_declarations(dumped: list[DumpedBucket], folder: Path | None = None,
                       max_depth: int = DEFAULT_MAX_DEPTH) -> list[dict]:
    """The ``create_bucket`` options of each dumped bucket, each checked as the engine checks it.

    Raises CorruptDataError listing every bucket whose declaration would be refused (and
    two metadata files naming one bucket), so that a restore refused for it writes nothing.
    """
    out: list[dict] = []
    problems: list[str] = []
    seen: dict[str, str] = {}
    for b in dumped:
        options = dict(b.metadata.get("options") or {})
        if b.metadata.get("fields"):
            options["fields"] = b.metadata["fields"]
        if b.metadata.get("store_fields"):
            options["store_fields"] = b.metadata["store_fields"]
        if b.indices:
            options["indices"] = b.indices
        out.append(options)
        where = b.source or f"{b.name}{METADATA_SUFFIX}"
        if b.name in seen:
            problems.append(f"{where}: names bucket {b.name!r}, as {seen[b.name]} does; restore one of them with "
                            "--bucket")
            continue
        seen[b.name] = where
        try:
            check_name(b.name, "bucket")
            declare_bucket(b.name, {"type": b.type, **options}, max_depth)  # as create_bucket checks it, writing nothing
        except HoardError as exc:
            problems.append(f"{where}: this hoardDB refuses the declaration of bucket {b.name!r} "
                            f"({exc.codeName}: {exc.message}); correct it in the metadata file (or leave the "
                            "bucket out with --bucket) and run again")
    if problems:
        raise CorruptDataError(f"the dump {folder or ''} cannot be restored; nothing was written:\n  "
                               + "\n  ".join(problems))
    return out


def _load_entries(bucket, b: DumpedBucket, rep: BucketReport, batch_size: int, progress) -> None:
    loads = True  # until a fifo or lifo of a version without their load refuses it: pushed then, in order
    seen: set[str] = set()

    def write(docs: list) -> Any:
        nonlocal loads
        if loads:
            try:
                return bucket.load(docs)
            except (AttributeError, VerbNotSupportedError):
                if b.type not in QUEUES:
                    raise
                loads = False
        return bucket.batch_push(docs)

    def on_result(result: Any) -> None:
        for c in (result or {}).get("conflicts", []) if isinstance(result, dict) else []:
            if c.get("index") not in seen:
                seen.add(c.get("index"))
                rep.conflicts.append(c)

    writer = BatchWriter(write, rep, on_error="stop", batch_size=batch_size, on_result=on_result, stop_hint="")
    start = time.perf_counter()
    with InputFile(b.data) as f:
        try:
            for record in read_bson(f):
                writer.add(record)
                if progress is not None and record.number % batch_size == 0:
                    rep.bytes, rep.seconds = f.done, time.perf_counter() - start
                    progress(rep)
            writer.flush()
        finally:
            rep.bytes, rep.seconds = f.done, time.perf_counter() - start
            if progress is not None:
                progress(rep)


def _load_blobs(bucket, b: DumpedBucket, rep: BucketReport, progress) -> None:
    blobs = b.metadata.get("blobs") or {}
    blob_dir = b.data.parent / (blobs.get("folder") or f"{b.name}.blobs")
    sums = blobs.get("sha256") or {}

    def write(docs: list) -> Any:
        loaded = 0
        for info in docs:
            blob_id = str(info["_id_"])
            with open(blob_dir / blob_id, "rb") as fh:
                bucket.load([{"_id_": blob_id, "data": blob_data(bucket, fh), "name": info.get("name"),
                              "type": info.get("type"),
                              "sha256": sums.get(blob_id) or info.get("sha256"), "created": info.get("created")}])
            loaded += 1
        rep.blobs += loaded
        return {"loaded": loaded}

    writer = BatchWriter(write, rep, on_error="stop", batch_size=1, stop_hint="")
    start = time.perf_counter()
    with InputFile(b.data) as f:
        try:
            for record in read_bson(f):
                writer.add(record)
                if progress is not None:
                    rep.bytes, rep.seconds = f.done, time.perf_counter() - start
                    progress(rep)
            writer.flush()
        finally:
            rep.bytes, rep.seconds = f.done, time.perf_counter() - start


def _check_after(bucket, b: DumpedBucket, rep: BucketReport) -> None:
    """Compare the restored bucket with the dump: its entries, and which indexes are not ready."""
    described = bucket.describe()
    if b.documents is not None and described.get("entries") != b.documents and rep.ok:
        rep.notes.append(f"the bucket holds {described.get('entries')} entries; the dump recorded {b.documents}")
    names = {c.get("index") for c in rep.conflicts}
    for ix in described.get("indexes") or []:
        if ix.get("state") == "conflicted" and ix["name"] not in names:
            rep.conflicts.append({"index": ix["name"], "values": None, "documents": []})
