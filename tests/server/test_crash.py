"""A real server process: SIGKILL under concurrent writes loses nothing acknowledged; SIGTERM stops gracefully."""

from __future__ import annotations

import os
import threading
import time

import pytest

import hoarddb
from hoarddb.errors import HoardError
from hoarddb.testing import ServerProcess
from hoarddb.testing.raw import RawConnection
from hoarddb.values.codec import encode

SLOW = os.environ.get("HOARDDB_SLOW") == "1"


def _kill_under_load(tmp_path, seconds: float, writers: int):
    data = tmp_path / "data"
    acked: dict[int, list] = {n: [] for n in range(writers)}
    with ServerProcess(data) as server:
        with hoarddb.connect(server.url()) as c:
            c["app"].create_bucket("H", type="hash")
            c["app"].create_bucket("Q", type="fifo")
            c["app"].create_bucket("B", type="btree", key="k")
        stop = threading.Event()

        def writer(n):
            try:
                with hoarddb.connect(server.url(), timeout=10) as c:
                    i = 0
                    while not stop.is_set() and i < 100_000:
                        key = f"w{n}-{i}"
                        kind = i % 3
                        if kind == 0:
                            c["app"].H.insert({"_id_": key, "n": n, "i": i})
                        elif kind == 1:
                            c["app"].Q.push({"key": key})
                        else:
                            c["app"].B.insert({"k": key})
                        acked[n].append((kind, key))
                        i += 1
            except HoardError:
                pass  # the server died under us: what was answered before is what counts

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        server.kill()
        stop.set()
        for t in threads:
            t.join(30)
        assert server.proc.returncode == -9
        server.start()  # same data, no repair step
        with hoarddb.connect(server.url()) as c:
            hash_keys = {d["_id_"] for d in _all(c["app"].H)}
            queue = {d["key"] for d in _all(c["app"].Q)}
            btree = {d["k"] for d in _all(c["app"].B)}
    total = 0
    for n, keys in acked.items():
        for kind, key in keys:
            total += 1
            assert key in (hash_keys, queue, btree)[kind], f"acknowledged {key} lost"
    assert total > 50, "the load did not get going"
    return total


def _all(bucket):
    """Every element, a page at a time (keyed stores continue after a key, queues after a count)."""
    out, page = [], bucket.list(limit=1000)
    while page:
        out += page
        last = page[-1]
        after = last["_id_"] if "_id_" in last else last["k"] if "k" in last else len(out)
        page = bucket.list(after=after, limit=1000)
    return out


def test_sigkill_under_concurrent_writes_loses_nothing_acknowledged(tmp_path):
    total = _kill_under_load(tmp_path, seconds=2, writers=8)
    print(f"{total} acknowledged writes survived SIGKILL")


def test_sigkill_under_one_writer_loses_nothing_acknowledged(tmp_path):
    """One connection: each write is answered before LMDB commits it (its log record is
    flushed first), so a kill between the answer and the commit is what this covers."""
    total = _kill_under_load(tmp_path, seconds=1.5, writers=1)
    print(f"{total} acknowledged writes survived SIGKILL")


@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="soak: HOARDDB_SLOW=1")
def test_sigkill_soak(tmp_path):
    for round_ in range(5):
        _kill_under_load(tmp_path / f"r{round_}", seconds=6, writers=16)


def test_sigterm_finishes_what_is_in_flight(tmp_path):
    data = tmp_path / "data"
    with ServerProcess(data) as server:
        with hoarddb.connect(server.url()) as c:
            c["app"].create_bucket("Q", type="fifo")
        raw = RawConnection("127.0.0.1", server.port, timeout=20)
        raw.hello()
        n = 300
        raw.send(b"".join(encode({"id": i, "op": "push", "db": "app", "bucket": "Q", "args": {"doc": {"i": i}}})
                          for i in range(n)))
        time.sleep(0.05)
        server.proc.send_signal(15)
        answered = []
        while (doc := raw.recv_doc()) is not None:
            if doc.get("ok") == 1:
                answered.append(doc["id"])
        raw.close()
        assert server.proc.wait(30) == 0
        log = server.log_text()
        assert "stopping" in log and "stopped" in log
        server.start()
        with hoarddb.connect(server.url()) as c:
            stored = [d["i"] for d in c["app"].Q.list(limit=1000)]
    assert answered, "nothing was answered before the stop"
    assert set(answered) <= set(stored)
    assert stored == sorted(stored) and stored == list(range(len(stored)))  # in order, no gap
