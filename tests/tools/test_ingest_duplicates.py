"""ingest and keys: a later document with an earlier one's key is reported as replacing it, and
``_id_`` lands right after ``_id`` whatever the file format and wherever the database is."""

from __future__ import annotations

import json

import bson
import pytest
from click.testing import CliRunner

import hoarddb
from hoarddb.cli import main
from hoarddb.testing import ServerThread
from hoarddb.tools import ingest

from .toolfiles import offsets, write_bson


@pytest.fixture(params=["one process", "reader process"])
def reader(request, monkeypatch):
    """Read .bson files in this process, or in a second one (as files of 32 MiB and more are)."""
    import sys
    module = sys.modules["hoarddb.tools.ingest"]
    monkeypatch.setattr(module, "PARALLEL_MIN_BYTES", 0 if request.param == "reader process" else 1 << 60)
    return request.param


def raw_document(*pairs) -> bytes:
    """BSON with its fields in exactly this order (pymongo's encoder would move _id first)."""
    body = b"".join(bson.encode({k: v})[4:-1] for k, v in pairs)
    return (len(body) + 5).to_bytes(4, "little") + body + b"\x00"


def test_a_duplicate_id_in_json_lines_is_reported_as_a_replacement(client, tmp_path):
    lines = [{"_id": i, "v": i} for i in range(5)] + [{"_id": 2, "v": "again"}]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(d) for d in lines) + "\n")
    report = ingest(client, tmp_path / "t.jsonl", into="app.t")
    assert report.ok and report.documents == 6 and report.replaced == 1
    assert client["app"].t.count() == 5 == report.buckets[0].kept
    (r,) = report.buckets[0].replaced
    assert (r.number, r.line, r.earlier, r.earlier_line) == (6, 6, 3, 3)
    assert r.offset == sum(len(json.dumps(d)) + 1 for d in lines[:5])
    assert client["app"].t.get(2)["v"] == "again"
    text = report.summary()
    assert "document 6, line 6" in text and "has the key of document 3 (line 3), and replaced it" in text
    assert "loaded 6 document(s) in 1 bucket(s); 1 of them replaced an earlier one with the same key, " \
           "so 5 are kept" in text


def test_duplicates_across_batches_and_equal_numbers_are_one_key(client, tmp_path, reader):
    # 7 and 7.0 are one _id_ to a hash bucket; the third document is in a later batch than the first.
    docs = [{"_id": 7, "v": 1}, {"_id": "a"}, {"_id": 8}, {"_id": 7.0, "v": 2}, {"_id": "a", "v": 3}]
    raws = write_bson(tmp_path / "n.bson", docs)
    report = ingest(client, tmp_path / "n.bson", into="app.n", batch_size=2)
    rep = report.buckets[0]
    assert [(r.number, r.earlier, r.offset) for r in rep.replaced] == [(4, 1, offsets(raws)[3]),
                                                                       (5, 2, offsets(raws)[4])]
    assert rep.replaced[0].line is None and rep.kept == 3 == client["app"].n.count()
    assert client["app"].n.get(7)["v"] == 2


def test_no_replacement_without_duplicates_or_outside_hash_buckets(client, tmp_path):
    write_bson(tmp_path / "u.bson", [{"_id": i} for i in range(10)])
    report = ingest(client, tmp_path / "u.bson", into="app.u")
    assert report.replaced == 0 and "replaced" not in report.summary()
    write_bson(tmp_path / "q.bson", [{"_id": 1}, {"_id": 1}])
    report = ingest(client, tmp_path / "q.bson", into="app.q", type="fifo", yes=True)
    assert report.replaced == 0 and client["app"].q.length() == 2


def test_a_refused_document_neither_replaces_nor_is_replaced(client, tmp_path):
    client["app"].create_bucket("users", type="hash", indices=[{"field": "email", "unique": True}])
    docs = [{"_id": 1, "email": "a"}, {"_id": 2, "email": "a"},  # 2 is refused: its email is taken
            {"_id": 2, "email": "b"},  # the first 2 was not loaded: nothing is replaced
            {"_id": 1, "email": "c"}]  # replaces 1
    write_bson(tmp_path / "users.bson", docs)
    report = ingest(client, tmp_path / "users.bson", into="app.users", on_error="skip")
    rep = report.buckets[0]
    assert [r.number for r in rep.refused] == [2] and rep.refused[0].code == "DUPLICATE_KEY"
    assert [(r.number, r.earlier) for r in rep.replaced] == [(4, 1)]
    assert rep.documents == 3 and rep.kept == 2 == client["app"].users.count()


def test_the_json_report_lists_replacements(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"_id": 1}\n{"_id": 1, "x": 2}\n')
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "t.jsonl"), "--into", "app.t",
                                       "--data", str(tmp_path / "data"), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["action"] == "ingest" and out["ok"] is True and out["documents"] == 2 and out["replaced"] == 1
    (bucket,) = out["buckets"]
    assert bucket["kept"] == 1
    assert bucket["replaced"] == [{"file": str(tmp_path / "t.jsonl"), "number": 2, "offset": 11, "earlier": 1,
                                   "line": 2, "earlier_line": 1}]


def write_both(tmp_path):
    """The same documents as .bson (fields in file order, _id not first) and as JSON Lines."""
    pairs = [[("name", "x"), ("_id", 1), ("n", 2)], [("_id", 2), ("name", "y")],
             [("name", "z"), ("_id_", "own"), ("_id", 3)]]
    (tmp_path / "b.bson").write_bytes(b"".join(raw_document(*p) for p in pairs))
    (tmp_path / "j.jsonl").write_text("".join(json.dumps(dict(p)) + "\n" for p in pairs))


EXPECTED = {1: ["_id", "_id_", "name", "n"], 2: ["_id", "_id_", "name"], "own": ["_id", "_id_", "name"]}


def fields_of(client, bucket):
    return {key: list(client["app"][bucket].get(key)) for key in EXPECTED}


def test_id_key_lands_right_after_id_from_bson_and_json_alike(client, tmp_path, reader):
    write_both(tmp_path)
    for name, bucket in (("b.bson", "b"), ("j.jsonl", "j")):
        assert ingest(client, tmp_path / name, into=f"app.{bucket}").ok
    assert fields_of(client, "b") == fields_of(client, "j")
    assert fields_of(client, "b")[1] == EXPECTED[1] and fields_of(client, "b")[2] == EXPECTED[2]


def test_id_key_lands_in_the_same_place_over_the_wire(tmp_path):
    write_both(tmp_path)
    with hoarddb.open(tmp_path / "embedded") as embedded:
        for name, bucket in (("b.bson", "b"), ("j.jsonl", "j")):
            ingest(embedded, tmp_path / name, into=f"app.{bucket}")
        local = {b: fields_of(embedded, b) for b in ("b", "j")}
    with ServerThread(tmp_path / "served", insecure=True) as server, hoarddb.connect(server.url()) as remote:
        for name, bucket in (("b.bson", "b"), ("j.jsonl", "j")):
            assert ingest(remote, tmp_path / name, into=f"app.{bucket}").ok
        assert {b: fields_of(remote, b) for b in ("b", "j")} == local
    assert local["b"][1] == EXPECTED[1]
