"""The readers of ingest and restore: BSON framing and JSON Lines, with document numbers, offsets and lines."""

from __future__ import annotations

import datetime
import gzip
import json
import struct

import bson
import pytest
from bson import Binary, Decimal128, Int64, ObjectId

from hoarddb.tools.readers import InputFile, read_bson, read_jsonl, split_name
from hoarddb.values.codec import MAX_DOCUMENT_SIZE

from .toolfiles import offsets, write_bson


def records(path, fmt="bson"):
    with InputFile(path) as f:
        return list(read_bson(f) if fmt == "bson" else read_jsonl(f))


def test_split_name_knows_each_format_and_skips_metadata(tmp_path):
    assert split_name(tmp_path / "users.bson") == ("users", "bson")
    assert split_name(tmp_path / "users.bson.gz") == ("users", "bson")
    assert split_name(tmp_path / "events.2024.jsonl") == ("events.2024", "jsonl")
    assert split_name(tmp_path / "users.json") == ("users", "jsonl")
    assert split_name(tmp_path / "users.metadata.json") is None
    assert split_name(tmp_path / "users.csv") is None


@pytest.mark.parametrize("gz", [False, True])
def test_bson_records_carry_number_and_offset_plain_or_gzip(tmp_path, gz):
    docs = [{"_id": i, "pad": "x" * i} for i in range(50)]
    raws = write_bson(tmp_path / "a.bson", docs, gz=gz)
    got = records(tmp_path / "a.bson")
    assert [r.doc for r in got] == docs
    assert [r.number for r in got] == list(range(1, 51))
    assert [r.offset for r in got] == offsets(raws)
    assert all(r.error is None for r in got)


def test_a_truncated_bson_file_is_fatal_at_its_last_document(tmp_path):
    raws = write_bson(tmp_path / "a.bson", [{"n": i} for i in range(3)])
    data = (tmp_path / "a.bson").read_bytes()
    (tmp_path / "a.bson").write_bytes(data[:-5])
    got = records(tmp_path / "a.bson")
    assert [r.doc for r in got[:2]] == [{"n": 0}, {"n": 1}]
    bad = got[2]
    assert (bad.number, bad.offset, bad.code, bad.fatal) == (3, offsets(raws)[2], "TRUNCATED", True)
    assert "file ends" in bad.error


def test_a_file_cut_inside_a_length_prefix_is_truncated(tmp_path):
    write_bson(tmp_path / "a.bson", [{"n": 1}])
    with open(tmp_path / "a.bson", "ab") as fh:
        fh.write(b"\x10\x00")
    got = records(tmp_path / "a.bson")
    assert got[-1].code == "TRUNCATED" and got[-1].number == 2 and got[-1].fatal


def test_an_impossible_length_loses_the_thread(tmp_path):
    raws = write_bson(tmp_path / "a.bson", [{"n": 1}, {"n": 2}, {"n": 3}])
    data = bytearray((tmp_path / "a.bson").read_bytes())
    data[offsets(raws)[1]:offsets(raws)[1] + 4] = struct.pack("<i", 2)
    (tmp_path / "a.bson").write_bytes(bytes(data))
    got = records(tmp_path / "a.bson")
    assert len(got) == 2
    assert got[1].code == "CORRUPT" and got[1].fatal and got[1].number == 2 and got[1].offset == offsets(raws)[1]


def test_a_damaged_document_is_refused_and_the_next_one_read(tmp_path):
    raws = write_bson(tmp_path / "a.bson", [{"s": "abc"}, {"s": "def"}, {"s": "ghi"}])
    data = bytearray((tmp_path / "a.bson").read_bytes())
    at = offsets(raws)[1] + raws[1].index(b"def")
    data[at] = 0xFF  # invalid UTF-8 inside the string
    (tmp_path / "a.bson").write_bytes(bytes(data))
    got = records(tmp_path / "a.bson")
    assert [r.doc for r in got] == [{"s": "abc"}, None, {"s": "ghi"}]
    assert got[1].code == "CORRUPT" and not got[1].fatal and got[1].offset == offsets(raws)[1]


def test_a_document_without_its_final_zero_is_refused(tmp_path):
    raws = write_bson(tmp_path / "a.bson", [{"a": 1}, {"b": 2}])
    data = bytearray((tmp_path / "a.bson").read_bytes())
    data[len(raws[0]) - 1] = 7
    (tmp_path / "a.bson").write_bytes(bytes(data))
    got = records(tmp_path / "a.bson")
    assert got[0].code == "CORRUPT" and not got[0].fatal and got[1].doc == {"b": 2}


def test_a_document_over_16_mib_is_refused_and_skipped(tmp_path):
    big = bson.encode({"blob": Binary(b"\0" * (MAX_DOCUMENT_SIZE + 10))})
    raws = write_bson(tmp_path / "a.bson", [{"n": 1}, big, {"n": 3}])
    got = records(tmp_path / "a.bson")
    assert [r.doc for r in got] == [{"n": 1}, None, {"n": 3}]
    assert got[1].code == "DOCUMENT_TOO_LARGE" and got[1].offset == offsets(raws)[1] and got[1].size == len(big)
    assert got[2].offset == offsets(raws)[2]


def test_a_cut_gzip_stream_is_fatal(tmp_path):
    write_bson(tmp_path / "a.bson.gz", [{"n": i, "pad": "y" * 500} for i in range(200)], gz=True)
    data = (tmp_path / "a.bson.gz").read_bytes()
    (tmp_path / "a.bson.gz").write_bytes(data[: len(data) // 2])
    got = records(tmp_path / "a.bson.gz")
    assert got[-1].fatal and got[-1].error
    assert all(r.error is None for r in got[:-1]) and len(got) > 1


def test_jsonl_reads_canonical_and_relaxed_lines_in_one_file(tmp_path):
    oid = ObjectId()
    lines = [
        '{"_id": {"$oid": "%s"}, "n": {"$numberLong": "5"}, "i": {"$numberInt": "7"}, '
        '"d": {"$numberDouble": "1.0"}, "m": {"$numberDecimal": "9.99"}, '
        '"at": {"$date": {"$numberLong": "1709209815123"}}, "b": {"$binary": {"base64": "AAE=", "subType": "00"}}, '
        '"u": {"$binary": {"base64": "AAAAAAAAAAAAAAAAAAAAAQ==", "subType": "04"}}}' % oid,
        "",
        '{"_id": {"$oid": "%s"}, "n": 5, "big": 1099511627776, "d": 1.0, "m": {"$numberDecimal": "9.99"}, '
        '"at": {"$date": "2024-02-29T12:30:15.123Z"}, "plain": [1, {"x": null}]}' % oid,
    ]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    got = records(tmp_path / "a.jsonl", "jsonl")
    canonical, relaxed = got[0].doc, got[1].doc
    at = datetime.datetime(2024, 2, 29, 12, 30, 15, 123000, tzinfo=datetime.timezone.utc)
    assert canonical["_id"] == oid and type(canonical["n"]) is Int64 and type(canonical["i"]) is int
    assert type(canonical["d"]) is float and canonical["m"] == Decimal128("9.99") and canonical["at"] == at
    assert canonical["b"] == b"\x00\x01" and str(canonical["u"]) == "00000000-0000-0000-0000-000000000001"
    assert relaxed["_id"] == oid and type(relaxed["n"]) is int and relaxed["at"] == at
    assert relaxed["big"] == 2**40 and type(relaxed["d"]) is float and relaxed["plain"] == [1, {"x": None}]
    assert [(r.number, r.line) for r in got] == [(1, 1), (2, 3)]
    assert got[1].offset == len(lines[0]) + 2


def test_a_line_that_is_not_json_is_refused_with_its_line_and_the_next_read(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n\n{"a": 2,,}\n[1, 2]\n{"a": 3}\n')
    got = records(tmp_path / "a.jsonl", "jsonl")
    assert [r.doc for r in got] == [{"a": 1}, None, None, {"a": 3}]
    assert (got[1].number, got[1].line, got[1].offset, got[1].code) == (2, 3, 10, "NOT_JSON")
    assert got[2].line == 4 and "one JSON object" in got[2].error


@pytest.mark.parametrize("gz", [False, True])
def test_a_json_array_export_is_read_element_by_element(tmp_path, gz):
    text = '  [\n{"a": "x]}\\"{", "é": 1},\n {"b": [1, {"c": 2}]} ,{"d": {"$date": "2020-01-01T00:00:00Z"}}\n]\n'
    data = text.encode()
    (tmp_path / "a.json").write_bytes(gzip.compress(data) if gz else data)
    got = records(tmp_path / "a.json", "jsonl")
    assert [r.doc for r in got] == [{"a": 'x]}"{', "é": 1}, {"b": [1, {"c": 2}]},
                                    {"d": datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)}]
    assert [r.number for r in got] == [1, 2, 3] and [r.line for r in got] == [2, 3, 3]
    assert [r.offset for r in got] == [data.index(b'{"a"'), data.index(b'{"b"'), data.index(b'{"d"')]


def test_a_json_array_read_across_many_chunks(tmp_path, monkeypatch):
    from hoarddb.tools import readers

    monkeypatch.setattr(readers, "CHUNK", 64)  # every element spans reads, and the buffer is cut often
    docs = [{"n": i, "s": "x" * (i % 90), "q": '"' * (i % 3)} for i in range(400)]
    (tmp_path / "a.json").write_text("[" + ",\n".join(json.dumps(d) for d in docs) + "]")
    got = records(tmp_path / "a.json", "jsonl")
    assert [r.doc for r in got] == docs
    assert [r.line for r in got] == list(range(1, 401))


def test_a_json_array_s_bad_elements_are_refused_and_the_next_read(tmp_path):
    (tmp_path / "a.json").write_text('[{"a": 1}, 5, {"a": 2,,}, "s", {"a": 3},]')
    got = records(tmp_path / "a.json", "jsonl")
    assert [r.doc for r in got] == [{"a": 1}, None, None, None, {"a": 3}]
    assert [r.code for r in got] == ["", "NOT_JSON", "NOT_JSON", "NOT_JSON", ""]
    assert "must be one JSON object" in got[1].error and not any(r.fatal for r in got)


@pytest.mark.parametrize("text, code, why", [
    ('[{"a": 1}, {"a": 2', "TRUNCATED", "ends inside this document"),
    ('[{"a": 1}, {"a": "2}', "TRUNCATED", "ends inside this document"),
    ('[{"a": 1}', "TRUNCATED", "the end of the file"),
    ('[{"a": 1} {"a": 2}]', "CORRUPT", "separated by commas"),
    ('[{"a": 1}] {"a": 2}', "CORRUPT", "follows the end of the JSON array"),
])
def test_a_json_array_that_loses_its_thread_ends_the_file(tmp_path, text, code, why):
    (tmp_path / "a.json").write_text(text)
    got = records(tmp_path / "a.json", "jsonl")
    assert got[0].doc == {"a": 1} and len(got) == 2
    assert got[1].code == code and got[1].fatal and why in got[1].error


def test_gzip_jsonl_is_read(tmp_path):
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b'{"a": 1}\n{"a": 2}\n'))
    assert [r.doc for r in records(tmp_path / "a.jsonl.gz", "jsonl")] == [{"a": 1}, {"a": 2}]


def test_a_cut_gzip_stream_is_truncated_at_the_document_it_cuts(tmp_path):
    raws = write_bson(tmp_path / "a.bson.gz", [{"_id": i, "x": "y" * 100} for i in range(50)], gz=True)
    data = (tmp_path / "a.bson.gz").read_bytes()
    (tmp_path / "a.bson.gz").write_bytes(data[:-30])
    got = records(tmp_path / "a.bson.gz")
    last = got[-1]
    assert all(r.error is None for r in got[:-1])
    assert last.fatal and last.code == "TRUNCATED" and "gzip -t" in last.error
    assert last.number == len(got) and last.offset == offsets(raws)[len(got) - 1]


def test_a_file_that_is_not_bson_is_corrupt_with_a_hint(tmp_path):
    (tmp_path / "a.bson").write_text('{"_id": 1, "name": "json, not bson"}\n')
    (got,) = records(tmp_path / "a.bson")
    assert got.fatal and got.code == "CORRUPT" and "not BSON" in got.error and ".json" in got.error


def test_a_pretty_printed_json_document_gets_a_hint(tmp_path):
    (tmp_path / "a.json").write_text('{\n  "a": 1\n}\n')
    got = records(tmp_path / "a.json", "jsonl")
    assert got[0].code == "NOT_JSON" and "one whole document per line" in got[0].error
