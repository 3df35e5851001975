"""Requests whose evaluation is expensive: one client's must not freeze or exhaust the server for the others.

The server runs in a child process (ServerProcess), so that a request holding the GIL
there cannot also stop the test's own client threads, which measure it from outside.
"""

from __future__ import annotations

import threading
import time

import pytest

import hoarddb
from hoarddb.errors import BadValueError, DocumentTooLargeError, RegexTimeoutError
from hoarddb.testing import ServerProcess

#: The server's regex_timeout here: long enough to see other clients served while a
#: hostile match runs, short enough for a quick test.
REGEX_TIMEOUT = 2.0
#: (a|aa)+$ on these backtracks through ~1.6^50 paths: hours on Python's re, which held
#: the GIL (and so the whole server) all along; the regex package tries it in C, without
#: the GIL, and stops at the time limit. ((a+)+$, the classic, is one the regex package
#: sees through at once.)
CATASTROPHIC = "(a|aa)+$"
VICTIM = "a" * 50 + "b"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("hostile") / "data"
    with ServerProcess(data, "--busy-poll", "0", env={"HOARDDB_REGEX_TIMEOUT": str(REGEX_TIMEOUT)}) as s:
        with hoarddb.connect(s.url(), timeout=30) as c:
            c["app"].create_bucket("Users", type="hash")
            c["app"].Users.batch_insert([{"_id_": "victim", "Name": VICTIM, "Tags": [VICTIM]},
                                         {"_id_": "u1", "Name": "Jane", "Tags": ["x"]}])
        yield s


def _while_running(server, hostile, timeout: float = 60):
    """Run ``hostile(bucket)`` on a connection of its own while another client gets a
    document again and again: (what hostile raised or returned, seconds it took, the gets
    answered while it ran, the slowest of them)."""
    outcome: dict = {}

    def run():
        with hoarddb.connect(server.url(), timeout=timeout) as h:
            started = time.monotonic()
            try:
                outcome["result"] = hostile(h["app"].Users)
            except Exception as e:  # noqa: BLE001 - the outcome is what the test looks at
                outcome["result"] = e
            outcome["took"] = time.monotonic() - started

    answered, slowest = 0, 0.0
    with hoarddb.connect(server.url(), timeout=timeout) as good:
        assert good["app"].Users.get("u1")["Name"] == "Jane"
        thread = threading.Thread(target=run)
        thread.start()
        while thread.is_alive():
            started = time.monotonic()
            assert good["app"].Users.get("u1")["Name"] == "Jane"
            if thread.is_alive():  # answered while the hostile request still ran
                answered += 1
                slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.02)
        thread.join()
    return outcome["result"], outcome["took"], answered, slowest


def test_catastrophic_regex_is_refused_and_others_are_served_meanwhile(server):
    # Regression: on Python's re this find held the GIL for hours; every connection, the
    # event loop and the group commit waited with it (the get below took as long as the find).
    result, took, answered, slowest = _while_running(
        server, lambda b: b.find({"Name": {"$regex": CATASTROPHIC}}))
    assert isinstance(result, RegexTimeoutError), result
    assert result.code == 33 and result.codeName == "REGEX_TIMEOUT"
    assert "anchor" in result.message and "regex_timeout" in result.message
    assert f"{REGEX_TIMEOUT:g} s" in result.message  # the server's option, not the filters' default
    assert took < REGEX_TIMEOUT + 10
    assert answered >= 3, "no other client was answered while the regex ran"
    assert slowest < 1.0, f"a get waited {slowest:.2f} s behind the regex"


def test_catastrophic_regex_in_a_write_is_refused_and_writes_nothing(server):
    # An update's filter runs in the group commit, where it would hold every write.
    result, _took, answered, _slowest = _while_running(
        server, lambda b: b.update({"Name": {"$regex": CATASTROPHIC}}, {"$set": {"Hit": True}}))
    assert isinstance(result, RegexTimeoutError), result
    assert answered >= 1
    # $pull with a regex condition: the same limit
    result, *_ = _while_running(server, lambda b: b.update({"_id_": "victim"}, {"$pull": {"Tags": {"$regex": CATASTROPHIC}}}))
    assert isinstance(result, RegexTimeoutError), result
    with hoarddb.connect(server.url(), timeout=30) as c:
        victim = c["app"].Users.get("victim")
        assert "Hit" not in victim and victim["Tags"] == [VICTIM]
        c["app"].Users.update({"_id_": "u1"}, {"$set": {"Seen": 1}})  # the server writes on
        assert c["app"].Users.get("u1")["Seen"] == 1


def test_regex_that_fits_still_matches(server):
    with hoarddb.connect(server.url(), timeout=30) as c:
        users = c["app"].Users
        assert [d["_id_"] for d in users.find({"Name": {"$regex": "^ja", "$options": "i"}})] == ["u1"]
        assert users.count({"Name": {"$regex": "a{50}b$"}}) == 1
        # a search that an index answers with few documents runs on the event loop; one whose
        # filter holds a regex does not, and is still answered
        assert users.search({"_id_": "victim", "Name": {"$regex": "b$"}})[0]["_id_"] == "victim"


def test_regex_that_would_take_the_memory_to_compile_is_refused(server):
    # The regex package spells a fixed repeat out item by item: this one would have taken
    # tens of gigabytes (the process was killed) before a single document was tested.
    with hoarddb.connect(server.url(), timeout=30) as c:
        with pytest.raises(BadValueError, match="repeats too much"):
            c["app"].Users.find({"Name": {"$regex": "(?:(?:a{1000}){1000}){1000}"}})
        with pytest.raises(BadValueError, match="characters long"):
            c["app"].Users.count({"Name": {"$regex": "a" * 40_000}})
        assert c["app"].Users.get("u1")["Name"] == "Jane"


def test_a_lone_clients_long_update_does_not_hold_the_event_loop(server):
    # Regression: with one connection open, its writes ran on the event loop; an update of
    # a whole bucket held it for seconds, and a connection arriving meanwhile (or /healthz)
    # waited for all of it. Writes that scan now run on the flush thread.
    with hoarddb.connect(server.url(), timeout=60) as c:
        c["app"].create_bucket("Many", type="hash")
        for start in range(0, 50_000, 10_000):
            c["app"].Many.batch_insert([{"_id_": i, "n": 0, "pad": "x" * 50} for i in range(start, start + 10_000)])
    outcome: dict = {}

    def lone_update():
        with hoarddb.connect(server.url(), timeout=60) as h:
            outcome["answer"] = h["app"].Many.update({"n": {"$gte": 0}}, {"$inc": {"n": 1}})  # a second or two
            outcome["ended"] = time.monotonic()

    thread = threading.Thread(target=lone_update)
    thread.start()
    time.sleep(0.2)  # the update is running
    with hoarddb.connect(server.url(), timeout=60) as good:
        assert good["app"].Users.get("u1")["Name"] == "Jane"
        answered = time.monotonic()
    thread.join()
    assert outcome["answer"] == {"matched": 50_000, "modified": 50_000}
    assert answered < outcome["ended"], "the new connection was served only after the lone update ended"


def test_a_long_answer_is_encoded_off_the_event_loop(tmp_path, monkeypatch):
    # bson's encoder holds the GIL for all of one call: a find answering 100,000 documents
    # held the event loop 100-300 ms while it was encoded there in one piece.
    from hoarddb.testing import ServerThread
    from hoarddb.wire import protocol

    on_loop: list[int] = []
    encode_message = protocol.encode_message

    def spy(doc, *args, **kwargs):
        data = encode_message(doc, *args, **kwargs)
        if threading.current_thread().name == "hoarddb-test-server":
            on_loop.append(len(data))
        return data

    monkeypatch.setattr(protocol, "encode_message", spy)
    with ServerThread(tmp_path / "data", insecure=True) as s, hoarddb.connect(s.url(), timeout=60) as c:
        c["app"].create_bucket("Many", type="hash")
        c["app"].Many.batch_insert([{"_id_": i, "pad": "x" * 100} for i in range(20_000)])
        assert len(c["app"].Many.find({})) == 20_000  # ~2.5 MB
        c["app"].create_bucket("Big", type="hash")
        for i in range(300):  # 300 documents of 60 KB: an answer of 18 MB, over the limit of one message
            c["app"].Big.insert({"_id_": i, "blob": "y" * 60_000})
        with pytest.raises(DocumentTooLargeError, match="limit of one answer"):  # asked whole: stopped reading at 16 MiB
            c.execute({"op": "find", "db": "app", "bucket": "Big", "args": {}})
        assert len(c["app"].Big.find({})) == 300  # through a cursor, a batch at a time
        assert len(c["app"].Big.find({}, limit=200)) == 200
    assert max(on_loop, default=0) < 1_000_000, f"an answer of {max(on_loop)} bytes was encoded on the loop"


def test_regex_timeout_option():
    from hoarddb.server.config import ServerConfig

    assert ServerConfig().regex_timeout == 1.0
    assert ServerConfig.load({"regex_timeout": "0"}, environ={"HOARDDB_DATA": "x"}).regex_timeout == 0
    for bad in ("-1", "nan", "soon"):
        with pytest.raises(BadValueError, match="regex.timeout"):
            ServerConfig.load({"regex_timeout": bad}, environ={"HOARDDB_DATA": "x"})


def test_a_long_answer_encoded_a_document_at_a_time_is_the_same_message():
    import bson

    from hoarddb.errors import DocumentTooLargeError
    from hoarddb.server.server import ONE_CALL, encode_answer

    for n in (0, 1, ONE_CALL, ONE_CALL + 1, 500):
        answer = {"id": 7, "ok": 1, "result": [{"_id_": i, "v": "x" * (i % 13)} for i in range(n)], "index_used": "E"}
        assert bson.decode(encode_answer(answer, 1 << 24)) == answer
    big = {"id": 1, "ok": 1, "result": [{"_id_": i, "v": "x" * 1000} for i in range(200)]}
    with pytest.raises(DocumentTooLargeError, match="limit"):
        encode_answer(big, 100_000)


def test_a_find_whose_answer_cannot_be_sent_stops_reading_at_the_limit(tmp_path):
    # Before, every matching document was decoded into memory (100,000 small documents
    # took 180 MB for an answer the server then refused); now the read stops as soon as
    # it has gathered more than one message can carry, for find, search and range alike.
    import tracemalloc

    with hoarddb.open(tmp_path / "data") as client:
        many = client["app"].create_bucket("Many", type="hash", indices=[{"field": "k"}])
        many.batch_insert([{"_id_": i, "k": 1, "pad": "x" * 2_000} for i in range(3_000)])  # ~6 MB
        tree = client["app"].create_bucket("Tree", type="btree", key="s")
        tree.batch_insert([{"s": i, "pad": "x" * 2_000} for i in range(3_000)])
        assert len(many.find({})) == 3_000  # embedded: no limit unless asked for
    with hoarddb.open(tmp_path / "data", max_answer_bytes=1_000_000) as client:  # what a server sets (16 MiB)
        many, tree = client["app"].Many, client["app"].Tree

        def whole(op, bucket, **args):  # asked without batch_size: one answer (the clients read through cursors)
            return lambda: client.execute({"op": op, "db": "app", "bucket": bucket, "args": args})
        for read in (whole("find", "Many"), whole("search", "Many", filter={"k": 1}), whole("range", "Tree")):
            tracemalloc.start()
            with pytest.raises(DocumentTooLargeError, match="over the 1000000-byte limit of one answer"):
                read()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert peak < 4_000_000, f"{peak} bytes held before the refusal"
        assert len(many.find({}, limit=100)) == 100  # under the limit: answered
        assert len(tree.range({}, limit=100)) == 100
        cursor = many.find({}, batch_size=3_000)  # through a cursor: a batch at a time, whatever the result's size
        assert len(cursor.next_batch()) < 500 and sum(1 for _ in cursor) > 2_500  # a batch holds at most the limit
