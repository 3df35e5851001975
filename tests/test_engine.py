"""The engine through the public API: databases, buckets, names, options, refusals, the directory lock."""

from __future__ import annotations

import subprocess
import sys

import pytest

import hoarddb
from hoarddb import errors


def test_create_bucket_creates_its_database(client):
    db = client["app"]
    db.create_bucket("Comments", type="fifo")
    assert client.databases() == ["app"]
    assert db.buckets() == ["Comments"]


def test_create_and_drop_database(client):
    client.create_database("shop")
    assert client.databases() == ["shop"]
    with pytest.raises(errors.DatabaseExistsError):
        client.create_database("shop")
    client["shop"].create_bucket("Orders")
    client.drop_database("shop")
    assert client.databases() == []
    with pytest.raises(errors.DatabaseNotFoundError):
        client["shop"].buckets()


def test_bucket_by_attribute_and_by_item(db):
    db.create_bucket("Users", type="hash")
    db.Users.insert({"_id_": "u1"})
    assert db["Users"].get("u1") == {"_id_": "u1"}


def test_default_bucket_type_is_hash(db):
    db.create_bucket("Things")
    assert db.Things.stats()["type"] == "hash"


@pytest.mark.parametrize("name", ["", "1abc", "a b", "a.b", "x" * 65, "é", None, 5, "a/b"])
def test_bad_bucket_name_is_refused_and_nothing_written(db, name):
    with pytest.raises(errors.InvalidNameError, match="a letter, then letters, digits"):
        db.create_bucket(name, type="fifo")
    with pytest.raises(errors.DatabaseNotFoundError):
        db.buckets()


@pytest.mark.parametrize("name", ["", "9db", "has space", "catalog", "tls"])
def test_bad_database_name_is_refused(client, name):
    with pytest.raises(errors.InvalidNameError):
        client.create_database(name)
    assert client.databases() == []


def test_unknown_store_type_lists_the_six(db):
    with pytest.raises(errors.UnknownStoreTypeError) as e:
        db.create_bucket("X", type="queue")
    assert "fifo, lifo, hash, btree, heap, blob" in str(e.value)
    assert e.value.code == 5


def test_unknown_option_is_refused_naming_accepted_ones(db):
    with pytest.raises(errors.UnknownOptionError) as e:
        db.create_bucket("X", type="fifo", segmnt_size=4096)
    assert "segment_size" in str(e.value) and "type" in str(e.value)
    with pytest.raises(errors.UnknownOptionError):
        db.create_bucket("Y", type="hash", key="Score")  # key is a btree option
    with pytest.raises(errors.DatabaseNotFoundError):
        db.buckets()


def test_bucket_exists(db):
    db.create_bucket("A", type="lifo")
    with pytest.raises(errors.BucketExistsError):
        db.create_bucket("A", type="fifo")
    assert db.A.stats()["type"] == "lifo"


def test_missing_bucket_names_the_ones_there_are(db):
    db.create_bucket("Users")
    with pytest.raises(errors.BucketNotFoundError, match="its buckets: Users"):
        db.Userz.get("x")


@pytest.mark.parametrize("type_, verb, args", [
    ("hash", "pop", ()), ("fifo", "find", ({},)), ("btree", "push", ({"a": 1},)),
    ("blob", "insert", ({"a": 1},)), ("heap", "range", ()), ("lifo", "get", ("k",)),
])
def test_verb_the_type_does_not_have_is_refused(db, type_, verb, args):
    db.create_bucket("B", type=type_)
    with pytest.raises(errors.VerbNotSupportedError) as e:
        getattr(db.B, verb)(*args)
    assert f"{type_} bucket 'B' has no verb {verb!r}" in str(e.value)
    assert e.value.code == 10


def test_unknown_verb(db):
    db.create_bucket("B", type="fifo")
    with pytest.raises(errors.UnknownVerbError):
        db.B.shove({"a": 1})
    assert not hasattr(db.B, "shove")


@pytest.mark.parametrize("type_", ["fifo", "lifo", "heap"])
def test_non_document_push_is_refused(db, type_):
    db.create_bucket("Q", type=type_)
    for bad in (5, "text", [1, 2], None):
        with pytest.raises((errors.NotADocumentError, errors.InvalidArgumentError)):
            db.Q.push(bad)
    assert db.Q.length() == 0


def test_wrong_argument_kind_says_what_is_accepted(db):
    db.create_bucket("Q", type="fifo")
    with pytest.raises(errors.InvalidArgumentError, match="must be an integer"):
        db.Q.peek("five")
    with pytest.raises(errors.InvalidArgumentError, match="has no argument 'limt'"):
        db.Q.peek(limt=5)


def test_drop_bucket_removes_its_files(client, tmp_path):
    db = client["app"]
    db.create_bucket("Q", type="fifo")
    db.Q.push({"a": 1})
    assert (tmp_path / "data" / "app" / "Q").exists()
    db.drop_bucket("Q")
    assert not (tmp_path / "data" / "app" / "Q").exists()
    assert db.buckets() == []
    db.create_bucket("Q", type="fifo")
    assert db.Q.length() == 0


def test_close_and_reopen_keeps_declarations(tmp_path):
    with hoarddb.open(tmp_path) as c:
        c["app"].create_bucket("Board", type="btree", key="Score")
    with hoarddb.open(tmp_path) as c:
        assert c["app"].Board.describe()["options"] == {"key": "Score"}
        c["app"].Board.insert({"Score": 3, "User": "x"})
        assert c["app"].Board.first()["User"] == "x"


def test_closed_client_refuses(tmp_path):
    c = hoarddb.open(tmp_path)
    c.close()
    with pytest.raises(errors.ClosedError):
        c.databases()


def test_unknown_database_option_is_refused(tmp_path):
    with pytest.raises(errors.UnknownOptionError, match="segment_size"):
        hoarddb.open(tmp_path, segmentsize=5)


def test_second_process_is_refused_naming_the_holder(tmp_path):
    with hoarddb.open(tmp_path):
        code = (
            "import hoarddb, sys\n"
            "try:\n    hoarddb.open(sys.argv[1])\n"
            "except hoarddb.errors.DataDirLockedError as e:\n    print(e.code, e.message); sys.exit(0)\n"
            "sys.exit(1)\n"
        )
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        import os
        assert f"pid {os.getpid()}" in out.stdout and out.stdout.startswith("17 ")
    with hoarddb.open(tmp_path):  # released on close
        pass


def test_second_open_in_the_same_process_is_refused(tmp_path):
    with hoarddb.open(tmp_path):
        with pytest.raises(errors.DataDirLockedError) as e:
            hoarddb.open(tmp_path)
        assert "open already in this process" in e.value.message


def test_a_data_directory_that_cannot_be_made_is_a_storage_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(errors.StorageError) as e:
        hoarddb.open(tmp_path / "file")
    assert "it is a file, not a directory" in e.value.message
    with pytest.raises(errors.StorageError) as e:
        hoarddb.open(tmp_path / "file" / "below")
    assert "cannot open data directory" in e.value.message and "Not a directory" in e.value.message


def test_stats_shape(db):
    db.create_bucket("Q", type="fifo")
    db.Q.push({"a": 1})
    s = db.Q.stats()
    assert s["type"] == "fifo" and s["entries"] == 1 and s["bytes"] > 0


def test_errors_have_stable_codes_and_answers():
    e = errors.DuplicateKeyError("dup")
    assert e.code == 0x0F and e.codeName == "DUPLICATE_KEY"
    assert errors.error_from_answer(e.to_answer()).__class__ is errors.DuplicateKeyError
    codes = [cls.code for cls in errors.ERRORS.values()]
    assert len(codes) == len(set(codes))


def test_is_point_read_tells_one_key_reads_from_scans(client):
    db = client["app"]
    db.create_bucket("U", type="hash", indices=[{"field": "Email", "unique": True}, "Co"])
    db.create_bucket("P", type="blob")
    db.U.insert({"_id_": 1, "Email": "a@x", "Co": "c"})
    engine = client._executor

    def req(op, bucket="U", **args):
        return {"op": op, "db": "app", "bucket": bucket, "args": args}

    assert engine.is_point_read(req("get", key=1))
    assert engine.is_point_read(req("search", filter={"Email": "a@x"}))
    assert engine.is_point_read(req("length"))
    assert not engine.is_point_read(req("search", filter={"Co": "c"}))  # a plain index may match many
    assert not engine.is_point_read(req("search", filter={"Email": "a@x"}, explain=True))
    assert not engine.is_point_read(req("find", filter={"Email": "a@x"}))
    assert not engine.is_point_read(req("get", bucket="P", key="x"))  # a blob get reads a whole file
    assert not engine.is_point_read(req("get", bucket="Nope", key=1))
    assert not engine.is_point_read(req("push", doc={}))


def test_execute_group_shares_a_transaction_and_a_refusal_undoes_only_itself(tmp_path):
    from hoarddb.engine import Engine
    from hoarddb.options import Options
    engine = Engine(tmp_path, Options(sync=False))
    client = hoarddb.Client(engine)
    client["a"].create_bucket("U", type="hash", indices=[{"field": "E", "unique": True}])
    client["a"].create_bucket("H", type="heap")
    client["a"].create_bucket("Q", type="fifo")
    requests = [{"op": "insert", "db": "a", "bucket": "U", "args": {"doc": {"_id_": i, "E": i % 5}}} for i in range(8)]
    requests += [{"op": "push", "db": "a", "bucket": "H", "args": {"doc": {"priority": i}}} for i in range(3)]
    requests += [{"op": "push", "db": "a", "bucket": "Q", "args": {"doc": {"n": 1}}},
                 {"op": "pop", "db": "a", "bucket": "Nope", "args": {}}]
    answers = engine.execute_group(requests)
    assert [a["result"] for a in answers[:5]] == [0, 1, 2, 3, 4]
    assert all(isinstance(a, errors.DuplicateKeyError) for a in answers[5:8])
    assert [a["ok"] for a in answers[8:12]] == [1, 1, 1, 1]
    assert isinstance(answers[12], errors.BucketNotFoundError)
    assert client["a"].U.count() == 5 and client["a"].H.peek() == {"priority": 2}
    assert client["a"].U.search({"E": 3}).index_used == "E_1"
    engine.sync()
    client.close()
    with hoarddb.open(tmp_path) as c:  # committed and durable
        assert c["a"].U.count() == 5 and c["a"].H.length() == 3 and c["a"].Q.length() == 1


def test_a_bug_in_one_write_of_a_group_fails_that_write_alone(tmp_path, monkeypatch):
    from hoarddb.engine import Engine
    from hoarddb.options import Options
    from hoarddb.stores.hash import HashStore

    engine = Engine(tmp_path, Options(sync=False))
    client = hoarddb.Client(engine)
    client["a"].create_bucket("H", type="hash")

    def broken(self, target):  # a bug, halfway through its write
        return self._write(lambda txn: (txn.put(b"Dzz", b"half"), 1 / 0))

    monkeypatch.setattr(HashStore, "delete", broken)
    insert = lambda i: {"op": "insert", "db": "a", "bucket": "H", "args": {"doc": {"_id_": i}}}  # noqa: E731
    answers = engine.execute_group([insert(1), {"op": "delete", "db": "a", "bucket": "H", "args": {"target": 1}},
                                    insert(2)])
    assert answers[0]["ok"] == 1 and answers[2]["ok"] == 1
    assert isinstance(answers[1], errors.InternalError) and "ZeroDivisionError" in answers[1].message
    assert [d["_id_"] for d in client["a"].H.find()] == [1, 2]  # and nothing of the broken write
    client.close()


def test_execute_group_of_one_write_runs_it_in_its_own_transaction(tmp_path, monkeypatch):
    """A lone client's every write is a group of one: no outer transaction (one commit, not two)."""
    from hoarddb.storage.kv import KV
    engine, client = _group_engine(tmp_path)
    client["a"].create_bucket("U", type="hash", indices=[{"field": "E", "unique": True}])
    client["a"].create_bucket("H", type="heap")
    outer, begin = [], KV.begin_group
    monkeypatch.setattr(KV, "begin_group", lambda self: outer.append(self) or begin(self))
    insert = lambda i, e: {"op": "insert", "db": "a", "bucket": "U", "args": {"doc": {"_id_": i, "E": e}}}  # noqa: E731
    assert engine.execute_group([insert(1, "x")])[0]["result"] == 1
    refused = engine.execute_group([insert(2, "x")])[0]
    assert isinstance(refused, errors.DuplicateKeyError)  # answered, not raised, and nothing written
    assert engine.execute_group([{"op": "push", "db": "a", "bucket": "H", "args": {"doc": {"priority": 1}}}])[0]["ok"] == 1
    assert outer == []
    engine.sync()
    client.close()
    with hoarddb.open(tmp_path) as c:
        assert c["a"].U.count() == 1 and c["a"].U.get(2) is None and c["a"].H.length() == 1


def _group_engine(tmp_path):
    from hoarddb.engine import Engine
    from hoarddb.options import Options
    engine = Engine(tmp_path, Options(sync=False))
    return engine, hoarddb.Client(engine)


@pytest.mark.parametrize("kind", ["fifo", "lifo"])
def test_execute_group_runs_pushes_in_a_row_as_one_append_each_refused_alone(tmp_path, kind):
    engine, client = _group_engine(tmp_path)
    q = client["a"].create_bucket("Q", type=kind)
    push = lambda doc: {"op": "push", "db": "a", "bucket": "Q", "args": {"doc": doc}}  # noqa: E731
    too_big = {"pad": "x" * (17 * 1024 * 1024)}
    answers = engine.execute_group([push({"n": 0}), push({"n": 1}), push(too_big), push({"n": 2}),
                                    {"op": "length", "db": "a", "bucket": "Q", "args": {}}, push({"n": 3})])
    assert [a if isinstance(a, Exception) else a["result"] for a in answers[:2]] == [None, None]
    assert isinstance(answers[2], errors.DocumentTooLargeError)  # refused alone
    assert answers[3] == {"ok": 1, "result": None}
    assert answers[4]["result"] == 3  # a read inside the group sees the pushes before it
    assert answers[5] == {"ok": 1, "result": None}
    order = [d["n"] for d in q.list()]
    assert order == [0, 1, 2, 3]
    engine.sync()
    client.close()
    with hoarddb.open(tmp_path) as c:
        assert [d["n"] for d in c["a"].Q.list()] == [0, 1, 2, 3]


@pytest.mark.parametrize("kind", ["fifo", "lifo"])
def test_execute_group_runs_pops_in_a_row_as_pops_one_by_one_would(tmp_path, kind):
    engine, client = _group_engine(tmp_path)
    q = client["a"].create_bucket("Q", type=kind)
    q.batch_push([{"n": i} for i in range(150)])  # more than max_pop (100): taken in two
    pop = {"op": "pop", "db": "a", "bucket": "Q", "args": {}}
    answers = engine.execute_group([pop] * 152 + [{"op": "pop", "db": "a", "bucket": "Q", "args": {"limit": 2}}])
    got = [a["result"] for a in answers[:152]]
    expected = list(range(150)) if kind == "fifo" else list(range(149, -1, -1))
    assert [d["n"] for d in got[:150]] == expected
    assert got[150:] == [None, None] and answers[152]["result"] == []
    assert q.length() == 0


def test_execute_group_pops_in_a_row_leave_claimed_elements(tmp_path):
    engine, client = _group_engine(tmp_path)
    q = client["a"].create_bucket("Q", type="fifo")
    q.batch_push([{"n": i} for i in range(4)])
    assert [c["element"]["n"] for c in q.claim()] == [0]
    pop = {"op": "pop", "db": "a", "bucket": "Q", "args": {}}
    answers = engine.execute_group([pop] * 4)
    assert [a["result"] and a["result"]["n"] for a in answers] == [1, 2, 3, None]


def test_is_quick_read_runs_few_keys_on_the_loop_and_sends_scans_away(client):
    db = client["a"]
    db.create_bucket("U", type="hash", indices=[{"field": "Email", "unique": True}, "Co"],
                     store_fields=[{"name": "Notes", "type": "fifo"}, {"name": "Files", "type": "blob"}])
    db.create_bucket("Q", type="fifo")
    db.U.batch_insert([{"_id_": i, "Email": f"{i}@x", "Co": "big" if i < 150 else f"c{i}"} for i in range(160)])
    engine = client._executor

    def req(op, bucket="U", **args):
        return {"op": op, "db": "a", "bucket": bucket, "args": args}

    quick = engine.is_quick_read
    assert quick(req("search", filter={"Email": "3@x"})) and quick(req("get", key=1))
    assert quick(req("search", filter={"Co": "c151"}))  # one entry under the value
    assert not quick(req("search", filter={"Co": "big"}))  # 150 entries: may be long
    assert not quick(req("search", filter={"Co": "c151"}, explain=True))
    assert not quick(req("find", filter={"Co": "c151"})) and not quick(req("count", filter={}))
    assert quick(req("peek", "Q")) and quick(req("peek", "Q", limit=100)) and not quick(req("peek", "Q", limit=101))
    assert quick(req("list", "Q", limit=20)) and not quick(req("list", "Q"))  # list's default is not known small
    field = lambda op, name, **args: {**req(op, **args), "key": 1, "field": name}  # noqa: E731
    assert quick(field("peek", "Notes", limit=10)) and quick(field("length", "Notes"))
    assert not quick(field("get", "Files", key="x"))  # a blob reads a file
    assert not quick(field("peek", "Nope")) and not quick(req("peek", "Nope"))


def test_engine_sync_flushes_every_log_written_since_the_last(tmp_path):
    """With sync off (a server's group commit) a write leaves its log record unflushed;
    Engine.sync() is what makes it durable, for every store and the catalog."""
    from hoarddb.engine import Engine
    from hoarddb.options import Options

    engine = Engine(tmp_path, Options(sync=False))
    try:
        engine.execute({"op": "create_bucket", "db": "app", "bucket": "H", "options": {"type": "hash"}})
        engine.execute({"op": "create_bucket", "db": "app", "bucket": "P", "options": {"type": "heap"}})
        engine.execute({"op": "insert", "db": "app", "bucket": "H", "args": {"doc": {"_id_": "a"}}})
        engine.execute({"op": "push", "db": "app", "bucket": "P", "args": {"doc": {"priority": 1}}})
        logs = [engine.catalog.kv.wal] + [store.kv.wal for store in engine._stores.values()]
        assert len(logs) == 3 and any(wal.unflushed() for wal in logs)
        engine.sync()
        assert not any(wal.unflushed() for wal in logs)
    finally:
        engine.close()


# ---- names, options, concurrent drops (audit) ----------------------------------------------------

@pytest.mark.parametrize("name", ["abc\n", "Users\n", "a\nb", "a\x00b", "a.b", "a/b", "..", "x" * 65, "ß"])
def test_a_name_with_a_newline_or_a_path_character_is_refused_and_makes_no_folder(client, tmp_path, name):
    with pytest.raises(errors.InvalidNameError, match="a letter, then letters"):
        client["app"].create_bucket(name, type="fifo")
    with pytest.raises(errors.InvalidNameError):
        client[name].create_bucket("Q", type="fifo")
    with pytest.raises(errors.InvalidNameError):
        client["app"].create_bucket("H", store_fields=[{"name": name, "type": "fifo"}])
    assert client.databases() == []
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["LOCK", "catalog"]


@pytest.mark.parametrize("options, words", [
    ({"ttl_sweep_seconds": float("inf")}, "finite"), ({"ttl_sweep_seconds": float("nan")}, "finite"),
    ({"ttl_sweep_budget_seconds": float("nan")}, "finite"), ({"ttl_sweep_seconds": -1}, "≥ 0"),
    ({"segment_size": 1}, "at least 4096"), ({"segment_size": 4095}, "at least 4096"),
    ({"max_peek": 0}, "positive integer"), ({"sync": "yes"}, "true or false"),
])
def test_a_bad_database_option_value_is_refused_saying_what_is_accepted(tmp_path, options, words):
    with pytest.raises(errors.BadValueError, match=words):
        hoarddb.open(tmp_path / "data", **options)
    with hoarddb.open(tmp_path / "data"):  # nothing was left locked
        pass


@pytest.mark.parametrize("raw", ["nan", "inf", "-3", "soon"])
def test_a_bad_sweep_interval_in_the_environment_is_refused(tmp_path, monkeypatch, raw):
    monkeypatch.setenv("HOARDDB_TTL_SWEEP_SECONDS", raw)
    with pytest.raises(errors.BadValueError, match="HOARDDB_TTL_SWEEP_SECONDS"):
        hoarddb.open(tmp_path / "data")


@pytest.mark.parametrize("kind", ["hash", "fifo", "heap"])
def test_threads_using_a_bucket_another_thread_drops_and_recreates_hear_only_bucket_not_found(tmp_path, kind):
    """Operations racing a drop and re-create of their bucket either run or are refused with
    BUCKET_NOT_FOUND: never a closed store's error, a half-written file of the dropped bucket,
    nor a dropped bucket's store kept (and its folder re-made) for the next bucket of that name."""
    import threading

    c = hoarddb.open(tmp_path / "data")
    db = c["app"]
    db.create_bucket("B", type=kind)
    stop = threading.Event()
    unexpected: list[BaseException] = []

    def work(i):
        n = 0
        while not stop.is_set():
            n += 1
            try:
                if kind == "hash":
                    db.B.insert({"_id_": f"{i}-{n}"})
                    db.B.get(f"{i}-{n}")
                else:
                    db.B.push({"priority": n, "n": n})
                    db.B.pop()
                db.B.length()
                db.buckets()
            except errors.BucketNotFoundError:
                pass
            except BaseException as e:  # noqa: BLE001 - collected, the test fails on them
                unexpected.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(40):
            db.drop_bucket("B")
            db.create_bucket("B", type=kind)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not unexpected, unexpected[:3]
    db.drop_bucket("B")
    assert not (tmp_path / "data" / "app" / "B").exists()
    db.create_bucket("B", type=kind)
    assert db.B.length() == 0
    c.close()
    with hoarddb.open(tmp_path / "data") as again:
        assert again["app"].B.length() == 0


def test_a_call_that_read_the_declaration_before_a_drop_does_not_reopen_the_bucket(client, tmp_path):
    engine = client._executor
    client["app"].create_bucket("Q", type="fifo")
    decl = engine.catalog.bucket("app", "Q")  # as a call that read it just before the drop
    client["app"].drop_bucket("Q")
    with pytest.raises(errors.BucketNotFoundError):
        engine._store("app", "Q", decl)
    assert not (tmp_path / "data" / "app" / "Q").exists()


def test_catalog_lists_while_another_thread_creates_and_drops(tmp_path):
    import threading

    client = hoarddb.open(tmp_path / "data", sync=False)  # quick changes: many of them land mid-listing
    db = client["app"]
    for i in range(150):  # a listing long enough for a change to land in the middle of it
        client["other"].create_bucket(f"B{i}", type="fifo")
    stop = threading.Event()
    unexpected: list[BaseException] = []

    def churn():
        i = 0
        while not stop.is_set():
            i += 1
            try:
                db.create_bucket(f"T{i % 7}", type="fifo")
                db.drop_bucket(f"T{(i + 3) % 7}")
            except (errors.BucketExistsError, errors.BucketNotFoundError):
                pass
            except BaseException as e:  # noqa: BLE001
                unexpected.append(e)

    def listing():
        for _ in range(4000):
            try:
                db.buckets()
                db.Nope.length()  # refused naming the buckets there are: a listing too
                client.databases()
            except (errors.BucketNotFoundError, errors.DatabaseNotFoundError):
                pass
            except BaseException as e:  # noqa: BLE001
                unexpected.append(e)

    churner = threading.Thread(target=churn)
    listers = [threading.Thread(target=listing) for _ in range(3)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often: inside a listing too
    churner.start()
    try:
        for t in listers:
            t.start()
        for t in listers:
            t.join(120)
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        churner.join(60)
        client.close()
    assert not unexpected, unexpected[:3]


def test_a_filter_nested_too_deeply_is_a_bad_value_and_writes_nothing(db):
    b = db.create_bucket("H", type="hash")
    b.insert({"_id_": 1, "a": 1})
    deep: dict = {"a": 1}
    for _ in range(3000):
        deep = {"$and": [deep]}
    for call in (lambda: b.find(deep), lambda: b.delete(deep), lambda: b.count(deep)):
        with pytest.raises(errors.BadValueError) as e:
            call()
        assert "nested too deeply" in e.value.message
    assert b.count() == 1


def test_close_closes_every_store_and_releases_the_lock_when_one_fails(tmp_path, monkeypatch):
    from hoarddb.stores.heap import HeapStore

    c = hoarddb.open(tmp_path, sync=False)
    c["app"].create_bucket("A", type="heap").push({"priority": 1})
    c["app"].create_bucket("B", type="hash").insert({"_id_": 1})
    c["app"].create_bucket("C", type="fifo").push({"n": 1})

    def failing(self):  # a disk that refuses this bucket's last flush
        raise errors.StorageError("cannot flush: No space left on device")

    monkeypatch.setattr(HeapStore, "close", failing)
    with pytest.raises(errors.StorageError, match="No space left"):
        c.close()
    monkeypatch.undo()
    with hoarddb.open(tmp_path) as again:  # the lock was released; the other buckets were flushed
        assert again["app"].B.get(1) == {"_id_": 1} and again["app"].C.length() == 1
