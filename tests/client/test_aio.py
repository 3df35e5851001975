"""hoarddb.aio: the same API awaitable; concurrent tasks pipeline on one connection."""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

import pytest

import hoarddb
import hoarddb.aio
from hoarddb import errors
from hoarddb.testing import FaultProxy, ServerThread

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_users import add_users  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("aio") / "data"
    add_users(data)
    with ServerThread(data) as s:
        yield s


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_verbs_and_errors(server):
    async def main():
        async with await hoarddb.aio.connect(server.url("writer", "writer-pw")) as client:
            with pytest.raises(errors.UnauthorizedError):
                await client["app"].create_bucket("Nope")
        async with await hoarddb.aio.connect(server.url("admin", "admin-pw")) as client:
            db = client["app"]
            users = await db.create_bucket("AioUsers", type="hash", indices=[{"field": "Email", "unique": True}])
            assert await users.insert({"_id_": "u1", "Email": "a@x"}) == "u1"
            with pytest.raises(errors.DuplicateKeyError):
                await users.insert({"_id_": "u2", "Email": "a@x"})
            found = await users.search({"Email": "a@x"})
            assert found.index_used == "Email_1" and found == [{"_id_": "u1", "Email": "a@x"}]
            assert "app" in await client.databases()
            with pytest.raises(errors.VerbNotSupportedError):
                await users.pop()
    run(main())


def test_store_fields_and_a_verb_they_do_not_have(server):
    async def main():
        async with await hoarddb.aio.connect(server.url("admin", "admin-pw")) as client:
            props = await client["app"].create_bucket("AioProps", type="hash",
                                                      store_fields=[{"name": "Log", "type": "fifo"}])
            await props.insert({"_id_": "p1"})
            log = props["p1"].Log
            await log.push({"n": 1})
            assert await log.length() == 1 and await log.peek() == {"n": 1}
            with pytest.raises(errors.VerbNotSupportedError) as e:  # sent as it is: the engine says what to use
                await log.update({"n": 2})
            blocking = hoarddb.connect(server.url("admin", "admin-pw"))
            try:
                with pytest.raises(errors.VerbNotSupportedError) as same:
                    blocking["app"].AioProps["p1"].Log.update({"n": 2})
            finally:
                blocking.close()
            assert e.value.message == same.value.message
    run(main())


def test_concurrent_tasks_are_pipelined_on_one_connection(server):
    async def main():
        async with await hoarddb.aio.connect(server.url("admin", "admin-pw")) as client:
            q = await client["app"].create_bucket("AioQ", type="fifo")
            await asyncio.gather(*(q.push({"n": i}) for i in range(300)))
            assert await q.length() == 300
            lengths = await asyncio.gather(*(q.length() for _ in range(50)))
            assert set(lengths) == {300}
            popped = await asyncio.gather(*(q.pop() for _ in range(300)))
            assert sorted(d["n"] for d in popped) == list(range(300))
    run(main())


def test_blobs_up_and_down(server):
    payload = bytes(range(256)) * 20_000  # ~5 MiB
    async def main():
        async with await hoarddb.aio.connect(server.url("admin", "admin-pw")) as client:
            photos = await client["app"].create_bucket("AioPhotos", type="blob")
            blob_id = await photos.put(io.BytesIO(payload), name="p.bin")
            stream = await photos.stream(blob_id)
            first = await stream.__anext__()
            assert await photos.length() == 1  # another request while the stream is unread
            rest = b"".join([chunk async for chunk in stream])
            assert first + rest == payload
            with pytest.raises(errors.NotFoundError):
                await photos.stream("0192a3b4-c5d6-7890-abcd-ef12345678a1")
    run(main())


def test_timeout_and_reconnect(server):
    async def main():
        with FaultProxy("127.0.0.1", server.port) as proxy:
            url = f"hoarddb://admin:admin-pw@127.0.0.1:{proxy.port}/?tls_fingerprint={server.fingerprint}&timeout=0.5"
            client = await hoarddb.aio.connect(url)
            await client.databases()
            proxy.stall()
            with pytest.raises(errors.HoardTimeoutError):
                await client.databases()
            proxy.resume()
            assert isinstance(await client.databases(), list)
            proxy.cut()
            assert isinstance(await client.databases(), list)  # a read reconnects once
            await client.close()
            with pytest.raises(errors.ClosedError):
                await client.databases()
    run(main())


def test_connection_errors(server):
    async def main():
        with pytest.raises(errors.AuthFailedError):
            await hoarddb.aio.connect(server.url("admin", "wrong"))
        with pytest.raises(errors.ConnectionError_, match="not the pinned"):
            await hoarddb.aio.connect(f"hoarddb://admin:admin-pw@127.0.0.1:{server.port}/?tls_fingerprint={'00' * 32}")
        with pytest.raises(errors.ConnectionError_, match="TLS"):
            await hoarddb.aio.connect(f"hoarddb://127.0.0.1:{server.port}/?insecure=true")
    run(main())
