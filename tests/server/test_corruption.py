"""A damaged data directory served: where a server differs from an embedded open.

A server is one process for every bucket, so what embedded would be one failed call is
there everybody's: a crash in LMDB's reader (a data.mdb cut short under its pages was a
SIGBUS of the whole server) takes every bucket down with it. And a server opens its data
with sync off (group commit), where an opener repairs what a power cut may leave: damage
that a clean shutdown rules out must still be refused, not cut away. tests/test_corruption.py
holds the table of files and damage, embedded; these run a real server in a child process.
"""

from __future__ import annotations


import pytest

import hoarddb
from hoarddb import errors
from hoarddb.testing import ServerProcess

from ..test_corruption import BUCKETS, build, corrupt_document, damage, read

DAMAGED = {  # bucket -> (file, damage, what the error names)
    "H": ("app/H/kv/data.mdb", "truncate-half", "data.mdb"),  # before: SIGBUS, the server gone
    "Q": ("app/Q/seg_00002.fifo", "flip-middle", "seg_00002.fifo"),  # before: cut (sync off), entries lost
    "B": ("app/B/_index.bson", "truncate-half", "_index.bson"),  # before: cut, and blob files deleted
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server on a built directory with three buckets damaged (and T's documents undecodable)."""
    base = tmp_path_factory.mktemp("served")
    data = base / "data"
    build(data)
    with hoarddb.open(data) as c:
        expected = {name: read(c, name) for name in [*BUCKETS, "C"]}
    for rel, how, _ in DAMAGED.values():
        damage(data, rel, how)
    corrupt_document(data / "app" / "T" / "kv" / "data.mdb", b"t" * 50)
    with ServerProcess(data) as server:
        yield server, expected


def test_damaged_buckets_answer_corrupt_data_and_the_server_serves_the_rest(served):
    server, expected = served
    with hoarddb.connect(server.url(), timeout=20) as c:
        for bucket, (_rel, _how, named) in DAMAGED.items():
            for _ in range(2):
                with pytest.raises(errors.CorruptDataError) as caught:
                    read(c, bucket)
                assert named in caught.value.message and "restore" in caught.value.message.lower()
        for name in [*BUCKETS, "C"]:
            if name not in DAMAGED and name != "T":
                assert read(c, name) == expected[name], name
        c["app"].Q2.push({"n": 1000})  # and writes go on
        c["ctl"].C.insert({"_id_": "new"})
    assert server.proc.poll() is None, server.log_text()


def test_a_document_that_does_not_decode_is_corrupt_data_not_an_internal_error(served):
    server, _expected = served
    with hoarddb.connect(server.url(), timeout=20) as c:
        with pytest.raises(errors.CorruptDataError, match="app/T"):
            c["app"].T.list(limit=1000)


def test_a_queue_a_server_closed_cleanly_refuses_damage_instead_of_cutting_it(tmp_path):
    """A server writes with sync off; its clean shutdown still flushes and marks every queue
    closed, so damage found at the next start is refused (before: cut as a power cut's)."""
    data = tmp_path / "data"
    with ServerProcess(data) as server:
        with hoarddb.connect(server.url(), timeout=20) as c:
            q = c["app"].create_bucket("Q", type="fifo", segment_size=4096)
            q.batch_push([{"n": i, "pad": "q" * 100} for i in range(80)])
            c["app"].create_bucket("Other", type="lifo").push({"n": 1})
    assert server.proc.returncode == 0
    segments = sorted((data / "app" / "Q").glob("seg_*.fifo"))
    assert len(segments) == 3
    damage(data, f"app/Q/{segments[-1].name}", "flip-start")
    with ServerProcess(data) as server:
        with hoarddb.connect(server.url(), timeout=20) as c:
            with pytest.raises(errors.CorruptDataError, match=segments[-1].name):
                c["app"].Q.length()
            assert c["app"].Other.list() == [{"n": 1}]
    assert len(list((data / "app" / "Q").glob("seg_*.fifo"))) == 3  # nothing was cut
