"""The server's event loop: uvloop by default where installed, asyncio on request; the same answers on both."""

from __future__ import annotations

import threading

import pytest

import hoarddb
from hoarddb.errors import BadValueError
from hoarddb.server.config import ServerConfig, uvloop
from hoarddb.testing import ServerThread

LOOPS = ["asyncio"] + (["uvloop"] if uvloop() is not None else [])


@pytest.mark.parametrize("choice", LOOPS)
def test_each_loop_serves_reads_writes_and_concurrent_groups(tmp_path, choice):
    with ServerThread(tmp_path / "data", insecure=True, event_loop=choice) as server:
        assert type(server.loop).__module__.split(".")[0] == choice
        assert f"{choice} loop" in server.server.start_line()
        with hoarddb.connect(server.url()) as c:
            c["app"].create_bucket("Q", type="fifo")
            kv = c["app"].create_bucket("KV", type="hash", indices=[{"field": "email", "unique": True}])
            kv.insert({"_id_": "a", "email": "a@x"})
            with pytest.raises(hoarddb.HoardError) as refused:
                kv.insert({"_id_": "b", "email": "a@x"})
            assert refused.value.codeName == "DUPLICATE_KEY"
            assert kv.get("a")["email"] == "a@x"

        errors = []

        def writer(n):  # several connections: groups run on the flush thread and come back to the loop
            try:
                with hoarddb.connect(server.url()) as c:
                    for i in range(20):
                        c["app"].Q.push({"n": n, "i": i})
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        with hoarddb.connect(server.url()) as c:
            assert c["app"].Q.length() == 160
            popped = [c["app"].Q.pop() for _ in range(160)]
        for n in range(8):  # each connection's pushes kept their order
            assert [d["i"] for d in popped if d["n"] == n] == list(range(20))


def test_auto_takes_uvloop_where_installed(tmp_path):
    factory = ServerConfig(data=str(tmp_path)).check().loop_factory()
    loop = factory()
    try:
        assert type(loop).__module__.split(".")[0] == ("uvloop" if uvloop() is not None else "asyncio")
    finally:
        loop.close()


def test_an_unknown_loop_is_refused_with_the_choices(tmp_path):
    with pytest.raises(BadValueError) as e:
        ServerConfig.load({"data": str(tmp_path), "event_loop": "trio"})
    assert "auto, uvloop or asyncio" in e.value.message
