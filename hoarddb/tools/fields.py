"""Dumping and restoring the contents of store fields: the queues, stacks, heaps, maps and files each document owns.

In a dump, a bucket that declares store fields has a folder beside its ``.bson``:

    <bucket>.fields/
      <Field>.bson           one record per element, owners in the bucket's order and each
                             owner's elements in their store's order:
                               fifo, lifo, heap   {owner: <document key>, element: {...}}
                               hash, btree        {owner: <document key>, key: <key>, element: {...}}
                               blob               {owner: <document key>,
                                                   element: {_id_, name, type, size, sha256, created}}
      <Field>.blobs/<id>     a blob field's bytes
      <Field>.<Sub>.bson     a store of the elements of a hash or btree field (L3, and deeper:
                             <Field>.<Sub>.<Deeper>.bson), its records with the keys of the
                             elements between the document and the store:
                               {owner: <document key>, path: [<element key>, ...], ...}
      <Field>.<Sub>.blobs/   the bytes of such a blob store

The owner is the document's key: a hash document's ``_id_``, a btree entry's sort key
(entries with equal sort keys share their stores, so they are dumped once). Restore
loads the documents first — a store field exists only once its document does — then
each store, a field before the stores of its elements (so that the element exists
before its stores are written: the order of the metadata's ``fields``), pushes each owner's elements in order (a heap's priorities are in its elements, and
ties keep their order), puts each keyed element, and loads each blob under its own id
(the blob field's ``load`` verb), so documents that name a blob still find it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

from ..errors import BadValueError, HoardError
from ..values.codec import encode
from ..values.keys import encode_key
from .batches import BATCH_BYTES, blob_data, shrinking
from .readers import InputFile, read_bson
from .report import BucketReport, Refusal

#: Elements read per list call.
PAGE = 1000


def owner_key(decl: dict, doc: dict) -> Any:
    """The key a document's store fields hang from: a hash's ``_id_``, a btree's sort key."""
    if decl["type"] == "hash":
        return doc["_id_"]
    key_field = (decl.get("options") or {}).get("key")
    if key_field is not None:
        return doc.get(key_field)
    if "_id_" in doc:
        return doc["_id_"]
    return next(iter(doc.values()), None)


class FieldDumper:
    """FieldDumper writes the store-field contents of one bucket's documents, owner by owner."""

    def __init__(self, bucket, decl: dict, folder: Path):
        self.bucket = bucket
        self.decl = decl
        self.folder = folder  # the ``.part`` folder; renamed by the caller when done
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        # every store of the tree, a field before its elements' stores: (dotted name, type, declaration)
        self.fields = list(_tree(decl.get("store_fields") or []))
        self._files = {name: open(folder / f"{name}.bson", "wb") for name, _, _ in self.fields}
        self._digests = {name: hashlib.sha256() for name, _, _ in self.fields}
        self._bytes = dict.fromkeys(self._files, 0)
        self._counts = dict.fromkeys(self._files, 0)
        self._blob_sums: dict[str, dict[str, str]] = {name: {} for name, t, _ in self.fields if t == "blob"}
        self._last_owner: bytes | None = None
        self.elements = 0
        #: Elements not dumped (a blob whose bytes fail their SHA-256): (where, reason, codeName).
        self.refused: list[tuple[str, str, str]] = []

    def add(self, doc: dict) -> None:
        """Dump the stores of the document ``doc`` (once per owner key), at every level."""
        owner = owner_key(self.decl, doc)
        marker = encode_key(owner)
        if marker == self._last_owner:
            return  # a btree entry with the same sort key shares these stores
        self._last_owner = marker
        for f in self.decl.get("store_fields") or []:
            self._dump_store(self.bucket[owner][f["name"]], f, f["name"], owner, [])

    def _dump_store(self, store, f: dict, name: str, owner: Any, path: list) -> None:
        """Dump one store (``name``: its dotted field name), then the stores of its elements."""
        ftype = f["type"]
        keys = []
        for record in _elements(store, ftype, owner):
            if path:
                record = {"owner": owner, "path": path, **{k: v for k, v in record.items() if k != "owner"}}
            if ftype == "blob":
                try:
                    self._dump_blob(store, name, record["element"])
                except HoardError as exc:  # left out, reported; the other elements are still dumped
                    self.refused.append((f"{self.folder.name}/{name}.blobs/{record['element']['_id_']}",
                                         exc.message, exc.codeName))
                    continue
            elif f.get("store_fields"):
                keys.append(record["key"])
            self._write(name, record)
        for key in keys:
            for sub in f["store_fields"]:
                self._dump_store(store[key][sub["name"]], sub, f"{name}.{sub['name']}", owner, path + [key])

    def _write(self, name: str, record: dict) -> None:
        data = encode(record)
        self._files[name].write(data)
        self._digests[name].update(data)
        self._bytes[name] += len(data)
        self._counts[name] += 1
        self.elements += 1

    def _dump_blob(self, store, name: str, info: dict) -> None:
        blob_dir = self.folder / f"{name}.blobs"
        blob_dir.mkdir(exist_ok=True)
        blob_id = str(info["_id_"])
        digest = hashlib.sha256()
        try:
            with open(blob_dir / blob_id, "wb") as fh:
                for chunk in store.stream(blob_id):
                    fh.write(chunk)
                    digest.update(chunk)
        except BaseException:
            (blob_dir / blob_id).unlink(missing_ok=True)
            raise
        self._blob_sums[name][blob_id] = digest.hexdigest()

    def finish(self) -> dict:
        """Close the files; the ``store_field_contents`` entry of the bucket's metadata."""
        out = {}
        for name, ftype, _ in self.fields:
            fh = self._files[name]
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
            entry = {"type": ftype, "file": f"{name}.bson", "elements": self._counts[name],
                     "bytes": self._bytes[name], "sha256": self._digests[name].hexdigest()}
            if ftype == "blob":
                entry["blobs"] = {"folder": f"{name}.blobs", "sha256": self._blob_sums[name]}
            out[name] = entry
        return {"fields": out}

    def abort(self) -> None:
        for fh in self._files.values():
            fh.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _tree(store_fields, above: str = ""):
    """``(dotted name, type, declaration)`` of every store of a declaration's tree, each field before the
    stores of its elements: ``Friends``, ``Friends.Messages``, ``Friends.Photos``, ``Log``."""
    for f in store_fields:
        name = f"{above}.{f['name']}" if above else f["name"]
        yield name, f["type"], f
        yield from _tree(f.get("store_fields") or [], name)


def _store_of(bucket, owner: Any, name: str, path: list):
    """The store a dump record names: field ``name`` (dotted below L2) of document ``owner``, through the
    element keys of ``path``."""
    names = name.split(".")
    store = bucket[owner][names[0]]
    if len(path) != len(names) - 1:
        raise BadValueError(f"a record of store {name} needs a path of {len(names) - 1} element key(s), got {path!r:.80}")
    for key, sub in zip(path, names[1:]):
        store = store[key][sub]
    return store


def _elements(store, ftype: str, owner: Any):
    """Every element of one document's store field, in its store's order, as dump records."""

    limit = PAGE
    if ftype in ("fifo", "lifo", "heap"):
        skip = 0
        while True:
            page, limit = shrinking(lambda n: store.list(after=skip, limit=n), limit)
            for element in page:
                yield {"owner": owner, "element": element}
            skip += len(page)
            if len(page) < limit:
                return
    after = None
    while True:
        page, limit = shrinking(lambda n: store.list(after=after, limit=n) if after is not None
                                else store.list(limit=n), limit)
        for item in page:
            if ftype == "blob":
                yield {"owner": owner, "element": item}
            else:
                yield {"owner": owner, "key": item["key"], "element": item["doc"]}
        if len(page) < limit:
            return
        after = page[-1]["_id_"] if ftype == "blob" else page[-1]["key"]


def check(folder: Path, contents: dict) -> list[str]:
    """Problems with a dump's store-field folder against its metadata (empty when it is whole)."""
    from .readers import file_sha256

    problems = []
    for name, entry in (contents.get("fields") or {}).items():
        path = folder / entry.get("file", f"{name}.bson")
        if not path.is_file():
            problems.append(f"{folder.name}/{path.name} is missing")
            continue
        digest, size = file_sha256(path)
        if "sha256" in entry and (digest != entry["sha256"] or size != entry.get("bytes", size)):
            problems.append(f"{folder.name}/{path.name} is {size} bytes with SHA-256 {digest}, the dump recorded "
                            f"{entry.get('bytes')} bytes with {entry['sha256']}")
        blobs = entry.get("blobs") or {}
        blob_dir = folder / blobs.get("folder", "")
        sums = blobs.get("sha256") or {}
        missing = [i for i in sums if not (blob_dir / i).is_file()]
        if missing:
            problems.append(f"{folder.name}/{blobs.get('folder')}: {len(missing)} blob file(s) missing: "
                            f"{', '.join(missing[:5])}")
            continue
        changed = [i for i, digest in sums.items() if file_sha256(blob_dir / i)[0] != digest]
        if changed:
            problems.append(f"{folder.name}/{blobs.get('folder')}: {len(changed)} blob file(s) do not have the "
                            f"SHA-256 the dump recorded (changed or damaged since the dump): {', '.join(changed[:5])}")
    return problems


def restore_fields(bucket, folder: Path, contents: dict, rep: BucketReport) -> None:
    """Load each store field's elements into the restored bucket's documents."""
    for name, entry in (contents.get("fields") or {}).items():
        ftype = entry["type"]
        path = folder / entry.get("file", f"{name}.bson")
        blob_dir = folder / ((entry.get("blobs") or {}).get("folder") or f"{name}.blobs")
        loaded = 0
        group: list = []
        group_store: Any = None
        group_marker: bytes | None = None
        group_bytes = 0

        def flush() -> None:
            nonlocal group, loaded, group_bytes
            if group:
                group_store.batch_push([r.doc["element"] for r in group])
                loaded += len(group)
                group, group_bytes = [], 0

        with InputFile(path) as f:
            record = None
            try:
                for record in read_bson(f):
                    if record.error is not None:
                        raise _Refused(record, record.error, record.code)
                    owner, path = record.doc["owner"], record.doc.get("path") or []
                    store = _store_of(bucket, owner, name, path)
                    if ftype in ("fifo", "lifo", "heap"):
                        marker = encode_key(owner) + b"".join(encode_key(k) for k in path)
                        # one owner's elements per write, at most PAGE of them and BATCH_BYTES of BSON
                        if marker != group_marker or len(group) >= PAGE or \
                                (group and group_bytes + record.size > BATCH_BYTES):
                            flush()
                            group_store, group_marker = store, marker
                        group.append(record)
                        group_bytes += record.size
                        continue
                    if ftype == "blob":  # the same id, so documents that name it still find it
                        info = record.doc["element"]
                        with open(blob_dir / str(info["_id_"]), "rb") as fh:
                            store.load([{**info, "data": blob_data(bucket, fh)}])
                    else:
                        store.put(record.doc["key"], record.doc["element"])
                    loaded += 1
                flush()
            except _Refused as exc:
                rep.refused.append(Refusal(file=str(path), number=exc.record.number, offset=exc.record.offset,
                                           reason=exc.reason, code=exc.code))
                rep.stopped = f"the store field {name} could not be restored past element {exc.record.number}"
            except HoardError as exc:
                where = group[0] if group else record
                rep.refused.append(Refusal(file=str(path), number=where.number if where else 0,
                                           offset=where.offset if where else 0, reason=exc.message, code=exc.codeName))
                rep.stopped = f"the store field {name} could not be restored past this element"
        rep.notes.append(f"store field {name} ({ftype}): {loaded:,} element(s) restored")


class _Refused(Exception):
    def __init__(self, record, reason: str, code: str):
        super().__init__(reason)
        self.record, self.reason, self.code = record, reason, code
