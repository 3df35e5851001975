"""The client's copy of a cluster's map (hoarddb/client/router.py), without I/O: what it keeps per bucket of a
map is dropped with the map, a request after a move goes to the new owner, and a bucket whose partitions all go
to one place routes each request as the partition-by-partition reading does."""

from hoarddb.client.options import ConnectOptions
from hoarddb.client.router import READ_MAP, Router
from hoarddb.routing import Partitioner, partition_of, request_partition

PARTS = 8
NODES = {"n1": {"address": "127.0.0.1:7001"}, "n2": {"address": "127.0.0.1:7002"},
         "n3": {"address": "[::1]:7003", "fingerprint": "ab" * 32}}


def router(home="n1", url="hoarddb://127.0.0.1:7001/?insecure=true"):
    r = Router(ConnectOptions.from_url(url))
    r.connected({"node": home})
    return r


def a_map(owners, nodes=NODES, **place):
    return {"cluster": True, "node": "n1", "nodes": nodes,
            "buckets": {"Users": {"type": "hash", "partitions": len(owners), "owners": list(owners), "version": 1,
                                  **place}}}


def get(key, bucket="Users"):
    return {"op": "get", "db": "app", "bucket": bucket, "args": {"key": key}}


def key_of_partition(p, parts=PARTS):
    return next(k for k in (f"k{i}" for i in range(10_000)) if partition_of(k, parts) == p)


def test_a_request_goes_to_its_partition_s_owner_and_after_a_move_to_the_new_one():
    r = router()
    assert r.route(get("a")) is READ_MAP  # no map yet
    owners = ["n1", "n2"] * (PARTS // 2)
    r.learn("app", a_map(owners))
    for p in range(PARTS):
        target = r.route(get(key_of_partition(p)))
        assert (target.node if target else None) == (None if owners[p] == "n1" else owners[p])
    assert r.route(get(key_of_partition(1))).options.port == 7002
    moved = list(owners)
    moved[1], moved[2] = "n3", "n2"  # partition 1 moves from n2 to n3, partition 2 from n1 to n2
    r.learn("app", a_map(moved))
    assert r.route(get(key_of_partition(1))).node == "n3"
    assert r.route(get(key_of_partition(1))).options.address == "[::1]:7003"
    assert r.route(get(key_of_partition(2))).node == "n2"
    assert r.route(get(key_of_partition(0))) is None  # still n1's: the URL's connection
    r.forget("app")
    assert r.route(get(key_of_partition(1))) is READ_MAP
    assert r.route(get(key_of_partition(1)), fresh=False) is None  # no map, and none to be read


def test_a_map_older_than_its_age_is_read_again_but_still_serves_when_it_cannot_be():
    r = router()
    r.learn("app", a_map(["n2"] * PARTS))
    r.maps["app"]["read"] -= 60
    assert r.route(get("a")) is READ_MAP
    assert r.route(get("a"), fresh=False).node == "n2"


def test_an_owner_that_is_down_or_unreachable_sends_its_requests_to_the_url_s_node():
    r = router()
    r.learn("app", a_map(["n2", "n4"] * (PARTS // 2)))  # n4 is not among the live nodes
    assert r.route(get(key_of_partition(1))) is None
    assert r.route(get(key_of_partition(0))).node == "n2"
    r.cannot_reach("n2", "app")
    r.learn("app", a_map(["n2", "n4"] * (PARTS // 2)))
    assert r.route(get(key_of_partition(0))) is None


def test_a_bucket_of_one_owner_routes_only_what_has_a_key_and_still_makes_an_insert_s_id():
    r = router()
    r.learn("app", a_map(["n2"] * PARTS))
    assert r.route(get("anything")).node == "n2"
    by_filter = {"op": "update", "db": "app", "bucket": "Users",
                 "args": {"filter": {"x": 1}, "update": {"$set": {"x": 2}}}}
    assert r.route(by_filter) is None  # many documents: the URL's node gathers it, as before
    made = {"op": "insert", "db": "app", "bucket": "Users", "args": {"doc": {"x": 1}}}
    assert r.route(made).node == "n2" and "_id_" in made["args"]["doc"]
    r.learn("app", a_map(["n1"] * PARTS))  # all the URL's node's
    assert r.route(get("anything")) is None


def test_the_url_s_node_changing_drops_the_maps_read_against_the_old_one():
    r = router()
    r.learn("app", a_map(["n1", "n2"] * (PARTS // 2)))
    r.connected({"node": "n1"})
    assert "app" in r.maps
    r.connected({"node": "n2"})
    assert r.route(get("a")) is READ_MAP
    r.learn("app", a_map(["n1", "n2"] * (PARTS // 2)))
    assert r.route(get(key_of_partition(1))) is None  # n2's, now the URL's node
    assert r.route(get(key_of_partition(0))).node == "n1"


def test_routing_off_and_requests_that_are_never_routed():
    r = router(url="hoarddb://127.0.0.1:7001/?insecure=true&route=any")
    r.learn("app", a_map(["n2"] * PARTS))
    assert r.route(get("a")) is None
    r = router()
    r.learn("app", a_map(["n2"] * PARTS))
    assert r.route({**get("a"), "_node": "n1"}) is None  # a node's own request
    assert r.route({"op": "find", "db": "app", "bucket": "Users", "args": {}}) is None
    assert r.route({**get("a"), "bucket": 5}) is None
    r.learn("app", {"cluster": False})
    assert not r.on and r.route(get("a")) is None


def test_a_pinned_certificate_is_each_node_s_own_from_the_map():
    pin = "cd" * 32
    r = router(url=f"hoarddb://127.0.0.1:7001/?tls_fingerprint={pin}")
    r.learn("app", a_map(["n2", "n3"] * (PARTS // 2)))
    assert r.route(get(key_of_partition(0))).options.tls_fingerprint == pin  # the map names none for n2
    assert r.route(get(key_of_partition(1))).options.tls_fingerprint == "ab" * 32


def test_a_partitioner_kept_per_bucket_answers_as_request_partition():
    places = [{"type": "hash", "partitions": 16}, {"type": "btree", "partitions": 16, "key": "Score"},
              {"type": "btree", "partitions": 16}, {"type": "blob", "partitions": 16},
              {"type": "fifo", "partitions": 16, "group": "g"}, {"type": "hash", "partitions": 1},
              {"type": "fifo", "partitions": 4}]
    requests = [("get", {"key": "a"}), ("get", {"key": 30}), ("get", {"key": {"Score": 93}}),
                ("insert", {"doc": {"_id_": "b", "Score": 4}}), ("insert", {"doc": {"Score": 5}}),
                ("delete", {"target": {"_id_": "d"}}), ("update", {"filter": {"x": 1}, "update": {}}),
                ("get", {"key": "0192A3B4-C5D6-7890-ABCD-EF12345678A1"}), ("push", {"doc": {"g": "t1"}}),
                ("push", {"doc": {"n": 2}}), ("pop", {}), ("find", {}), ("more", {"cursor": 1})]
    told = 0
    for place in places:
        kept = Partitioner(place)
        for op, args in requests:
            doc = {"op": op, "db": "app", "bucket": "B", "args": {"doc": dict(args["doc"])} if "doc" in args else args}
            once = {**doc, "args": {"doc": dict(args["doc"])} if "doc" in args else args}
            got = kept(doc)
            if "_id_" in doc["args"].get("doc", {}) and "_id_" not in args["doc"]:  # an id made: compare by it
                once["args"]["doc"]["_id_"] = doc["args"]["doc"]["_id_"]
            assert got == request_partition(place, once), (place, op, args)
            assert kept(doc, hashed=False) == (None if got is None else 0)
            told += got is not None
    assert told >= 20


def test_a_partition_past_the_owners_the_map_names_goes_to_the_url_s_node():
    r = router()
    r.learn("app", {"cluster": True, "nodes": NODES, "buckets": {
        "Users": {"type": "hash", "partitions": PARTS, "owners": ["n2"] * (PARTS // 2)}}})
    assert r.route(get(key_of_partition(1))).node == "n2"
    assert r.route(get(key_of_partition(PARTS - 1))) is None


def test_a_queue_s_pops_go_to_its_owners_in_turn_and_a_whole_one_s_to_its_owner():
    r = router()
    owners = ["n2", "n1", "n3", "n2"]
    r.learn("app", {"cluster": True, "node": "n1", "nodes": NODES, "buckets": {
        "Jobs": {"type": "fifo", "partitions": 4, "group": "g", "owners": owners, "version": 1},
        "Whole": {"type": "fifo", "partitions": 1, "owners": ["n3"], "version": 1},
        "Mine": {"type": "fifo", "partitions": 1, "owners": ["n1"], "version": 1},
        "Heap": {"type": "heap", "partitions": 4, "group": "g", "owners": owners, "version": 1}}})

    def op(name, bucket, **extra):
        return {"op": name, "db": "app", "bucket": bucket, "args": {}, **extra}

    turns = []
    for name in ("peek", "pop", "peek", "claim", "pop", "pop"):
        request = op(name, "Jobs")
        target = r.route(request)
        turns.append((request["_turn"], None if target is None else target.node))
    # sorted owners n1, n2, n3; a peek looks where the next pop starts; n1 is the URL's node (no Owner)
    assert turns == [("n1", None), ("n1", None), ("n2", "n2"), ("n2", "n2"), ("n3", "n3"), ("n1", None)]
    whole = op("pop", "Whole")
    assert r.route(whole).node == "n3" and "_turn" not in whole
    assert r.route(op("claim", "Whole")).node == "n3"
    assert r.route(op("pop", "Mine")) is None  # the URL's node owns it
    heap = op("pop", "Heap")
    assert r.route(heap) is None and "_turn" not in heap  # a partitioned heap's pop takes every owner's top
    field = op("pop", "Jobs", field="Log", key="k")
    r.route(field)
    assert "_turn" not in field  # a store field's pop is keyed by its document
