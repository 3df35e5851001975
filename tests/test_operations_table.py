"""The table of operations (hoarddb/operations.py) is the one place that says what each operation is.

Every layer reads its flags (scope, cost, write, catalog, streams, uploads, retry, role,
route) and keeps no list of its own; an operation's name is written nowhere else as a
string; the verb tables of docs/user say what the table says; and a verb is one entry
plus one store method (``exists`` is the worked example of docs/dev/architecture.md).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import hoarddb
from hoarddb import operations
from hoarddb.client import connection as blocking_client
from hoarddb.engine import CATALOG_CHANGES, HANDLERS, POINT_READS, QUICK_READS, TOGETHER
from hoarddb.server import auth, commit, server
from hoarddb.stores import store_class

ROOT = Path(__file__).resolve().parents[1]
NAMES = set(operations.OPERATIONS) | set(operations.FIELD_VERBS)

#: Operation names still written as string literals where they stand for an operation,
#: file by file, each with why the literal is the clearest code there. The test fails on a
#: name written so anywhere else, and on one listed here that is gone.
LEFT: dict[str, set[str]] = {
    # the engine's hooks after two verbs' writes: a claim moves elements past max_deliveries to
    # the dead-letter bucket, a load that conflicted an index records the indexes it left
    "hoarddb/engine.py": {"claim", "load"},
    # the advice of a refusal, verb by verb: what to use instead of a verb a store field lacks
    "hoarddb/stores/fields.py": {"batch_insert", "count", "delete", "find", "get", "insert", "range", "search",
                                 "update"},
    "hoarddb/stores/btree.py": {"range"},  # a refusal's words: "within those bounds" for range, else "with that key"
    # a blob journal's record kinds on disk ("put", "del"): bytes of the format, named as the verb is by chance
    "hoarddb/stores/blob.py": {"put"},
    "hoarddb/storage/blobfiles.py": {"put"},
    # hoarddb ingest's choice of verb for each store type (a hash is filled by put, replacing; a btree
    # by insert, a taken key reported): the tool's decision, which no flag of the verbs says
    "hoarddb/tools/ingest.py": {"batch_insert", "batch_push", "batch_put", "insert", "push", "put"},
    # the offline check opens a bucket a crash left unclean by a request on it: length, the cheapest
    "hoarddb/tools/check.py": {"length"},
    # a partition's move, as requests of the old owner on its own local bucket: its documents read
    # (list pages, find by keys) and written on the new owner (batch_put, delete); the mover's choice
    "hoarddb/cluster/moves.py": {"batch_put", "delete", "find", "list"},
}

#: What holds an operation's name, in a comparison or membership test: ``op``, ``self.verb``,
#: ``request["op"]``, ``request.get("op")``, ``verb["name"]``.
_OP_NAMES = {"op", "name", "verb", "op_name", "operation"}
#: Calls whose first argument is the name of the operation of the request they build.
_REQUEST_BUILDERS = {"request", "_request", "make_request"}


def _holds_an_operation_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id in _OP_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in _OP_NAMES
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value in _OP_NAMES
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        return isinstance(node.args[0], ast.Constant) and node.args[0].value in _OP_NAMES
    return False


def _is_name(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is str and node.value in NAMES


def _literals(path: Path) -> set[str]:
    """The operation names a module writes as string literals where they stand for an
    operation: the value of an "op" key of a dict display; a side of a comparison or
    membership test against what holds an operation's name (``op == "push"``, ``verb in
    ("get", "delete")``); an element of a set, tuple or list display of two or more names,
    or a key or value of a dict display of two or more; the first argument of a call that
    builds a request. A plain word that is also a name ("last", "count", a log level
    "info", a limit's "pop" in a message) is not one."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == "op" and _is_name(v):
                    found.add(v.value)
            for part in (node.keys, node.values):
                named = [n.value for n in part if _is_name(n)]
                if len(named) >= 2:
                    found.update(named)
        elif isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            named = [n.value for n in node.elts if _is_name(n)]
            if len(named) >= 2:
                found.update(named)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_holds_an_operation_name(s) for s in sides):
                for s in sides:
                    if _is_name(s):
                        found.add(s.value)
                    elif isinstance(s, (ast.Set, ast.Tuple, ast.List)):
                        found.update(n.value for n in s.elts if _is_name(n))
        elif isinstance(node, ast.Call) and node.args and _is_name(node.args[0]):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in _REQUEST_BUILDERS:
                found.add(node.args[0].value)
    return found


def test_the_finder_tells_operation_names_from_words(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("""
a = {"op": "push", "db": "app"}
b = op == "pop" or request["op"] != "get" or request.get("op") in ("peek",) or self.verb in ("list",)
c = ("insert", "put")
d = {"stats": 1, "metrics": 2}
e = make_request("length", "app")
# words
f = {"last": 3, "n": 1}
g = check_limit(limit, 100, "count")
h = log_level in ("debug", "info")
i = ("get", "x")
j = record.kind == "delete"
k = '''a docstring saying "whoami"'''
""")
    assert _literals(module) == {"push", "pop", "get", "peek", "list", "insert", "put", "stats", "metrics", "length"}


def test_no_operation_name_is_written_outside_the_table():
    found = {}
    for path in sorted((ROOT / "hoarddb").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name == "hoarddb/operations.py":
            continue
        names = _literals(path)
        if names:
            found[name] = names
    new = {f: sorted(n - LEFT.get(f, set())) for f, n in found.items() if n - LEFT.get(f, set())}
    assert not new, f"operation names written outside hoarddb/operations.py (read the table's flags instead): {new}"
    gone = {f: sorted(n - found.get(f, set())) for f, n in LEFT.items() if n - found.get(f, set())}
    assert not gone, f"no longer written there: take them out of LEFT: {gone}"


def test_every_entry_says_everything():
    for name, op in {**operations.OPERATIONS, **{f"field {n}": v for n, v in operations.FIELD_VERBS.items()}}.items():
        assert op.scope in (operations.SERVER, operations.DATABASE, operations.BUCKET, operations.FIELD), name
        assert op.cost in operations.COSTS and op.role in operations.ROLES, name
        assert op.route in (operations.ROUTE_NONE, operations.ROUTE_DATABASE, operations.ROUTE_BUCKET,
                            operations.ROUTE_KEY), name
        assert op.runs in (operations.STORE, operations.ENGINE, operations.SERVER), name
        assert isinstance(op.retry, bool) and op.summary and op.answer, name
        assert not (op.retry and op.write), f"{name}: a write is never sent twice"
        assert op.catalog <= op.write, name
        assert (op.upload is None) or op.upload in op.param_names, name
        if op.scope in (operations.BUCKET, operations.FIELD) and op.runs == operations.STORE:
            assert op.types and op.types <= set(operations.STORE_TYPES), name
    for op in operations.FIELD_VERBS.values():
        assert op.scope == operations.FIELD and op.route == operations.ROUTE_KEY
        bucket_verb = operations.VERBS[op.name]  # a field verb is named as the bucket verb, and runs as it does
        assert (op.write, op.streams, op.retry, op.role) == (bucket_verb.write, bucket_verb.streams,
                                                              bucket_verb.retry, bucket_verb.role)


def test_each_catalog_and_server_operation_is_named_in_the_module():
    for name, op in operations.ADMIN.items():
        assert getattr(operations, name.upper()) is op, name


def test_a_bucket_verb_is_a_method_of_each_store_type_that_serves_it():
    for op in operations.VERBS.values():
        for kind in op.types:
            assert callable(getattr(store_class(kind), op.name, None)), f"{kind} store has no {op.name}"


def test_the_engine_and_the_server_run_what_the_table_says_they_run():
    assert set(HANDLERS) == operations.names(runs=operations.ENGINE)
    assert CATALOG_CHANGES == {n for n, op in operations.OPERATIONS.items() if op.catalog}
    assert POINT_READS == {n for n, op in operations.VERBS.items() if op.cost in (operations.POINT, operations.INDEXED)}
    assert POINT_READS <= QUICK_READS
    assert TOGETHER == {"push", "pop"}
    for name in operations.names(runs=operations.SERVER):
        assert callable(getattr(server.Server, "_op_" + name, None)), name
    assert server.SERVER_OPS == operations.names(runs=operations.SERVER)
    for name, op in operations.OPERATIONS.items():
        assert server.is_write(name) == op.write, name


def test_authorization_reads_the_role_of_each_entry():
    wanted = {"read": "read", "readWrite": "readWrite", "dbAdmin": "dbAdmin", "look": "look", "any": "any",
              "admin": "admin"}
    for name, op in operations.OPERATIONS.items():
        assert auth.needed({"op": name, "db": "app"})[0] == wanted[op.role], name
    assert auth.needed({"op": "no_such_operation"}) == ("admin", None)  # nothing unclassified gets through


def test_clients_resend_only_what_the_table_says_they_may():
    assert blocking_client._RETRYABLE == {n for n, op in operations.OPERATIONS.items() if op.retry}
    assert not any(operations.OPERATIONS[n].write for n in blocking_client._RETRYABLE)


def test_group_commit_batching_reads_the_cost_classes():
    many = [{"x": i} for i in range(commit.LONG_BATCH + 1)]
    for name, op in operations.VERBS.items():
        if op.cost == operations.BATCH:
            assert commit.may_be_long({"op": name, "args": {"docs": many}}), name
            assert not commit.may_be_long({"op": name, "args": {"docs": many[:2]}}), name
        elif op.cost == operations.FILTERED_WRITE:
            first = op.params[0].name
            assert commit.may_be_long({"op": name, "args": {first: {"Age": 3}}}), name
            assert not commit.may_be_long({"op": name, "args": {first: {"_id_": "a"}}}), name
        else:
            assert not commit.may_be_long({"op": name, "args": {"docs": many}}), name


def test_routes_name_the_part_of_a_request_that_places_it():
    ops = operations.OPERATIONS
    assert ops["list_databases"].route == ops["whoami"].route == operations.ROUTE_NONE
    assert ops["create_database"].route == ops["list_buckets"].route == operations.ROUTE_DATABASE
    assert ops["create_bucket"].route == ops["get"].route == ops["push"].route == operations.ROUTE_BUCKET
    assert operations.FIELD_VERBS["push"].route == operations.ROUTE_KEY


# -- docs/user's verb tables --------------------------------------------------------------

def _table_rows(path: Path, header: str) -> list[list[str]]:
    lines = path.read_text().splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_store_types_doc_lists_each_types_verbs():
    rows = _table_rows(ROOT / "docs/user/store-types.md", "| type | use it for | verbs |")
    assert {r[0] for r in rows} == set(operations.STORE_TYPES)
    for kind, _use, verbs in rows:
        listed = {v.strip() for v in verbs.split(",")}
        # export and load, every type's, are said once below the table
        assert listed | {"export", "load"} == set(operations.verbs_for(kind)), kind


def test_python_api_doc_lists_every_bucket_verb():
    rows = _table_rows(ROOT / "docs/user/python-api.md", "| verb | types | answers |")
    listed = {name for r in rows for name in re.findall(r"`(\w+)\(", r[0])}
    assert listed == {op.name for op in operations.VERBS.values()}
    for r in rows:
        types = set(r[1].split()) if r[1] != "all" else set(operations.STORE_TYPES)
        for name in re.findall(r"`(\w+)\(", r[0]):
            assert types <= operations.VERBS[name].types, (name, types)


def test_store_fields_doc_lists_each_field_types_verbs():
    rows = _table_rows(ROOT / "docs/user/store-fields.md", "| field type | verbs |")
    for kinds, verbs in rows:
        listed = set(re.findall(r"`(\w+)", verbs))
        for kind in (k.strip() for k in kinds.split(",")):
            if kind == "heap":  # "the same" as fifo and lifo
                continue
            # a blob field's load is dump and restore's, as every bucket's export and load are
            assert listed | ({"load"} if kind == "blob" else set()) == set(operations.field_verbs_for(kind)), kind


# -- exists: a verb that is one entry and one method -------------------------------------

def test_exists_answers_true_or_false_on_hash_and_btree(tmp_path):
    with hoarddb.open(tmp_path / "data") as client:
        db = client["app"]
        db.create_bucket("U", type="hash")
        db.create_bucket("T", type="btree")
        db.create_bucket("S", type="btree", key="Score")
        db.create_bucket("Q", type="fifo")
        db.U.insert({"_id_": "jane"})
        db.T.insert({"_id_": 5, "x": 1})
        db.S.insert({"Score": 92})
        assert db.U.exists("jane") is True and db.U.exists("joe") is False and db.U.exists({"_id_": "jane"})
        assert db.T.exists(5) is True and db.T.exists(6) is False and db.T.exists({"_id_": 5}) is True
        assert db.S.exists(92) is True and db.S.exists({"Score": 92}) is True and db.S.exists(1) is False
        assert client.execute({"op": "exists", "db": "app", "bucket": "U", "args": {"key": "jane"}}) == \
            {"ok": 1, "result": True}
        with pytest.raises(hoarddb.errors.VerbNotSupportedError, match="no verb 'exists'"):
            db.Q.exists("x")
        with pytest.raises(hoarddb.errors.InvalidArgumentError, match=r"exists\(key\)"):
            db.U.exists()
        with pytest.raises(hoarddb.errors.BadValueError):
            db.U.exists({"Name": "jane"})
        engine = client._executor
        assert engine.is_point_read({"op": "exists", "db": "app", "bucket": "U", "args": {"key": "jane"}})


def test_exists_over_the_wire_and_in_hql(tmp_path):
    import asyncio
    import io

    from hoarddb.aio import connect as aio_connect
    from hoarddb.shell import run_script
    from hoarddb.testing import ServerThread

    with ServerThread(tmp_path / "data", insecure=True) as s:
        with hoarddb.connect(s.url(), timeout=30) as client:
            db = client["app"]
            db.create_bucket("U", type="hash")
            db.U.insert({"_id_": "jane"})
            assert db.U.exists("jane") is True and db.U.exists("joe") is False
            out = io.StringIO()
            assert run_script(client, 'use app; db.U.exists("jane"); db.U.exists("joe");', out=out) == 0
            assert out.getvalue().split()[-2:] == ["true", "false"]

        async def remote():
            async with await aio_connect(s.url(), timeout=30) as client:
                return await client["app"].U.exists("jane"), await client["app"].U.exists("joe")

        assert asyncio.run(remote()) == (True, False)
