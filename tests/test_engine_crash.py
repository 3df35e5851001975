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
