"""A data directory damaged on disk, embedded: one file at a time, every store type.

A bad disk, a careless ``cp``, a half-restored backup or an editor opened on the wrong
file damages a file while hoardDB is closed. What a user must meet then (docs/user/
durability.md, "When a file is damaged"):

- a CORRUPT_DATA error (STORAGE_ERROR for a file the operating system will not open)
  that names the file and says what to do: never a traceback of an internal error, a
  crash, or a hang;
- never the damaged bucket's data returned as if it were whole (popped entries back, a
  bucket empty, another bucket's documents), and nothing deleted by a "repair";
- every other bucket as usable as before.

One data directory is built and closed per module; each case copies it, damages one file,
opens the copy and reads everything. Damage that LMDB could not survive (a file cut short
under its pages) runs in a child process, so that a regression crashes the child and
fails its case instead of taking pytest down with it.
"""

from __future__ import annotations

import datetime
import json
import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

import hoarddb
from hoarddb import errors
from hoarddb.storage import framing, segment, segment_format, segment_recovery

from .killing import run_script

#: The buckets of the built directory: name -> type (Q2, S2, H2, T2, P2, B2 are twins that
#: swaps take files from).
BUCKETS = {"Q": "fifo", "Q2": "fifo", "QC": "fifo", "S": "lifo", "S2": "lifo", "H": "hash", "H2": "hash",
           "T": "btree", "T2": "btree", "P": "heap", "P2": "heap", "B": "blob", "B2": "blob"}
FIELDS = [{"name": n, "type": t} for n, t in [("L", "lifo"), ("X", "hash"), ("Bl", "blob")]]
AT = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)


def build(data: Path) -> None:
    """Every store type (three segments per queue: one batch spanning them), indexes of every
    kind, store fields, claims, blobs; and the control database ``ctl``."""
    with hoarddb.open(data) as c:
        app = c["app"]
        for name, tag in (("Q", "q"), ("Q2", "r"), ("S", "s"), ("S2", "t")):
            b = app.create_bucket(name, type=BUCKETS[name], segment_size=4096)
            b.batch_push([{"n": i, "tag": tag, "pad": tag * (100 + len(name))} for i in range(80)])
            b.pop({"limit": 3})
        qc = app.create_bucket("QC", type="fifo")
        qc.batch_push([{"n": i} for i in range(10)])
        qc.claim(2, lease=86400)
        for name, tag in (("H", "h"), ("H2", "i")):
            b = app.create_bucket(name, type="hash", store_fields=FIELDS, indices=[
                {"fields": ["email"], "unique": True}, {"fields": ["city", "age"]},
                {"field": "at", "expire_after_seconds": 10 ** 8}])
            b.batch_insert([{"_id_": f"k{i}", "email": f"{tag}{i}@x.org", "city": f"c{i % 3}", "age": i,
                             "at": AT, "pad": tag * (50 + len(name))} for i in range(50)])
            d = b["k1"]
            d.L.push({"v": 1})
            d.X.put("x1", {"v": 3})
            d.Bl.put(b"field blob " + tag.encode() * 100, name="fb")
        for name, tag in (("T", "t"), ("T2", "u")):
            app.create_bucket(name, type="btree", key="n").batch_insert(
                [{"n": i, "tag": tag, "pad": tag * 50} for i in range(50)])
        for name, tag in (("P", "p"), ("P2", "o")):
            b = app.create_bucket(name, type="heap")
            b.batch_push([{"priority": i % 7, "n": i, "tag": tag} for i in range(50)])
            b.claim(1, lease=86400)
        for name, tag in (("B", "b"), ("B2", "c")):
            b = app.create_bucket(name, type="blob")
            for i in range(3):
                b.put((tag * 1000 + str(i)).encode() * 20, name=f"{tag}{i}.bin")
        c["ctl"].create_bucket("C", type="hash").batch_insert([{"_id_": f"c{i}", "n": i} for i in range(10)])


def read(c, name: str):
    """Everything a user could read of bucket ``name`` (the control bucket ``C`` too)."""
    if name == "C":
        return c["ctl"].C.find({}, limit=100)
    b, kind = c["app"][name], BUCKETS[name]
    if kind in ("fifo", "heap"):
        return b.length(), b.peek(limit=1000)
    if kind == "lifo":
        return b.length(), b.list(limit=1000)
    if kind == "btree":
        return b.length(), b.list(limit=1000), b.get(7)
    if kind == "hash":
        tag = "h" if name == "H" else "i"
        return (b.length(), sorted(b.find({}, limit=1000), key=lambda d: d["_id_"]),
                b.search({"email": f"{tag}7@x.org"}), sorted(d["_id_"] for d in b.search({"city": "c1", "age": 4})),
                b["k1"].L.list(), b["k1"].X.get("x1"), [b["k1"].Bl.get(i["_id_"])["data"] for i in b["k1"].Bl.list()])
    return b.length(), sorted((i["name"], b.get(i["_id_"])["data"]) for i in b.list())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The directory, closed, and what each bucket reads."""
    data = tmp_path_factory.mktemp("corruption") / "data"
    build(data)
    with hoarddb.open(data) as c:
        expected = {name: read(c, name) for name in [*BUCKETS, "C"]}
    return data, expected


def copy(built, tmp_path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(built[0], data)
    return data


# -- the damage ---------------------------------------------------------------------------------


def blob_file(data: Path, bucket: str) -> Path:
    return min(p for p in (data / "app" / bucket).iterdir() if len(p.name) == 36)


def resolve(data: Path, rel: str) -> Path:
    if rel == "app/B/<blob>":
        return blob_file(data, "B")
    return data / rel


def flip(path: Path, at: int, n: int = 4) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        old = f.read(n)
        f.seek(at)
        f.write(bytes(b ^ 0x5A for b in old))


def data_end(path: Path) -> int:
    """Where a file's bytes end before the zeros a fifo segment or a log keeps ahead."""
    return len(path.read_bytes().rstrip(b"\0"))


def damage(data: Path, rel: str, how: str) -> None:
    path = resolve(data, rel)
    if how == "flip-start":
        flip(path, 8)
    elif how == "flip-middle":
        flip(path, data_end(path) // 2)
    elif how == "flip-end":
        flip(path, data_end(path) - 6)
    elif how == "flip-meta-flags":  # LMDB's main tree's flags in meta page 0 (offset 88 + 4)
        flip(path, 92, 1)
    elif how == "truncate-0":
        os.truncate(path, 0)
    elif how == "truncate-half":
        os.truncate(path, path.stat().st_size // 2)
    elif how == "truncate-1":
        os.truncate(path, path.stat().st_size - 1)
    elif how == "delete":
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    elif how == "swap":  # the same file of the twin bucket (H -> H2...)
        parts = rel.split("/")
        twin = data / parts[0] / (parts[1] + "2") / "/".join(parts[2:])
        shutil.copyfile(twin, path)
    else:
        raise AssertionError(how)


# -- the table ----------------------------------------------------------------------------------
#
# (file, damage, outcome): "corrupt" = the damaged bucket answers CORRUPT_DATA naming `named`
# (the file, or the bucket's folder) and every other bucket reads as before; "intact" = harmless
# damage, every bucket reads as before; "open" = the database refuses to open (the catalog).
# The comment says what the same damage would do without its defence.

CASES = [
    # fifo: a middle segment lost or emptied (before: its entries silently missing)
    ("app/Q/seg_00002.fifo", "delete", "corrupt", "seg_00002.fifo"),
    ("app/Q/seg_00002.fifo", "truncate-0", "corrupt", "seg_00002.fifo"),
    # the head's segment lost or emptied (before: read on from the next one, with a warning)
    ("app/Q/seg_00001.fifo", "delete", "corrupt", "seg_00001.fifo"),
    ("app/Q/seg_00001.fifo", "truncate-0", "corrupt", "seg_00001.fifo"),
    ("app/Q/seg_00001.fifo", "flip-middle", "corrupt", "seg_00001.fifo"),
    # the last segment damaged (before: cut as a torn append, and the batch's entries in the
    # earlier segments with it: the whole queue gone, with warnings only)
    ("app/Q/seg_00003.fifo", "flip-start", "corrupt", "seg_00003.fifo"),
    ("app/Q/seg_00003.fifo", "flip-end", "corrupt", "seg_00003.fifo"),
    ("app/Q/seg_00003.fifo", "truncate-half", "corrupt", "seg_00003.fifo"),
    ("app/Q/seg_00003.fifo", "delete", "corrupt", "app/Q"),
    ("app/Q/seg_00003.fifo", "truncate-1", "intact", None),  # one of the zeros kept ahead
    # the state file cut (before: the older slot, silently: popped entries back)
    ("app/Q/state.bson", "truncate-half", "corrupt", "state.bson"),
    ("app/Q/state.bson", "delete", "corrupt", "state.bson"),
    # lifo
    ("app/S/seg_00003.lifo", "truncate-1", "corrupt", "seg_00003.lifo"),  # before: all 77 entries cut
    ("app/S/seg_00002.lifo", "delete", "corrupt", "app/S"),  # before: silently missing
    ("app/S/seg_00001.lifo", "truncate-0", "corrupt", "seg_00001.lifo"),  # before: silently missing
    # LMDB: data.mdb lost or emptied (before: the bucket, the claims or the catalog opened empty)
    ("app/T/kv/data.mdb", "delete", "corrupt", "app/T/kv/data.mdb"),
    ("app/P/kv/data.mdb", "truncate-0", "corrupt", "app/P/kv/data.mdb"),
    ("app/QC/claims/data.mdb", "delete", "corrupt", "app/QC/claims/data.mdb"),
    ("catalog/data.mdb", "delete", "open", "catalog/data.mdb"),
    # a bucket's whole folder, or its LMDB folder, lost (before: the bucket opened empty)
    ("app/H", "delete", "corrupt", "app/H"),
    ("app/T/kv", "delete", "corrupt", "app/T"),
    ("app/S", "delete", "corrupt", "app/S"),
    # LMDB's meta pages (before: STORAGE_ERROR saying to check permissions; a traceback)
    ("app/H/kv/data.mdb", "flip-start", "corrupt", "app/H/kv/data.mdb"),
    ("app/H/kv/data.mdb", "flip-meta-flags", "corrupt", "app/H/kv/data.mdb"),
    # another bucket's data.mdb copied over (before: its documents answered for this bucket's)
    ("app/H/kv/data.mdb", "swap", "corrupt", "app/H/kv/data.mdb"),
    ("app/T/kv/data.mdb", "swap", "corrupt", "app/T/kv/data.mdb"),
    # the log and LMDB's lock file of a closed bucket hold nothing it needs
    ("app/H/kv/wal.0", "flip-start", "intact", None),
    ("app/H/kv/wal.1", "truncate-0", "intact", None),
    ("app/H/kv/lock.mdb", "delete", "intact", None),
    # blobs (before: the index cut or replaced, and the blob files it no longer named deleted)
    ("app/B/_index.bson", "truncate-0", "corrupt", "app/B"),
    ("app/B/_index.bson", "truncate-half", "corrupt", "_index.bson"),
    ("app/B/_index.bson", "flip-end", "corrupt", "_index.bson"),
    ("app/B/_index.bson", "swap", "corrupt", "app/B"),
    ("app/B/<blob>", "flip-middle", "corrupt", "is corrupt"),
    ("app/B/<blob>", "delete", "corrupt", "is missing"),  # before: dropped from the index on open
    ("app/B/_index.closed", "flip-middle", "intact", None),  # then opened as after a crash
]


def case_id(case) -> str:
    return f"{case[0].replace('app/', '')}-{case[1]}"


def expect_corrupt(call, named: str) -> errors.CorruptDataError:
    with pytest.raises(errors.CorruptDataError) as caught:
        call()
    message = caught.value.message
    assert named in message, message
    assert "restore" in message.lower(), message  # and what to do
    return caught.value


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_damaged_file_is_refused_by_name_and_the_rest_reads_as_before(built, tmp_path, case):
    rel, how, outcome, named = case
    data = copy(built, tmp_path)
    files_before = sorted(p.name for p in (data / "app" / "B").iterdir())
    damage(data, rel, how)
    if outcome == "open":
        expect_corrupt(lambda: hoarddb.open(data), named)
        return
    target = rel.split("/")[1]
    with hoarddb.open(data) as c:
        if outcome == "corrupt":
            expect_corrupt(lambda: read(c, target), named)
            expect_corrupt(lambda: read(c, target), named)  # the same, every time (and no hang)
        for name in [*BUCKETS, "C"]:
            if name != target or outcome == "intact":
                assert read(c, name) == built[1][name], name
    if target == "B" and rel != "app/B/<blob>":  # refused, not repaired: no blob file deleted
        assert sorted(p.name for p in (data / "app" / "B").iterdir()) == files_before


def test_a_missing_blob_file_after_a_clean_close_stays_listed_and_deletable(built, tmp_path):
    data = copy(built, tmp_path)
    lost = blob_file(data, "B")
    lost.unlink()
    with hoarddb.open(data) as c:
        b = c["app"].B
        assert lost.name in [i["_id_"] for i in b.list()] and b.length() == 3
        expect_corrupt(lambda: b.get(lost.name), "is missing")
        b.delete(lost.name)
        assert b.length() == 2
    with hoarddb.open(data) as c:
        assert c["app"].B.length() == 2


def test_a_bucket_written_after_reopening_repairs_a_torn_tail_as_after_a_crash(built, tmp_path):
    """The clean close's mark goes with the first write after an open: what a crash leaves
    then is repaired again, not refused as damage."""
    data = copy(built, tmp_path)
    done = run_script(KILLED_AFTER_A_PUSH, data)
    assert done.returncode == 0, done.stderr[-2000:]
    last = data / "app" / "Q" / "seg_00003.fifo"
    with open(last, "r+b") as f:  # and a torn append after the last entry (which come after the identity)
        f.seek(framing.valid_end(f, segment.SEGMENT_HEADER_SIZE))
        f.write(b"\x99" * 10)
    with hoarddb.open(data) as c:
        assert c["app"].Q.length() == 78
        assert read(c, "Q2") == built[1]["Q2"]


#: A child that pushes once and ends without closing anything, as a killed process would.
KILLED_AFTER_A_PUSH = """
import os, sys
import hoarddb
c = hoarddb.open(sys.argv[1])
c["app"].Q.push({"n": 100})
os._exit(0)
"""


def test_a_data_file_cut_short_under_lmdb_is_refused_not_a_crash(built, tmp_path):
    """LMDB maps data.mdb and trusts its meta page: a file cut below its last page was a
    SIGBUS of the whole process (a server with it). Run in a child, which a regression kills."""
    data = copy(built, tmp_path)
    damage(data, "app/H/kv/data.mdb", "truncate-half")
    done = run_script(PROBE, str(data), "H")
    assert done.returncode == 0, f"the child died ({done.returncode}): {done.stderr[-2000:]}"
    said = json.loads(done.stdout.splitlines()[-1])
    assert said["H"][0] == "CORRUPT_DATA" and "data.mdb" in said["H"][1] and "cut short" in said["H"][1]
    assert said["C"] == "ok"


#: A child: open the data directory, read bucket argv[2] and the control bucket; print what each gave.
PROBE = """
import json, sys
import hoarddb
from hoarddb import errors
out = {}
with hoarddb.open(sys.argv[1]) as c:
    for name, call in ((sys.argv[2], lambda: c["app"][sys.argv[2]].find({})), ("C", lambda: c["ctl"].C.get("c1"))):
        try:
            call()
            out[name] = "ok"
        except errors.HoardError as exc:
            out[name] = [exc.codeName, exc.message]
print(json.dumps(out))
"""


def corrupt_document(path: Path, marker: bytes) -> None:
    """Make every copy of the stored string ``marker`` undecodable: its BSON length says 2 GiB."""
    raw = bytearray(path.read_bytes())
    at = raw.find(marker)
    assert at > 0
    while at > 0:
        raw[at - 4:at] = (0x7FFFFFFF).to_bytes(4, "little")
        at = raw.find(marker, at + 1)
    path.write_bytes(bytes(raw))


def test_a_stored_document_that_does_not_decode_is_corrupt_data_not_a_traceback(built, tmp_path):
    data = copy(built, tmp_path)
    corrupt_document(data / "app" / "T" / "kv" / "data.mdb", b"t" * 50)
    with hoarddb.open(data) as c:
        expect_corrupt(lambda: c["app"].T.list(limit=1000), "app/T")
        expect_corrupt(lambda: c["app"].T.get(7), "app/T")
        assert read(c, "T2") == built[1]["T2"] and read(c, "C") == built[1]["C"]


def test_a_catalog_entry_that_does_not_decode_refuses_the_open_by_name(built, tmp_path):
    data = copy(built, tmp_path)
    corrupt_document(data / "catalog" / "data.mdb", b"btree\x00")  # the type of T's and T2's declarations
    expect_corrupt(lambda: hoarddb.open(data), "catalog/data.mdb")


@pytest.mark.parametrize("rel, how", [("app/Q/seg_00002.fifo", "delete"), ("app/H/kv/data.mdb", "delete"),
                                      ("app/B/_index.bson", "truncate-0")], ids=["fifo", "hash", "blob"])
def test_a_damaged_bucket_can_be_dropped_and_made_again(built, tmp_path, rel, how):
    """What the error says to do works: drop the bucket, create it again (or restore it)."""
    data = copy(built, tmp_path)
    damage(data, rel, how)
    name = rel.split("/")[1]
    with hoarddb.open(data) as c:
        with pytest.raises(errors.CorruptDataError):
            read(c, name)
        c["app"].drop_bucket(name)
        b = c["app"].create_bucket(name, type=BUCKETS[name])
        assert b.length() == 0
        assert read(c, "C") == built[1]["C"]


# -- permissions ------------------------------------------------------------------------------

#: A child that drops to another user (root reads and writes every file) and opens a bucket.
AS_USER = """
import json, os, sys
import importlib, pkgutil
import hoarddb, hoarddb.engine, hoarddb.stores, hoarddb.storage, lmdb, bson
for pkg in (hoarddb.stores, hoarddb.storage):
    for m in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(pkg.__name__ + "." + m.name)
from hoarddb import errors
import tempfile
with tempfile.TemporaryDirectory() as warm, hoarddb.open(warm) as c:  # what an open imports late (lmdb's own
    for kind in ("fifo", "blob", "hash"):                              # modules), while root can still read it:
        c["w"].create_bucket(kind, type=kind).length()                 # the checkout may be root's alone
os.setgid(int(sys.argv[3]))
os.setuid(int(sys.argv[2]))
with hoarddb.open(sys.argv[1]) as c:
    try:
        c["app"][sys.argv[4]].length()
        print(json.dumps("ok"))
    except errors.HoardError as exc:
        print(json.dumps([exc.codeName, exc.message]))
"""


@pytest.mark.parametrize("rel", ["app/Q/state.bson", "app/B/_index.bson"])
def test_a_file_the_user_may_not_write_is_a_storage_error_not_a_traceback(built, rel):
    """(Before: PermissionError's traceback.)"""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' to drop to")
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the child as another user")  # (a user's own files: chmod bypassed)
    base = Path(tempfile.mkdtemp(prefix="hoarddb-perm-"))  # /tmp/pytest-of-root is root's alone
    try:
        base.chmod(0o755)
        data = base / "data"
        shutil.copytree(built[0], data)
        for root, dirs, files in os.walk(base):
            for name in dirs + files:
                os.chown(os.path.join(root, name), nobody.pw_uid, nobody.pw_gid)
        (data / rel).chmod(0o444)
        done = run_script(AS_USER, data, nobody.pw_uid, nobody.pw_gid, rel.split("/")[1])
        assert done.returncode == 0, done.stderr[-2000:]
        code, message = json.loads(done.stdout.splitlines()[-1])
        assert code == "STORAGE_ERROR" and "Permission denied" in message and rel.split("/")[-1] in message
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- queues: the newest state slot, and a segment of another queue -------------------------------


def newest_slot(path: Path) -> int:
    """Which slot of a queue's ``state.bson`` holds the newest state."""
    raw = path.read_bytes()
    found = [(s["seq"], i) for i in range(2)
             if (s := segment_format._parse_slot(raw[i * segment.SLOT_SIZE:(i + 1) * segment.SLOT_SIZE])) is not None]
    return max(found)[1]


def test_a_damaged_newest_state_slot_after_a_clean_close_is_whole_in_the_other(built, tmp_path, caplog):
    """A clean close writes its state into both slots: the one left reads as before, still
    as after a clean close (a segment lost as well is refused), and the slot is written again.
    (Before: the update before the close was used, as after a crash: the fifo opened without
    the entries of a lost last segment, with a warning about the slot only.)"""
    data = copy(built, tmp_path)
    state = data / "app" / "Q" / "state.bson"
    flip(state, newest_slot(state) * segment.SLOT_SIZE + 20)
    with caplog.at_level("WARNING", logger="hoarddb.segment"), hoarddb.open(data) as c:
        for name in [*BUCKETS, "C"]:
            assert read(c, name) == built[1][name], name
    assert "whole state of the last clean close" in caplog.text
    assert all(segment_recovery._read_state(data / "app" / "Q")[1])  # both slots check again

    data = tmp_path / "again"
    shutil.copytree(built[0], data)
    state = data / "app" / "Q" / "state.bson"
    flip(state, newest_slot(state) * segment.SLOT_SIZE + 20)
    damage(data, "app/Q/seg_00003.fifo", "delete")
    with hoarddb.open(data) as c:
        expect_corrupt(lambda: read(c, "Q"), "app/Q")
        assert read(c, "Q2") == built[1]["Q2"]


def twin_queues(data: Path) -> None:
    """Queues Z (fifo) and Y (lifo) with twins Z2 and Y2 whose entries have exactly the same
    sizes, three segments each; and the control bucket."""
    with hoarddb.open(data) as c:
        for name, kind in (("Z", "fifo"), ("Z2", "fifo"), ("Y", "lifo"), ("Y2", "lifo")):
            b = c["app"].create_bucket(name, type=kind, segment_size=4096)
            tag = name[0].lower() if len(name) == 1 else name[0].upper()
            b.batch_push([{"n": i, "pad": tag * 900} for i in range(10)])
        c["ctl"].create_bucket("C", type="hash").batch_insert([{"_id_": f"c{i}", "n": i} for i in range(10)])


@pytest.mark.parametrize("rel", ["app/Z/seg_00002.fifo", "app/Z/seg_00003.fifo", "app/Y/seg_00002.lifo",
                                 "app/Y/seg_00003.lifo"], ids=lambda rel: rel.replace("app/", ""))
def test_a_queue_segment_swapped_for_a_same_sized_one_of_another_queue_is_refused(tmp_path, rel):
    """(Before: the other queue's entries were read as this queue's.)"""
    data = tmp_path / "data"
    twin_queues(data)
    with hoarddb.open(data) as c:
        expected = {name: c["app"][name].list(limit=100) for name in ("Z", "Z2", "Y", "Y2")}
    twin = data / rel.replace("/Z/", "/Z2/").replace("/Y/", "/Y2/")
    assert (data / rel).stat().st_size == twin.stat().st_size
    shutil.copyfile(twin, data / rel)
    target = rel.split("/")[1]
    with hoarddb.open(data) as c:
        error = expect_corrupt(lambda: c["app"][target].list(limit=100), rel.split("/")[-1])
        assert "belongs to another queue" in error.message
        for name in expected:
            if name != target:
                assert c["app"][name].list(limit=100) == expected[name], name
        assert c["ctl"].C.length() == 10
