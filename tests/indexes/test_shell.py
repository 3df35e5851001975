"""indexes.md's examples as the spec writes them, through the shell (hoardDB's HQL)."""

from __future__ import annotations

import io
import json

import hoarddb
from hoarddb.shell import run_script


def run(client, text, json_mode=True):
    out, err = io.StringIO(), io.StringIO()
    code = run_script(client, text, json_mode=json_mode, continue_on_error=True, out=out, err=err)
    if json_mode:
        return code, [json.loads(line) for line in out.getvalue().splitlines()]
    return code, out.getvalue() + err.getvalue()


def test_declaring_and_describing_indexes(tmp_path):
    with hoarddb.open(tmp_path) as c:
        code, text = run(c, """
use app
create bucket Users { type: hash, indices: [{field: "Email", unique: true}, {fields: ["CustomerID", "CreatedAt"]}, {field: "CreatedAt", expire_after_seconds: 3600}] }
describe bucket Users
db.Users.stats()
""", json_mode=False)
        assert code == 0, text
        assert text.count("Indexes:  Email_1 (unique), CustomerID_1_CreatedAt_1, CreatedAt_1 (ttl 3600s)") == 2


def test_unique_refusal_to_the_letter_through_the_shell(tmp_path):
    with hoarddb.open(tmp_path) as c:
        code, answers = run(c, """
use app
create bucket Users { type: hash, indices: [{field: "Email", unique: true}] }
db.Users.insert({_id_: "u1", Email: "dalek@example.com"})
db.Users.insert({_id_: "u2", Email: "dalek@example.com"})
db.Users.count()
""")
        assert answers[3] == {
            "ok": 0, "code": 15, "codeName": "DUPLICATE_KEY",
            "message": 'Duplicate value for unique index "Email_1" on bucket "Users": Email = "dalek@example.com" '
                       'is already used by document "u1". Change the value, update that document instead, or '
                       "delete it first.",
        }
        assert answers[4]["result"] == 1


def test_field_line_unique_and_alter_bucket(tmp_path):
    with hoarddb.open(tmp_path) as c:
        code, answers = run(c, """
use app
create bucket Users { type: hash, Email string unique }
db.Users.insert({_id_: "u1", Email: "dalek@example.com"})
db.Users.insert({_id_: "u2", Email: "dalek@example.com"})
create bucket Other { type: hash }
alter bucket Other { indices: ["Email"] }
""")
        assert [a["ok"] for a in answers] == [1, 1, 1, 0, 1, 0]
        assert "declare indexes when you create the bucket" in answers[5]["message"]


def test_a_misspelt_key_is_refused_naming_the_accepted_ones(tmp_path):
    with hoarddb.open(tmp_path) as c:
        code, answers = run(c, 'use app\ncreate bucket Users { type: hash, indices: [{field: "Email", uniqe: true}] }')
        assert answers[1]["codeName"] == "UNKNOWN_OPTION" and "unique" in answers[1]["message"]


def test_search_names_the_index_in_json_and_prints_only_results(tmp_path):
    with hoarddb.open(tmp_path) as c:
        script = """
use app
create bucket Orders { type: hash, indices: [{fields: ["CustomerID", "CreatedAt"]}] }
db.Orders.insert({_id_: "o1", CustomerID: "c1", CreatedAt: ISODate("2026-09-29T10:00:00Z")})
db.Orders.search({CustomerID: "c1"})
db.Orders.search({CustomerID: "c1", CreatedAt: ISODate("2026-09-29T10:00:00Z")})
db.Orders.search({CreatedAt: ISODate("2026-09-29T10:00:00Z")})
db.Orders.find({CustomerID: "c1"})
"""
        code, answers = run(c, script)
        assert [a.get("index_used") for a in answers[3:]] == [
            "CustomerID_1_CreatedAt_1", "CustomerID_1_CreatedAt_1", "none — full scan", "none — full scan"]
    with hoarddb.open(tmp_path / "b") as c:
        code, text = run(c, script, json_mode=False)
        assert "index_used" not in text and "full scan" not in text


def test_ttl_declaration_and_now(tmp_path):
    with hoarddb.open(tmp_path, ttl_sweep_seconds=0) as c:
        code, answers = run(c, """
use app
create bucket Sessions { type: hash, indices: [{field: "CreatedAt", expire_after_seconds: 3600}] }
db.Sessions.insert({_id_: "s1", CreatedAt: now()})
db.Sessions.insert({_id_: "s0", CreatedAt: ISODate("2020-01-01T00:00:00Z")})
""")
        assert all(a["ok"] for a in answers)
        assert c.sweep_ttl()["expired"] == 1
        assert [d["_id_"] for d in c["app"].Sessions.find()] == ["s1"]


def test_range_type_warns_in_the_answer(tmp_path):
    with hoarddb.open(tmp_path) as c:
        code, answers = run(c, 'use app\ncreate bucket U { type: hash, indices: [{field: "A", type: "range"}] }')
        assert answers[1]["ok"] == 1 and any("ignored" in w for w in answers[1]["warnings"])
