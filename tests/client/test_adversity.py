"""Both clients when the server or the network misbehaves: a server killed or restarted, answers
lost, a stalled network, a connection cut mid-message, a client closed or interrupted mid-call.

The rules under test (docs/user/clients.md, "Was my write applied?"):
- a request that found its connection dead before it was sent goes on a new connection;
- a read whose answer was lost is sent once more; a write never is: it raises
  ConnectionError_ or HoardTimeoutError with ``outcome_unknown = True``, saying so;
- nothing waits forever: every call has a timeout, and ``close()`` fails the calls in
  flight with ClosedError at once;
- each call gets its own answer, and the client is usable after any of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import socket
import threading
import time

import pytest

import hoarddb
import hoarddb.aio
from hoarddb.client import ConnectOptions
from hoarddb.errors import ClosedError, ConnectionError_, HoardError, HoardTimeoutError
from hoarddb.testing import FaultProxy, ServerProcess, ServerThread

from .scripted_server import ScriptedServer, answer, goodbye


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerThread(tmp_path_factory.mktemp("adversity") / "data", insecure=True) as s:
        with hoarddb.connect(s.url()) as c:
            for name, kind in (("H", "hash"), ("Q", "fifo"), ("B", "blob")):
                c["adv"].create_bucket(name, type=kind)
        yield s


@pytest.fixture
def proxy(server):
    with FaultProxy("127.0.0.1", server.port) as p:
        p.url = f"hoarddb://127.0.0.1:{p.port}/?insecure=true"
        yield p


def run_within(seconds: float, coro_fn):
    """Run ``coro_fn()`` on its own loop in a thread; its result, or fail if it is not done in
    ``seconds`` (a hung asyncio call would hang the test, and cancelling it may hang too)."""
    out: dict = {}

    def main():
        try:
            out["result"] = asyncio.run(coro_fn())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds} s: hung")
    if "error" in out:
        raise out["error"]
    return out["result"]


def wait_until(condition, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("the condition did not come true in time")
        time.sleep(0.01)


def assert_outcome_unknown(error: HoardError, verb: str) -> None:
    assert error.outcome_unknown is True
    assert f"the {verb} may or may not have been applied" in error.message
    assert "Read back before trying again" in error.message


# ---- a server restarted, killed mid-request -----------------------------------------------------

def test_a_write_after_the_server_restarted_goes_on_a_new_connection_once(tmp_path):
    """Regression: the first write after a restart failed as "may or may not have happened", though
    the old connection was known dead (its end of file was waiting to be read) and never carried it."""
    server = ServerProcess(tmp_path / "data").start()
    try:
        client = hoarddb.connect(server.url())
        client["app"].create_bucket("H")
        server.kill()
        server.start()  # the same port
        key = client["app"].H.insert({"n": 1})  # a generated _id_: sent twice, it would be two documents
        assert client["app"].H.find({}) == [{"_id_": key, "n": 1}]

        async def aio():
            c = await hoarddb.aio.connect(server.url())
            await c["app"].H.length()
            server.kill()
            server.start()
            await asyncio.sleep(0.1)
            await c["app"].H.insert({"n": 2})
            assert await c["app"].H.count({}) == 2
            await c.close()
        run_within(30, aio)
        client.close()
    finally:
        server.stop()


@pytest.mark.parametrize("farewell", [b"", goodbye()], ids=["end-of-file", "goodbye"])
def test_aio_notices_a_connection_closed_while_its_loop_was_blocked(farewell):
    """Regression: when the server closed the connection while the event loop was busy with the
    program's own code (a time.sleep in a coroutine), the loop had not seen the end of file yet,
    and the next write went into the dead connection and failed as "may or may not have been
    applied". It now sees the connection is dead before sending, and sends on a new one."""
    pushes: list = []

    def on_request(conn, doc):
        if doc["op"] == "push":
            pushes.append(doc["id"])
        conn.sendall(answer(doc["id"], None))

    with ScriptedServer(on_request) as scripted:
        async def main():
            c = await hoarddb.aio.connect(scripted.url)
            try:
                await c.execute({"op": "length", "db": "a", "bucket": "Q"})
                scripted.drop(farewell)
                time.sleep(0.3)  # the loop is blocked: it reads neither the goodbye nor the end of file
                await c.execute({"op": "push", "db": "a", "bucket": "Q", "args": {"doc": {"n": 1}}})
            finally:
                await c.close()
        run_within(10, main)
        assert len(pushes) == 1


def test_aio_write_after_a_restart_its_loop_did_not_see_goes_on_a_new_connection_once(tmp_path):
    """As above, through TLS, against a real server killed and started again while the loop is blocked."""
    from hoarddb.server.users import UserStore
    UserStore(tmp_path / "data").add("admin", "admin-pw", ["admin"], iterations=4096)
    server = ServerProcess(tmp_path / "data", insecure=False).start()
    try:
        async def main():
            c = await hoarddb.aio.connect(server.url("admin", "admin-pw"))
            await c["app"].create_bucket("H")
            server.kill()  # blocking calls: the loop runs none of its callbacks meanwhile
            server.start()
            time.sleep(0.2)
            await c["app"].H.insert({"n": 1})  # a generated _id_: sent twice, it would be two documents
            assert await c["app"].H.count({}) == 1
            await c.close()
        run_within(60, main)
    finally:
        server.stop()


def test_a_write_whose_answer_was_lost_to_a_killed_server_is_not_resent(tmp_path):
    server = ServerProcess(tmp_path / "data").start()
    watcher = None
    try:
        with FaultProxy("127.0.0.1", server.port) as proxy:
            client = hoarddb.connect(f"hoarddb://127.0.0.1:{proxy.port}/?insecure=true")
            client["app"].create_bucket("H")
            watcher = hoarddb.connect(server.url())  # straight to the server
            proxy.stall("answers")
            failure: list = []
            writer = threading.Thread(target=lambda: failure.append(_raised(client["app"].H.insert, {"n": 1})))
            writer.start()
            wait_until(lambda: watcher["app"].H.count({}) == 1)  # applied; its answer held back
            server.kill()  # SIGKILL before the answer got out
            proxy.cut()
            writer.join(10)
            assert not writer.is_alive()
            (error,) = failure
            assert isinstance(error, ConnectionError_) and error.code == 29
            assert_outcome_unknown(error, "insert")
            server.start()
            proxy.resume()
            assert client["app"].H.count({}) == 1  # not sent again; and the client reconnects by itself
            client["app"].H.insert({"n": 2})
            assert client["app"].H.count({}) == 2
            client.close()
    finally:
        if watcher is not None:
            watcher.close()
        server.stop()


def _raised(fn, *args):
    try:
        fn(*args)
    except HoardError as e:
        return e
    return None


def test_aio_writes_in_flight_when_the_connection_drops_fail_and_reads_are_answered(server, proxy):
    async def main():
        client = await hoarddb.aio.connect(proxy.url, timeout=30)
        bucket = client["adv"].H
        for i in range(20):
            await bucket.put({"_id_": f"k{i}", "n": i})
        before = await bucket.count({})
        proxy.stall("answers")
        writes = [asyncio.ensure_future(bucket.insert({"w": i})) for i in range(20)]
        reads = [asyncio.ensure_future(bucket.get(f"k{i}")) for i in range(20)]
        await asyncio.sleep(0.3)
        proxy.cut()
        proxy.resume()
        done, pending = await asyncio.wait(writes + reads, timeout=20)
        assert not pending
        for i, read in enumerate(reads):
            assert read.result() == {"_id_": f"k{i}", "n": i}  # its own answer, sent again
        for write in writes:
            assert isinstance(write.exception(), ConnectionError_)
            assert_outcome_unknown(write.exception(), "insert")
        assert before <= await bucket.count({}) <= before + 20  # usable after
        await client.close()
    run_within(40, main)


def test_a_lost_answer_sends_a_read_again_and_never_a_write(server, proxy):
    """On a connection that had already carried requests, a cut that loses a get's answer
    sends the get once more on a new connection; a write's (an insert) is raised, not resent."""
    client = hoarddb.connect(proxy.url, timeout=30)
    bucket = client["adv"].H
    bucket.put({"_id_": "lost", "n": 1})
    outcomes = {}
    for verb, call in (("get", lambda: bucket.get("lost")), ("insert", lambda: bucket.insert({"lost": True}))):
        def run(verb=verb, call=call):
            try:
                outcomes[verb] = call()
            except HoardError as e:
                outcomes[verb] = e
        proxy.stall("answers")
        caller = threading.Thread(target=run)
        caller.start()
        time.sleep(0.3)  # the request is through; its answer is held at the proxy
        proxy.cut()
        proxy.resume()
        caller.join(20)
        assert not caller.is_alive()
    assert outcomes["get"] == {"_id_": "lost", "n": 1}
    assert isinstance(outcomes["insert"], ConnectionError_)
    assert_outcome_unknown(outcomes["insert"], "insert")
    assert bucket.count({"lost": True}) in (0, 1)
    client.close()


def test_threads_sharing_a_client_through_cuts_get_their_own_answers_and_never_hang(server, proxy):
    client = hoarddb.connect(proxy.url, timeout=30)
    bucket = client["adv"].H
    for t in range(6):
        bucket.put({"_id_": f"t{t}", "owner": t})
    stop = threading.Event()
    wrong: list = []
    errors: list = []

    def work(t):
        while not stop.is_set():
            verb = "get"
            try:
                got = bucket.get(f"t{t}")
                if got != {"_id_": f"t{t}", "owner": t}:
                    wrong.append((t, got))
                verb = "push"
                client["adv"].Q.push({"t": t})
            except (ConnectionError_, HoardTimeoutError) as e:
                errors.append((verb, e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for thread in threads:
        thread.start()
    for _ in range(5):
        time.sleep(0.1)
        proxy.cut()
    stop.set()
    for thread in threads:
        thread.join(20)
    assert not any(thread.is_alive() for thread in threads)
    assert not wrong
    for verb, e in errors:
        if verb == "push":
            assert_outcome_unknown(e, "push")
        else:  # a get is sent again on a new connection, unless the one cut was new itself (under
            # load, a cut can come before a new connection's first answer): then it says so
            assert e.outcome_unknown is False and "the get changed nothing; call it again" in e.message, e
    assert bucket.get("t0") == {"_id_": "t0", "owner": 0}
    client.close()


# ---- a server that says goodbye, or answers slowly ------------------------------------------------

def test_answers_that_came_before_the_servers_goodbye_reach_their_callers():
    """Regression: the answer and the server's goodbye in one read; the sync client raised the
    goodbye to the caller whose answer it had, the asyncio client dropped the answer."""
    def on_request(conn, doc):
        conn.sendall(answer(doc["id"], 7) + goodbye())
        conn.close()

    with ScriptedServer(on_request) as scripted:
        request = {"op": "length", "db": "a", "bucket": "Q"}
        client = hoarddb.connect(scripted.url)
        assert client.execute(request)["result"] == 7
        client.close()

        async def aio():
            c = await hoarddb.aio.connect(scripted.url)
            try:
                return (await c.execute(request))["result"]
            finally:
                await c.close()
        assert run_within(10, aio) == 7


def test_every_connection_error_says_whether_its_outcome_is_unknown():
    """Regression: a server refusing the connection in its hello (max_connections, stopping) raised
    an error without ``outcome_unknown``, so ``if e.outcome_unknown`` itself failed."""
    refuse = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = refuse.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.sendall(goodbye(29, "CONNECTION_ERROR", "too many connections (max_connections)"))
            conn.close()
    threading.Thread(target=serve, daemon=True).start()
    url = f"hoarddb://127.0.0.1:{refuse.getsockname()[1]}/?insecure=true"
    nothing = socket.socket()
    nothing.bind(("127.0.0.1", 0))
    nowhere = f"hoarddb://127.0.0.1:{nothing.getsockname()[1]}/?insecure=true"
    nothing.close()
    try:
        for target in (url, nowhere):
            with pytest.raises(ConnectionError_) as e:
                hoarddb.connect(target)
            assert e.value.outcome_unknown is False

            async def aio():
                await hoarddb.aio.connect(target)
            with pytest.raises(ConnectionError_) as e:
                run_within(10, aio)
            assert e.value.outcome_unknown is False
    finally:
        refuse.close()


def test_aio_timeout_counts_the_servers_silence_not_a_long_pipeline():
    """Regression: every asyncio call timed out ``timeout`` after it began, even while the server
    was answering the calls before it; now a call times out when the server stays silent."""
    waiting: list = []
    lock = threading.Lock()

    def on_request(conn, doc):
        with lock:
            waiting.append((conn, doc["id"]))

    def answer_slowly():
        sent = 0
        while sent < 12:
            time.sleep(0.1)
            with lock:
                if waiting:
                    conn, request_id = waiting.pop(0)
                    conn.sendall(answer(request_id, request_id))
                    sent += 1

    with ScriptedServer(on_request) as scripted:
        threading.Thread(target=answer_slowly, daemon=True).start()

        async def main():
            c = await hoarddb.aio.connect(scripted.url, timeout=0.6)
            try:
                return await asyncio.gather(*(c.execute({"op": "length", "db": "a", "bucket": "Q"})
                                              for _ in range(12)))
            finally:
                await c.close()
        answers = run_within(20, main)  # 1.2 s in all, never more than 0.1 s of silence
        assert len(answers) == 12


def test_a_pipeline_cut_midway_keeps_the_answers_that_came():
    """Regression: a pipeline whose connection was lost midway raised, and the answers of the
    requests before the loss (so: which writes were applied) were lost with it."""
    def on_request(conn, doc):
        if doc["id"] <= 3:  # the hello was id 1
            conn.sendall(answer(doc["id"], None))
        else:
            conn.close()

    from hoarddb.client import pipeline
    with ScriptedServer(on_request) as scripted:
        client = hoarddb.connect(scripted.url, timeout=10)
        pushes = [{"op": "push", "db": "a", "bucket": "Q", "args": {"doc": {"n": i}}} for i in range(5)]
        with pytest.raises(ConnectionError_) as e:
            pipeline(client, pushes)
        assert e.value.answers == [{"ok": 1, "result": None}] * 2
        assert_outcome_unknown(e.value, "pipeline (from its 3rd request on)")
        client.close()


def test_aio_close_while_connecting_leaves_no_connection_open(server, proxy):
    async def main():
        client = await hoarddb.aio.connect(proxy.url)
        proxy.cut()
        proxy.stall()  # the next connection's handshake hangs
        call = asyncio.ensure_future(client["adv"].Q.length())
        await asyncio.sleep(0.3)
        await client.close()
        try:
            with pytest.raises(ClosedError):
                await asyncio.wait_for(call, 5)  # at once: not after connect_timeout (10 s)
        finally:
            proxy.resume()
        assert client._executor._proto is None
    run_within(20, main)


# ---- stalls and timeouts ------------------------------------------------------------------------

def test_every_call_has_a_timeout_by_default(server):
    """Regression: without ?timeout= a call waited forever for a server that stopped answering."""
    options = ConnectOptions.from_url("hoarddb://h/")
    assert options.timeout is not None and 0 < options.timeout <= 300 and 0 < options.connect_timeout <= 60
    with hoarddb.connect(server.url()) as client:
        assert client._executor._connection().sock.gettimeout() == options.timeout


def _push_request(n: int = 1) -> dict:
    return {"op": "push", "db": "a", "bucket": "Q", "args": {"doc": {"n": n}}}


def test_threads_queued_behind_a_timed_out_call_fail_with_it():
    """Regression: threads sharing a client against a server gone silent each waited a whole
    timeout in turn (each sent its request on a new connection and waited again): four threads
    took four timeouts. Now the calls queued behind a timeout fail with it at once, unsent."""
    silent = threading.Event()
    silent.set()
    pushes: list = []

    def on_request(conn, doc):
        if doc["op"] == "push":
            pushes.append(doc["id"])
        if not silent.is_set():
            conn.sendall(answer(doc["id"], None))

    with ScriptedServer(on_request) as scripted:
        client = hoarddb.connect(scripted.url, timeout=0.5)
        failures: list = []
        threads = [threading.Thread(target=lambda: failures.append(_raised(client.execute, _push_request())))
                   for _ in range(4)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        took = time.monotonic() - started
        assert took < 1.5, f"the four calls took {took:.2f} s: each waited a timeout of its own"
        assert len(failures) == 4 and all(isinstance(e, HoardTimeoutError) and e.code == 30 for e in failures)
        sent = [e for e in failures if e.outcome_unknown]
        assert len(sent) == len(pushes) == 1  # the one that went out; the others never did
        assert_outcome_unknown(sent[0], "push")
        for e in failures:
            if e not in sent:
                assert e.outcome_unknown is False and "it was not sent" in e.message
        silent.clear()
        assert client.execute(_push_request())["ok"] == 1  # the next call reconnects
        assert len(pushes) == 2
        client.close()


def test_a_call_waiting_for_its_turn_counts_that_wait_in_its_timeout():
    """A call queued behind another thread's call that holds the connection while nothing moves on
    it (an upload whose file reads slowly) fails after ``timeout``, unsent: it does not wait for the
    whole upload and then a timeout of its own."""
    requests: list = []

    class SlowFile(io.RawIOBase):
        def __init__(self):
            self.reads = 0

        def readable(self):
            return True

        def read(self, size=-1):
            self.reads += 1
            if self.reads == 1:
                return b"x" * 1000
            if self.reads == 2:
                time.sleep(2)
            return b""

    with ScriptedServer(lambda conn, doc: requests.append(doc.get("op"))) as scripted:  # never answers
        client = hoarddb.connect(scripted.url, timeout=0.5)
        uploader = threading.Thread(target=_raised, args=(client["a"].B.put, SlowFile()))
        uploader.start()
        wait_until(lambda: requests)  # the put went out: it holds the connection, reading its file
        started = time.monotonic()
        error = _raised(client.execute, {"op": "length", "db": "a", "bucket": "Q"})
        took = time.monotonic() - started
        assert took < 1.2, f"the queued call took {took:.2f} s"
        assert isinstance(error, HoardTimeoutError) and error.outcome_unknown is False
        assert "waited 0.5 s for its turn" in error.message and "it was not sent" in error.message
        uploader.join(10)
        assert "length" not in requests
        client.close()


def test_an_aio_upload_to_a_stalled_server_times_out_and_can_be_cancelled(server, proxy):
    """Regression: an asyncio put whose bytes the network stopped taking waited forever, whatever
    the timeout, and could not even be cancelled (its clean-up waited for the network too)."""
    data = os.urandom(24 * 2**20)

    async def timed_out():
        client = await hoarddb.aio.connect(proxy.url, timeout=1)
        await client["adv"].B.length()
        proxy.stall()
        try:
            with pytest.raises(HoardTimeoutError, match="took none of our upload") as e:
                await client["adv"].B.put(data)
            assert_outcome_unknown(e.value, "put")
        finally:
            proxy.resume()
            await client.close()
    run_within(20, timed_out)

    async def cancelled():
        client = await hoarddb.aio.connect(proxy.url, timeout=60)
        await client["adv"].B.length()
        proxy.stall()
        try:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(client["adv"].B.put(data), 0.5)
        finally:
            proxy.resume()
        assert isinstance(await client["adv"].B.length(), int)  # usable after
        await client.close()
    run_within(20, cancelled)


# ---- closing while calls wait -------------------------------------------------------------------

def test_close_from_another_thread_fails_the_waiting_call_at_once(server, proxy):
    """Regression: close() waited for the call in flight to end, forever with a stalled server,
    and that call then said the server had closed the connection."""
    client = hoarddb.connect(proxy.url)  # the default timeout: far longer than this test
    client["adv"].H.length()
    proxy.stall("answers")
    failure: list = []
    caller = threading.Thread(target=lambda: failure.append(_raised(client["adv"].H.insert, {"n": 1})))
    caller.start()
    time.sleep(0.3)
    closer = threading.Thread(target=client.close)
    closer.start()
    closer.join(5)
    caller.join(5)
    proxy.resume()
    assert not closer.is_alive() and not caller.is_alive()
    (error,) = failure
    assert isinstance(error, ClosedError) and error.code == 19
    assert "closed while the insert waited for its answer" in error.message
    assert_outcome_unknown(error, "insert")
    with pytest.raises(ClosedError):
        client["adv"].H.length()


def test_aio_close_fails_the_calls_in_flight_with_closed(server, proxy):
    async def main():
        client = await hoarddb.aio.connect(proxy.url)
        await client["adv"].Q.length()
        proxy.stall("answers")
        calls = [asyncio.ensure_future(client["adv"].Q.push({"n": i})) for i in range(5)]
        calls.append(asyncio.ensure_future(client["adv"].Q.length()))
        await asyncio.sleep(0.3)
        await client.close()
        done, pending = await asyncio.wait(calls, timeout=5)
        proxy.resume()
        assert not pending
        for call in calls:
            assert isinstance(call.exception(), ClosedError)
        for push in calls[:5]:
            assert_outcome_unknown(push.exception(), "push")
        with pytest.raises(ClosedError):
            await client["adv"].Q.length()
    run_within(20, main)


def test_a_stream_read_after_close_is_closed(server):
    payload = os.urandom(5 * 2**20)
    with hoarddb.connect(server.url()) as c:
        blob_id = c["adv"].B.put(payload)
    client = hoarddb.connect(server.url())
    stream = client["adv"].B.stream(blob_id, chunk_size=2**20)
    next(stream)
    client.close()
    with pytest.raises(ClosedError, match="before the stream was read to its end"):
        list(stream)

    async def aio():
        c = await hoarddb.aio.connect(server.url())
        chunks = await c["adv"].B.stream(blob_id, chunk_size=2**20)
        await chunks.__anext__()
        await c.close()
        with pytest.raises(ClosedError, match="before the stream was read to its end"):
            async for _ in chunks:
                pass
    run_within(20, aio)


# ---- a call interrupted (Ctrl-C) ----------------------------------------------------------------

@contextlib.contextmanager
def ctrl_c_after(seconds: float):
    """A KeyboardInterrupt in this (the main) thread after ``seconds``, if still inside the block."""
    armed = True

    def interrupt(signum, frame):
        if armed:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_call_interrupted_halfway_leaves_the_client_usable(server, proxy):
    """Regression: a request interrupted in the middle of being sent left half a message on the
    connection, so the server read the next request as the rest of it and never answered it."""
    client = hoarddb.connect(proxy.url, timeout=5)
    bucket = client["adv"].H
    bucket.length()
    proxy.stall("requests")  # the server takes nothing: the big insert's send blocks halfway
    with pytest.raises(KeyboardInterrupt), ctrl_c_after(0.5):
        bucket.insert({"big": "x" * (15 * 2**20)})
    proxy.resume()
    bucket.put({"_id_": "after-ctrl-c", "n": 1})
    assert bucket.get("after-ctrl-c") == {"_id_": "after-ctrl-c", "n": 1}

    proxy.stall("answers")  # interrupted while waiting for an answer: that answer comes later
    with pytest.raises(KeyboardInterrupt), ctrl_c_after(0.3):
        bucket.count({})
    proxy.resume()
    assert bucket.get("after-ctrl-c") == {"_id_": "after-ctrl-c", "n": 1}  # its own answer
    assert bucket.length() >= 1
    assert not client._executor._connection()._answers  # the late answer was dropped, not kept
    client.close()


# ---- large transfers cut midway -----------------------------------------------------------------

def test_a_stream_cut_midway_raises_and_never_ends_short(server, proxy):
    payload = os.urandom(8 * 2**20)
    with hoarddb.connect(server.url()) as c:
        blob_id = c["adv"].B.put(payload)
    client = hoarddb.connect(proxy.url)
    proxy.cut_after(3 * 2**20, "answers")
    got = bytearray()
    with pytest.raises(ConnectionError_, match="the stream changed nothing; call it again"):
        for chunk in client["adv"].B.stream(blob_id):
            got += chunk
    assert len(got) < len(payload)
    assert b"".join(client["adv"].B.stream(blob_id)) == payload  # reconnects
    client.close()

    async def aio():
        c = await hoarddb.aio.connect(proxy.url)
        proxy.cut_after(3 * 2**20, "answers")
        with pytest.raises(ConnectionError_, match="the stream changed nothing"):
            async for _ in await c["adv"].B.stream(blob_id):
                pass
        assert b"".join([chunk async for chunk in await c["adv"].B.stream(blob_id)]) == payload
        await c.close()
    run_within(30, aio)


def test_an_upload_cut_midway_stores_nothing(server, proxy):
    with hoarddb.connect(server.url()) as c:
        before = c["adv"].B.length()
    client = hoarddb.connect(proxy.url)
    proxy.cut_after(5 * 2**20, "requests")
    with pytest.raises(ConnectionError_) as e:
        client["adv"].B.put(io.BytesIO(os.urandom(20 * 2**20)), name="cut.bin")
    assert_outcome_unknown(e.value, "put")
    client.close()

    async def aio():
        c = await hoarddb.aio.connect(proxy.url)
        proxy.cut_after(5 * 2**20, "requests")
        with pytest.raises(ConnectionError_) as e:
            await c["adv"].B.put(io.BytesIO(os.urandom(20 * 2**20)), name="cut.bin")
        assert_outcome_unknown(e.value, "put")
        await c.close()
    run_within(30, aio)
    time.sleep(0.2)  # let the server see the ends of the cut uploads
    with hoarddb.connect(server.url()) as c:
        assert c["adv"].B.length() == before
