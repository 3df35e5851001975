"""hoarddb check: a sound data directory checks clean and stays byte for byte the same; each
kind of damage is reported naming its file, damage a normal open does not see included.

One directory is built and closed per module (every store type, unique, compound and
TTL indexes, a conflicted unique index with its claims, store fields of every type,
claims on a fifo and a heap, blobs); each case copies it and damages one thing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import lmdb
import pytest
from click.testing import CliRunner

import hoarddb
from hoarddb.cli import main
from hoarddb.testing import ServerProcess
from hoarddb.storage import segment_format
from hoarddb.tools import check as check_module
from hoarddb.tools.check import check
from hoarddb.values.codec import decode, encode
from hoarddb.values.keys import encode_key

from ..indexes.building import wait_built

from ..killing import child_env, run_script
from ..test_corruption import CASES, KILLED_AFTER_A_PUSH, blob_file, build, case_id, damage, flip

#: Store fields of every type on a btree bucket (the hash buckets of ``build`` have lifo, hash and blob ones).
MORE_FIELDS = [{"name": n, "type": t} for n, t in [("Q", "fifo"), ("P", "heap"), ("T", "btree")]]


def build_more(data: Path) -> None:
    """What ``build`` lacks: a conflicted unique index (claims), store fields of the other types."""
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:
        u = c["app"].create_bucket("U", type="hash", indices=[{"field": "mail", "unique": True}])
        u.load([{"_id_": "a", "mail": "x"}, {"_id_": "b", "mail": "x"}, {"_id_": "c", "mail": "y"}])
        f = c["app"].create_bucket("F", type="btree", key="n", store_fields=MORE_FIELDS)
        f.batch_insert([{"n": i} for i in range(5)])
        d = f[2]
        d.Q.push({"v": 1})
        d.P.push({"priority": 3, "v": 2})
        d.T.put("t1", {"v": 3})
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:  # the open rebuilds the conflicted index, claims and all
        assert wait_built(c["app"].U)[0]["state"] == "conflicted"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    data = tmp_path_factory.mktemp("check") / "data"
    build(data)
    build_more(data)
    return data


@pytest.fixture
def data(built, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(built, copy)
    return copy


def hashes(root: Path, but: tuple[str, ...] = ()) -> dict[str, str]:
    """Every file below ``root`` (but those named in ``but``): its path -> sha256 of its bytes."""
    out = {}
    for where, _dirs, files in os.walk(root):
        for name in files:
            path = Path(where) / name
            if name not in but:
                out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def run_cli(*args):
    return CliRunner().invoke(main, ["check", *map(str, args)])


def problems_of(data: Path, **scope) -> list:
    report = check(data, **scope)
    assert not report.ok, "the check found nothing"
    return report.problems


def assert_reported(data: Path, file: str, *words: str, **scope) -> None:
    """The check finds a problem in ``file`` (relative to the data directory) saying ``words``; so does the CLI."""
    found = problems_of(data, **scope)
    lines = [p.line() for p in found]
    assert any(p.file == file and all(w in p.problem for w in words) for p in found), "\n".join(lines)
    result = run_cli(data)
    assert result.exit_code == 1, result.output
    assert any(file in line and all(w in line for w in words) for line in result.output.splitlines()), result.output


# -- sound ----------------------------------------------------------------------------------------


def test_a_sound_directory_checks_clean_and_not_a_byte_changes(data):
    before = hashes(data)
    report = check(data)
    assert report.ok, "\n".join(report.lines())
    assert report.repaired == []
    kinds = {c["type"] for c in report.checked}
    assert kinds == {"fifo", "lifo", "hash", "btree", "heap", "blob"} and len(report.checked) == 16
    result = run_cli(data)
    assert result.exit_code == 0, result.output
    assert "no problems" in result.output
    after = hashes(data)
    # LOCK is the lock every open takes: it names the process that holds it, now the check.
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert changed in ([], ["LOCK"]), changed
    assert int((data / "LOCK").read_text().split()[0]) == os.getpid()


def test_a_crash_is_repaired_first_as_at_any_open_and_then_checks_clean(data):
    done = run_script(KILLED_AFTER_A_PUSH, data)  # pushes to app.Q, ends without closing anything
    assert done.returncode == 0, done.stderr[-2000:]
    report = check(data)
    assert report.ok, "\n".join(report.lines())
    assert "app/Q" in report.repaired and "catalog" in report.repaired
    before = hashes(data)
    again = check(data)
    assert again.ok and again.repaired == []
    assert hashes(data) == before
    with hoarddb.open(data) as c:
        assert c["app"].Q.length() == 78


def test_a_scope_checks_only_what_it_names(data):
    report = check(data, db="app", bucket="H")
    assert report.ok and report.checked == [{"db": "app", "bucket": "H", "type": "hash"}]
    assert {c["db"] for c in check(data, db="ctl").checked} == {"ctl"}


# -- LMDB buckets: damage a normal open does not see ------------------------------------------------


def flip_in_documents(path: Path, value: str) -> None:
    """Flip the bytes of the BSON string ``value`` wherever data.mdb holds it in a document (the
    live leaf page, and any stale copy in a freed page), found by scanning the file for the
    document's bytes (its length prefix: index keys hold the value encoded otherwise)."""
    marker = (len(value) + 1).to_bytes(4, "little") + value.encode()
    raw = path.read_bytes()
    at = raw.find(marker)
    assert at > 0, marker
    while at >= 0:
        flip(path, at + 4, len(value))
        at = raw.find(marker, at + 1)


def test_bytes_flipped_in_a_leaf_page_of_documents_are_found_though_reads_do_not_see_them(data):
    flip_in_documents(data / "app" / "H" / "kv" / "data.mdb", "h7@x.org")
    with hoarddb.open(data) as c:  # the normal open and reads: nothing seen
        h = c["app"].H
        assert h.length() == 50 and len(h.find({}, limit=100)) == 50
        assert h.search({"email": "h7@x.org"})[0]["_id_"] == "k7"  # answered from the index, unchecked
    assert_reported(data, "app/H/kv/data.mdb", 'index "email_1"', '"k7"')


def raw_write(folder: Path, fn) -> None:
    """Change a closed LMDB environment with LMDB itself, behind hoardDB's back."""
    env = lmdb.open(str(folder), subdir=True, max_dbs=0)
    try:
        with env.begin(write=True) as txn:
            fn(txn)
    finally:
        env.close()


def entry_key(txn, *parts) -> bytes:
    """The index entry key holding the encoded ``parts`` (found among the b"I" keys)."""
    wanted = b"".join(encode_key(p) for p in parts)
    for key in txn.cursor().iternext(values=False):
        if key.startswith(b"I") and wanted in key:
            return bytes(key)
    raise AssertionError(parts)


def test_an_index_entry_deleted_behind_hoarddbs_back_is_reported(data):
    raw_write(data / "app" / "H" / "kv", lambda txn: txn.delete(entry_key(txn, "h3@x.org")))
    assert_reported(data, "app/H/kv/data.mdb", 'index "email_1" has no entry for document "k3"')


def test_an_index_entry_added_behind_hoarddbs_back_is_reported(data):
    def add(txn):
        real = entry_key(txn, "c0", 0, "k0")  # the compound index's entry of k0
        txn.put(real[:2] + encode_key("c9") + encode_key(99) + encode_key("k0"), b"")

    raw_write(data / "app" / "H" / "kv", add)
    assert_reported(data, "app/H/kv/data.mdb", 'index "city_1_age_1"', '"k0"', '"c9", 99', "does not hold")


def test_a_ttl_index_entry_deleted_is_reported(data):
    def delete(txn):
        import datetime

        at = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
        txn.delete(entry_key(txn, at, "k5"))

    raw_write(data / "app" / "H" / "kv", delete)
    assert_reported(data, "app/H/kv/data.mdb", 'index "at_1" has no entry for document "k5"')


def test_two_holders_of_a_unique_value_are_reported(data):
    def twin(txn):
        key = b"D" + encode_key("k4")
        doc = decode(txn.get(key))
        txn.put(key, encode(dict(doc, email="h3@x.org")))

    raw_write(data / "app" / "H" / "kv", twin)
    assert_reported(data, "app/H/kv/data.mdb", '"k4"', '"k3"', 'email = "h3@x.org"', "unique")


def test_a_claim_of_a_conflicted_unique_index_deleted_is_reported(data):
    def unclaim(txn):
        claim = entry_key(txn, "x", "b")
        assert txn.delete(claim)

    raw_write(data / "app" / "U" / "kv", unclaim)
    assert_reported(data, "app/U/kv/data.mdb", 'conflicted unique index "mail_1" has no claim for document "b"')


def test_a_count_that_disagrees_with_the_documents_is_reported(data):
    raw_write(data / "app" / "T" / "kv", lambda txn: txn.put(b"Mcount", (49).to_bytes(8, "little")))
    assert_reported(data, "app/T/kv/data.mdb", "count says 49 entries, and 50 are there")


def test_a_btree_entry_under_another_sort_key_is_reported(data):
    def move(txn):
        key = b"D" + encode_key(5) + (6).to_bytes(8, "big")
        raw = txn.get(key)
        assert raw is not None
        txn.delete(key)
        txn.put(b"D" + encode_key(500) + (6).to_bytes(8, "big"), raw)

    raw_write(data / "app" / "T" / "kv", move)
    assert_reported(data, "app/T/kv/data.mdb", "sort key 5 is stored under the key of another")


def test_a_heap_claim_without_its_element_is_reported(data):
    def drop_claimed(txn):
        claim = next(bytes(k) for k in txn.cursor().iternext(values=False) if k.startswith(b"L"))
        assert txn.delete(b"D" + claim[1:])
        txn.put(b"Mcount", (49).to_bytes(8, "little"))

    raw_write(data / "app" / "P" / "kv", drop_claimed)
    assert_reported(data, "app/P/kv/data.mdb", "claim record names element", "not there")


def test_a_store_field_element_without_its_count_is_reported(data):
    def orphan(txn):
        key = next(bytes(k) for k in txn.cursor().iternext(values=False) if k.startswith(b"C"))
        txn.delete(key)

    raw_write(data / "app" / "F" / "kv", orphan)
    assert_reported(data, "app/F/kv/data.mdb", "store field", "of document 2", "no count record")


def test_a_reader_that_crashes_is_reported_as_damage_and_the_check_goes_on(data, monkeypatch):
    """LMDB can stop a process on a damaged page (SIGSEGV, SIGBUS): the reader is a child, and
    its death names the file it read. (Here the child kills itself when it reaches bucket T:
    damage that crashes LMDB cannot be made on purpose reliably.)"""
    monkeypatch.setattr(check_module, "READER", ["-c", CRASHING_READER])
    monkeypatch.setenv("PYTHONPATH", child_env()["PYTHONPATH"])
    report = check(data)
    crashed = [p for p in report.problems if p.bucket == "T"]
    assert len(crashed) == 1 and crashed[0].file == "app/T/kv/data.mdb", report.lines()
    assert "crashed the reader" in crashed[0].problem and "SIGSEGV" in crashed[0].problem
    assert [p for p in report.problems if p.bucket != "T"] == []  # every bucket after T checked, clean
    assert {c["bucket"] for c in report.checked} >= {"T", "T2"}


#: A reader that dies of SIGSEGV when it is given bucket T, and checks the others.
CRASHING_READER = """
import os, signal
from hoarddb.tools import check
real = check._run
def run(task):
    if task["task"] == "bucket" and task["declaration"]["name"] == "T":
        os.kill(os.getpid(), signal.SIGSEGV)
    return real(task)
check._run = run
check.serve()
"""


# -- queues --------------------------------------------------------------------------------------


def test_a_fifo_entry_that_fails_its_crc_is_reported(data):
    seg = data / "app" / "Q" / "seg_00002.fifo"
    flip(seg, seg.stat().st_size // 2)
    assert_reported(data, "app/Q/seg_00002.fifo", "fails its checksum")


def test_a_lifo_whose_segments_disagree_with_its_counts_is_reported(data):
    seg = data / "app" / "S" / "seg_00003.lifo"
    os.truncate(seg, seg.stat().st_size - 1)
    assert_reported(data, "app/S/state.bson", "clean close counted")


def test_a_queue_segment_of_another_queue_with_the_same_sizes_is_reported(data):
    """(Before: it checked as this queue's, its sizes matching what the clean close counted.)"""
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:
        for name in ("Z", "Z2"):
            c["app"].create_bucket(name, type="fifo", segment_size=4096).batch_push(
                [{"n": i, "pad": name[-1] * 900} for i in range(10)])
    z = data / "app" / "Z" / "seg_00002.fifo"
    z.write_bytes((data / "app" / "Z2" / "seg_00002.fifo").read_bytes())
    assert_reported(data, "app/Z/seg_00002.fifo", "belongs to another queue")


def test_a_damaged_state_slot_of_a_queue_closed_cleanly_is_reported_as_whole_in_the_other(data):
    state = data / "app" / "Q" / "state.bson"
    raw = state.read_bytes()
    newest = max((s["seq"], i) for i in range(2) if (s := segment_format._parse_slot(raw[i * 512:(i + 1) * 512])))[1]
    flip(state, newest * 512 + 20)
    assert_reported(data, "app/Q/state.bson", f"slot {newest} does not check", "whole state of the last clean close")


# -- blobs ---------------------------------------------------------------------------------------


def test_a_blob_with_one_byte_changed_is_reported(data):
    path = blob_file(data, "B")
    flip(path, 10, 1)
    assert_reported(data, f"app/B/{path.name}", "is corrupt", "sha256")


def test_a_blob_file_the_index_does_not_name_is_reported(data):
    stray = data / "app" / "B" / "0192a3b4-c5d6-7890-abcd-ef12345678a1"
    shutil.copyfile(blob_file(data, "B"), stray)
    assert_reported(data, f"app/B/{stray.name}", "index does not name")


def test_a_blob_record_without_its_file_is_reported(data):
    path = blob_file(data, "B")
    path.unlink()
    assert_reported(data, f"app/B/{path.name}", "is missing")


def test_a_store_field_blob_with_one_byte_changed_is_reported(data):
    path = next((data / "app" / "H" / "fields").iterdir())
    flip(path, 3, 1)
    assert_reported(data, f"app/H/fields/{path.name}", "is corrupt")


# -- the catalog ---------------------------------------------------------------------------------


def test_a_declared_bucket_without_its_folder_is_reported(data):
    shutil.rmtree(data / "app" / "T2")
    assert_reported(data, "app/T2", "folder is missing")


def test_a_folder_no_bucket_declares_is_reported(data):
    shutil.copytree(data / "app" / "T", data / "app" / "Tcopy")
    assert_reported(data, "app/Tcopy/", "no bucket of the catalog")


# -- the command ---------------------------------------------------------------------------------


def test_json_output_is_parseable(data):
    flip(blob_file(data, "B"), 10, 1)
    result = run_cli(data, "--json")
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["ok"] is False and len(report["checked"]) == 16
    problem, = report["problems"]
    assert problem["db"] == "app" and problem["bucket"] == "B" and problem["file"].startswith("app/B/")
    assert "corrupt" in problem["problem"] and "restore" in problem["action"]
    clean = json.loads(run_cli(data, "--json", "--db", "ctl").output)
    assert clean["ok"] is True and clean["problems"] == []


@pytest.mark.parametrize("args, said", [
    (["--bucket", "H"], "give --db too"),
    (["--db", "nope"], "databases: app, ctl"),
    (["--db", "app", "--bucket", "Nope"], "its buckets: B, B2, F, H"),
    (["--frobnicate"], "No such option"),
])
def test_usage_errors_exit_2_saying_what_is_accepted(data, args, said):
    result = run_cli(data, *args)
    assert result.exit_code == 2 and said in result.output, result.output


def test_a_directory_that_is_not_a_data_directory_is_refused(tmp_path):
    result = run_cli(tmp_path)
    assert result.exit_code == 2 and "not a hoardDB data directory" in result.output
    assert not (tmp_path / "LOCK").exists() and not (tmp_path / "catalog").exists()  # nothing made
    assert run_cli(tmp_path / "missing").exit_code == 2


def test_a_running_servers_directory_is_refused(data):
    with ServerProcess(data) as server:
        result = run_cli(data)
        assert result.exit_code == 2, result.output
        assert f"open in another process (pid {server.proc.pid})" in result.output


# -- every damage the opener refuses, the check reports too ---------------------------------------


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_what_an_open_refuses_the_check_reports_naming_the_file(built, tmp_path, case):
    """tests/test_corruption.py's table: damage a read answers with CORRUPT_DATA (or that
    stops the open) is a problem of the check naming the same file; harmless damage checks clean."""
    rel, how, outcome, named = case
    data = tmp_path / "data"
    shutil.copytree(built, data)
    damage(data, rel, how)
    report = check(data)
    if outcome == "intact":
        assert report.ok, "\n".join(report.lines())
        return
    target = rel.split("/")[1] if outcome != "open" else None
    assert not report.ok, f"{rel} {how}: the check found nothing"
    mine = [p for p in report.problems if p.bucket == target]
    assert [p for p in report.problems if p.bucket != target] == [], "\n".join(report.lines())
    assert mine, "\n".join(report.lines())
    assert any(named in f"{p.file}: {p.problem}" for p in mine), "\n".join(report.lines())


def test_a_blob_file_whose_name_is_an_id_with_a_newline_is_reported(data):
    odd = data / "app" / "B" / (blob_file(data, "B").name + "\n")
    shutil.copyfile(blob_file(data, "B"), odd)
    assert_reported(data, f"app/B/{odd.name!r}", "not a blob's id")
