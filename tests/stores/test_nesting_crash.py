"""A process killed (SIGKILL) while it deletes documents that own three-level trees leaves each
tree whole or gone: never a document without some of its friends, nor friends' messages without
their friend, nor a photo file no element names."""

from __future__ import annotations

import random

import hoarddb
from hoarddb.storage.lmdb_files import read_only

from ..killing import SAY_READY, kill_midway

TREES, FRIENDS, MESSAGES = 12, 12, 40
TREE = [{"name": "Friends", "type": "hash", "store_fields": [
    {"name": "Messages", "type": "fifo"}, {"name": "Photos", "type": "blob"}]}]

CHILD = """
import sys
import hoarddb
data = sys.argv[1]
TREES, FRIENDS, MESSAGES = 12, 12, 40
with hoarddb.open(data, ttl_sweep_seconds=0) as c:
    users = c["app"].User
""" + "\n".join("    " + line for line in SAY_READY.strip().splitlines()) + """
    for t in range(TREES):
        say(f"deleting u{t}")
        users.delete(f"u{t}")
        say(f"deleted u{t}")
"""


def build(data):
    with hoarddb.open(data, ttl_sweep_seconds=0, sync=False) as c:
        users = c["app"].create_bucket("User", type="hash", store_fields=TREE)
        for t in range(TREES):
            users.insert({"_id_": f"u{t}"})
            for f in range(FRIENDS):
                users[f"u{t}"].Friends.put(f, {"n": f})
                users[f"u{t}"].Friends[f].Messages.batch_push([{"m": m} for m in range(MESSAGES)])
                if f % 4 == 0:
                    users[f"u{t}"].Friends[f].Photos.put(b"p" * 1000)


def test_a_kill_mid_cascade_leaves_each_tree_whole_or_gone(tmp_path):
    rng = random.Random()
    for round_ in range(3):
        data = tmp_path / f"data{round_}"
        build(data)
        said = kill_midway(CHILD, [data], tmp_path / f"round{round_}.out", pause=rng.uniform(0.0, 0.25))
        deleted = {line.split()[1] for line in said if line.startswith("deleted")}
        with hoarddb.open(data, ttl_sweep_seconds=0) as c:
            users = c["app"].User
            present = {d["_id_"] for d in users.find()}
            assert not deleted & present, "an acknowledged delete came back"
            for t in range(TREES):
                doc = f"u{t}"
                if doc in present:  # whole: every friend, every message, every photo
                    assert [x["key"] for x in users[doc].Friends.list()] == list(range(FRIENDS))
                    for f in range(FRIENDS):
                        assert users[doc].Friends[f].Messages.length() == MESSAGES
                        assert users[doc].Friends[f].Photos.length() == (1 if f % 4 == 0 else 0)
            photos = sum(1 for d in present for f in range(0, FRIENDS, 4))
            problems = c._executor.execute({"op": "check", "db": "app"})["result"]["buckets"][0]["problems"]
            assert problems == []
        assert len(list((data / "app" / "User" / "fields").iterdir())) == photos  # no file left by a gone tree
        with read_only(data / "app" / "User" / "kv") as txn:  # gone: not one key of its tree at any level
            counts = {ns: 0 for ns in b"FCNKB"}
            for key in txn.cursor().iternext(values=False):
                if key[0] in counts:
                    counts[key[0]] += 1
        n = len(present)
        assert counts == {ord("F"): n * FRIENDS, ord("C"): n, ord("N"): n * FRIENDS * MESSAGES + photos,
                          ord("K"): n * FRIENDS + photos, ord("B"): photos}  # (a store's count: at its first write)
