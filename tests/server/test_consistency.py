"""Consistency over the wire: per-connection order, read-your-writes across connections,
refusals inside a write group, acknowledged-means-durable, answers never mixed up.

The oracle is the embedded engine: the same requests run one by one on ``Engine.execute``
in a fresh data directory give the answers a server must give to them pipelined (each
connection works in a database of its own, so connections do not disturb each other's
oracle). Real sockets on 127.0.0.1, real child processes, SIGKILL; no mocks.
"""

from __future__ import annotations

import random
import socket
import threading
import time

import pytest

from hoarddb.engine import Engine
from hoarddb.errors import HoardError
from hoarddb.testing import ServerProcess, ServerThread
from hoarddb.testing.raw import RawConnection
from hoarddb.values.codec import encode

TIMEOUT = 60  # generous: a noisy 2-CPU VM


# -- the oracle and the requests -----------------------------------------------------------

def oracle(path, requests: list[dict]) -> list[dict]:
    """The answers of ``requests`` run one by one on an embedded engine (a fresh directory)."""
    engine = Engine(path)
    try:
        out = []
        for r in requests:
            try:
                out.append(engine.execute(dict(r)))
            except HoardError as e:
                out.append(e.to_answer())
        return out
    finally:
        engine.close()


def setup(db: str) -> list[dict]:
    """Buckets of every store type LMDB and queues serve, with store fields and a unique index."""
    def create(name, **options):
        return {"op": "create_bucket", "db": db, "bucket": name, "options": options}
    return [
        create("H", type="hash", indices=[{"field": "email", "unique": True}],
               store_fields=[{"name": "Log", "type": "fifo"}, {"name": "Pri", "type": "heap"},
                             {"name": "Map", "type": "hash"}]),
        create("B", type="btree", key="k"),
        create("P", type="heap"),
        create("Q", type="fifo"),
        create("L", type="lifo"),
    ]


def random_requests(rng: random.Random, db: str, n: int) -> list[dict]:
    """A mix of reads and writes to few keys (so they collide), refusals included (duplicate
    keys, unique index, a heap element without priority, a store field of a missing document,
    a bucket dropped), and a bucket created and dropped in the middle."""
    keys = [f"k{i}" for i in range(4)]
    out: list[dict] = []
    t_exists = False

    def req(op, bucket, **args):
        return {"op": op, "db": db, "bucket": bucket, "args": args}

    def field(op, owner, name, **args):
        return {"op": op, "db": db, "bucket": "H", "key": owner, "field": name, "args": args}

    for i in range(n):
        k = rng.choice(keys)
        roll = rng.random()
        if roll < 0.03:  # a catalog change in the middle of the pipeline
            if t_exists:
                out.append({"op": "drop_bucket", "db": db, "bucket": "T"})
            else:
                out.append({"op": "create_bucket", "db": db, "bucket": "T", "options": {"type": "hash"}})
            t_exists = not t_exists
            continue
        kind = rng.choice(["H", "H", "B", "P", "Q", "L", "F", "T"])
        if kind == "H":
            out.append(rng.choice([
                req("insert", "H", doc={"_id_": k, "v": i, "email": f"e{rng.randrange(3)}"}),
                req("put", "H", doc={"_id_": k, "v": i}),
                req("update", "H", filter={"_id_": k}, update={"$inc": {"v": 1}}),
                req("update", "H", filter={}, update={"$set": {"email": "same"}}),  # unique: refused whole
                req("delete", "H", target=k),
                req("get", "H", key=k), req("get", "H", key=k),
                req("find", "H", filter={"v": {"$gte": 0}}),  # read pool
                req("count", "H"), req("length", "H"),
                req("search", "H", filter={"email": f"e{rng.randrange(3)}"}),
            ]))
        elif kind == "B":
            out.append(rng.choice([
                req("insert", "B", doc={"k": k, "v": i}), req("delete", "B", target=k),
                req("get", "B", key=k), req("first", "B"), req("last", "B"), req("length", "B"),
                req("range", "B"),
            ]))
        elif kind == "P":
            out.append(rng.choice([
                req("push", "P", doc={"priority": rng.randrange(5), "i": i}),
                req("push", "P", doc={"i": i}),  # no priority: refused
                req("pop", "P"), req("peek", "P"), req("length", "P"), req("list", "P"),
            ]))
        elif kind in "QL":
            out.append(rng.choice([
                req("push", kind, doc={"i": i}), req("push", kind, doc={"i": i}),
                req("batch_push", kind, docs=[{"i": i, "j": 0}, {"i": i, "j": 1}]),
                req("pop", kind), req("pop", kind, limit=2), req("peek", kind),
                req("length", kind), req("list", kind),
            ]))
        elif kind == "F":  # store fields (refused while the document is missing)
            out.append(rng.choice([
                field("push", k, "Log", doc={"i": i}), field("pop", k, "Log"), field("length", k, "Log"),
                field("peek", k, "Log"),
                field("push", k, "Pri", doc={"priority": rng.randrange(3), "i": i}), field("pop", k, "Pri"),
                field("put", k, "Map", key="a", doc={"i": i}), field("get", k, "Map", key="a"),
                field("delete", k, "Map", key="a"),
            ]))
        else:  # T: exists or not, depending on where in the pipeline
            out.append(rng.choice([req("put", "T", doc={"_id_": k, "v": i}), req("get", "T", key=k),
                                   req("length", "T")]))
    return out


def with_ids(requests: list[dict], first: int) -> list[dict]:
    return [{**r, "id": first + i} for i, r in enumerate(requests)]


def send_pipelined(raw: RawConnection, requests: list[dict], chunk: int | None = None) -> None:
    """Send the requests back to back (in one send, or in sends of ``chunk`` requests)."""
    if chunk is None:
        raw.send(b"".join(encode(r) for r in requests))
    else:
        for start in range(0, len(requests), chunk):
            raw.send(b"".join(encode(r) for r in requests[start:start + chunk]))


def receive_answers(raw: RawConnection, ids: list) -> dict:
    """Every answer of ``ids``, by id; fails on an answer to an id not asked, or twice."""
    wanted, got = set(ids), {}
    while len(got) < len(wanted):
        doc = raw.recv_doc()
        assert doc is not None, f"connection closed with {len(wanted) - len(got)} answers missing"
        rid = doc.pop("id")
        assert rid in wanted, f"an answer to id {rid!r}, which this connection never sent: {doc}"
        assert rid not in got, f"two answers to id {rid!r}: {got[rid]} and {doc}"
        got[rid] = doc
    return got


def same(answer: dict, expected: dict) -> bool:
    """Answers agree: ok and result, or ok and the error's code (messages may differ in wording)."""
    if expected.get("ok") == 1:
        return answer.get("ok") == 1 and answer.get("result") == expected.get("result")
    return answer.get("ok") == 0 and answer.get("code") == expected.get("code")


def check(got: dict, requests: list[dict], expected: list[dict]) -> None:
    for r, e in zip(requests, expected):
        a = got[r["id"]]
        assert same(a, e), f"request {r} was answered {a}, run alone it is {e}"


@pytest.fixture
def server(tmp_path):
    with ServerThread(tmp_path / "data", insecure=True) as s:
        yield s


def connect(server) -> RawConnection:
    raw = RawConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    assert raw.hello().get("ok") == 1
    return raw


# -- (1) per-connection order, (3) refusals in a group, (5) answers by id ----------------

@pytest.mark.parametrize("chunk", [None, 7])
def test_a_pipelined_mix_of_every_store_type_answers_as_if_run_one_by_one(server, tmp_path, chunk):
    """One connection (the lone-client path: groups on the loop, deferred commits) pipelines
    reads and writes to colliding keys of hash, btree, heap, fifo, lifo and store fields,
    refusals, and a bucket created and dropped in the middle."""
    rng = random.Random(1234 + (chunk or 0))
    requests = setup("app") + random_requests(rng, "app", 400)
    expected = oracle(tmp_path / f"oracle{chunk}", requests)
    assert sum(1 for e in expected if e.get("ok") == 0) > 20, "the mix should hold refusals"
    requests = with_ids(requests, 1)
    with connect(server) as raw:
        send_pipelined(raw, requests, chunk)
        got = receive_answers(raw, [r["id"] for r in requests])
    check(got, requests, expected)


def test_concurrent_pipelines_share_groups_and_each_answers_as_if_alone(server, tmp_path):
    """Eight connections pipeline at once (their writes share groups: refusals of one must
    undo only themselves, in the middle of others' writes to the same buckets' files)."""
    n = 8
    plans = []
    for c in range(n):
        db = f"d{c}"
        requests = setup(db) + random_requests(random.Random(c), db, 250)
        plans.append((requests, oracle(tmp_path / f"oracle{c}", requests)))
    conns = [connect(server) for _ in range(n)]
    failures: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(c):
        try:
            requests = with_ids(plans[c][0], 1)  # the same ids on every connection: never mixed up
            barrier.wait(TIMEOUT)
            send_pipelined(conns[c], requests, chunk=25)
            got = receive_answers(conns[c], [r["id"] for r in requests])
            check(got, requests, plans[c][1])
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    _run_all(run, conns, failures)


def _run_all(run, conns: list, failures: list) -> None:
    """``run(c)`` on a thread per connection, all at once; then close them and raise the first failure."""
    threads = [threading.Thread(target=run, args=(c,)) for c in range(len(conns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 2)
    for raw in conns:
        raw.close()
    assert not any(t.is_alive() for t in threads)
    if failures:
        raise failures[0]


def test_many_connections_with_the_same_ids_each_get_their_own_answers(server):
    """48 connections pipeline writes and reads of their own keys with the same ids at once:
    every answer is the asking connection's, once."""
    _rw_setup(server)
    n, failures = 48, []
    conns = [connect(server) for _ in range(n)]

    def run(c):
        try:
            requests = []
            for i in range(40):
                doc = {"_id_": f"c{c}-{i % 5}", "email": f"c{c}-{i}", "c": c, "i": i}
                requests += [{"op": "put", "db": "app", "bucket": "H", "args": {"doc": doc}},
                             {"op": "get", "db": "app", "bucket": "H", "args": {"key": doc["_id_"]}},
                             {"op": "push", "db": "app", "bucket": "H", "key": doc["_id_"], "field": "Log",
                              "args": {"doc": {"c": c, "i": i}}},
                             {"op": "peek", "db": "app", "bucket": "H", "key": doc["_id_"], "field": "Log",
                              "args": {"limit": 100}}]
            requests = with_ids(requests, 1)
            send_pipelined(conns[c], requests, chunk=16)
            got = receive_answers(conns[c], [r["id"] for r in requests])
            for r in requests:
                a = got[r["id"]]
                assert a.get("ok") == 1, (r, a)
                if r["op"] == "get":
                    assert a["result"]["c"] == c and a["result"]["_id_"] == r["args"]["key"], (r, a)
                elif r["op"] == "peek":
                    assert a["result"] and all(e["c"] == c for e in a["result"]), (r, a)
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    _run_all(run, conns, failures)


# -- (2) read-your-writes and monotonic reads across connections -------------------------

def _rw_setup(server):
    with connect(server) as raw:
        raw.send(b"".join(encode(r) for r in with_ids(setup("app"), 1)))
        receive_answers(raw, list(range(1, 6)))


def _call(raw: RawConnection, request: dict, rid: int) -> dict:
    raw.send_doc({**request, "id": rid})
    answer = raw.recv_doc()
    assert answer is not None and answer.pop("id") == rid, answer
    return answer


READS = {
    # bucket: (write request of version v, reads that must see at least version v)
    "H": (lambda v: {"op": "put", "db": "app", "bucket": "H", "args": {"doc": {"_id_": "x", "v": v}}},
          [({"op": "get", "db": "app", "bucket": "H", "args": {"key": "x"}}, lambda r: r["v"]),  # inline
           ({"op": "find", "db": "app", "bucket": "H", "args": {"filter": {"_id_": "x"}}},  # read pool
            lambda r: r[0]["v"])]),
    "Q": (lambda v: {"op": "push", "db": "app", "bucket": "Q", "args": {"doc": {"v": v}}},
          [({"op": "length", "db": "app", "bucket": "Q"}, lambda r: r),
           ({"op": "list", "db": "app", "bucket": "Q", "args": {"limit": 1000}}, lambda r: len(r))]),
    "P": (lambda v: {"op": "push", "db": "app", "bucket": "P", "args": {"doc": {"priority": 1, "v": v}}},
          [({"op": "length", "db": "app", "bucket": "P"}, lambda r: r)]),
    "B": (lambda v: {"op": "insert", "db": "app", "bucket": "B", "args": {"doc": {"k": v}}},
          [({"op": "last", "db": "app", "bucket": "B"}, lambda r: r["k"]),
           ({"op": "range", "db": "app", "bucket": "B", "args": {"reverse": True, "limit": 1}},
            lambda r: r[0]["k"])]),
}


@pytest.mark.parametrize("bucket", sorted(READS))
def test_a_write_answered_to_a_lone_client_is_seen_by_a_connection_opened_after(server, bucket):
    """The lone-client path: the write's LMDB commit comes after its answer (and the server
    busy-polls the lone connection); a connection opened once the answer is in must see it,
    on the loop and on the read pool."""
    _rw_setup(server)
    write, reads = READS[bucket]
    with connect(server) as writer:
        for v in range(1, 16):
            assert _call(writer, write(v), v).get("ok") == 1
            with connect(server) as reader:  # opened after the answer: must see version v
                for request, version in reads:
                    answer = _call(reader, request, 1)
                    assert answer.get("ok") == 1, answer
                    assert version(answer["result"]) >= v, (
                        f"write {v} was answered, then a read on a new connection saw {answer['result']}")
            # the reader closed: the writer is alone again before its next write
            deadline = time.monotonic() + TIMEOUT
            while len(server.server.connections) > 1:
                assert time.monotonic() < deadline
                time.sleep(0.005)


def test_reads_on_other_connections_see_every_answered_write_and_never_go_back(server):
    """Two writers and a reader (groups on the commit thread): once a write is answered,
    every read that starts afterwards, on any connection, sees it; a reader's successive
    reads of one key never go back."""
    _rw_setup(server)
    acked = {"H": 0, "Q": 0}
    lock = threading.Lock()
    stop = threading.Event()
    failures: list[BaseException] = []

    def writer(bucket, n):
        try:
            with connect(server) as raw:
                write, _ = READS[bucket]
                for v in range(1, n + 1):
                    assert _call(raw, write(v), v).get("ok") == 1
                    with lock:
                        acked[bucket] = v
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    def reader():
        try:
            with connect(server) as raw:
                seen = {"H": 0, "Q": 0}
                rid = 0
                while not stop.is_set():
                    for bucket in ("H", "Q"):
                        for request, version in READS[bucket][1]:
                            with lock:
                                floor = acked[bucket]
                            rid += 1
                            answer = _call(raw, request, rid)
                            got = version(answer["result"]) if answer.get("result") else 0
                            assert got >= floor, f"{bucket}: write {floor} was answered, a later read saw {got}"
                            assert got >= seen[bucket], f"{bucket}: a read saw {got} after one saw {seen[bucket]}"
                            seen[bucket] = got
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    writers = [threading.Thread(target=writer, args=("H", 150)), threading.Thread(target=writer, args=("Q", 150))]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join(TIMEOUT * 2)
    stop.set()
    for t in readers:
        t.join(TIMEOUT)
    if failures:
        raise failures[0]
    assert acked == {"H": 150, "Q": 150}


# -- (5) a client that leaves mid-pipeline --------------------------------------------------

def test_a_client_leaving_mid_pipeline_leaves_a_prefix_and_disturbs_no_one(server):
    """A connection pipelines 600 numbered pushes and closes after reading a few answers:
    what it wrote is a prefix of what it sent, in order, and holds every answered push;
    meanwhile other connections' answers stay theirs."""
    _rw_setup(server)
    others_failed: list[BaseException] = []
    stop = threading.Event()

    def other(c):
        try:
            with connect(server) as raw:
                doc = {"_id_": f"o{c}", "c": c, "email": f"o{c}"}  # H's email index is unique
                assert _call(raw, {"op": "put", "db": "app", "bucket": "H", "args": {"doc": doc}}, 1)["ok"] == 1
                rid = 1
                while not stop.is_set():
                    rid += 1
                    answer = _call(raw, {"op": "get", "db": "app", "bucket": "H", "args": {"key": f"o{c}"}}, rid)
                    assert answer["result"] == doc, answer
        except BaseException as e:  # noqa: BLE001
            others_failed.append(e)

    threads = [threading.Thread(target=other, args=(c,)) for c in range(3)]
    for t in threads:
        t.start()
    n = 600
    raw = connect(server)
    send_pipelined(raw, [{"op": "push", "db": "app", "bucket": "Q", "args": {"doc": {"i": i}}, "id": i + 1}
                         for i in range(n)], chunk=50)
    answered = []
    while len(answered) < 5:
        doc = raw.recv_doc()
        assert doc is not None
        assert doc.get("ok") == 1, doc
        answered.append(doc["id"] - 1)
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
    raw.close()
    stop.set()
    for t in threads:
        t.join(TIMEOUT)
    if others_failed:
        raise others_failed[0]
    with connect(server) as check_raw:  # writes of the closed connection may still run: any moment will do
        stored = [d["i"] for d in _call(check_raw, {"op": "list", "db": "app", "bucket": "Q",
                                                    "args": {"limit": 1000}}, 1)["result"]]
    assert stored == list(range(len(stored))), "the pushes kept are not a prefix of those sent, in order"
    assert set(answered) <= set(stored)


# -- (4) acknowledged means durable: pipelined mixes of every type, then SIGKILL -----------

def _dump_requests(db: str) -> list[dict]:
    """Reads that show everything the requests of random_requests can leave behind."""
    def req(op, bucket, **args):
        return {"op": op, "db": db, "bucket": bucket, "args": args}
    out = [req("list", b, limit=1000) for b in ("H", "B", "P", "Q", "L")]
    for k in (f"k{i}" for i in range(4)):
        for f in ("Log", "Pri", "Map"):
            out.append({"op": "list", "db": db, "bucket": "H", "key": k, "field": f, "args": {"limit": 1000}})
    out.append({"op": "list_buckets", "db": db})
    return out


def test_sigkill_right_after_pipelined_answers_keeps_every_answered_write(tmp_path):
    """One connection pipelines batches of writes to every store type, store fields and
    catalog changes, reads all their answers, and the server is SIGKILLed at once: after a
    restart, the data is exactly what running them one by one gives."""
    rng = random.Random(99)
    batches = [setup("app")] + [[r for r in random_requests(rng, "app", 120) if not _is_read(r)]
                                 for _ in range(4)]
    flat = [r for b in batches for r in b]
    oracle_path = tmp_path / "oracle"
    oracle(oracle_path, flat)
    expected = oracle(oracle_path, _dump_requests("app"))
    with ServerProcess(tmp_path / "data") as server:
        raw = RawConnection("127.0.0.1", server.port, timeout=TIMEOUT)
        raw.hello()
        rid = 1
        for batch in batches:
            requests = with_ids(batch, rid)
            rid += len(batch)
            send_pipelined(raw, requests)
            receive_answers(raw, [r["id"] for r in requests])
        server.kill()  # every write answered: every one must survive
        raw.close()
        assert server.proc.wait(TIMEOUT) == -9
        server.start()
        with connect(server) as raw:
            dump = with_ids(_dump_requests("app"), 1)
            send_pipelined(raw, dump)
            got = receive_answers(raw, [r["id"] for r in dump])
    check(got, dump, expected)


def _is_read(request: dict) -> bool:
    from hoarddb import operations
    verb = operations.VERBS.get(request["op"])
    return verb is not None and not verb.write


# -- (1) seen from another connection: one connection's pipelined writes take effect in order --

def test_another_connection_never_sees_a_pipelined_write_without_the_ones_before_it(tmp_path):
    """A producer pipelines ``put order; push job`` (then more writes, which make the group
    last); a watcher on another connection that peeks the job must find the order."""
    with ServerProcess(tmp_path / "data") as server:
        with connect(server) as raw:
            setup_requests = with_ids([{"op": "create_bucket", "db": "app", "bucket": b, "options": {"type": t}}
                                       for b, t in (("Orders", "hash"), ("Jobs", "fifo"), ("Other", "hash"))], 1)
            send_pipelined(raw, setup_requests)
            receive_answers(raw, [1, 2, 3])
        anomalies: list[str] = []
        for round_ in range(10):
            producer, watcher = connect(server), connect(server)  # two connections: groups on the commit thread
            stop, watching = threading.Event(), threading.Event()

            def watch(order=f"o{round_}"):
                rid = 0
                while not stop.is_set():
                    rid += 2
                    watching.set()
                    job = _call(watcher, {"op": "peek", "db": "app", "bucket": "Jobs"}, rid)["result"]
                    if job and job.get("order") == order:
                        found = _call(watcher, {"op": "get", "db": "app", "bucket": "Orders",
                                                "args": {"key": order}}, rid + 1)["result"]
                        if found is None:
                            anomalies.append(f"round {round_}: job for {order} visible, {order} not")
                        return

            t = threading.Thread(target=watch)
            t.start()
            assert watching.wait(TIMEOUT)
            requests = with_ids(
                [{"op": "put", "db": "app", "bucket": "Orders", "args": {"doc": {"_id_": f"o{round_}"}}},
                 {"op": "push", "db": "app", "bucket": "Jobs", "args": {"doc": {"order": f"o{round_}"}}}]
                + [{"op": "put", "db": "app", "bucket": "Other", "args": {"doc": {"_id_": f"{round_}-{i}", "n": i}}}
                   for i in range(1500)], 1)
            send_pipelined(producer, requests)
            receive_answers(producer, [r["id"] for r in requests])
            stop.set()
            t.join(TIMEOUT)
            assert _call(producer, {"op": "pop", "db": "app", "bucket": "Jobs"}, 1)["result"] == {"order": f"o{round_}"}
            producer.close()
            watcher.close()
            if anomalies:
                break
    assert not anomalies, anomalies
