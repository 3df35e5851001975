"""Answers as text: readable lines, and the one-line --json shape scripts depend on."""

from __future__ import annotations

import datetime
import hashlib
import json
import uuid

from bson.int64 import Int64

from hoarddb.errors import DuplicateKeyError
from hoarddb.hql import format_answer, format_error, format_value, json_line, parse_value
from hoarddb.hql.printer import BYTES_SHOWN, error_answer, settle

UTC = datetime.timezone.utc


def test_documents_print_as_typed():
    assert format_value({"Author": "Bob", "Text": "Nice photo!"}) == '{Author: "Bob", Text: "Nice photo!"}'
    assert format_value({"At": datetime.datetime(2026, 9, 29, 10, tzinfo=UTC)}) == '{At: ISODate("2026-09-29T10:00:00Z")}'


def test_wide_documents_break_over_lines_and_still_parse():
    doc = {"Name": "x" * 60, "Tags": ["a" * 30, "b" * 30, "c" * 30], "Nested": {"k": 1}}
    text = format_value(doc)
    assert text.count("\n") >= 3
    assert parse_value(text) == doc


def test_long_bytes_print_as_a_summary():
    data = b"\x01" * (BYTES_SHOWN + 1)
    shown = format_answer("get", {"ok": 1, "result": {"data": data}})
    assert f"<{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}>" in shown
    assert 'BinData(0, "AQ==")' in format_answer("get", {"ok": 1, "result": {"data": b"\x01"}})


def test_describe_lines():
    info = {"name": "Users", "db": "app", "type": "hash", "entries": 2, "bytes": 8192, "options": {},
            "fields": [{"name": "Email", "type": "string", "keywords": ["unique"]}],
            "store_fields": [{"name": "Expenses", "type": "lifo"}],
            "indexes": [
                {"name": "Email_1", "fields": ["Email"], "unique": True, "expire_after_seconds": None, "state": "ready"},
                {"name": "CustomerID_1_CreatedAt_1", "fields": ["CustomerID", "CreatedAt"], "unique": False,
                 "expire_after_seconds": None, "state": "ready"},
                {"name": "CreatedAt_1", "fields": ["CreatedAt"], "unique": False, "expire_after_seconds": 3600,
                 "state": "ready"},
            ], "verbs": ["find"]}
    text = format_answer("describe_bucket", {"ok": 1, "result": info})
    assert text.splitlines() == [
        "Bucket:   Users",
        "Type:     hash",
        "Entries:  2",
        "Bytes:    8192",
        "Fields:   Email string unique",
        "Stores:   Expenses lifoStore",
        "Indexes:  Email_1 (unique), CustomerID_1_CreatedAt_1, CreatedAt_1 (ttl 3600s)",
    ]
    info["indexes"] = [{"name": "Email_1", "fields": ["Email"], "unique": True, "state": "conflicted"}]
    assert "Indexes:  Email_1 (unique, conflicted)" in format_answer("stats", {"ok": 1, "result": info})
    info["indexes"] = []
    assert "Indexes:  none" in format_answer("describe_bucket", {"ok": 1, "result": info})


def test_readable_answers():
    assert format_answer("push", {"ok": 1, "result": None}) == "ok"
    assert format_answer("create_database", {"ok": 1, "result": None}) == "ok"
    assert format_answer("pop", {"ok": 1, "result": None}) == "null"
    assert format_answer("list_buckets", {"ok": 1, "result": ["A", "B"]}) == "A\nB"
    assert format_answer("list_databases", {"ok": 1, "result": []}) == "(none)"
    assert format_answer("length", {"ok": 1, "result": 3}) == "3"


def test_streams_are_read_to_the_end():
    answer = settle({"ok": 1, "result": iter([b"ab", b"c"])})
    assert answer["result"] == {"size": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}
    assert format_answer("stream", answer) == f"3 bytes, sha256 {hashlib.sha256(b'abc').hexdigest()}"
    assert json.loads(json_line(answer)) == {"ok": 1, "result": answer["result"]}


def test_json_line_shape():
    line = json_line({"index_used": "none — full scan", "ok": 1, "result": [{"a": 1}]})
    assert "\n" not in line
    assert line == '{"ok": 1, "result": [{"a": 1}], "index_used": "none — full scan"}'
    assert json_line({"ok": 1, "result": None, "warnings": ["w"]}) == '{"ok": 1, "result": null, "warnings": ["w"]}'


def test_json_values_are_relaxed_extended_json():
    doc = {"at": datetime.datetime(2026, 9, 29, 10, tzinfo=UTC), "n": Int64(5), "f": 1.5, "b": b"hi",
           "u": uuid.UUID("0192a3b4-c5d6-7890-abcd-ef12345678a1")}
    assert json.loads(json_line({"ok": 1, "result": doc})) == {"ok": 1, "result": {
        "at": {"$date": "2026-09-29T10:00:00Z"}, "n": 5, "f": 1.5,
        "b": {"$binary": {"base64": "aGk=", "subType": "00"}},
        "u": {"$binary": {"base64": "AZKjtMXWeJCrze8SNFZ4oQ==", "subType": "04"}}}}


def test_errors():
    err = DuplicateKeyError('Duplicate value for unique index "Email_1"', holder="u1")
    assert format_error(err) == 'error DUPLICATE_KEY (15): Duplicate value for unique index "Email_1"'
    assert json.loads(json_line(error_answer(err))) == {
        "ok": 0, "code": 15, "codeName": "DUPLICATE_KEY", "message": 'Duplicate value for unique index "Email_1"'}
    assert list(json.loads(json_line(error_answer(err)))) == ["ok", "code", "codeName", "message"]


def test_dbref_code_and_native_regex_print_so_they_read_back():
    import re

    from bson.code import Code
    from bson.dbref import DBRef
    from bson.regex import Regex

    # BSON decodes {$ref, $id} as a DBRef: it used to print as <DBRef DBRef('users', 5)>.
    assert format_value({"r": DBRef("users", 5)}) == '{r: {$ref: "users", $id: 5}}'
    assert parse_value(format_value(DBRef("users", 5))) == {"$ref": "users", "$id": 5}
    # Code is a str subclass: it used to print as a plain string and lose its type.
    assert format_value(Code("f()")) == 'Code("f()")'
    assert format_value(Code("f()", {"x": 1})) == 'Code("f()", {x: 1})'
    assert type(parse_value(format_value(Code("f()")))) is Code
    assert format_value(re.compile("a.b", re.I)) == 'Regex("a.b", "iu")'
    assert parse_value(format_value(re.compile("a.b", re.I))) == Regex("a.b", "iu")
