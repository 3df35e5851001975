"""Requests whose fields have the wrong type: each is refused alone, with its code, embedded and in a group.

Regression test for issue 22: a write whose ``bucket`` was a document reached a catalog
lookup inside the group commit, raised TypeError there, and failed every write of its
group (most of which were applied anyway). The same requests over the wire are in
tests/server/test_malformed_requests.py; both build them here.
"""

from __future__ import annotations

import pytest
from bson import Binary, Code, Decimal128, MaxKey, MinKey, Regex, Timestamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hoarddb
from hoarddb import operations
from hoarddb.errors import HoardError

#: One value of each BSON type a field may wrongly hold, by name.
BAD = {
    "document": {"a": 1}, "array": [1, 2], "regex": Regex("^a", "i"), "decimal128": Decimal128("1.5"),
    "code": Code("x"), "code with scope": Code("x", {"a": 1}), "binary": Binary(b"\x01", 5),
    "minkey": MinKey(), "maxkey": MaxKey(), "timestamp": Timestamp(1, 2), "int": 5, "str": "five",
}
#: Which of BAD a field of each kind accepts (the others are its bad values).
ACCEPTS = {"str": {"str"}, "doc": {"document"}, "filter": {"document"}, "update": {"document"},
           "docs": {"array"}, "int": {"int"}, "list": {"array"}}

#: A bucket serving each store type, and a store field of each type on the hash bucket H.
BUCKETS = {"fifo": "Q", "lifo": "L", "hash": "H", "btree": "T", "heap": "P", "blob": "B"}
FIELDS = {"fifo": "FQ", "lifo": "FL", "hash": "FH", "btree": "FT", "heap": "FP", "blob": "FB"}


def setup(client) -> None:
    """The buckets every request below names, and the document H["k"] whose stores they use."""
    db = client["app"]
    for kind, name in BUCKETS.items():
        options = {"store_fields": [{"name": f, "type": t} for t, f in FIELDS.items()]} if kind == "hash" else {}
        db.create_bucket(name, type=kind, **options)
    db.create_bucket("Good", type="hash")
    db.create_bucket("GoodQ", type="fifo")
    db.H.insert({"_id_": "k"})


def _value(param: operations.Param):
    return {"doc": {"x": 1}, "docs": [{"x": 1}], "filter": {}, "update": {"$set": {"x": 1}}, "int": 1,
            "str": "s"}.get(param.kind, "k")


def base_requests(server: bool = False) -> list[dict]:
    """One well-formed request of every operation (its arguments need not be accepted)."""
    out = []
    for name, op in sorted(operations.VERBS.items()):
        kind = sorted(op.types)[0]
        out.append({"op": name, "db": "app", "bucket": BUCKETS[kind],
                    "args": {p.name: _value(p) for p in op.params if p.required}})
    for name, op in sorted(operations.FIELD_VERBS.items()):
        kind = sorted(op.types)[0]
        out.append({"op": name, "db": "app", "bucket": "H", "key": "k", "field": FIELDS[kind],
                    "args": {p.name: _value(p) for p in op.params if p.required}})
    for name, op in sorted(operations.ADMIN.items()):  # catalog and server operations (the server's: over the wire)
        if server or op.runs != operations.SERVER:
            out.append({"op": name, "db": "app", "bucket": "Q"})
    return out


def malformed(server: bool = False) -> list[tuple[dict, str, set[str] | None]]:
    """Every malformed request: ``(request, what is wrong, the codes it may be refused with)``
    (None: any code but INTERNAL_ERROR)."""
    out = []
    bases = base_requests(server)
    for name in sorted({r["op"] for r in bases}):
        out.append(({"op": Code(name), "db": "app", "bucket": "Q"}, f"op {name} as code", {"INVALID_ARGUMENT"}))
        out.append(({"op": Code(name, {}), "db": "app", "bucket": "Q"}, f"op {name} as code with scope",
                    {"INVALID_ARGUMENT"}))
    for bad, value in BAD.items():
        if bad != "str":
            # (a server's protocol refuses an op that is no kind of string before it is a request)
            out.append(({"op": value, "db": "app", "bucket": "Q"}, f"op as {bad}",
                        {"INVALID_ARGUMENT", "PROTOCOL_ERROR"} if server else {"INVALID_ARGUMENT"}))
    for base in bases:
        op = base["op"]
        fields = ["db", "bucket", "args"] + (["field", "key"] if "field" in base else [])
        for field in fields:
            for bad, value in BAD.items():
                if field == "args" and bad == "document" or field in ("db", "bucket", "field") and bad == "str":
                    continue
                if field == "key" and bad == "str":
                    value = "no such document"
                request = {**base, field: value}
                codes = {"db": {"INVALID_NAME"}, "bucket": {"INVALID_NAME"}, "field": {"INVALID_ARGUMENT"},
                         "args": {"INVALID_ARGUMENT"}, "key": None}[field]
                out.append((request, f"{op} with {field} as {bad}", codes))
        entry = (operations.FIELD_VERBS if "field" in base else operations.OPERATIONS)[op]
        for param in entry.params + entry.options + entry.fields:
            where = "args" if param in entry.params + entry.options else None
            for bad, value in BAD.items():
                if param.kind not in ACCEPTS or bad in ACCEPTS[param.kind]:
                    continue
                if where:
                    request = {**base, "args": {**base["args"], param.name: value}}
                else:  # a field of a catalog or server operation's request
                    request = {**base, param.name: value}
                out.append((request, f"{op} with argument {param.name} as {bad}", {"INVALID_ARGUMENT"}))
    return out


def good_writes(tag: str, n: int) -> list[dict]:
    """Writes that succeed: pushes to GoodQ and inserts into Good, each naming ``tag`` and its number."""
    out = []
    for i in range(n):
        out.append({"op": "push", "db": "app", "bucket": "GoodQ", "args": {"doc": {"w": f"{tag}{i}"}}})
        out.append({"op": "insert", "db": "app", "bucket": "Good", "args": {"doc": {"_id_": f"{tag}{i}"}}})
    return out


def applied(client) -> tuple[list[str], list[str]]:
    """What the good writes left: the pushes to GoodQ in order, and the keys of Good."""
    db = client["app"]
    pushes: list[str] = []
    while True:
        page = db.GoodQ.list(after=len(pushes), limit=1000)
        pushes += [d["w"] for d in page]
        if len(page) < 1000:
            return pushes, sorted(d["_id_"] for d in db.Good.find())


def check_refusal(answer, what: str, codes: set[str] | None) -> None:
    assert answer.get("ok") == 0, f"{what}: {answer!r:.200}"
    assert answer["codeName"] != "INTERNAL_ERROR", f"{what}: {answer['message']}"
    if codes is not None:
        assert answer["codeName"] in codes, f"{what}: {answer['codeName']} {answer['message']}"
    assert answer["message"]


@pytest.fixture
def client(tmp_path):
    with hoarddb.open(tmp_path / "data") as c:
        setup(c)
        yield c


def test_every_malformed_request_is_refused_with_its_code_embedded(client):
    for request, what, codes in malformed():
        try:
            answer = client.execute(request)
        except HoardError as e:
            answer = e.to_answer()
        check_refusal(answer, what, codes)
    assert client["app"].H.get("k") == {"_id_": "k"}  # nothing of the refused requests was written
    assert client["app"].Q.length() == 0 and client["app"].Good.count() == 0
    assert sorted(client.databases()) == ["app"]


@pytest.mark.parametrize("field, value, code", [
    ("bucket", {}, "INVALID_NAME"), ("db", ["app"], "INVALID_NAME"), ("op", Code("insert"), "INVALID_ARGUMENT"),
    ("args", [{"_id_": "x"}], "INVALID_ARGUMENT"),
])
def test_refusals_name_the_field_and_what_it_accepts(client, field, value, code):
    request = {"op": "insert", "db": "app", "bucket": "Good", "args": {"doc": {"_id_": "x"}}, field: value}
    with pytest.raises(HoardError) as info:
        client.execute(request)
    assert info.value.codeName == code
    assert repr(field) in info.value.message
    assert {"bucket": "a bucket name is", "db": "a database name is", "op": "must be a string",
            "args": "a document"}[field] in info.value.message


def test_a_bucket_name_that_is_no_string_is_refused_by_the_python_api(client):
    # the in-process client skips the request document: the engine's cache must not be
    # looked up by an unhashable name either
    with pytest.raises(hoarddb.errors.InvalidNameError, match="a bucket name is"):
        client["app"][{"a": 1}].insert({"_id_": "x"})
    with pytest.raises(hoarddb.errors.InvalidNameError, match="a database name is"):
        client[["app"]].Good.insert({"_id_": "x"})
    assert client["app"].Good.count() == 0


def test_one_malformed_write_in_a_group_fails_alone(client):
    # The pipeline: [push, insert a, insert with bucket {}, insert b]: before, all
    # four were answered INTERNAL_ERROR, and the push and a were stored anyway.
    engine = client._executor
    answers = engine.execute_group([
        {"op": "push", "db": "app", "bucket": "GoodQ", "args": {"doc": {"w": "p"}}},
        {"op": "insert", "db": "app", "bucket": "Good", "args": {"doc": {"_id_": "a"}}},
        {"op": "insert", "db": "app", "bucket": {}, "args": {"doc": {"_id_": "x"}}},
        {"op": "insert", "db": "app", "bucket": "Good", "args": {"doc": {"_id_": "b"}}},
    ])
    assert answers[0] == {"ok": 1, "result": None}
    assert answers[1] == {"ok": 1, "result": "a"} and answers[3] == {"ok": 1, "result": "b"}
    assert answers[2].codeName == "INVALID_NAME"
    assert applied(client) == (["p"], ["a", "b"])


def test_every_malformed_request_fails_alone_in_a_group_beside_good_writes(client):
    bad = malformed()
    good = good_writes("g", len(bad))
    requests, expect = [], []
    for (request, what, codes), (push, insert) in zip(bad, zip(good[::2], good[1::2])):
        requests += [push, request, insert]
        expect += [None, (what, codes), None]
    answers = client._executor.execute_group(requests)
    assert len(answers) == len(requests)
    for answer, expected in zip(answers, expect):
        if expected is None:
            assert type(answer) is dict and answer["ok"] == 1, answer
        else:
            check_refusal(answer.to_answer() if isinstance(answer, HoardError) else answer, *expected)
    pushes, keys = applied(client)
    assert pushes == [d["args"]["doc"]["w"] for d in good[::2]]
    assert keys == sorted(d["args"]["doc"]["_id_"] for d in good[1::2])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 10_000)), min_size=1, max_size=30))
def test_a_group_of_good_and_malformed_writes_applies_the_good_ones_once(tmp_path_factory, plan):
    bad = malformed()
    with hoarddb.open(tmp_path_factory.mktemp("mix") / "data") as client:
        setup(client)
        requests, goods = [], []
        for i, (is_good, pick) in enumerate(plan):
            if is_good:
                request = good_writes(f"w{i}-", 1)[pick % 2]
                goods.append(len(requests))
            else:
                request = bad[pick % len(bad)][0]
            requests.append(request)
        answers = client._executor.execute_group(requests)
        for i, answer in enumerate(answers):
            if i in goods:
                assert type(answer) is dict and answer["ok"] == 1, (requests[i], answer)
            else:
                assert isinstance(answer, HoardError) and answer.codeName != "INTERNAL_ERROR", (requests[i], answer)
        pushes, keys = applied(client)
        want = [requests[i]["args"]["doc"] for i in goods]
        assert pushes == [d["w"] for d in want if "w" in d]
        assert keys == sorted(d["_id_"] for d in want if "_id_" in d)
