"""dump -> restore of a bucket whose store fields' elements own stores (L3): every level comes back."""

from __future__ import annotations

import pytest
from bson import json_util

from hoarddb.tools import dump, restore

TREE = [{"name": "Friends", "type": "hash", "store_fields": [
            {"name": "Messages", "type": "fifo"}, {"name": "Photos", "type": "blob"},
            {"name": "Ranked", "type": "heap"}, {"name": "Notes", "type": "btree"}]},
        {"name": "Log", "type": "lifo"}]


def fill_tree(db):
    users = db.create_bucket("User", type="hash", store_fields=TREE)
    for u in ("jane", "omar"):
        users.insert({"_id_": u, "Name": u.title()})
        users[u].Log.push({"at": 1})
        for f in ("bob", "eve", 7):
            users[u].Friends.put(f, {"Since": 2020})
            friend = users[u].Friends[f]
            for i in range(3):
                friend.Messages.push({"Text": f"{u} to {f}: {i}"})
                friend.Ranked.push({"priority": i % 2, "n": i})
            friend.Notes.put(f"n{f}", {"Text": "met at work"})
            friend.Photos.put(f"{u}-{f}".encode() * 100, name="p.png")
    return users


def test_every_level_of_a_tree_round_trips(client, tmp_path):
    src = fill_tree(client["app"])
    report = dump(client, "app", tmp_path / "out")
    assert report.ok, report.summary()
    folder = tmp_path / "out" / "app" / "User.fields"
    assert (folder / "Friends.Messages.bson").is_file() and (folder / "Friends.Photos.blobs").is_dir()
    meta = json_util.loads((tmp_path / "out" / "app" / "User.metadata.json").read_text())
    assert list(meta["store_field_contents"]["fields"]) == [
        "Friends", "Friends.Messages", "Friends.Photos", "Friends.Ranked", "Friends.Notes", "Log"]
    assert meta["store_field_contents"]["fields"]["Friends.Messages"]["elements"] == 18
    restored = restore(client, tmp_path / "out" / "app", db="app2")
    assert restored.ok, restored.summary()
    dst = client["app2"].User
    assert client["app2"].User.describe()["store_fields"] == TREE
    for u in ("jane", "omar"):
        assert dst[u].Log.list() == src[u].Log.list()
        assert dst[u].Friends.list() == src[u].Friends.list()
        for f in ("bob", "eve", 7):
            a, b = dst[u].Friends[f], src[u].Friends[f]
            assert a.Messages.list() == b.Messages.list() and len(a.Messages.list()) == 3
            assert a.Ranked.pop(limit=10) == b.Ranked.pop(limit=10)
            assert a.Notes.list() == b.Notes.list()
            assert a.Photos.list() == b.Photos.list()
            assert [b"".join(a.Photos.stream(i["_id_"])) for i in a.Photos.list()] == [f"{u}-{f}".encode() * 100]


def test_a_tree_deeper_than_three_levels_restores_into_a_target_that_allows_it(tmp_path):
    import hoarddb
    from hoarddb import errors
    tree = [{"name": "A", "type": "btree", "store_fields": [
        {"name": "B", "type": "hash", "store_fields": [{"name": "C", "type": "lifo"}]}]}]
    with hoarddb.open(tmp_path / "src", max_nesting_depth=4) as c:
        t = c["app"].create_bucket("T", store_fields=tree)
        t.insert({"_id_": "t1"})
        t["t1"].A.put(1, {})
        t["t1"].A[1].B.put("x", {})
        t["t1"].A[1].B["x"].C.batch_push([{"n": 1}, {"n": 2}])
        assert dump(c, "app", tmp_path / "out").ok
    with hoarddb.open(tmp_path / "dst", max_nesting_depth=4) as c:
        with pytest.raises(errors.CorruptDataError, match="L4, deeper than the maximum of L3"):
            restore(c, tmp_path / "out" / "app")
        assert "app" not in c.databases() or c["app"].buckets() == []  # nothing was written
        report = restore(c, tmp_path / "out" / "app", max_nesting_depth=4)
        assert report.ok, report.summary()
        assert c["app"].T["t1"].A[1].B["x"].C.pop(limit=2) == [{"n": 2}, {"n": 1}]
