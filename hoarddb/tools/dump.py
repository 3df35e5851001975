"""dump: write every bucket of a database to files that restore can declare and load again.

    >>> from hoarddb.tools import dump
    >>> report = dump(client, "app", "./backup")              # every bucket of app
    >>> report = dump(client, "app", "./backup", buckets=["Users"])
    >>> report = dump(client, None, "./backup")               # every database: ./backup/<db>/...

The layout, one folder per database (every database when no ``db`` is given) and a few
files per bucket:

    OUT/
      <db>/
        <bucket>.bson            every entry, BSON back to back, in storage order: a hash in
                                 key order, a btree in sort-key order, a heap in pop order
                                 (priorities are in the documents), a fifo or lifo oldest
                                 first. A blob bucket: one document per blob
                                 {_id_, name, type, size, sha256, created}.
        <bucket>.metadata.json   the declaration and what the dump holds (below)
        <bucket>.blobs/<id>      blob buckets: each blob's bytes, in a file named by its id
        <bucket>.fields/         buckets with store fields: the elements of the stores each
                                 document owns, one <Field>.bson per field (and
                                 <Field>.blobs/ for a blob field); see hoarddb.tools.fields

``<bucket>.metadata.json`` (JSON; values in relaxed MongoDB Extended JSON):

    {"format": 2, "hoarddb": "0.1.0", "db": "app", "bucket": "Users", "type": "hash",
     "options": {}, "fields": [...], "store_fields": [...],
     "indexes": [{"name": "Email_1", "fields": ["Email"], "unique": true,
                  "expire_after_seconds": null, "state": "ready"}],
     "documents": 1200, "data": {"file": "Users.bson", "bytes": 1234567, "sha256": "..."},
     "blobs": {"folder": "Photos.blobs", "sha256": {"<id>": "<sha256>"}},   (blob buckets)
     "store_field_contents": {"folder": "Users.fields", "fields": {"Expenses": {"type": "lifo",
         "file": "Expenses.bson", "elements": 40, "bytes": 4000, "sha256": "..."}}},   (or null)
     "dumped_at": "2026-11-30T10:00:00Z"}

Format 1, written by older versions, had ``"indexes": ["Email", "Name"]`` — field names
only — and restore reads it as plain single-field indexes.

Each file is written under a ``.part`` name and renamed when complete, the metadata
last: a bucket whose ``.metadata.json`` is present was dumped whole. A dump reads in
pages of ``page_size`` entries and is not a snapshot: writes made while it runs may or
may not be in it, so stop writers for an exact copy.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from bson import json_util
from bson.json_util import JSONMode, JSONOptions

from ..version import __version__
from ..catalog import check_name
from ..errors import HoardError, InvalidArgumentError, VerbNotSupportedError
from ..indexes.declaration import OPTIONAL_KEYS as INDEX_OPTIONS
from ..values.codec import encode
from .batches import fewer_collections, shrinking
from .fields import FieldDumper
from .report import BucketReport, Refusal, Report

#: The dump format this version writes: 2 records each index's whole declaration; 1 had field names only.
FORMAT = 2
#: Entries per export page.
PAGE_SIZE = 1000
#: How the metadata's values are written: relaxed Extended JSON, dates in UTC.
METADATA_JSON = JSONOptions(json_mode=JSONMode.RELAXED, tz_aware=True, tzinfo=datetime.timezone.utc)


def dump(client, db: str | None, out: str | os.PathLike, *, buckets: list[str] | None = None,
         page_size: int = PAGE_SIZE, progress: Callable[[BucketReport], None] | None = None) -> Report:
    """Write the buckets of database ``db`` under ``out/db/``; a :class:`~hoarddb.tools.report.Report`.

    :param db: the database to dump; None dumps every database, each under ``out/<db>/``
        (a database without buckets gets an empty folder, which restore recreates).
    :param buckets: only these buckets (default: every bucket of ``db``; needs a ``db``).
    :param page_size: entries read per export call.
    :param progress: called with the current bucket's report after each page.

    A bucket that cannot be read whole (a blob whose bytes fail their SHA-256) is
    reported; the others are still dumped. Files of the same buckets from an earlier
    dump in ``out/db`` are replaced; other files there are left alone.
    """
    if db is None:
        if buckets:
            raise InvalidArgumentError("--bucket names buckets of one database: give it with --db "
                                       "(without --db, dump writes every bucket of every database)")
        report = Report("dump")
        names = client.databases()
        Path(out).mkdir(parents=True, exist_ok=True)
        for name in names:
            one = dump(client, name, out, page_size=page_size, progress=progress)
            report.buckets.extend(one.buckets)
            if not one.buckets:
                report.notes.append(f"database {name} has no buckets: {Path(out) / name} is an empty folder, "
                                    "and restore creates the database empty")
        if not names:
            report.notes.append("there are no databases: nothing was dumped")
        return report
    check_name(db, "database")
    names = client[db].buckets()
    if buckets:
        missing = [b for b in buckets if b not in names]
        if missing:
            from ..errors import BucketNotFoundError

            raise BucketNotFoundError(
                f"no bucket {', '.join(missing)} in database {db!r}; its buckets: {', '.join(names) or 'none'}"
            )
        names = [b for b in names if b in buckets]
    folder = Path(out) / db
    folder.mkdir(parents=True, exist_ok=True)
    report = Report("dump")
    for name in names:
        with fewer_collections():
            rep = _dump_bucket(client, db, name, folder, page_size, progress)
        report.buckets.append(rep)
    return report


def _dump_bucket(client, db: str, name: str, folder: Path, page_size: int, progress) -> BucketReport:
    """Dump one bucket; an error that ends it (the database, the disk) is in the report, and its
    ``.part`` files are removed, so what is in ``folder`` for it is an earlier whole dump or nothing."""
    data_path = folder / f"{name}.bson"
    rep = BucketReport(db=db, bucket=name, type="?", file=str(data_path))
    try:
        _dump_bucket_files(client[db][name], rep, folder, page_size, progress)
    except (HoardError, OSError) as exc:
        for part in (f"{name}.bson.part", f"{name}.blobs.part", f"{name}.fields.part", f"{name}.metadata.json.part"):
            path = folder / part
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        rep.error = (f"{exc.codeName}: {exc.message}" if isinstance(exc, HoardError)
                     else f"{type(exc).__name__}: {exc}")
        earlier = (folder / f"{name}{'.metadata.json'}").is_file()
        rep.stopped = ("this bucket was not dumped" + (
            f"; the files of an earlier dump of it in {folder} were left as they were (its .metadata.json "
            "records when: dumped_at)" if earlier else "") + ". Fix the cause and dump it again with --bucket "
            + name)
    return rep


def _dump_bucket_files(bucket, rep: BucketReport, folder: Path, page_size: int, progress) -> None:
    name = rep.bucket
    decl = bucket.describe()
    data_path = folder / f"{name}.bson"
    rep.type, rep.total_bytes = decl["type"], decl.get("entries", 0)
    db = rep.db
    start = time.perf_counter()
    part = data_path.with_name(data_path.name + ".part")
    digest = hashlib.sha256()
    blob_sums: dict[str, str] = {}
    blob_dir = folder / f"{name}.blobs"
    blob_part = folder / f"{name}.blobs.part"
    if decl["type"] == "blob":
        shutil.rmtree(blob_part, ignore_errors=True)
        blob_part.mkdir()
    fields_dir = folder / f"{name}.fields"
    fields = FieldDumper(bucket, decl, folder / f"{name}.fields.part") if decl.get("store_fields") else None
    written = 0
    with open(part, "wb") as fh:
        for page in _pages(bucket, decl["type"], page_size):
            for doc in page:
                if fields is not None:
                    before = len(fields.refused)
                    fields.add(doc)
                    for where, reason, code in fields.refused[before:]:  # a store-field blob left out
                        rep.refused.append(Refusal(file=f"{name}.fields/{where.split('/', 1)[1]}",
                                                   number=rep.documents + 1, offset=written,
                                                   reason=f"a blob of the document {doc.get('_id_')!r}: {reason}",
                                                   code=code))
                if decl["type"] == "blob":
                    try:
                        blob_sums[doc["_id_"]] = _dump_blob(bucket, doc, blob_part)
                    except HoardError as exc:
                        rep.refused.append(Refusal(file=f"{name}.blobs/{doc['_id_']}", number=rep.documents + 1,
                                                   offset=written, reason=exc.message, code=exc.codeName))
                        continue
                    rep.blobs += 1
                data = encode(doc)
                fh.write(data)
                digest.update(data)
                written += len(data)
                rep.documents += 1
            rep.bytes, rep.seconds = written, time.perf_counter() - start
            if progress is not None:
                progress(rep)
        fh.flush()
        os.fsync(fh.fileno())
    contents = {"folder": fields_dir.name, **fields.finish()} if fields is not None else None
    # Every file is whole under its .part name: now the earlier dump's metadata goes first, so
    # that a bucket whose .metadata.json is present is always one whole dump, never a mix.
    meta_path = folder / f"{name}.metadata.json"
    meta_path.unlink(missing_ok=True)
    os.replace(part, data_path)
    if decl["type"] == "blob":
        shutil.rmtree(blob_dir, ignore_errors=True)
        os.replace(blob_part, blob_dir)
    shutil.rmtree(fields_dir, ignore_errors=True)
    if fields is not None:
        os.replace(fields.folder, fields_dir)
        rep.notes.append(f"{fields.elements:,} store-field element(s) of {len(contents['fields'])} field(s) "
                         f"dumped to {fields_dir.name}/")
    metadata = {
        "format": FORMAT,
        "hoarddb": __version__,
        "db": db,
        "bucket": name,
        "type": decl["type"],
        "options": decl.get("options") or {},
        "fields": decl.get("fields") or [],
        "store_fields": decl.get("store_fields") or [],
        "indexes": [
            {"name": ix["name"], "fields": list(ix["fields"]), "unique": bool(ix.get("unique")),
             "expire_after_seconds": ix.get("expire_after_seconds"), "state": ix.get("state", "ready"),
             **{k: ix[k] for k in INDEX_OPTIONS if k in ix}}
            for ix in decl.get("indexes") or []
        ],
        "documents": rep.documents,
        "data": {"file": data_path.name, "bytes": written, "sha256": digest.hexdigest()},
        "store_field_contents": contents,
        "dumped_at": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0),
    }
    if decl["type"] == "blob":
        metadata["blobs"] = {"folder": blob_dir.name, "sha256": blob_sums}
    meta_part = meta_path.with_name(meta_path.name + ".part")
    meta_part.write_text(metadata_text(metadata), encoding="utf-8")
    os.replace(meta_part, meta_path)
    rep.seconds = time.perf_counter() - start


def _pages(bucket, type_name: str, page_size: int):
    """Pages of every entry in storage order: ``export`` with its cursor; ``list`` where a type has no export yet.

    A page whose answer would be over one message (large documents, from a server) is
    asked for again with half the entries, down to one.
    """
    try:
        page, page_size = shrinking(lambda n: bucket.export(limit=n), page_size)
    except (AttributeError, VerbNotSupportedError):
        if type_name not in ("fifo", "lifo"):
            raise
        yield from _list_pages(bucket, page_size)
        return
    while True:
        yield page["docs"]
        if page.get("next") is None:
            return
        cursor = page["next"]
        page, page_size = shrinking(lambda n: bucket.export(cursor=cursor, limit=n), page_size)


def _list_pages(bucket, page_size: int):
    """fifo and lifo pages through ``list(after=skip)``: oldest first, for both."""
    after = 0
    page_size = min(page_size, 1000)
    while True:
        docs, page_size = shrinking(lambda n: bucket.list(after=after, limit=n), page_size)
        if not docs:
            return
        yield docs
        after += len(docs)
        if len(docs) < page_size:
            return


def _dump_blob(bucket, info: dict, folder: Path) -> str:
    """Write one blob's bytes to ``folder/<id>``; its SHA-256 (the stream checks it against the recorded one)."""
    blob_id = str(info["_id_"])
    digest = hashlib.sha256()
    path = folder / blob_id
    try:
        with open(path, "wb") as fh:
            for chunk in bucket.stream(blob_id):
                fh.write(chunk)
                digest.update(chunk)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return digest.hexdigest()


def metadata_text(metadata: dict[str, Any]) -> str:
    """A metadata document as dump writes it."""
    return json_util.dumps(metadata, json_options=METADATA_JSON, indent=2) + "\n"
