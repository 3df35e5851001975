"""The filter a cluster cursor's part reads on from after a move (cluster/cursors.py ``_past``), run by one engine:
it matches exactly the keys after the last one handed out, in the merge's key order, for every type a key can be."""

import datetime
import math

from bson import Binary, ObjectId

import hoarddb
from hoarddb.cluster.cursors import _past
from hoarddb.values.keys import encode_key

KEYS = [float("nan"), float("-inf"), -5, 0, 2.5, 7, float("inf"), "", "a", "b\x00c", "é",
        Binary(b""), Binary(b"\x01"), ObjectId("0" * 24), ObjectId("f" * 24), False, True,
        datetime.datetime(1969, 12, 31), datetime.datetime(2020, 1, 1)]


def _id(doc):
    return encode_key(doc["_id_"])


def test_the_resume_filter_matches_exactly_the_keys_after_the_last_one_in_key_order(tmp_path):
    with hoarddb.open(tmp_path / "d") as db:
        db["app"].create_bucket("K", type="hash")
        for i, k in enumerate(KEYS):
            db["app"].K.insert({"_id_": k, "even": i % 2 == 0})
        everything = sorted(encode_key(k) for k in KEYS)
        for k in KEYS:
            for filter_ in ({}, {"even": True}):
                request = {"op": "find", "db": "app", "bucket": "K", "args": {"filter": filter_} if filter_ else {}}
                narrowed = _past(request, k, 0)["args"]["filter"]
                got = sorted(_id(d) for d in db["app"].K.find(narrowed))
                wanted = [e for e in everything if e > encode_key(k)
                          and (not filter_ or db["app"].K.get(_key_of(e))["even"])]
                assert got == wanted, (k, filter_)


def _key_of(encoded):
    return next(k for k in KEYS if encode_key(k) == encoded)


def test_a_part_that_gave_all_it_was_asked_for_is_not_opened_again():
    request = {"op": "find", "db": "app", "bucket": "K", "args": {"limit": 3}}
    assert _past(request, "a", 3) is None
    assert _past(request, "a", 1)["args"]["limit"] == 2
    assert not math.isnan(_past(request, float("nan"), 0)["args"]["filter"]["$or"][0]["_id_"]["$gte"])
