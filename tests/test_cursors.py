"""Cursors (hoarddb/cursors.py): results of any size read in batches, embedded and over the wire by both clients;
idle cursors time out; closed, finished and orphaned cursors are freed; many open cursors hold no LMDB reader."""

from __future__ import annotations

import asyncio
import io
import time

import pytest

import hoarddb
import hoarddb.aio
from hoarddb import errors
from hoarddb.cursors import BATCH_BYTES, MORE_BYTES
from hoarddb.shell import Shell
from hoarddb.storage.lmdb_files import MAX_READERS
from hoarddb.testing import ServerThread

MiB = 1024 * 1024
#: 440 documents of 100 KiB: a 44 MiB result, well past the 16 MiB of one message.
BIG_N, BIG_PAD = 440, 100 * 1024


def _fill_big(bucket) -> None:
    for start in range(0, BIG_N, 40):
        bucket.batch_insert([{"_id_": i, "n": i, "pad": "x" * BIG_PAD} for i in range(start, min(start + 40, BIG_N))])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerThread(tmp_path_factory.mktemp("cursors") / "data", insecure=True, slow_ms=1e9,
                      max_cursors_per_connection=1000) as s:
        client = hoarddb.connect(s.url())
        _fill_big(client["big"].create_bucket("B"))
        client.close()
        yield s


def _read_all(docs) -> tuple[int, int, list]:
    n = size = 0
    keys = []
    for doc in docs:
        n += 1
        size += len(doc["pad"])
        keys.append(doc["_id_"])
    return n, size, keys


def test_a_result_past_16_mib_is_read_to_its_end_embedded(tmp_path):
    with hoarddb.open(tmp_path / "d", max_answer_bytes=16 * MiB) as client:
        bucket = client["big"].create_bucket("B")
        _fill_big(bucket)
        cursor = bucket.find({})
        assert cursor.id is not None  # more than the first batch
        n, size, keys = _read_all(cursor)
        assert n == BIG_N and size > 40 * MiB and keys == list(range(BIG_N))
        assert client._executor.cursors.ids() == []  # read to its end: freed


def test_a_result_past_16_mib_is_read_to_its_end_over_the_wire_blocking(server):
    client = hoarddb.connect(server.url())
    try:
        bucket = client["big"].B
        with pytest.raises(errors.DocumentTooLargeError):  # asked whole, without a cursor: one message cannot hold it
            client.execute({"op": "find", "db": "big", "bucket": "B", "args": {}})
        n, size, keys = _read_all(bucket.find({}))
        assert n == BIG_N and size > 40 * MiB and keys == list(range(BIG_N))
        n, _, keys = _read_all(bucket.find({"n": {"$gte": 100}}, batch_size=7))
        assert n == BIG_N - 100 and keys == list(range(100, BIG_N))
        assert len(bucket.find({}, projection={"pad": 0})) == BIG_N  # used as a list: read whole into one
    finally:
        client.close()


def test_a_result_past_16_mib_is_read_to_its_end_over_the_wire_asyncio(server):
    async def main():
        client = await hoarddb.aio.connect(server.url())
        try:
            n = size = 0
            async for doc in client["big"].B.find({}):
                n += 1
                size += len(doc["pad"])
            assert n == BIG_N and size > 40 * MiB
            listed = await client["big"].B.find({"n": {"$lt": 250}}, projection={"n": 1})
            assert [d["n"] for d in listed] == list(range(250)) and listed.index_used == "none — full scan"
        finally:
            await client.close()
    asyncio.run(main())


def test_a_batch_stays_under_one_message_and_its_count(tmp_path):
    with hoarddb.open(tmp_path / "d") as client:
        bucket = client["big"].create_bucket("B")
        _fill_big(bucket)
        engine = client._executor
        answer = engine.execute({"op": "find", "db": "big", "bucket": "B", "args": {"batch_size": 3}})
        assert len(answer["result"]) == 3 and answer["cursor"]
        answer = engine.execute({"op": "more", "cursor": answer["cursor"], "batch_size": 300})
        sizes = [len(answer["result"])]
        assert 100 < sizes[0] < 300  # asked for 300 of 100 KiB: 16 MiB hold fewer
        assert sum(len(d["pad"]) + 40 for d in answer["result"]) <= BATCH_BYTES
        while answer.get("cursor"):
            answer = engine.execute({"op": "more", "cursor": answer["cursor"]})
            sizes.append(len(answer["result"]))
            assert sum(len(d["pad"]) + 40 for d in answer["result"]) <= MORE_BYTES  # none asked: about 1 MiB
        assert sum(sizes) + 3 == BIG_N and max(sizes[1:]) == MORE_BYTES // (BIG_PAD + 40)
        answer = engine.execute({"op": "find", "db": "big", "bucket": "B", "args": {"batch_size": 300}})
        assert len(answer["result"]) < 300  # the bytes bound the first batch too
        engine.execute({"op": "close_cursor", "cursor": answer["cursor"]})


def test_a_batch_of_many_small_documents_fits_one_message():
    from hoarddb.cursors import Cursor
    from hoarddb.server.server import encode_answer
    from hoarddb.wire.framing import MAX_MESSAGE_SIZE

    cursor = Cursor(1, "find", ({"_id_": i} for i in range(1_500_000)), None)
    batch, more = cursor.batch(None)  # as many as fit: the bytes of their array's keys count too
    assert more and len(batch) > 500_000
    message = encode_answer({"id": 1, "ok": 1, "result": batch, "cursor": 2**62, "index_used": "x"}, MAX_MESSAGE_SIZE)
    assert len(message) <= MAX_MESSAGE_SIZE


def test_every_read_verb_answers_through_a_cursor(tmp_path):
    with hoarddb.open(tmp_path / "d") as client:
        db = client["app"]
        users = db.create_bucket("U", indices=[{"field": "g"}])
        users.batch_insert([{"_id_": i, "g": i % 3} for i in range(300)])
        found = users.search({"g": 1}, batch_size=10)
        assert found.index_used == "g_1" and found.id is not None
        assert [d["_id_"] for d in found] == list(range(1, 300, 3))
        assert [d["_id_"] for d in users.find({"g": 2}, sort={"_id_": -1}, batch_size=5)] == list(range(299, 0, -3))
        assert [d["n"] for d in users.aggregate([{"$match": {"g": 0}}, {"$project": {"n": "$_id_"}}],
                                                 batch_size=4)] == list(range(0, 300, 3))
        assert len(list(users.list(limit=250, batch_size=50))) == 250
        scores = db.create_bucket("L", type="btree", key="s")
        scores.batch_insert([{"s": i} for i in range(500)])
        assert [d["s"] for d in scores.range({"s": {"$gte": 100}}, batch_size=9)] == list(range(100, 500))
        assert [d["s"] for d in scores.range({"s": {"$lt": 450}}, reverse=True, batch_size=9)] == list(range(449, -1, -1))
        assert client._executor.cursors.ids() == []
        with pytest.raises(errors.BadValueError, match="batch_size"):
            users.find({}, batch_size=-1)


def test_a_sort_an_index_serves_streams_through_a_cursor_without_holding_the_documents(tmp_path):
    with hoarddb.open(tmp_path / "d", stage_memory_bytes=4096) as client:  # a sort in memory: ~30 documents
        bucket = client["app"].create_bucket("B", indices=[{"field": "C"}])
        bucket.batch_insert([{"_id_": i, "C": i % 50, "pad": "x" * 100} for i in range(500)])
        found = bucket.search({"C": {"$gte": 10}}, sort={"C": -1}, batch_size=7)
        assert found.index_used == "C_1"
        assert [(d["C"], d["_id_"]) for d in found] == sorted(
            ((i % 50, i) for i in range(500) if i % 50 >= 10), key=lambda t: (-t[0], t[1]))
        made = bucket.aggregate([{"$sort": {"C": 1}}, {"$project": {"C": 1}}], batch_size=9)
        assert [d["C"] for d in made] == sorted(i % 50 for i in range(500)) and made.index_used == "C_1"
        with pytest.raises(errors.LimitExceededError, match="memory limit of 4096 bytes"):
            list(bucket.find({}, sort={"C": 1}, batch_size=7))  # find sorts in memory


def test_a_batch_holds_every_kind_of_value_the_engine_stores(tmp_path):
    import datetime
    import uuid

    from bson import Decimal128, ObjectId

    values = [uuid.uuid4(), Decimal128("1.5"), ObjectId(), datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc),
              b"bytes"]
    with hoarddb.open(tmp_path / "d") as client:
        bucket = client["app"].create_bucket("U")
        bucket.batch_insert([{"_id_": i, "v": values[i % len(values)]} for i in range(50)])
        assert [d["v"] for d in bucket.find({}, batch_size=3)] == [values[i % len(values)] for i in range(50)]


def test_a_result_in_its_first_batch_is_a_list_and_a_longer_one_is_read_once(tmp_path):
    with hoarddb.open(tmp_path / "d") as client:
        bucket = client["app"].create_bucket("U")
        bucket.batch_insert([{"_id_": i} for i in range(30)])
        small = bucket.find({"_id_": {"$lt": 3}})
        assert list(small) == list(small) == [{"_id_": 0}, {"_id_": 1}, {"_id_": 2}] == small
        long = bucket.find({}, batch_size=10)
        assert next(long) == {"_id_": 0}
        assert [d["_id_"] for d in long] == list(range(1, 30))  # goes on where it was
        with pytest.raises(errors.CursorNotFoundError, match="read once"):
            list(long)


def test_close_frees_a_cursor_and_it_is_not_found_after(tmp_path, server):
    with hoarddb.open(tmp_path / "d") as client:
        bucket = client["app"].create_bucket("U")
        bucket.batch_insert([{"_id_": i} for i in range(300)])
        cursor = bucket.find({}, batch_size=10)
        cursor_id = cursor.id
        assert client._executor.cursors.ids() == [cursor_id]
        cursor.close()
        assert client._executor.cursors.ids() == []
        with pytest.raises(errors.CursorNotFoundError) as info:
            client.execute({"op": "more", "cursor": cursor_id})
        assert info.value.code == 36 and info.value.codeName == "CURSOR_NOT_FOUND"
    remote = hoarddb.connect(server.url())
    try:
        with remote["big"].B.find({}, batch_size=2) as cursor:
            cursor_id = cursor.id
            assert cursor_id in server.server.engine.cursors
        assert cursor_id not in server.server.engine.cursors
    finally:
        remote.close()


def test_a_connection_reads_only_its_own_cursors_and_its_close_frees_them(server):
    engine = server.server.engine
    first, second = hoarddb.connect(server.url()), hoarddb.connect(server.url())
    try:
        cursor = first["big"].B.find({}, batch_size=2)
        with pytest.raises(errors.CursorNotFoundError, match="not open on this connection"):
            second.execute({"op": "more", "cursor": cursor.id})
        assert second.execute({"op": "close_cursor", "cursor": cursor.id})["result"] == {"closed": 0}
        assert cursor.id in engine.cursors
        assert next(cursor)["_id_"] == 0
        first.close()
        deadline = time.monotonic() + 10
        while cursor.id in engine.cursors and time.monotonic() < deadline:
            time.sleep(0.02)
        assert cursor.id not in engine.cursors
    finally:
        second.close()


def test_idle_cursors_time_out_and_are_counted(tmp_path):
    with ServerThread(tmp_path / "data", insecure=True, cursor_timeout=0.3, slow_ms=1e9) as s:
        client = hoarddb.connect(s.url())
        try:
            bucket = client["app"].create_bucket("U")
            bucket.batch_insert([{"_id_": i} for i in range(50)])
            cursor = bucket.find({}, batch_size=5)
            assert client.metrics()["hoarddb_cursors_open"] == 1.0
            deadline = time.monotonic() + 10  # the server's sweep closes it without any request
            while cursor.id in s.server.engine.cursors and time.monotonic() < deadline:
                time.sleep(0.05)
            assert cursor.id not in s.server.engine.cursors
            metrics = client.metrics()
            assert metrics["hoarddb_cursors_timed_out_total"] == 1.0 and metrics["hoarddb_cursors_open"] == 0.0
            with pytest.raises(errors.CursorNotFoundError, match="cursor_timeout"):
                list(cursor)
        finally:
            client.close()
    with hoarddb.open(tmp_path / "e", cursor_timeout=0.2) as embedded:
        bucket = embedded["app"].create_bucket("U")
        bucket.batch_insert([{"_id_": i} for i in range(50)])
        cursor = bucket.find({}, batch_size=5)
        time.sleep(1.3)  # past the timeout, and past the once-a-second look at idle cursors
        with pytest.raises(errors.CursorNotFoundError):
            list(cursor)


def test_many_open_cursors_hold_no_lmdb_reader(tmp_path, server):
    n = MAX_READERS + 300  # more than LMDB's reader slots
    with hoarddb.open(tmp_path / "d", max_cursors=n + 10) as client:
        bucket = client["app"].create_bucket("U", indices=[{"field": "g"}])
        bucket.batch_insert([{"_id_": i, "g": i % 2} for i in range(500)])
        cursors = [bucket.search({"g": i % 2}, batch_size=1) if i % 2 else bucket.find({}, batch_size=1)
                   for i in range(n)]
        assert len(client._executor.cursors) == n
        assert len(list(bucket.find({}, batch_size=50))) == 500  # reads still work
        bucket.insert({"_id_": 1000, "g": 0})  # and so do writes
        assert sum(1 for _ in cursors[-1]) == 250  # an old cursor still reads on (g: 1, its first batch too)
        del cursors
    client = hoarddb.connect(server.url())
    try:  # over the wire too: abandoned, then freed with the connection
        opened = [client["big"].B.find({}, batch_size=1) for _ in range(MAX_READERS + 50)]
        assert len(server.server.engine.cursors) >= MAX_READERS + 50
        assert sum(1 for _ in client["big"].B.find({"n": {"$lt": 300}}, projection={"n": 1})) == 300
        del opened
    finally:
        client.close()


def test_the_cursors_of_one_connection_and_of_all_are_capped(tmp_path):
    with ServerThread(tmp_path / "data", insecure=True, max_cursors_per_connection=3, max_cursors=5,
                      slow_ms=1e9) as s:
        clients = [hoarddb.connect(s.url()) for _ in range(2)]
        try:
            bucket = clients[0]["app"].create_bucket("U")
            bucket.batch_insert([{"_id_": i} for i in range(20)])
            kept = [bucket.find({}, batch_size=1) for _ in range(3)]
            with pytest.raises(errors.LimitExceededError, match="max_cursors_per_connection"):
                bucket.find({}, batch_size=1)
            assert len(bucket.find({})) == 20  # a result in one batch opens no cursor
            other = clients[1]["app"].U
            kept += [other.find({}, batch_size=1) for _ in range(2)]
            with pytest.raises(errors.LimitExceededError, match="max_cursors"):
                other.find({}, batch_size=1)
            kept[0].close()
            assert next(other.find({}, batch_size=1))["_id_"] == 0
        finally:
            for c in clients:
                c.close()


def test_an_embedded_cursor_dropped_unfinished_is_closed(tmp_path):
    with hoarddb.open(tmp_path / "d") as client:
        bucket = client["app"].create_bucket("U")
        bucket.batch_insert([{"_id_": i} for i in range(300)])
        cursor = bucket.find({}, batch_size=10)
        assert len(client._executor.cursors) == 1
        del cursor
        assert len(client._executor.cursors) == 0


def test_a_dropped_bucket_ends_its_cursors(tmp_path):
    with hoarddb.open(tmp_path / "d") as client:
        bucket = client["app"].create_bucket("U")
        bucket.batch_insert([{"_id_": i, "pad": "x" * 10_000} for i in range(500)])
        cursor = bucket.find({}, batch_size=1)
        client["app"].drop_bucket("U")
        with pytest.raises(errors.BucketNotFoundError):
            list(cursor)
        assert client._executor.cursors.ids() == []


def test_the_shell_pages_a_read_and_it_shows_the_next_page(tmp_path):
    with hoarddb.open(tmp_path / "d") as client:
        client["app"].create_bucket("T").batch_insert([{"_id_": i} for i in range(45)])
        out, err = io.StringIO(), io.StringIO()
        shell = Shell(client, out=out, err=err, db="app")
        assert shell.run_text("db.T.find({})")
        assert out.getvalue().count("_id_") == 20 and '-- 20 shown; type "it" for more' in out.getvalue()
        assert shell.run_text("it")
        assert "-- 40 shown (21 to 40 now)" in out.getvalue()
        assert shell.run_text("it;")
        assert out.getvalue().count("_id_") == 45 and "-- 45 shown in all (41 to 45 now); no more" in out.getvalue()
        assert not shell.run_text("it") and "no cursor" in err.getvalue()
        shell.run_text("db.T.find({})\ndb.T.count()")  # a new statement closes the page before it
        assert client._executor.cursors.ids() == []
        assert shell.run_text("db.T.find({}).batch_size(30)\nit")
        assert "-- 30 shown; type" in out.getvalue() and "-- 45 shown in all (31 to 45 now)" in out.getvalue()
        json_out = io.StringIO()
        assert Shell(client, out=json_out, err=err, db="app", json_mode=True).run_text("db.T.find({})")
        assert json_out.getvalue().count("_id_") == 45 and "cursor" not in json_out.getvalue()
