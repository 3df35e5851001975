"""One client suite, two executors: every store type's verbs, embedded and over the wire, must agree.

The ``db`` fixture here is parametrised: ``embedded`` is ``hoarddb.open(tmp)``,
``remote`` is ``hoarddb.connect(url)`` to a server running in this process (one per
module, a fresh database per test). A test that passes on one and fails on the other
is a verb that behaves differently over the wire — exactly what must not happen.
``aio`` runs the same tests once more through ``hoarddb.aio``'s connection, driven
from a loop in another thread, so the asyncio adapter keeps the same contract.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import itertools
import threading
import uuid

import pytest
from bson import Decimal128, Int64, ObjectId

import hoarddb
from hoarddb import errors
from hoarddb.client import pipeline
from hoarddb.testing import ServerThread

_names = itertools.count(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerThread(tmp_path_factory.mktemp("both") / "data", insecure=True) as s:
        yield s


class AioBridge:
    """An executor for hoarddb.api.Client that runs hoarddb.aio's AsyncExecutor on a loop in a thread."""

    def __init__(self, url):
        from hoarddb.aio import AsyncExecutor
        from hoarddb.client.options import ConnectOptions

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.inner = AsyncExecutor(ConnectOptions.from_url(url))
        self._run(self.inner.connect())

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def execute(self, request):
        answer = self._run(self.inner.execute(request))
        if hasattr(answer.get("result"), "__anext__"):
            chunks = answer["result"]

            def sync_chunks():
                while True:
                    try:
                        yield self._run(chunks.__anext__())
                    except StopAsyncIteration:
                        return
            answer = {**answer, "result": sync_chunks()}
        return answer

    def close(self):
        self._run(self.inner.close())

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(params=["embedded", "remote", "aio"])
def client(request, tmp_path):
    if request.param == "embedded":
        c = hoarddb.open(tmp_path / "data")
    elif request.param == "remote":
        c = hoarddb.connect(request.getfixturevalue("server").url())
    else:
        bridge = AioBridge(request.getfixturevalue("server").url())
        request.addfinalizer(bridge.stop)
        c = hoarddb.api.Client(bridge)
    yield c
    c.close()


@pytest.fixture
def db(client):
    return client[f"app{next(_names)}"]


# ---- queues -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "lifo"])
def test_queue_verbs(db, kind):
    q = db.create_bucket("Q", type=kind)
    assert q.push({"n": 1}) is None
    assert q.batch_push([{"n": 2}, {"n": 3}]) == 2
    assert q.batchPush([{"n": 4}]) == 1
    order = [1, 2, 3, 4] if kind == "fifo" else [4, 3, 2, 1]
    assert q.length() == 4
    assert q.peek() == {"n": order[0]}
    assert [d["n"] for d in q.peek(3)] == order[:3]
    assert [d["n"] for d in q.list(after=1, limit=2)] == [2, 3] if kind == "fifo" else True
    assert q.pop() == {"n": order[0]}
    assert [d["n"] for d in q.pop({"limit": 2})] == order[1:3]
    assert q.pop(10) == [{"n": order[3]}]
    assert q.pop() is None and q.peek() is None and q.length() == 0


def test_queue_refusals(db):
    q = db.create_bucket("Q", type="fifo")
    with pytest.raises(errors.LimitExceededError):
        q.peek(1001)
    with pytest.raises(errors.VerbNotSupportedError) as e:
        q.find({})
    assert e.value.code == 10
    with pytest.raises(errors.InvalidArgumentError):
        q.peek("five")
    with pytest.raises(errors.InvalidArgumentError):
        q.push(5)


def test_heap_verbs(db):
    h = db.create_bucket("Alerts", type="heap")
    h.push({"priority": 10, "Msg": "Disk full"})
    h.batch_push([{"priority": 5, "Msg": "CPU"}, {"priority": 8, "Msg": "Net"}])
    assert h.peek() == {"priority": 10, "Msg": "Disk full"}
    assert [d["priority"] for d in h.list()] == [10, 8, 5]
    assert h.pop()["Msg"] == "Disk full"
    assert [d["Msg"] for d in h.pop(5)] == ["Net", "CPU"]
    with pytest.raises(errors.BadValueError, match="priority"):
        h.push({"priority": "high"})


# ---- keyed stores -------------------------------------------------------------------------------

def test_hash_verbs(db):
    users = db.create_bucket("Users", type="hash")
    assert users.insert({"_id_": "jane", "Name": "Jane", "Age": 41}) == "jane"
    assert users.batch_insert([{"_id_": "bob", "Age": 30}, {"_id_": "amy", "Age": 25}]) == ["bob", "amy"]
    assert users.get("jane") == {"_id_": "jane", "Name": "Jane", "Age": 41}
    assert users.get("nobody") is None
    assert users.put({"_id_": "bob", "Age": 31}) == "bob"
    assert users.count() == 3
    assert users.count({"Age": {"$gte": 31}}) == 2
    found = users.find({"Age": {"$lt": 40}})
    assert sorted(d["_id_"] for d in found) == ["amy", "bob"]
    assert found.index_used == "none — full scan"
    assert users.update({"_id_": "jane"}, {"$set": {"Name": "Janet"}, "$inc": {"Age": 1}}) == {"matched": 1, "modified": 1}
    assert users.get("jane")["Age"] == 42
    assert [d["_id_"] for d in users.list(limit=2)] == ["amy", "bob"]
    assert users.delete({"_id_": "amy"}) == {"deleted": 1}
    assert users.length() == 2


def test_duplicate_key_is_0x0f_on_both(db):
    users = db.create_bucket("Users", type="hash", indices=[{"field": "Email", "unique": True}])
    users.insert({"_id_": "u1", "Email": "dalek@example.com"})
    with pytest.raises(hoarddb.DuplicateKeyError) as e:
        users.insert({"_id_": "u2", "Email": "dalek@example.com"})
    assert e.value.code == 0x0F and e.value.codeName == "DUPLICATE_KEY"
    assert "Email_1" in str(e.value)
    with pytest.raises(hoarddb.DuplicateKeyError):
        users.insert({"_id_": "u1"})
    found = users.search({"Email": "dalek@example.com"})
    assert found == [{"_id_": "u1", "Email": "dalek@example.com"}] and found.index_used == "Email_1"
    assert users.search({"Email": "x"}, explain=True).explain


def test_btree_verbs(db):
    board = db.create_bucket("Leaderboard", type="btree", key="Score")
    board.batch_insert([{"Score": s, "Name": n} for s, n in [(90, "a"), (75, "b"), (99, "c")]])
    board.insert({"Score": 60, "Name": "d"})
    assert board.first()["Name"] == "d" and board.last()["Name"] == "c"
    assert [d["Score"] for d in board.range({"Score": {"$gte": 75, "$lt": 99}})] == [75, 90]
    assert [d["Score"] for d in board.range({"Score": {"$gte": 0}}, limit=2, reverse=True)] == [99, 90]
    assert board.get(75)["Name"] == "b"
    assert board.delete(75) == {"deleted": 1}
    assert board.length() == 3
    with pytest.raises(errors.MissingKeyError):
        board.insert({"Name": "no score"})


# ---- blobs --------------------------------------------------------------------------------------

def test_blob_verbs_small(db):
    photos = db.create_bucket("Photos", type="blob")
    blob_id = photos.put(b"hello", name="hi.txt", type="text/plain")
    other = photos.put({"data": b"\x00\x01", "name": "b.bin"})
    assert photos.get(blob_id)["data"] == b"hello"
    info = photos.info(blob_id)
    assert (info["size"], info["name"], info["type"]) == (5, "hi.txt", "text/plain")
    assert b"".join(photos.stream(blob_id)) == b"hello"
    assert list(photos.stream({"_id_": other}, chunk_size=1)) == [b"\x00", b"\x01"]
    assert photos.length() == 2 and [b["_id_"] for b in photos.list()] == sorted([blob_id, other])
    assert photos.delete(blob_id) == {"deleted": 1}
    with pytest.raises(errors.NotFoundError):
        photos.info(blob_id)
    with pytest.raises(errors.NotFoundError):
        photos.stream(blob_id)
    with pytest.raises(errors.BadValueError):
        photos.put("text is not bytes")


def test_blob_large_file_and_bytes(db):
    photos = db.create_bucket("Photos", type="blob")
    payload = bytes(range(256)) * (6 * 4096 + 7)  # ~6 MiB: over the inline limit
    from_file = photos.put(io.BytesIO(payload), name="big.bin")
    from_bytes = photos.put(payload)
    from_doc = photos.put({"data": io.BytesIO(payload[:1000]), "name": "small.bin", "type": "x/y"})
    for blob_id in (from_file, from_bytes):
        assert photos.info(blob_id)["size"] == len(payload)
        chunks = list(photos.stream(blob_id))
        assert b"".join(chunks) == payload
        assert max(len(c) for c in chunks) == 1024 * 1024
    assert photos.get(from_doc)["data"] == payload[:1000] and photos.info(from_doc)["type"] == "x/y"
    with pytest.raises(errors.BadValueError, match="binary mode"):
        photos.put(io.StringIO("text"))


def test_a_stream_left_half_read_does_not_block_the_client(db):
    photos = db.create_bucket("Photos", type="blob")
    payload = b"z" * (3 * 1024 * 1024 + 5)
    blob_id = photos.put(payload)
    it = photos.stream(blob_id)
    first = next(it)
    assert photos.length() == 1  # another request while the stream is open
    assert first + b"".join(it) == payload
    abandoned = photos.stream(blob_id)
    next(abandoned)
    del abandoned
    assert photos.info(blob_id)["size"] == len(payload)


# ---- catalog, values, errors --------------------------------------------------------------------

def test_catalog(client, db):
    b = db.create_bucket("Users", type="hash", fields=[{"name": "Email", "type": "string", "keywords": ["required"]}])
    assert any("required" in w for w in b.warnings)
    # `key Score` (HQL's field line) where `key: Score` was meant: recorded as a field, and said so
    lb = db.create_bucket("Board", type="btree", fields=[{"name": "key", "type": "Score"}])
    assert lb.warnings == ["field line key Score declares a field named 'key'; for the bucket option write "
                           "`key: Score` (with a colon)"]
    db.drop_bucket("Board")
    assert db.buckets() == ["Users"]
    assert db.name in client.databases()
    assert db.Users.describe()["type"] == "hash"
    assert db.Users.stats()["entries"] == 0
    with pytest.raises(errors.BucketExistsError):
        db.create_bucket("Users")
    with pytest.raises(errors.UnknownOptionError):
        db.create_bucket("X", type="fifo", segmnt_size=1)
    with pytest.raises(errors.BucketNotFoundError):
        db.Nope.length()
    with pytest.raises(errors.InvalidNameError):
        client["9bad"].create_bucket("X")
    assert db.drop_bucket("Users") == {"dropped": "Users"}
    client.create_database(db.name + "x")
    with pytest.raises(errors.DatabaseExistsError):
        client.create_database(db.name + "x")
    assert client.drop_database(db.name + "x")["dropped"] == db.name + "x"


def test_bson_values_round_trip(db):
    h = db.create_bucket("V", type="hash")
    doc = {"_id_": "v", "date": datetime.datetime(2026, 9, 29, 10, 0, tzinfo=datetime.timezone.utc),
           "oid": ObjectId("65f0a1b2c3d4e5f601234567"), "dec": Decimal128("1.10"), "big": Int64(2 ** 40),
           "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"), "bin": b"\x00\xff", "none": None,
           "nested": {"list": [1, 2.5, "x", [True, False]]}, "neg": -0.0}
    h.insert(doc)
    assert h.get("v") == doc


def test_unknown_verb_and_raw_execute(client, db):
    db.create_bucket("Q", type="fifo")
    with pytest.raises(errors.UnknownVerbError):
        client.execute({"op": "frobnicate", "db": db.name, "bucket": "Q"})
    answer = client.execute({"op": "push", "db": db.name, "bucket": "Q", "args": {"doc": {"a": 1}}})
    assert answer == {"ok": 1, "result": None}
    with pytest.raises(AttributeError):
        db.Q.frobnicate


def test_pipeline_gives_the_answers_in_order(client, db):
    db.create_bucket("Q", type="fifo")
    requests = [{"op": "push", "db": db.name, "bucket": "Q", "args": {"doc": {"n": i}}} for i in range(50)]
    requests += [{"op": "length", "db": db.name, "bucket": "Q"}, {"op": "pop", "db": db.name, "bucket": "Nope"}]
    answers = pipeline(client, requests)
    assert answers[:50] == [{"ok": 1, "result": None}] * 50
    assert answers[50] == {"ok": 1, "result": 50}
    assert isinstance(answers[51], errors.BucketNotFoundError)


def test_store_fields(db):
    prop = db.create_bucket("Property", type="hash", store_fields=[{"name": "Expenses", "type": "lifo"},
                                                                  {"name": "Docs", "type": "blob"}])
    prop.insert({"_id_": "p1"})
    prop["p1"].Expenses.push({"Amount": 1})
    prop["p1"].Expenses.push({"Amount": 2})
    assert prop["p1"].Expenses.pop() == {"Amount": 2}
    doc_id = prop["p1"].Docs.put(b"lease", name="lease.pdf")
    assert b"".join(prop["p1"].Docs.stream(doc_id)) == b"lease"
    with pytest.raises(errors.NotFoundError):
        prop["nope"].Expenses.push({"Amount": 1})


def test_metrics_and_closed(client):
    assert "hoarddb_ttl_backlog_estimate" in client.metrics()
    client.close()
    with pytest.raises(errors.ClosedError):
        client.databases()


def test_pipeline_reads_see_the_writes_sent_before_them(client, db):
    db.create_bucket("H", type="hash")
    db.create_bucket("Q", type="lifo")
    h = lambda op, **args: {"op": op, "db": db.name, "bucket": "H", "args": args}  # noqa: E731
    q = lambda op, **args: {"op": op, "db": db.name, "bucket": "Q", "args": args}  # noqa: E731
    answers = pipeline(client, [
        h("insert", doc={"_id_": "k", "v": 1}), h("get", key="k"), h("update", filter={"_id_": "k"}, update={"$set": {"v": 2}}),
        h("get", key="k"), q("push", doc={"n": 1}), q("push", doc={"n": 2}), q("length"), q("pop"), q("peek"),
        h("delete", target="k"), h("get", key="k"), h("count"),
    ])
    results = [a["result"] for a in answers]
    assert results[1] == {"_id_": "k", "v": 1} and results[3] == {"_id_": "k", "v": 2}
    assert results[6] == 2 and results[7] == {"n": 2} and results[8] == {"n": 1}
    assert results[10] is None and results[11] == 0


# ---- audit: binding, requests, life cycle, threads, sizes — the same on every executor ------------

def test_argument_binding_refusals_name_the_argument_and_show_the_signature(db):
    q = db.create_bucket("Q", type="fifo")
    h = db.create_bucket("H", type="hash")
    q.batch_push([{"n": 1}, {"n": 2}])
    assert q.peek({}) == {"n": 1} and q.list({}) == [{"n": 1}, {"n": 2}]  # {}: no options
    assert q.peek(1) == q.peek(limit=1) == q.peek({"limit": 1}) == [{"n": 1}]
    for call, words in [
        (lambda: q.peek({"limt": 5}), "peek has no argument 'limt'; accepted: limit — peek(limit?, {limit})"),
        (lambda: q.list({"aftr": 1}), "list has no argument 'aftr'"),
        (lambda: h.search({}, {"limt": 1}), "search has no argument 'limt'"),
        (lambda: q.peek({"limit": 1}, limit=2), "argument 'limit' given twice — peek(limit?, {limit})"),
        (lambda: h.search({"a": 1}, {"filter": {"b": 1}}), "argument 'filter' given twice"),
        (lambda: q.peek(2 ** 70), "must be a 64-bit integer"),
        (lambda: q.pop(True), "must be an integer, got bool: True — pop(limit?, {limit})"),
        (lambda: q.push({"a": 1}, {"b": 2}), "push takes at most 1 argument(s): push(doc)"),  # no options
        (lambda: q.pop(1, 2), "pop takes at most 1 argument(s) and an options document: pop(limit?, {limit})"),
        (lambda: q.push(doc={"a": 1}, x=1), "push has no argument 'x'; accepted: doc — push(doc)"),
        (lambda: h.update({}), "update needs its argument 'update'"),
    ]:
        with pytest.raises(errors.InvalidArgumentError) as e:
            call()
        assert words in str(e.value) and e.value.code == 22
    assert q.length() == 2


def test_an_integer_past_64_bits_in_a_key_filter_or_update_is_refused_alike(db):
    # BSON holds no such integer: over the wire the request could not be sent, so embedded
    # the same call is refused the same way, not answered "not found"
    h = db.create_bucket("H", type="hash")
    b = db.create_bucket("B", type="btree", key="Score")
    h.insert({"_id_": 1, "a": 1})
    for call in (lambda: h.get(2 ** 70), lambda: h.find({"a": {"$in": [1, -(2 ** 64)]}}), lambda: h.count({"a": 2 ** 63}),
                 lambda: h.delete({"_id_": 2 ** 70}), lambda: h.update({"_id_": 1}, {"$set": {"a": 2 ** 65}}),
                 lambda: b.get(2 ** 64), lambda: b.range({"Score": {"$gte": 2 ** 64}})):
        with pytest.raises(errors.BadValueError) as e:
            call()
        assert "BSON cannot store" in e.value.message and "64-bit" in e.value.message
    assert h.get(2 ** 63 - 1) is None and h.find({"a": -(2 ** 63)}) == [] and h.get(1) == {"_id_": 1, "a": 1}


def test_a_request_that_is_not_an_operation_is_refused_alike(client):
    for request in (5, {"db": "app"}, {"op": 7}):
        with pytest.raises(errors.InvalidArgumentError, match="an operation is a document with a string 'op'"):
            client.execute(request)


def test_a_name_with_a_trailing_newline_is_refused(client, db):
    with pytest.raises(errors.InvalidNameError):
        db.create_bucket("Users\n")
    with pytest.raises(errors.InvalidNameError):
        client["app\n"].create_bucket("Users")
    assert db.name not in client.databases()


def test_drop_and_recreate_with_the_same_name_starts_empty_and_old_handles_follow_the_name(db):
    q = db.create_bucket("B", type="fifo")
    q.push({"n": 1})
    db.drop_bucket("B")
    with pytest.raises(errors.BucketNotFoundError):
        q.push({"n": 2})  # a handle names a bucket; that bucket is gone
    with pytest.raises(errors.BucketNotFoundError):
        db.drop_bucket("B")
    h = db.create_bucket("B", type="hash")
    assert q.length() == 0 and h.length() == 0
    with pytest.raises(errors.VerbNotSupportedError):
        q.push({"n": 3})  # now a hash bucket
    assert h.insert({"_id_": "k"}) == "k"


def test_every_kind_of_call_after_close_is_closed(client, db):
    q = db.create_bucket("Q", type="fifo")
    p = db.create_bucket("P", type="hash", store_fields=[{"name": "Log", "type": "fifo"}])
    p.insert({"_id_": "p1"})
    client.close()
    client.close()  # twice is fine
    calls = [client.databases, lambda: client.create_database("x"), lambda: db.create_bucket("Z"),
             db.buckets, lambda: db.drop_bucket("Q"), q.length, lambda: q.push({"a": 1}), q.stats, q.describe,
             lambda: p["p1"].Log.push({"a": 1}), lambda: client.execute({"op": "list_databases"}),
             lambda: pipeline(client, [{"op": "list_databases"}])]
    for call in calls:
        with pytest.raises(errors.ClosedError):
            call()


def test_threads_sharing_one_client_write_and_read_their_writes(db):
    h = db.create_bucket("H", type="hash")
    q = db.create_bucket("Q", type="fifo")
    photos = db.create_bucket("Photos", type="blob")
    blob_id = photos.put(b"b" * (2 * 1024 * 1024 + 3))
    held = photos.stream(blob_id)
    first = next(held)  # a stream left open must not hold the others up
    failures: list = []

    def work(i):
        try:
            for n in range(25):
                key = f"{i}-{n}"
                h.insert({"_id_": key, "n": n})
                assert h.get(key) == {"_id_": key, "n": n}  # an acknowledged write is read back
                q.push({"i": i, "n": n})
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads) and not failures, failures[:3]
    assert h.length() == 100 and h.count() == 100
    popped = q.pop(100)
    assert len(popped) == 100
    for i in range(4):  # each thread's pushes in its own order
        assert [d["n"] for d in popped if d["i"] == i] == list(range(25))
    assert len(first + b"".join(held)) == 2 * 1024 * 1024 + 3


def _doc_of_size(size: int, key: str) -> dict:
    import bson

    doc = {"_id_": key, "pad": ""}
    doc["pad"] = "x" * (size - len(bson.encode(doc)))
    return doc


def test_a_document_of_16_mib_is_kept_and_one_byte_more_is_refused(db):
    h = db.create_bucket("H", type="hash")
    limit = 16 * 1024 * 1024
    assert h.insert(_doc_of_size(limit, "max")) == "max"
    with pytest.raises(errors.DocumentTooLargeError) as e:
        h.insert(_doc_of_size(limit + 1, "over"))
    assert e.value.code == 14 and "16 MiB" in str(e.value)
    assert h.get("over") is None and len(h.get("max")["pad"]) > limit - 64
    assert h.length() == 1


def test_a_large_batch_under_the_message_limit_is_one_write(db):
    q = db.create_bucket("Q", type="fifo")
    docs = [_doc_of_size(1024 * 1024, f"k{i}") for i in range(12)]  # 12 MiB in one batch
    assert q.batch_push(docs) == 12
    assert [d["_id_"] for d in q.pop(12)] == [f"k{i}" for i in range(12)]
