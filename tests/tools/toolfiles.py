"""Helpers of the tools tests: mongodump-style files written with pymongo's bson."""

from __future__ import annotations

import datetime
import gzip
import uuid
from pathlib import Path

import bson
from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp


def write_bson(path: Path, docs, *, gz: bool = False) -> list[bytes]:
    """Write documents as mongodump does (BSON back to back); their encodings."""
    raws = [d if isinstance(d, bytes) else bson.encode(d) for d in docs]
    data = b"".join(raws)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return raws


def offsets(raws: list[bytes]) -> list[int]:
    """Each document's byte offset in the concatenation."""
    out, pos = [], 0
    for r in raws:
        out.append(pos)
        pos += len(r)
    return out


def mongo_documents(n: int = 20) -> list[dict]:
    """Documents with every type a mongodump carries that hoardDB must keep."""
    base = datetime.datetime(2024, 2, 29, 12, 30, 15, 123000, tzinfo=datetime.timezone.utc)
    docs = []
    for i in range(n):
        docs.append({
            "_id": ObjectId(),
            "name": f"Property {i}",
            "createdAt": base + datetime.timedelta(days=i),
            "rent": Decimal128(f"{1000 + i}.55"),
            "views": Int64(2**40 + i),
            "small64": Int64(i),
            "rooms": i,
            "ratio": i / 3,
            "active": i % 2 == 0,
            "missing": None,
            "history": [[i, i + 1], [{"at": base, "amount": Decimal128("-0.01")}], []],
            "address": {"city": "Leeds", "geo": [53.8, -1.55], "nested": {"deep": [1, [2, [3]]]}},
            "photo": Binary(b"\x00\x01binary" + bytes([i]), 0),
            "digest": Binary(b"0123456789abcdef", 5),
            "custom": Binary(b"\xff\xfe", 0x80),
            "ref": Binary.from_uuid(uuid.UUID(int=i + 1)),
            "pattern": Regex("^Leeds", "i"),
            "ts": Timestamp(1700000000, i + 1),
            "code": Code("function () { return 1; }"),
            "low": MinKey(),
            "high": MaxKey(),
        })
    return docs


NOW = datetime.datetime.now(datetime.timezone.utc)


def fill(db) -> None:
    """One bucket of each store type, with indexes, options, field lines and store fields."""
    users = db.create_bucket(
        "Users", fields=[{"name": "Email", "type": "string", "keywords": ["unique"]}],
        indices=[{"fields": ["Company", "Name"]}, {"field": "CreatedAt", "expire_after_seconds": 3600},
                 {"field": "City", "name": "by_city"}],
        store_fields=[{"name": "Notes", "type": "lifo"}, {"name": "Tasks", "type": "heap"},
                      {"name": "Prefs", "type": "hash"}, {"name": "Files", "type": "blob"}])
    for i, doc in enumerate(mongo_documents(25)):
        doc.pop("low"), doc.pop("high")
        users.put({"_id_": f"u{i:02}", "Email": f"u{i}@x", "Company": f"c{i % 3}", "Name": f"N{i}",
                   "CreatedAt": NOW - datetime.timedelta(hours=2 if i < 5 else 0), "City": "Leeds", **doc})
    for i in range(3):
        users[f"u{i:02}"].Notes.batch_push([{"n": j} for j in range(4)])
        users[f"u{i:02}"].Tasks.batch_push([{"priority": j % 2, "n": j} for j in range(4)])
        users[f"u{i:02}"].Prefs.put("theme", {"v": "dark"})
        users[f"u{i:02}"].Files.put(b"file %d" % i, name="a.txt", type="text/plain")
    board = db.create_bucket("Board", type="btree", key="Score")
    board.batch_insert([{"Score": s, "n": n} for n, s in enumerate([5, 3, 5, 9, -1.5, 5])])
    jobs = db.create_bucket("Jobs", type="heap")
    jobs.batch_push([{"priority": p, "n": n} for n, p in enumerate([1, 7, 1, 3, 7, 0])])
    queue = db.create_bucket("Queue", type="fifo", segment_size=4096)
    queue.batch_push([{"n": n, "pad": "q" * 300} for n in range(40)])
    queue.pop(limit=5)
    stack = db.create_bucket("Stack", type="lifo")
    stack.batch_push([{"n": n} for n in range(10)])
    stack.pop()
    photos = db.create_bucket("Photos", type="blob")
    for n in range(5):
        photos.put({"data": bytes([n]) * (1000 * n + 1), "name": f"p{n}.jpg", "type": "image/jpeg"})


def contents(db, name: str) -> list:
    bucket = db[name]
    kind = bucket.describe()["type"]
    if kind == "blob":
        return [(info, b"".join(bucket.stream(info["_id_"]))) for info in bucket.list(limit=1000)]
    out = []
    page = bucket.export(limit=7)  # small pages, so the cursor is exercised too
    out.extend(page["docs"])
    while page["next"] is not None:
        page = bucket.export(cursor=page["next"], limit=7)
        out.extend(page["docs"])
    return out


def declaration(db, name: str) -> dict:
    d = db[name].describe()
    return {k: d[k] for k in ("type", "options", "fields", "store_fields", "indexes")}
