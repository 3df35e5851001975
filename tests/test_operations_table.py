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

#: Operation names still written as string literals outside the table, file by file. Two
#: kinds: code that builds or reads requests by name and is to move onto the table (the
#: Python and asyncio clients' catalog methods, HQL's statements, the tools, the stores'
#: messages, the engine's dead-letter and load hooks), and words that are no operation
#: there (a log level "info", a segment's "last", a slot "count"). The test fails on a
#: name written anywhere else, and on one listed here that is gone: shrink this as the
#: code moves onto the table.
LEFT = {
    "hoarddb/api.py": {"create_bucket", "create_database", "describe_bucket", "drop_bucket", "drop_database",
                       "list_buckets", "list_databases", "metrics", "stats", "sweep_ttl"},
    "hoarddb/client/aio.py": {"stream"},  # in "the stream changed nothing"
    "hoarddb/client/connection.py": {"stream"},  # in "the stream changed nothing"
    "hoarddb/tools/online.py": {"backup", "check"},  # the requests of hoarddb check and backup against a server
    "hoarddb/tools/status.py": {"list_buckets", "stats", "whoami"},  # hoarddb status's requests
    "hoarddb/engine.py": {"claim", "load"},  # the dead-letter hook (moving to stores/claims.py) and a load's indexes
    "hoarddb/hql/parser.py": {"alter_bucket", "create_bucket", "create_database", "describe_bucket", "drop_bucket",
                              "drop_database", "list_buckets", "list_databases", "stats"},
    "hoarddb/hql/printer.py": {"describe_bucket", "length", "list_buckets", "list_databases", "stats"},
    "hoarddb/server/server.py": {"metrics"},  # the request /metrics sends the engine
    "hoarddb/shell.py": {"create_bucket", "create_database", "describe_bucket", "list_buckets", "list_databases"},
    "hoarddb/stores/base.py": {"export"},
    "hoarddb/stores/blob.py": {"list", "put"},
    "hoarddb/stores/btree.py": {"delete", "exists", "get", "list", "range"},
    "hoarddb/stores/claims.py": {"ack", "claim", "release"},
    "hoarddb/stores/fields.py": {"batch_insert", "count", "delete", "find", "get", "insert", "length",
                                 "range", "search", "update"},
    "hoarddb/stores/fifo.py": {"export", "list", "peek", "pop"},
    "hoarddb/stores/hash.py": {"aggregate", "claim", "distinct", "find", "list", "search"},
    "hoarddb/stores/heap.py": {"first", "list", "peek", "pop"},
    "hoarddb/tools/ingest.py": {"batch_insert", "batch_push", "batch_put", "insert", "push", "put"},
    "hoarddb/tools/restore.py": {"batch_push", "load"},
    # words that are no operation there
    "hoarddb/cli.py": {"check", "list"},  # the command hoarddb check, a click choice
    "hoarddb/tools/check.py": {"check", "length"},
    "hoarddb/indexes/declaration.py": {"range"},
    "hoarddb/indexes/planner.py": {"range"},  # explain's served: {range: ...}
    "hoarddb/server/config.py": {"info"},
    "hoarddb/server/metrics.py": {"count"},
    "hoarddb/values/pipeline.py": {"count"},  # $sortByCount's output field
    "hoarddb/storage/blobfiles.py": {"put"},
    "hoarddb/storage/segment_recovery.py": {"last"},
    "hoarddb/storage/segment_state.py": {"last"},
    "hoarddb/stores/keyed.py": {"list"},
    "hoarddb/stores/keyspace.py": {"count"},
    "hoarddb/storage/wal.py": {"get"},
}


def _literals(path: Path) -> set[str]:
    """The operation names written as whole string literals in a module, docstrings aside."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            docstrings.add(id(node.body[0].value))
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and type(node.value) is str
            and node.value in NAMES and id(node) not in docstrings}


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
