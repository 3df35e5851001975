"""Crash safety through the public API: a child process writes, reports each acknowledged write,
and is killed with SIGKILL at a random moment; on reopen every acknowledged write is there and
nothing acknowledged as removed came back. (Queues have their own kill tests in tests/stores.)"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hoarddb

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, random, sys
import hoarddb
rng = random.Random(int(sys.argv[2]))
with hoarddb.open(sys.argv[1]) as c:
    db = c["app"]
    n = int(sys.argv[2]) * 1_000_000  # keys and numbers never repeat across runs
    print("ready", flush=True)
    while True:
        n += 1
        kind = rng.choice(["insert", "delete", "heap_push", "heap_pop", "btree", "field", "blob", "batch"])
        if kind == "insert":
            db.H.insert({"_id_": f"h{n}", "n": n}); print(json.dumps(["insert", f"h{n}"]), flush=True)
        elif kind == "delete":
            k = f"h{rng.randrange(n - 50, n)}"
            print(json.dumps(["deleting", k]), flush=True)  # may take effect unacknowledged, if killed now
            got = db.H.delete({"_id_": k})["deleted"]; print(json.dumps(["delete", k, got]), flush=True)
        elif kind == "heap_push":
            db.P.push({"priority": rng.randrange(5), "n": n}); print(json.dumps(["heap_push", n]), flush=True)
        elif kind == "heap_pop":
            print(json.dumps(["popping"]), flush=True)  # may take effect unacknowledged, if killed now
            got = db.P.pop(); print(json.dumps(["heap_pop", got and got["n"]]), flush=True)
        elif kind == "btree":
            db.B.insert({"k": rng.randrange(10), "n": n}); print(json.dumps(["btree", n]), flush=True)
        elif kind == "field":
            db.H.insert({"_id_": f"f{n}"}); db.H[f"f{n}"].L.push({"n": n}); print(json.dumps(["field", f"f{n}", n]), flush=True)
        elif kind == "blob":
            i = db.Blob.put(f"blob {n}".encode() * 100); print(json.dumps(["blob", i, n]), flush=True)
        elif kind == "batch":
            db.H.batch_insert([{"_id_": f"b{n}-{j}"} for j in range(20)]); print(json.dumps(["batch", n]), flush=True)
"""


def run_and_kill(data: Path, seed: int, after: float) -> list:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(data), str(seed)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    assert child.stdout.readline().strip() == "ready", child.stderr.read()
    time.sleep(after)
    child.send_signal(signal.SIGKILL)
    # Read on through the same reader: readline() may have taken the first lines after
    # "ready" into its buffer, and communicate() reads the pipe itself, past them (an
    # unseen "popping" once made an in-flight pop look answered, and the test fail).
    out = child.stdout.read()
    child.wait(30)
    child.stdout.close()
    child.stderr.close()
    return [json.loads(line) for line in out.splitlines() if line.startswith("[")]


def check(data: Path, acked: list) -> None:
    with hoarddb.open(data) as c:
        db = c["app"]
        present = {d["_id_"] for d in db.H.find()}
        heap, cursor = set(), None
        while True:
            page = db.P.export(cursor=cursor, limit=1000)
            heap |= {d["n"] for d in page["docs"]}
            if (cursor := page["next"]) is None:
                break
        btree = {d["n"] for d in db.B.range()}
        deleted = {e[1] for e in acked if e[0] in ("delete", "deleting")}
        popped = {e[1] for e in acked if e[0] == "heap_pop" and e[1] is not None}
        # a pop killed after its commit but before its answer may have taken one element
        in_flight_pops = sum(1 for i, e in enumerate(acked) if e[0] == "popping"
                             and (i + 1 == len(acked) or acked[i + 1][0] != "heap_pop"))
        lost: list = []
        for entry in acked:
            kind = entry[0]
            if kind == "insert":
                assert entry[1] in present or entry[1] in deleted, entry
            elif kind == "delete":
                assert entry[1] not in present, entry  # an acknowledged delete stays done
            elif kind == "heap_push":
                if entry[1] not in heap and entry[1] not in popped:
                    lost.append(entry[1])
            elif kind == "heap_pop" and entry[1] is not None:
                assert entry[1] not in heap, entry  # an acknowledged pop never comes back
            elif kind == "btree":
                assert entry[1] in btree
            elif kind == "field":
                assert db.H[entry[1]].L.list() == [{"n": entry[2]}]
            elif kind == "blob":
                assert db.Blob.get(entry[1])["data"] == f"blob {entry[2]}".encode() * 100
            elif kind == "batch":
                assert all(f"b{entry[1]}-{j}" in present for j in range(20))
        assert len(lost) <= in_flight_pops, (lost, in_flight_pops)
        # a batch is all or nothing, acknowledged or not
        for n in {k.split("-")[0] for k in present if k.startswith("b")}:
            assert all(f"{n}-{j}" in present for j in range(20)), n


@pytest.mark.parametrize("kills", [6 if os.environ.get("HOARDDB_SLOW") != "1" else 60])
def test_acknowledged_writes_survive_sigkill(tmp_path, kills):
    data = tmp_path / "data"
    with hoarddb.open(data) as c:
        db = c["app"]
        db.create_bucket("H", type="hash", store_fields=[{"name": "L", "type": "lifo"}])
        db.create_bucket("P", type="heap")
        db.create_bucket("B", type="btree", key="k")
        db.create_bucket("Blob", type="blob")
    rng = random.Random(1234)
    acked: list = []
    for i in range(kills):
        acked += run_and_kill(data, seed=i, after=rng.uniform(0.05, 0.6))
        check(data, acked)
    assert len(acked) > 20  # the child really wrote between kills


# -- every store type, sync on and off, one child killed at random moments -----------------

MIXED = r"""
import json, random, sys
import hoarddb
path, seed, sync = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
rng = random.Random(seed)
def say(*entry):
    sys.stdout.write(json.dumps(entry) + "\n"); sys.stdout.flush()
with hoarddb.open(path, sync=sync) as c:
    db = c["app"]
    n = seed * 1_000_000
    say("ready")
    while True:
        n += 1
        kind = rng.choice(["insert", "update", "delete", "fpush", "fbatch", "fpop", "claim", "lpush", "lpop",
                           "blob", "unblob", "field", "bucket", "drop"])
        if kind == "insert":
            db.U.insert({"_id_": f"u{n}", "email": f"e{n}", "seen": n, "v": 0}); say("insert", f"u{n}")
        elif kind == "update":  # a new email: its unique index entry moves
            k = f"u{rng.randrange(n - 40, n)}"
            say("updating", k, n)
            got = db.U.update({"_id_": k}, {"$set": {"email": f"e{n}", "v": n}})["updated"]; say("update", k, n, got)
        elif kind == "delete":
            k = f"u{rng.randrange(n - 40, n)}"
            say("deleting", k)
            got = db.U.delete({"_id_": k})["deleted"]; say("delete", k, got)
        elif kind in ("fpush", "lpush"):
            q = db.F if kind == "fpush" else db.L
            q.push({"n": n}); say("push", kind[0], [n])
        elif kind == "fbatch":
            name = rng.choice("FL"); items = [n * 100 + j for j in range(rng.randrange(1, 30))]
            db[name].batch_push([{"n": i, "pad": "x" * rng.randrange(2000)} for i in items])
            say("push", name.lower(), items)
        elif kind in ("fpop", "lpop"):
            q = db.F if kind == "fpop" else db.L
            say("popping", kind[0])
            got = q.pop({"limit": rng.randrange(1, 5)}); got = got if isinstance(got, list) else [got] if got else []
            say("pop", kind[0], [d["n"] for d in got])
        elif kind == "claim":
            got = db.F.claim({"limit": 2, "lease": 3600})
            if got:
                say("acking", [g["element"]["n"] for g in got])
                db.F.ack([g["claimId"] for g in got]); say("ack", [g["element"]["n"] for g in got])
        elif kind == "blob":
            i = db.Blob.put(f"blob {n}".encode() * rng.randrange(1, 3000)); say("blob", i, n)
        elif kind == "unblob":
            ids = db.Blob.list()
            if ids:
                i = rng.choice(ids[-20:]); i = i["_id_"] if isinstance(i, dict) else i
                say("unblobbing", i)
                db.Blob.delete(i); say("unblob", i)
        elif kind == "field":
            db.U.insert({"_id_": f"f{n}", "email": f"e{n}"}); db.U[f"f{n}"].Q.batch_push([{"n": n}, {"n": n + 1}])
            say("field", f"f{n}")
        elif kind == "bucket":
            db.create_bucket(f"T{n}", type=rng.choice(["hash", "fifo", "btree", "heap"]), **({"key": "k"} if False else {}))
            say("bucket", f"T{n}")
        elif kind == "drop":
            names = [b for b in db.buckets() if b.startswith("T")]
            if names:
                b = rng.choice(names); say("dropping", b); db.drop_bucket(b); say("drop", b)
"""


def run_mixed(data: Path, seed: int, sync: bool, after: float) -> list:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen([sys.executable, "-c", MIXED, str(data), str(seed), "1" if sync else "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert json.loads(child.stdout.readline()) == ["ready"], child.stderr.read()
    # killed once ``after`` seconds have passed and the child has said a dozen things (on a loaded
    # machine its first writes can take longer than ``after``: a kill then would test nothing)
    said, deadline = [], time.monotonic() + after
    while len(said) < 12 or time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        said.append(line)
    child.send_signal(signal.SIGKILL)
    out = "".join(said) + child.stdout.read()  # through the same reader (see run_and_kill)
    child.wait(30)
    child.stdout.close()
    child.stderr.close()
    return [json.loads(line) for line in out.splitlines() if line.endswith("]")]


def queue_contents(q) -> list:
    got, cursor = [], None
    while True:
        page = q.export(cursor=cursor, limit=1000)
        got += [d["n"] for d in page["docs"]]
        if (cursor := page["next"]) is None:
            return got


def check_mixed(data: Path, said: list) -> None:
    """Every acknowledged write there once; a write in flight whole or absent; indexes,
    counts and contents agree."""
    with hoarddb.open(data) as c:
        db = c["app"]
        docs = {d["_id_"]: d for d in db.U.find()}
        assert db.U.stats()["entries"] == len(docs)
        for d in docs.values():  # every index finds its document, and only it
            assert [x["_id_"] for x in db.U.find({"email": d["email"]})] == [d["_id_"]], d
            if "seen" in d:
                assert d["_id_"] in {x["_id_"] for x in db.U.find({"seen": d["seen"]})}, d
        assert len({d["email"] for d in docs.values()}) == len(docs)
        last = {}
        for i, e in enumerate(said):
            kind = e[0]
            after = said[i + 1:]
            if kind == "insert" and not any(x[0] in ("deleting", "delete") and x[1] == e[1] for x in after):
                assert e[1] in docs, e
            elif kind == "update" and e[3]:
                last[e[1]] = e[2]
            elif kind == "delete":
                assert e[1] not in docs, e
                last.pop(e[1], None)
            elif kind == "field":
                assert e[1] in docs and db.U[e[1]].Q.length() == 2, e
        for k, v in last.items():  # the last acknowledged update, or one in flight after it
            if k in docs and not any(x[0] in ("deleting", "delete") and x[1] == k for x in said):
                assert docs[k]["v"] >= v, (k, docs[k], v)
        for q, name in ((db.F, "f"), (db.L, "l")):
            have = queue_contents(q)
            assert len(have) == len(set(have)), name  # nothing twice
            pushed = [n for e in said if e[0] == "push" and e[1] == name for n in e[2]]
            taken = {n for e in said if e[0] in ("pop", "ack", "acking") and (e[0] != "pop" or e[1] == name)
                     for n in (e[2] if e[0] == "pop" else e[1])}
            acked_taken = {n for e in said if (e[0] == "pop" and e[1] == name) or (e[0] == "ack" and name == "f")
                           for n in (e[2] if e[0] == "pop" else e[1])}
            assert not (set(have) & acked_taken), name  # a pop or ack acknowledged never comes back
            in_flight = sum(1 for j, e in enumerate(said) if e[0] == "popping" and e[1] == name
                            and (j + 1 == len(said) or said[j + 1][0] != "pop"))
            lost = [n for n in pushed if n not in have and n not in taken]
            assert len(lost) <= 4 * in_flight, (name, lost)
        blobs = {b["_id_"] if isinstance(b, dict) else b for b in db.Blob.list()}
        for i, e in enumerate(said):
            if e[0] == "blob" and not any(x[0] in ("unblobbing", "unblob") and x[1] == e[1] for x in said[i:]):
                assert db.Blob.get(e[1])["data"].startswith(f"blob {e[2]}".encode()), e
            elif e[0] == "unblob":
                assert e[1] not in blobs, e
        for b in blobs:
            db.Blob.get(b)  # every listed blob reads back whole (its sha256 checks)
        buckets = set(db.buckets())
        for i, e in enumerate(said):
            if e[0] == "bucket" and not any(x[0] in ("dropping", "drop") and x[1] == e[1] for x in said[i:]):
                assert e[1] in buckets, e
            elif e[0] == "drop":
                assert e[1] not in buckets, e
        for b in buckets:
            db[b].stats()


@pytest.mark.parametrize("sync", [True, False])
@pytest.mark.parametrize("kills", [4 if os.environ.get("HOARDDB_SLOW") != "1" else 40])
def test_every_store_type_keeps_acknowledged_writes_through_sigkill(tmp_path, kills, sync):
    data = tmp_path / "data"
    with hoarddb.open(data) as c:
        db = c["app"]
        db.create_bucket("U", type="hash", store_fields=[{"name": "Q", "type": "fifo"}],
                         indices=[{"field": "email", "unique": True}, {"field": "seen", "expire_after_seconds": 36000}])
        db.create_bucket("F", type="fifo")
        db.create_bucket("L", type="lifo")
        db.create_bucket("Blob", type="blob")
    rng = random.Random(99 + sync)
    said: list = []
    for i in range(kills):
        said += run_mixed(data, seed=i + 1, sync=sync, after=rng.uniform(0.1, 0.7))
        check_mixed(data, said)
    assert sum(1 for e in said if e[0] in ("insert", "push", "blob")) > 20
