"""The quick-start tour: opens an embedded database, exercises every store type, and says what it did."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import hoarddb


def main(data_dir: str | None = None, out=print) -> int:
    """Run the tour in ``data_dir`` (a fresh temporary directory when None); return an exit status."""
    temporary = data_dir is None
    path = Path(tempfile.mkdtemp(prefix="hoarddb-tour-")) if temporary else Path(data_dir)
    try:
        with hoarddb.open(path) as client:
            db = client["tour"]
            for name in db.buckets() if "tour" in client.databases() else []:
                db.drop_bucket(name)
            out(f"hoardDB {hoarddb.__version__} — embedded database in {path}\n")

            out("fifo: a queue, oldest first")
            db.create_bucket("Comments", type="fifo")
            db.Comments.push({"Author": "Bob", "Text": "Nice photo!"})
            db.Comments.batch_push([{"Author": "Ann", "Text": "Where is this?"}, {"Author": "Cy", "Text": "Wow"}])
            out(f"  pushed 3, length {db.Comments.length()}, peek(2) -> {db.Comments.peek(2)}")
            out(f"  pop() -> {db.Comments.pop()}")

            out("lifo: a stack, newest first")
            db.create_bucket("Sessions", type="lifo")
            for ip in ("10.0.0.1", "10.0.0.2"):
                db.Sessions.push({"IP": ip, "UA": "Chrome"})
            out(f"  pop() -> {db.Sessions.pop()}; list() (storage order) -> {db.Sessions.list()}")

            out("hash: documents by key")
            db.create_bucket("User", type="hash")
            db.User.insert({"_id_": "jane_doe", "Name": "Jane", "Email": "jane@example.com"})
            db.User.update({"_id_": "jane_doe"}, {"$set": {"Name": "Janet"}})
            out(f"  get('jane_doe') -> {db.User.get('jane_doe')}")
            try:
                db.User.insert({"_id_": "jane_doe"})
            except hoarddb.DuplicateKeyError as e:
                out(f"  a second insert of jane_doe is refused: {e.codeName} ({e.code})")  # as the shell prints it

            out("btree: sorted by a key")
            db.create_bucket("Leaderboard", type="btree", key="Score")
            db.Leaderboard.batch_insert([{"Score": 100, "User": "jane"}, {"Score": 85, "User": "bob"},
                                         {"Score": 92, "User": "alice"}])
            out(f"  range({{Score: {{$gte: 90}}}}) -> {db.Leaderboard.range({'Score': {'$gte': 90}})}")
            out(f"  first() -> {db.Leaderboard.first()}")

            out("heap: highest priority first")
            db.create_bucket("Alerts", type="heap")
            db.Alerts.batch_push([{"priority": 10, "Msg": "Disk full"}, {"priority": 5, "Msg": "High CPU"},
                                  {"priority": 8, "Msg": "Network latency"}])
            out(f"  pop() -> {db.Alerts.pop()}; peek() -> {db.Alerts.peek()}")

            out("blob: files checked by SHA-256")
            db.create_bucket("Photos", type="blob")
            ident = db.Photos.put(b"\x89PNG not really a picture", name="sunset.png", type="image/png")
            info = db.Photos.info(ident)
            out(f"  put -> {ident}; info -> {info['name']}, {info['size']} bytes, sha256 {info['sha256'][:16]}…")

            out("indexes: a unique index, and search saying which index it used")
            db.create_bucket("Users", type="hash", indices=[{"field": "Email", "unique": True}])
            db.Users.insert({"_id_": "u1", "Email": "dalek@example.com"})
            try:
                db.Users.insert({"_id_": "u2", "Email": "dalek@example.com"})
            except hoarddb.DuplicateKeyError as e:
                out(f"  {e.message}")
            found = db.Users.search({"Email": "dalek@example.com"})
            out(f"  search -> {[d['_id_'] for d in found]}, index_used {found.index_used!r}")

            out("store fields: each document owns its own stores")
            db.create_bucket("Property", type="hash", store_fields=[{"name": "Expenses", "type": "lifo"},
                                                                    {"name": "Tickets", "type": "heap"}])
            db.Property.insert({"_id_": "p1", "Name": "Elm Street 4"})
            db.Property["p1"].Expenses.push({"Amount": 120, "Category": "boiler"})
            db.Property["p1"].Tickets.push({"priority": 3, "Subject": "Boiler"})
            out(f"  Property['p1'].Expenses.peek() -> {db.Property['p1'].Expenses.peek()}; "
                f"get('p1') -> {db.Property.get('p1')}")

            out("claim/ack: a worker queue that survives a crashed worker")
            db.create_bucket("Jobs", type="fifo")
            db.Jobs.batch_push([{"job": 1}, {"job": 2}])
            claimed = db.Jobs.claim(lease=30, limit=1)
            out(f"  claim -> {claimed}")
            db.Jobs.ack(claimed[0]["claimId"])
            out(f"  after ack: {db.Jobs.length()} ready")

            out("\nbuckets: " + ", ".join(f"{b} ({db[b].stats()['type']})" for b in db.buckets()))
            out("Every write above was on disk (fsync) before its call returned.")
    finally:
        if temporary:
            shutil.rmtree(path, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
