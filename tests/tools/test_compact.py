"""hoarddb compact: every LMDB environment of a data directory (hash, btree and heap buckets with
their store fields, a fifo's claims, the catalog) shrinks to what its data needs, and everything
in it reads, writes, searches and checks as before; a process killed anywhere in the swap
leaves the old file or the new one, whole, and the next open finishes or undoes the rest.

One directory is built and closed per module, most of its data deleted; each test copies it.
"""

from __future__ import annotations

import datetime
import json
import resource
import shutil
import signal
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

import hoarddb
from hoarddb.cli import main
from hoarddb.errors import DataDirLockedError, DuplicateKeyError, StorageError
from hoarddb.storage.kv import COMPACTING
from hoarddb.storage.wal import WriteAheadLog, newest_header
from hoarddb.testing import ServerProcess
from hoarddb.tools import compact as compact_module
from hoarddb.tools.check import check
from hoarddb.tools.compact import compact, compact_environment

from ..killing import run_script
from .test_check import hashes as check_hashes

AT = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
#: Store fields of every type on the hash bucket's documents.
FIELDS = [{"name": n, "type": t} for n, t in
          [("L", "lifo"), ("X", "hash"), ("Bl", "blob"), ("Q", "fifo"), ("P", "heap"), ("T", "btree")]]
#: The LMDB environments of the built directory, in the order compaction takes them.
ENVIRONMENTS = ["app/H/kv", "app/P/kv", "app/Q/claims", "app/T/kv", "ctl/C/kv", "catalog"]
PAD = "x" * 300
PSIZE = resource.getpagesize()


def build(data: Path) -> None:
    """Every LMDB-backed kind, each mostly deleted: a hash bucket with unique, compound and
    TTL indexes and store fields of every type (90% of its documents deleted, and most
    elements of the fields of those kept), a btree, a heap with claims, a fifo whose claims
    were mostly acked, a lifo and a blob bucket (nothing to compact), buckets created and
    dropped (the catalog), and a small control database ``ctl``."""
    with hoarddb.open(data, ttl_sweep_seconds=0, sync=False) as c:  # (closing makes it durable)
        app = c["app"]
        h = app.create_bucket("H", type="hash", store_fields=FIELDS, indices=[
            {"fields": ["email"], "unique": True}, {"fields": ["city", "age"]},
            {"field": "at", "expire_after_seconds": 10 ** 8}])
        for k in range(4):
            h.batch_insert([{"_id_": f"k{i}", "email": f"e{i}@x.org", "city": f"c{i % 3}", "age": i, "at": AT,
                             "keep": i % 10 == 0, "pad": PAD} for i in range(k * 500, (k + 1) * 500)])
        for i in range(0, 2000, 100):  # fields on kept documents (i % 10 == 0) and on deleted ones
            for key in (f"k{i}", f"k{i + 5}"):
                d = h[key]
                d.L.batch_push([{"n": n, "pad": PAD} for n in range(40)])
                d.L.pop({"limit": 36})
                for n in range(40):
                    d.X.put(f"x{n}", {"n": n, "pad": PAD})
                for n in range(36):
                    d.X.delete(f"x{n}")
                d.Q.batch_push([{"n": n, "pad": PAD} for n in range(40)])
                d.Q.pop({"limit": 36})
                d.P.batch_push([{"priority": n % 5, "n": n, "pad": PAD} for n in range(40)])
                d.P.pop({"limit": 36})
                for n in range(40):
                    d.T.put(f"t{n:02}", {"n": n, "pad": PAD})
                for n in range(36):
                    d.T.delete(f"t{n:02}")
                d.Bl.put(b"field blob " + key.encode() * 50, name="fb")
        h.delete({"keep": False})
        t = app.create_bucket("T", type="btree", key="n")
        t.batch_insert([{"n": i, "pad": PAD} for i in range(3000)])
        for i in range(3000):
            if i % 10:
                t.delete(i)
        p = app.create_bucket("P", type="heap")
        p.batch_push([{"priority": i % 7, "n": i, "pad": PAD} for i in range(3000)])
        for _ in range(27):
            p.pop({"limit": 100})
        p.claim(limit=5, lease=86400)
        q = app.create_bucket("Q", type="fifo")
        q.batch_push([{"n": i, "pad": PAD} for i in range(2000)])
        for _ in range(15):
            q.ack([x["claimId"] for x in q.claim(limit=100, lease=86400)[:95]])
        app.create_bucket("S", type="lifo").batch_push([{"n": i} for i in range(10)])
        app.create_bucket("B", type="blob").put(b"a blob" * 100, name="b.bin")
        for i in range(30):
            app.create_bucket(f"tmp{i}", type="hash", indices=[{"fields": ["a"]}])
            app.drop_bucket(f"tmp{i}")
        c["ctl"].create_bucket("C", type="hash").batch_insert([{"_id_": f"c{i}", "n": i} for i in range(10)])


def read_all(c) -> dict:
    """Everything a user can read of the built directory, and the index each search used."""
    app = c["app"]
    h = app.H
    out = {"buckets": sorted(app.buckets()), "ctl": c["ctl"].C.find({}, limit=100)}
    docs = sorted(h.find({}, limit=10000), key=lambda d: d["_id_"])
    unique = h.search({"email": "e1230@x.org"})
    compound = h.search({"city": "c1", "age": 1000})
    ttl = h.search({"at": AT}, limit=1000)
    out["H"] = (h.length(), docs, list(unique), unique.index_used, list(compound), compound.index_used,
                len(ttl), ttl.index_used)
    fields = {}
    for i in range(0, 2000, 100):
        d = h[f"k{i}"]
        fields[i] = (d.L.list(), d.L.length(), d.X.get("x37"), d.X.length(), d.Q.peek(limit=100), d.Q.length(),
                     d.P.peek(limit=100), d.P.length(), d.T.list(limit=100), d.T.length(),
                     [d.Bl.get(x["_id_"])["data"] for x in d.Bl.list()])
    out["fields"] = fields
    out["T"] = (app.T.length(), app.T.list(limit=1000), app.T.get(1230))
    out["P"] = (app.P.length(), app.P.peek(limit=1000))
    out["Q"] = (app.Q.length(), app.Q.peek(limit=100))
    out["S"] = app.S.list(limit=100)
    out["B"] = [app.B.get(x["_id_"])["data"] for x in app.B.list()]
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The directory, closed, and what it reads."""
    data = tmp_path_factory.mktemp("compact") / "data"
    build(data)
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:
        expected = read_all(c)
    return data, expected


@pytest.fixture
def data(built, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(built[0], copy)
    return copy


def hashes(root: Path) -> dict[str, str]:
    """Every file below ``root`` but LOCK (which names the last process to take it): path -> sha256."""
    return check_hashes(root, but=("LOCK",))


def data_sizes(root: Path) -> dict[str, int]:
    return {env: (root / env / "data.mdb").stat().st_size for env in ENVIRONMENTS}


def assert_reads_as_built(data: Path, expected: dict) -> None:
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:
        assert read_all(c) == expected
    report = check(data)
    assert report.ok, "\n".join(report.lines())


def assert_log_matches(folder: Path) -> None:
    """The log's newest header is a clean close's, holding the meta pages data.mdb has."""
    gen, closed = newest_header(folder)
    assert closed
    wal = WriteAheadLog.open_existing(folder, PSIZE)
    try:
        assert wal.generation == gen and wal.metas == (folder / "data.mdb").read_bytes()[:2 * wal.psize]
    finally:
        wal.close()


def run_cli(*args):
    return CliRunner().invoke(main, ["compact", *map(str, args)])


# -- compacting ----------------------------------------------------------------------------------


def test_a_mostly_deleted_directory_compacts_to_much_less_and_reads_the_same(data, built):
    before = data_sizes(data)
    report = compact(data)
    assert report.ok, "\n".join(report.lines())
    assert [e.folder for e in report.environments] == ENVIRONMENTS
    assert all(e.status == "compacted" and e.after < e.before for e in report.environments), report.lines()
    after = data_sizes(data)
    for env in ["app/H/kv", "app/P/kv", "app/Q/claims", "app/T/kv"]:  # 90% or more was deleted from each
        assert after[env] < before[env] / 4, (env, before[env], after[env])
    assert after["catalog"] < before["catalog"] / 2
    assert report.after < report.before / 4
    assert not any((data / env / COMPACTING).exists() for env in ENVIRONMENTS)
    for env in ENVIRONMENTS:
        assert_log_matches(data / env)
        assert (data / env / "wal.0").stat().st_size == (data / env / "wal.1").stat().st_size == 64 + 2 * PSIZE
    assert check(data).ok
    assert_reads_as_built(data, built[1])


def assert_compacted(data: Path) -> None:
    report = compact(data)
    assert report.ok and all(e.status == "compacted" for e in report.environments), report.lines()
    assert report.after < report.before / 4


def test_after_compacting_every_store_writes_and_searches_by_its_indexes(data, built):
    assert_compacted(data)
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:
        h = c["app"].H
        searched = read_all(c)["H"]
        assert (searched[3], searched[5], searched[7]) == ("email_1", "city_1_age_1", "at_1")
        with pytest.raises(DuplicateKeyError):
            h.insert({"_id_": "n1", "email": "e1230@x.org"})
        h.insert({"_id_": "n1", "email": "n1@x.org", "city": "c9", "age": 5, "at": AT})
        found = h.search({"email": "n1@x.org"})
        assert [d["_id_"] for d in found] == ["n1"] and found.index_used == "email_1"
        assert [d["_id_"] for d in h.search({"city": "c9", "age": 5})] == ["n1"]
        assert h.length() == 201 and len(h.search({"at": AT}, limit=1000)) == 201
        h.delete({"_id_": "k0"})
        assert h.search({"email": "e0@x.org"}) == [] and h.length() == 200
        h.insert({"_id_": "old", "email": "old@x.org", "at": AT.replace(year=2000)})
        assert c.sweep_ttl()["expired"] == 1 and h.get("old") is None and h.length() == 200  # the TTL index
        d = h["k100"]
        d.L.push({"n": 99})
        d.X.put("new", {"n": 1})
        d.Q.push({"n": 99})
        d.P.push({"priority": 9, "n": 99})
        d.T.put("t99", {"n": 99})
        assert d.L.length() == 5 and d.X.get("new") == {"n": 1} and d.Q.length() == 5
        assert d.P.peek()["n"] == 99 and d.T.get("t99") == {"n": 99}
        t, p, q = c["app"].T, c["app"].P, c["app"].Q
        t.insert({"n": 5000})
        assert t.get(5000)["n"] == 5000 and t.length() == 301
        p.push({"priority": 100, "n": -1})
        assert p.pop()["n"] == -1
        claimed = q.claim(limit=2, lease=60)
        assert q.ack([x["claimId"] for x in claimed]) == {"acked": 2}
        c["app"].create_bucket("New", type="hash").insert({"_id_": "a"})
    report = check(data)
    assert report.ok, "\n".join(report.lines())
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:
        assert c["app"].New.get("a") == {"_id_": "a"} and c["app"].H.length() == 200
        assert c["app"].Q.length() == built[1]["Q"][0] - 2


def test_many_writes_and_a_crash_after_compacting_recover_onto_the_new_file(data, built):
    """Checkpoints and the recovery of a killed process work on the compacted file (its
    transaction ids start again from 1, its log's header is new)."""
    assert_compacted(data)
    done = run_script(WRITE_THEN_DIE, data)
    assert done.returncode == 0, done.stderr[-2000:]
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:
        assert c["app"].T.length() == 300 + 3000
        assert c["app"].T.get(12999)["n"] == 12999
    assert check(data).ok


#: A child: 3,000 durable inserts into app.T (three checkpoints), then dies without closing.
WRITE_THEN_DIE = """
import os, sys
import hoarddb
c = hoarddb.open(sys.argv[1], ttl_sweep_seconds=0)
for i in range(10000, 13000):
    c["app"].T.insert({"n": i})
os._exit(0)
"""


def test_compacting_a_compact_directory_is_harmless(data, built):
    assert_compacted(data)
    first = hashes(data)
    report = compact(data)
    assert report.ok and [e.status for e in report.environments] == ["already compact"] * len(ENVIRONMENTS)
    assert report.before == report.after
    assert hashes(data) == first  # not a byte changed
    assert_reads_as_built(data, built[1])
    assert compact(data).ok  # and after an open and close, once more
    assert_reads_as_built(data, built[1])


def test_queues_and_blobs_are_left_alone_and_named(data):
    before = hashes(data)
    report = compact(data)
    assert report.ok and report.after < report.before / 4
    assert {(s["bucket"], s["type"]) for s in report.skipped} == {("S", "lifo"), ("B", "blob")}
    assert "nothing to compact" in report.lines()[-1] and "app.S (lifo)" in report.lines()[-1]
    after = hashes(data)
    for name in before:
        if name.startswith(("app/S/", "app/B/")) or "/fields/" in name or name.startswith("app/Q/seg"):
            assert after[name] == before[name], name


def test_a_scope_compacts_only_what_it_names(data):
    before = hashes(data)
    report = compact(data, db="app", bucket="T")
    assert [e.folder for e in report.environments] == ["app/T/kv"] and report.ok
    after = hashes(data)
    changed = {k.rsplit("/", 1)[0] for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed == {"app/T/kv"}, changed
    report = compact(data, db="ctl")
    assert [e.folder for e in report.environments] == ["ctl/C/kv"]  # not the catalog
    assert hashes(data)["catalog/data.mdb"] == before["catalog/data.mdb"]


def test_a_crash_is_repaired_first_as_at_any_open(data, built):
    done = run_script(INSERT_THEN_DIE, data)
    assert done.returncode == 0, done.stderr[-2000:]
    with pytest.raises(StorageError, match="not closed cleanly"):  # one environment alone is not repaired
        compact_environment(data / "app" / "H" / "kv")
    assert not (data / "app" / "H" / "kv" / COMPACTING).exists()
    report = compact(data)
    assert report.ok and "app/H" in report.repaired and "catalog" in report.repaired
    assert all(e.status == "compacted" for e in report.environments)
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:
        assert c["app"].H.get("late")["email"] == "late@x.org"
        assert c["app"].H.length() == built[1]["H"][0] + 1
    assert check(data).ok


#: A child that inserts once and ends without closing anything, as a killed process would.
INSERT_THEN_DIE = """
import os, sys
import hoarddb
c = hoarddb.open(sys.argv[1], ttl_sweep_seconds=0)
c["app"].H.insert({"_id_": "late", "email": "late@x.org"})
os._exit(0)
"""


def test_a_disk_without_room_for_the_copy_changes_nothing(data, built, monkeypatch):
    before = hashes(data)
    full = types.SimpleNamespace(total=1 << 40, used=1 << 40, free=0)
    monkeypatch.setattr(compact_module.shutil, "disk_usage", lambda path: full)
    report = compact(data)
    assert not report.ok and all(e.status == "failed" for e in report.environments)
    assert "free space" in report.environments[0].problem and report.before == report.after
    result = run_cli(data)
    assert result.exit_code == 1 and "not compacted" in result.output and "free space" in result.output
    assert hashes(data) == before
    assert_reads_as_built(data, built[1])


def test_a_damaged_environment_is_left_as_it_is_and_the_others_are_compacted(data):
    path = data / "app" / "T" / "kv" / "data.mdb"
    with open(path, "r+b") as f:  # LMDB's main tree's flags in meta page 0: refused before LMDB maps it
        f.seek(92)
        f.write(b"\x5a")
    damaged = path.read_bytes()
    report = compact(data)
    assert not report.ok
    status = {e.folder: e.status for e in report.environments}
    assert status.pop("app/T/kv") == "failed" and set(status.values()) == {"compacted"}
    problem = report.environments[ENVIRONMENTS.index("app/T/kv")].problem
    assert "meta page 0 is damaged" in problem
    assert path.read_bytes() == damaged and not (path.parent / COMPACTING).exists()
    result = run_cli(data)
    assert result.exit_code == 1 and "app.T: app/T/kv: not compacted: " in result.output, result.output


# -- a process killed during the swap --------------------------------------------------------------


#: A child: compact argv[1], SIGKILLed by itself when step argv[2] of environment argv[3] is
#: reached for the argv[4]th time (the rewrite commits every 16 KiB, so "copying" comes often).
KILLED_AT = """
import os, signal, sys
from pathlib import Path
from hoarddb.tools import compact as m
data, step, target, nth = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
m.CHUNK_BYTES = 16 << 10
seen = []
def hook(name, folder):
    if name == step and folder == data / target:
        seen.append(name)
        if len(seen) == nth:
            os.kill(os.getpid(), signal.SIGKILL)
m._step_hook = hook
m.compact(data)
print("finished")
"""

SWAPPED = {"swapped", "logged", "trimmed"}


@pytest.mark.parametrize("target, step, nth", [
    ("app/H/kv", "copying", 3),
    ("app/H/kv", "copied", 1),
    ("app/H/kv", "verified", 1),
    ("app/H/kv", "swapped", 1),
    ("app/H/kv", "logged", 1),
    ("app/H/kv", "trimmed", 1),
    ("app/P/kv", "logged", 1),
    ("app/Q/claims", "verified", 1),
    ("app/Q/claims", "swapped", 1),
    ("catalog", "copied", 1),
    ("catalog", "swapped", 1),
], ids=lambda v: str(v).replace("/", "."))
def test_killed_anywhere_in_the_swap_leaves_the_old_or_the_new_file_and_the_open_finishes_it(
        data, built, target, step, nth):
    folder = data / target
    old = (folder / "data.mdb").read_bytes()
    done = run_script(KILLED_AT, data, step, target, nth)
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr[-2000:])
    now = (folder / "data.mdb").read_bytes()
    if step in SWAPPED:  # the new file, whole, in its place; the staging folder empty
        assert len(now) < len(old) / 2 and now[:PSIZE] != old[:PSIZE]
        assert (folder / COMPACTING).is_dir() and not any((folder / COMPACTING).iterdir())
    else:  # the old file, untouched; a copy (or part of one) beside it
        assert now == old
        assert (folder / COMPACTING / "data.mdb").exists()
    header = newest_header(folder)
    assert header is not None and header[1]  # the log still says: closed cleanly
    if step in {"logged", "trimmed"}:
        assert_log_matches(folder)
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:  # the open finishes, or undoes, what the kill left
        assert read_all(c) == built[1]
        assert not (folder / COMPACTING).exists()
    assert not any(p.name == COMPACTING for p in data.rglob("*"))
    report = check(data)
    assert report.ok, "\n".join(report.lines())
    again = compact(data)
    assert again.ok, "\n".join(again.lines())
    assert (folder / "data.mdb").stat().st_size < len(old) / 2
    assert_reads_as_built(data, built[1])


# -- refusals and the command ------------------------------------------------------------------


def test_an_open_directory_is_refused_and_nothing_changes(data):
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:
        c["app"].H.length()  # (its environment open too)
        before = data_sizes(data)
        with pytest.raises(DataDirLockedError):
            compact(data)
        result = run_cli(data)
        assert result.exit_code == 2 and "hoarddb compact: data directory" in result.output, result.output
        assert data_sizes(data) == before
        assert not any(p.name == COMPACTING for p in data.rglob("*"))


def test_a_running_servers_directory_is_refused(data):
    before = data_sizes(data)
    with ServerProcess(data) as server:
        result = run_cli(data)
        assert result.exit_code == 2, result.output
        assert f"open in another process (pid {server.proc.pid})" in result.output
        assert data_sizes(data) == before


def test_the_command_prints_a_line_per_environment_and_the_total(data):
    result = run_cli(data)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("app.H: app/H/kv: ") and " MiB -> " in lines[0]
    assert any(line.startswith("catalog: catalog: ") for line in lines)
    assert lines[-1].startswith(f"compacted 6 of 6 LMDB environment(s) of {data} in ") and "given back" in lines[-1]


def test_json_output_is_parseable(data):
    result = run_cli(data, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] is True and [e["folder"] for e in report["environments"]] == ENVIRONMENTS
    h = report["environments"][0]
    assert (h["db"], h["bucket"], h["type"], h["status"]) == ("app", "H", "hash", "compacted")
    assert h["after"] < h["before"] / 4 and report["after"] < report["before"]
    assert {s["bucket"] for s in report["skipped"]} == {"S", "B"}
    again = json.loads(run_cli(data, "--json", "--db", "app", "--bucket", "T").output)
    assert [e["status"] for e in again["environments"]] == ["already compact"]


@pytest.mark.parametrize("args, said", [
    (["--bucket", "H"], "give --db too"),
    (["--db", "nope"], "its databases: app, ctl"),
    (["--db", "app", "--bucket", "Nope"], "its buckets: B, H, P, Q, S, T"),
    (["--frobnicate"], "No such option"),
])
def test_usage_errors_exit_2_saying_what_is_accepted(data, args, said):
    before = hashes(data)
    result = run_cli(data, *args)
    assert result.exit_code == 2 and said in result.output, result.output
    assert hashes(data) == before


def test_a_directory_that_is_not_a_data_directory_is_refused(tmp_path):
    result = run_cli(tmp_path)
    assert result.exit_code == 2 and "not a hoardDB data directory" in result.output
    assert list(tmp_path.iterdir()) == []  # nothing made
    assert run_cli(tmp_path / "missing").exit_code == 2
