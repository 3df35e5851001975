"""ingest: load mongodump ``.bson`` files and JSON Lines exports into buckets, one bucket per file.

    >>> import hoarddb
    >>> from hoarddb.tools import ingest
    >>> with hoarddb.open("./data") as client:
    ...     report = ingest(client, "./dump/app", into_db="app")        # a directory
    ...     report = ingest(client, "users.bson", into="app.users")      # one file
    ...     print(report.summary())

ingest loads documents as they are; it does not design a model, analyse a dump or
split a collection. What it does, in order:

1. Plan: each ``.bson``, ``.bson.gz``, ``.jsonl`` or ``.json`` file (JSON Lines, as
   mongoexport writes) becomes one bucket named after the file. A base name with a dot
   (``events.2024.bson``, ``system.views.bson``) is refused unless ``allow_dots``; the
   dots then become underscores (``events_2024``).
2. Ask: a fifo or lifo bucket appends, so running ingest twice stores two copies;
   ingest says so and needs ``yes=True`` or a ``confirm`` callback that agrees.
3. Load each file in batches of one write each (see :mod:`hoarddb.tools.batches`): a
   hash bucket with ``batch_put`` keyed by ``_id_``, else ``_id`` (copied into ``_id_``;
   ``_id`` is kept), so a second run puts the same documents under the same keys; a
   btree with ``batch_insert``; fifo, lifo and heap with ``batch_push``.
4. Report: per bucket, documents, bytes and seconds; every document not loaded with its
   file, number and byte offset (line for JSON Lines); and, for a ``<name>.metadata.json``
   beside a file, the ``create bucket`` statement that would declare its indexes.
   ingest creates no index: declare the bucket with that statement first, and ingest
   fills it.

A bucket that exists keeps its type; ``type`` only chooses the type of the buckets
ingest creates.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bson import json_util

from ..catalog import check_name
from ..errors import (BadValueError, CorruptDataError, DatabaseNotFoundError, HoardError, InvalidArgumentError,
                      NotFoundError)
from ..indexes.declaration import check_partial, index_name
from .batches import BATCH_SIZE, ON_ERROR, BatchWriter, Stop, fewer_collections
from .keys import key_document
from .readers import (JSON_OPTIONS, PARALLEL_MIN_BYTES, InputFile, ParallelBSON, describe_position,
                      read_records, split_name)

from .report import BucketReport, Report

#: The verb each store type is filled with.
WRITE_VERB = {"hash": "batch_put", "btree": "batch_insert", "fifo": "batch_push", "lifo": "batch_push",
              "heap": "batch_push"}
#: ... and the verb that writes one document the same way (a refused batch is halved down to these).
WRITE_ONE = {"hash": "put", "btree": "insert", "fifo": "push", "lifo": "push", "heap": "push"}
APPENDING = ("fifo", "lifo")

#: progress(report): called after each batch, and once when a file is done.
Progress = Callable[[BucketReport], None]


@dataclass
class Source:
    """Source is one input file and the bucket it fills."""

    path: Path
    format: str  # "bson" or "jsonl"
    db: str
    bucket: str
    metadata: Path | None = None


def plan(path: str | os.PathLike, *, into_db: str | None = None, into: str | None = None,
         allow_dots: bool = False) -> list[Source]:
    """The files ``path`` names and the bucket each fills; refuses before anything is written.

    ``path`` is a directory (every data file in it, with ``into_db``) or one file (with
    ``into="db.bucket"``, or ``into_db`` to name the bucket after the file).
    """
    path = Path(path)
    if not path.exists():
        raise NotFoundError(f"no such file or directory: {path}")
    if (into_db is None) == (into is None):
        raise InvalidArgumentError(
            "say where the documents go: --into-db DB (a bucket per file, named after it) "
            "or --into DB.BUCKET (one file)" if into_db is None else "give --into-db or --into, not both"
        )
    if path.is_dir():
        if into is not None:
            raise InvalidArgumentError(
                f"{path} is a directory: load it with --into-db DB (one bucket per file), or name one file with --into"
            )
        files = sorted(p for p in path.iterdir() if p.is_file() and split_name(p))
        if not files:
            subdirs = sorted(p.name for p in path.iterdir() if p.is_dir())
            hint = (f"; it has folders ({', '.join(subdirs[:5])}) — a mongodump output holds one folder per "
                    f"database: give that folder, such as {path / subdirs[0]}") if subdirs else ""
            raise InvalidArgumentError(f"no .bson, .bson.gz, .jsonl or .json file in {path}{hint}")
    else:
        if split_name(path) is None:
            raise InvalidArgumentError(
                f"{path.name}: ingest reads .bson and .bson.gz (mongodump) and .jsonl, .json (JSON Lines, one "
                "document per line, as mongoexport writes) files"
                + ("; a .metadata.json file is read beside its data file" if ".metadata.json" in path.name else "")
            )
        files = [path]
    dotted = [f for f in files if "." in split_name(f)[0]]
    if dotted and not allow_dots:
        names = ", ".join(f.name for f in dotted)
        raise BadValueError(
            f"refused: {names} — a dot in a file's base name is usually a MongoDB system collection "
            "(system.views) or a file whose extension is not what it seems. Pass --allow-dots to load "
            "it; in a bucket named after the file the dots become underscores (events.2024 -> events_2024)"
        )
    sources: list[Source] = []
    if into is not None:
        db, _, bucket = into.partition(".")
        if not bucket:
            raise InvalidArgumentError(f"--into takes DB.BUCKET, such as app.properties; got {into!r}")
        check_name(db, "database")
        check_name(bucket, "bucket")
        sources.append(Source(path, split_name(path)[1], db, bucket, _metadata_beside(path)))
        return sources
    check_name(into_db, "database")
    seen: dict[str, Path] = {}
    for f in files:
        base, fmt = split_name(f)
        bucket = base.replace(".", "_")
        try:
            check_name(bucket, "bucket")
        except HoardError as exc:
            raise type(exc)(f"{f.name}: {exc.message}. Rename the file, or load it alone with "
                            "--into DB.BUCKET") from None
        if bucket in seen:
            raise BadValueError(
                f"{seen[bucket].name} and {f.name} would both fill bucket {bucket!r}; load one of them with --into"
            )
        seen[bucket] = f
        sources.append(Source(f, fmt, into_db, bucket, _metadata_beside(f)))
    return sources


def _metadata_beside(path: Path) -> Path | None:
    base = split_name(path)[0]
    for name in (f"{base}.metadata.json", f"{base}.metadata.json.gz"):
        candidate = path.with_name(name)
        if candidate.is_file():
            return candidate
    return None


# -- mongodump metadata ---------------------------------------------------------------------


def read_metadata(path: Path) -> dict:
    """A mongodump ``<name>.metadata.json`` (Extended JSON, plain or gzip) as a document."""
    with InputFile(path) as f:
        text = f.stream.read() if f.gzip else f.read(f.total)
    return json_util.loads(text, json_options=JSON_OPTIONS)


def mongo_indices(metadata: dict) -> tuple[list[dict], list[str]]:
    """The hoardDB ``indices`` entries for a mongodump metadata's indexes, and notes on what was left out.

    The ``_id`` index is skipped (a hash bucket's key is its own index). Descending keys
    (``-1``) become ``desc`` (but a TTL index stays ascending, noted); ``unique`` and
    ``expireAfterSeconds`` carry over;
    ``sparse`` and ``partialFilterExpression`` too (an expression outside the operators
    hoardDB accepts skips its index, with a note); text, geo and hashed indexes and paths
    into nested documents have no hoardDB equivalent and are named in the notes.
    """
    out: list[dict] = []
    notes: list[str] = []
    for ix in metadata.get("indexes") or []:
        if not isinstance(ix, dict) or not isinstance(ix.get("key"), dict):
            notes.append(f"index {ix!r} has no key document; skipped")
            continue
        name = ix.get("name")
        key = ix["key"]
        fields = list(key)
        if fields == ["_id"]:
            continue
        kinds = [v for v in key.values()
                 if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v in (1, -1))]
        if kinds:
            notes.append(f"index {name!r} is a {kinds[0]} index ({_json(key)}); hoardDB has no such index — skipped")
            continue
        nested = [f for f in fields if "." in f]
        if nested:
            notes.append(f"index {name!r} covers {', '.join(nested)}, a path into nested documents; hoardDB "
                         "indexes top-level fields only — skipped")
            continue
        for option in ("collation", "hidden"):
            if option in ix and ix[option] not in (False, None):
                notes.append(f"index {name!r}: {option} has no hoardDB equivalent; the index below covers "
                             "every document")
        entry: dict[str, Any] = {"field": fields[0]} if len(fields) == 1 else {"fields": fields}
        partial = ix.get("partialFilterExpression")
        if partial is not None:
            try:
                entry["partialFilterExpression"] = check_partial(partial, f"index {name!r}")
            except BadValueError as exc:
                notes.append(f"{exc.message} — skipped")
                continue
        elif ix.get("sparse") not in (None, False, 0):
            entry["sparse"] = True
        if ix.get("unique"):
            entry["unique"] = True
        ttl = ix.get("expireAfterSeconds")
        if ttl is not None:
            if entry.get("unique"):
                notes.append(f"index {name!r} is unique and TTL; hoardDB refuses a unique TTL index — "
                             "declared unique, without expiry")
            elif len(fields) > 1:
                notes.append(f"index {name!r}: TTL on more than one field is refused; declared without expiry")
            else:
                entry["expire_after_seconds"] = int(ttl) if float(ttl).is_integer() else float(ttl)
        descending = [f for f, v in key.items() if v == -1]
        if descending and "expire_after_seconds" in entry:
            notes.append(f"index {name!r} is a descending TTL index; hoardDB's TTL indexes are ascending — "
                         "declared ascending")
            descending = []
        if descending:
            entry["desc"] = True if descending == fields else descending
        if isinstance(name, str) and name and name != index_name(fields, descending):
            entry["name"] = name
        out.append(entry)
    return out, notes


def create_statement(bucket: str, type_name: str, indices: list[dict]) -> str:
    """The HQL ``create bucket`` statement that declares ``indices`` on a bucket."""
    return f"create bucket {bucket} {{ type: {type_name}, indices: [{', '.join(_hql(i) for i in indices)}] }}"


def _hql(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_hql(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_hql(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def _json(value: Any) -> str:
    return json_util.dumps(value)


# -- loading ------------------------------------------------------------------------------


def ingest(client, path: str | os.PathLike, *, into_db: str | None = None, into: str | None = None,
           type: str | None = None, allow_dots: bool = False, on_error: str = "stop", yes: bool = False,
           confirm: Callable[[str], bool] | None = None, batch_size: int = BATCH_SIZE,
           progress: Progress | None = None) -> Report:
    """Load the file or directory ``path`` into buckets; a :class:`~hoarddb.tools.report.Report`.

    :param client: an open :class:`hoarddb.Client` (embedded, or a server connection).
    :param into_db: the database of a directory's buckets, one per file, named after it.
    :param into: ``"db.bucket"`` for one file.
    :param type: the store type of buckets ingest creates (default hash); a bucket that
        exists keeps its own, and the report says so.
    :param allow_dots: load files with a dot in their base name (dots become underscores).
    :param on_error: ``"stop"`` (default) ends a file at its first bad document, with every
        document before it loaded; ``"skip"`` loads every good document and reports the rest.
    :param yes: agree up front that fifo and lifo buckets are appended to.
    :param confirm: asked ``confirm(message)`` when a fifo or lifo bucket would be appended
        to and ``yes`` is false; without it, that run is refused.
    :param batch_size: documents per write (and at most 8 MiB of BSON per write, whatever it says).
    :param progress: called with the current bucket's report after each write.

    Refusals before anything is written (no such path, a dotted name, an unknown type)
    raise; what happens while loading is in the report: ``report.ok`` is False when a
    document was not loaded.
    """
    if type is not None and type not in WRITE_VERB:
        if type == "blob":
            raise BadValueError("ingest loads documents; a blob bucket holds files (use put). Choose another --type")
        raise BadValueError(f"--type is one of {', '.join(WRITE_VERB)}, got {type!r}")
    if on_error not in ON_ERROR:
        raise BadValueError(f"--on-error is stop or skip, got {on_error!r}")
    sources = plan(path, into_db=into_db, into=into, allow_dots=allow_dots)
    unreadable = [p for p in map(_unreadable, sources) if p]
    if unreadable:
        raise CorruptDataError(
            "refused: nothing can be read from " + ("this file" if len(unreadable) == 1 else "these files")
            + "; nothing was written:\n  " + "\n  ".join(unreadable)
            + "\nFix or replace " + ("it" if len(unreadable) == 1 else "them")
            + (", or move it out of the folder," if path_is_dir(path) else "") + " and run again")
    new_type = type or "hash"
    report = Report("ingest")

    existing: dict[tuple[str, str], str] = {}
    for db_name in sorted({s.db for s in sources}):
        try:
            names = client[db_name].buckets()
        except DatabaseNotFoundError:
            names = []
        for s in sources:
            if s.db == db_name and s.bucket in names:
                existing[(s.db, s.bucket)] = client[s.db][s.bucket].describe()["type"]

    appending = [s for s in sources if existing.get((s.db, s.bucket), new_type) in APPENDING]
    if appending and not yes:
        names = ", ".join(f"{s.db}.{s.bucket} ({existing.get((s.db, s.bucket), new_type)})" for s in appending)
        message = (f"ingest appends to {names}: a fifo or lifo bucket has no keys, so running this ingest "
                   "again appends a second copy of every document. Go on?")
        if confirm is None:
            raise BadValueError(message.replace(" Go on?", "") + " Pass --yes (yes=True) to go on.")
        if not confirm(message):
            report.cancelled = "not confirmed; nothing was written"
            return report

    for s in sources:
        bucket_type = existing.get((s.db, s.bucket))
        rep = BucketReport(db=s.db, bucket=s.bucket, type=bucket_type or new_type, file=str(s.path))
        report.buckets.append(rep)
        if bucket_type is None:
            client[s.db].create_bucket(s.bucket, type=new_type)
            rep.created = True
        elif type is not None and type != bucket_type:
            rep.notes.append(f"the bucket exists as a {bucket_type} bucket; --type {type} does not change it "
                             f"(the documents were loaded into the {bucket_type} bucket)")
        if rep.type == "blob":
            rep.error = "the bucket is a blob bucket, which holds files, not documents; nothing was loaded"
            continue
        if s.metadata is not None:
            _report_metadata(s, rep, client, bucket_type is not None)
        try:
            with fewer_collections():
                _load_file(client, s, rep, on_error, batch_size, progress)
        except Stop:
            # A write the database refused outright, or --on-error stop: the run ends here. With
            # skip, only this file ends (it cannot be read further) and the next one is loaded.
            if rep.error is not None or on_error == "stop":
                rest = sources[sources.index(s) + 1:]
                if rest:
                    report.notes.append("not loaded, as the run stopped before them: "
                                        + ", ".join(f"{r.path.name} -> {r.db}.{r.bucket}" for r in rest))
                break
    return report


def path_is_dir(path: str | os.PathLike) -> bool:
    return Path(path).is_dir()


def _unreadable(s: Source) -> str | None:
    """Why nothing at all of ``s`` can be loaded (its first document cannot be read and nothing after
    it can be found: a JSON array cut at its start, a cut or damaged gzip stream, a file that is not BSON), or None."""
    try:
        with InputFile(s.path) as f:
            records = read_records(f, s.format)
            try:
                first = next(records, None)
            finally:
                records.close()
    except OSError as exc:
        return f"{s.path}: cannot be opened: {exc}"
    if first is not None and first.error is not None and first.fatal:
        return f"{describe_position(s.path, first)}: {first.code}: {first.error}"
    return None


def _report_metadata(s: Source, rep: BucketReport, client, existed: bool) -> None:
    try:
        metadata = read_metadata(s.metadata)
    except (ValueError, OSError, TypeError) as exc:
        rep.notes.append(f"{s.metadata.name} cannot be read ({exc}); its indexes are not reported")
        return
    indices, notes = mongo_indices(metadata if isinstance(metadata, dict) else {})
    rep.notes.extend(f"{s.metadata.name}: {n}" for n in notes)
    if not indices:
        return
    declared = client[s.db][s.bucket].describe().get("indexes") or [] if existed else []
    if declared:
        rep.notes.append(f"{s.metadata.name} lists {len(indices)} index(es); the bucket declares "
                         f"{', '.join(ix.get('summary') or ix['name'] for ix in declared)}")
        return
    how = "ingest created the bucket without them" if not existed else "the bucket declares none"
    rep.notes.append(
        f"{s.metadata.name} lists {len(indices)} index(es) and {how} (ingest creates no index). To have them: "
        f"drop bucket {s.bucket}, declare it in the shell (use {s.db}) with the statement below, and run this "
        "ingest again — it fills a bucket that exists"
        + ("; only hash buckets have indexes, so the statement declares a hash bucket" if rep.type != "hash" else ""))
    rep.statement = create_statement(s.bucket, "hash", indices)


def _load_file(client, s: Source, rep: BucketReport, on_error: str, batch_size: int,
               progress: Progress | None) -> None:
    bucket = client[s.db][s.bucket]
    write = getattr(bucket, WRITE_VERB[rep.type])
    keyed = rep.type == "hash"
    writer = BatchWriter(write, rep, on_error=on_error, batch_size=batch_size,
                         write_one=getattr(bucket, WRITE_ONE[rep.type]), track_keys=keyed)
    keys = {"_id_": 0, "_id": 0}
    start = time.perf_counter()
    if keyed and s.format == "bson" and (os.cpu_count() or 1) > 1 \
            and Path(s.path).stat().st_size >= PARALLEL_MIN_BYTES:
        f = ParallelBSON(s.path)  # a big dump: read and check it in a second process
        records = f.records()
    else:
        f = InputFile(s.path)
        records = read_records(f, s.format, keep_raw=keyed)
    rep.total_bytes = f.total
    last_done = 0
    try:
        for record in records:
            if keyed and record.doc is not None:
                if record.key_from is None:  # (ParallelBSON keyed it in its reader process)
                    record.doc, record.key_from, record.key = key_document(record.doc)
                if record.key_from:
                    keys[record.key_from] += 1
                else:
                    record.error, record.code = (
                        "the document has no _id_ and no _id; a hash bucket keys each document by it "
                        "(add one, or ingest into a fifo or btree bucket with --type)", "NO_KEY")
                    record.doc = None
            writer.add(record)
            if progress is not None and rep.documents != last_done:
                last_done = rep.documents
                rep.bytes, rep.seconds = f.done, time.perf_counter() - start
                progress(rep)
        writer.flush()
    finally:
        records.close()
        f.close()
        rep.bytes = f.done
        rep.seconds = time.perf_counter() - start
        if keyed and (keys["_id"] or keys["_id_"]):
            how = []
            if keys["_id_"]:
                how.append(f"{keys['_id_']:,} documents keyed by their _id_")
            if keys["_id"]:
                how.append(f"{keys['_id']:,} documents keyed by their _id (copied into _id_; _id is kept)")
            rep.notes.append(" and ".join(how))
        if progress is not None:
            progress(rep)
