"""Stores inside a store field's elements (L3, and LN up to max_nesting_depth): the rules one level up
hold at every level, the keys of a deeper level live apart from L2's, and a model of a three-level
tree agrees with hoardDB through inserts, puts, pushes, deletes and expiry."""

from __future__ import annotations

import datetime
import io
import logging

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import hoarddb
from hoarddb import errors
from hoarddb.shell import Shell
from hoarddb.storage.lmdb_files import read_only
from hoarddb.values.keys import encode_key

OLD = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
FRIENDS = [{"name": "Friends", "type": "hash", "store_fields": [
    {"name": "Messages", "type": "fifo"}, {"name": "Photos", "type": "blob"}]}]


def users(c, **extra):
    return c["app"].create_bucket("User", type="hash", store_fields=FRIENDS, **extra)


def test_ttl_expiry_of_a_document_cascades_through_every_level(tmp_path):
    with hoarddb.open(tmp_path / "data", ttl_sweep_seconds=0) as c:
        u = users(c, indices=[{"field": "At", "expire_after_seconds": 0}])
        u.insert({"_id_": "jane", "At": OLD})
        u["jane"].Friends.put("bob", {})
        u["jane"].Friends["bob"].Messages.batch_push([{"n": 1}, {"n": 2}])
        u["jane"].Friends["bob"].Photos.put(b"photo")
        assert any((tmp_path / "data" / "app" / "User" / "fields").iterdir())
        assert c.sweep_ttl()["expired"] == 1
        u.insert({"_id_": "jane"})
        u["jane"].Friends.put("bob", {})
        assert u["jane"].Friends["bob"].Messages.list() == [] and u["jane"].Friends["bob"].Photos.list() == []
        assert not any((tmp_path / "data" / "app" / "User" / "fields").iterdir())


def test_ttl_skips_a_document_whose_deeper_stores_hold_too_many(tmp_path, caplog):
    with hoarddb.open(tmp_path / "data", ttl_sweep_seconds=0, max_cascade_delete=2) as c:
        u = users(c, indices=[{"field": "At", "expire_after_seconds": 0}])
        u.batch_insert([{"_id_": "big", "At": OLD}, {"_id_": "small", "At": OLD}])
        u["big"].Friends.put("bob", {})  # one L2 element, three L3 ones: four in all
        u["big"].Friends["bob"].Messages.batch_push([{}, {}, {}])
        with caplog.at_level(logging.WARNING):
            got = c.sweep_ttl()
        assert (got["expired"], got["skipped"]) == (1, 1)
        assert u["big"].Friends["bob"].Messages.length() == 3  # skipped whole
        assert "3 in its elements' stores" in caplog.text and 'db.User["big"].Friends.delete(key)' in caplog.text


def test_deleting_an_element_past_max_cascade_delete_is_refused_and_keeps_it(tmp_path):
    with hoarddb.open(tmp_path / "data", max_cascade_delete=2) as c:
        u = users(c)
        u.insert({"_id_": "jane"})
        u["jane"].Friends.put("bob", {"Since": 2020})
        u["jane"].Friends["bob"].Messages.batch_push([{}, {}, {}])
        with pytest.raises(errors.TooManyElementsError) as e:
            u["jane"].Friends.delete("bob")
        assert 'db.User["jane"].Friends["bob"].Messages.pop({limit: 100})' in e.value.message
        assert (e.value.store, e.value.elements) == ("User.jane.Friends.bob", 3)  # the element, by dotted address
        assert u["jane"].Friends.get("bob") == {"Since": 2020} and u["jane"].Friends["bob"].Messages.length() == 3
        with pytest.raises(errors.TooManyElementsError):  # the document counts every level
            u.delete("jane")
        u["jane"].Friends["bob"].Messages.pop(limit=2)
        assert u["jane"].Friends.delete("bob") == {"deleted": 1}
        assert u["jane"].Friends.delete("bob") == {"deleted": 0}


def test_a_get_names_the_elements_stores_and_the_shell_shows_them(tmp_path):
    with hoarddb.open(tmp_path / "data") as c:
        u = users(c)
        u.insert({"_id_": "jane"})
        u["jane"].Friends.put("bob", {"Since": 2020})
        u["jane"].Friends["bob"].Messages.push({"Text": "hi"})
        answer = c._executor.execute({"op": "get", "db": "app", "bucket": "User", "key": "jane", "field": "Friends",
                                      "args": {"key": "bob"}})
        assert answer["result"] == {"Since": 2020}
        assert answer["store_fields"] == [{"name": "Messages", "type": "fifo", "length": 1},
                                          {"name": "Photos", "type": "blob", "length": 0}]
        out = io.StringIO()
        shell = Shell(c, out=out, err=io.StringIO())
        assert shell.run_text('use app; db.User["jane"].Friends.get("bob")')
        assert "Messages fifoStore (1)" in out.getvalue()
        assert shell.run_text('db.User["jane"].Friends["bob"].Messages.push({Text: "again"})')
        out.truncate(0)
        assert shell.run_text('db["User.jane.Friends.bob.Messages"].list()')  # the dotted address reads
        assert '"again"' in out.getvalue() and '"hi"' in out.getvalue()
        err = io.StringIO()
        shell = Shell(c, out=io.StringIO(), err=err)
        assert not shell.run_text('use app; db["User.jane.Friends.bob.Messages"].pop()')
        assert 'db.User["jane"].Friends["bob"].Messages.pop(...)' in err.getvalue()
        assert u["jane"].Friends["bob"].Messages.length() == 2


def test_describe_names_every_store_by_its_dotted_address(tmp_path):
    with hoarddb.open(tmp_path / "data") as c:
        u = users(c)
        info = u.describe()
        assert info["stores"] == [{"address": "User.Friends", "type": "hash", "level": 2},
                                  {"address": "User.Friends.Messages", "type": "fifo", "level": 3},
                                  {"address": "User.Friends.Photos", "type": "blob", "level": 3}]
        assert u.stats()["stores"] == info["stores"]
        out = io.StringIO()
        assert Shell(c, out=out, err=io.StringIO()).run_text("use app; describe bucket User; db.User.stats()")
        assert out.getvalue().count("User.Friends.Messages (L3 fifo)") == 2
        assert "Friends hashStore { Messages fifoStore, Photos blobStore }" in out.getvalue()


def test_a_deeper_tree_needs_a_raised_max_nesting_depth(tmp_path):
    tree = [{"name": "A", "type": "btree", "store_fields": [
        {"name": "B", "type": "hash", "store_fields": [{"name": "C", "type": "lifo"}]}]}]
    with hoarddb.open(tmp_path / "one") as c:
        with pytest.raises(errors.BadValueError, match="L4, deeper than the maximum of L3"):
            c["app"].create_bucket("T", store_fields=tree)
    with hoarddb.open(tmp_path / "two", max_nesting_depth=4) as c:
        t = c["app"].create_bucket("T", store_fields=tree)
        t.insert({"_id_": "t1"})
        t["t1"].A.put(1, {})
        with pytest.raises(errors.NotFoundError, match=r'Put it first: db.T\["t1"\].A\[1\].B.put\("x"'):
            t["t1"].A[1].B["x"].C.push({"n": 1})
        t["t1"].A[1].B.put("x", {})
        t["t1"].A[1].B["x"].C.batch_push([{"n": 1}, {"n": 2}])
        assert t["t1"].A[1].B["x"].C.pop() == {"n": 2}
        with pytest.raises(errors.BadValueError, match="no store field 'D'"):
            t["t1"].A[1].B["x"].D.length()
        with pytest.raises(errors.BadValueError, match="elements own no stores"):
            t["t1"].A[1].B["x"].C["y"].Z.length()
        assert t.delete("t1") == {"deleted": 1}
        problems = c._executor.execute({"op": "check", "db": "app"})["result"]["buckets"][0]["problems"]
        assert problems == []


def test_the_bytes_of_each_level_are_apart_and_l2_is_unchanged(tmp_path):
    with hoarddb.open(tmp_path / "data") as c:
        u = users(c)
        u.insert({"_id_": "jane"})
        u["jane"].Friends.put("bob", {"Since": 2020})
        u["jane"].Friends["bob"].Messages.push({"n": 1})
    dk, bob = encode_key("jane"), encode_key("bob")
    with read_only(tmp_path / "data" / "app" / "User" / "kv") as txn:
        keys = {bytes(k): bytes(v) for k, v in txn.cursor() if bytes(k)[:1] in b"FCNK"}
    assert set(keys) == {
        b"F" + dk + b"\x00" + bob,  # the L2 element, where it always was
        b"C" + dk + b"\x00",  # its store's count
        b"N\x03" + dk + b"\x00" + bob + b"\x00" + (1).to_bytes(8, "big"),  # the L3 message
        b"K\x03" + dk + b"\x00" + bob + b"\x00",  # its store's count
    }


def test_a_path_of_the_wrong_shape_is_refused_naming_what_it_takes(tmp_path):
    with hoarddb.open(tmp_path / "data") as c:
        users(c).insert({"_id_": "jane"})
        base = {"op": "length", "db": "app", "bucket": "User", "key": "jane", "field": "Friends"}
        for path in ("bob", [{"key": "bob"}], [{"key": "bob", "field": 3}], [["bob", "Messages"]]):
            with pytest.raises(errors.InvalidArgumentError, match=r"a list of \{key, field\}"):
                c._executor.execute({**base, "path": path})
        with pytest.raises(errors.InvalidArgumentError, match="needs the document's 'key'"):
            c._executor.execute({"op": "length", "db": "app", "bucket": "User", "path": []})
        with pytest.raises(errors.NotFoundError, match="Put it first"):
            c._executor.execute({**base, "path": [{"key": "bob", "field": "Messages"}]})


# -- a model of a three-level tree ----------------------------------------------------------------

DOCS = st.sampled_from(["jane", "omar", "ines"])
FRIEND_KEYS = st.sampled_from(["bob", "eve", 7])


class ThreeLevels(RuleBasedStateMachine):
    """User documents (L1) own Friends (L2), whose elements own Messages (L3, a fifo); a dict models it."""

    def __init__(self):
        super().__init__()
        import tempfile
        self.dir = tempfile.TemporaryDirectory()
        self.client = hoarddb.open(self.dir.name + "/data", ttl_sweep_seconds=0, sync=False)
        self.users = self.client["app"].create_bucket(
            "User", type="hash", indices=[{"field": "At", "expire_after_seconds": 0}], store_fields=FRIENDS)
        self.model: dict = {}  # doc -> {"expires": bool, "friends": {key: {"doc": {...}, "messages": [...]}}}
        self.n = 0

    def teardown(self):
        self.client.close()
        self.dir.cleanup()

    @rule(doc=DOCS, expires=st.booleans())
    def insert(self, doc, expires):
        if doc in self.model:
            with pytest.raises(errors.DuplicateKeyError):
                self.users.insert({"_id_": doc})
            return
        self.users.insert({"_id_": doc, **({"At": OLD} if expires else {})})
        self.model[doc] = {"expires": expires, "friends": {}}

    @rule(doc=DOCS, friend=FRIEND_KEYS)
    def put_friend(self, doc, friend):
        self.n += 1
        if doc not in self.model:
            with pytest.raises(errors.NotFoundError, match="Insert the document first"):
                self.users[doc].Friends.put(friend, {"v": self.n})
            return
        self.users[doc].Friends.put(friend, {"v": self.n})
        entry = self.model[doc]["friends"].setdefault(friend, {"messages": []})
        entry["doc"] = {"v": self.n}  # a put replaces the element's fields, never its stores

    @rule(doc=DOCS, friend=FRIEND_KEYS, count=st.integers(1, 3))
    def push(self, doc, friend, count):
        store = self.users[doc].Friends[friend].Messages
        batch = [{"n": self.n + i} for i in range(count)]
        self.n += count
        if doc not in self.model or friend not in self.model[doc]["friends"]:
            with pytest.raises(errors.NotFoundError):
                store.batch_push(batch)
            return
        store.batch_push(batch)
        self.model[doc]["friends"][friend]["messages"].extend(batch)

    @rule(doc=DOCS, friend=FRIEND_KEYS)
    def pop(self, doc, friend):
        if doc in self.model and friend in self.model[doc]["friends"]:
            got = self.users[doc].Friends[friend].Messages.pop()
            messages = self.model[doc]["friends"][friend]["messages"]
            assert got == (messages.pop(0) if messages else None)

    @rule(doc=DOCS, friend=FRIEND_KEYS)
    def delete_friend(self, doc, friend):
        if doc not in self.model:
            return
        got = self.users[doc].Friends.delete(friend)
        assert got == {"deleted": int(self.model[doc]["friends"].pop(friend, None) is not None)}

    @rule(doc=DOCS)
    def delete_doc(self, doc):
        assert self.users.delete(doc) == {"deleted": int(self.model.pop(doc, None) is not None)}

    @rule()
    def expire(self):
        gone = [d for d, m in self.model.items() if m["expires"]]
        assert self.client.sweep_ttl()["expired"] == len(gone)
        for d in gone:
            del self.model[d]

    @invariant()
    def agrees(self):
        assert sorted(d["_id_"] for d in self.users.find()) == sorted(self.model)
        for doc, m in self.model.items():
            listed = self.users[doc].Friends.list()
            assert [(x["key"], x["doc"]) for x in listed] == sorted(
                ((k, f["doc"]) for k, f in m["friends"].items()), key=lambda kv: encode_key(kv[0]))
            for friend, f in m["friends"].items():
                assert self.users[doc].Friends[friend].Messages.list(limit=1000) == f["messages"]


ThreeLevels.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
test_a_three_level_tree_agrees_with_its_model = ThreeLevels.TestCase


def test_the_shell_completes_the_verbs_of_a_deeper_store(tmp_path):
    from hoarddb import operations
    from hoarddb.shell import completions

    with hoarddb.open(tmp_path / "data") as c:
        shell = Shell(c, out=io.StringIO(), err=io.StringIO())
        assert shell.run_text("use app; create bucket User { Friends hashStore { Messages fifoStore } }")
        word, verbs = completions(shell, 'db.User["jane"].Friends["bob"].Messages.p')
        assert word == "p" and set(operations.field_verbs_for("fifo")) <= set(verbs) and "put" not in verbs
        assert "put" in completions(shell, 'db.User["jane"].Friends.')[1]
        err = io.StringIO()
        assert not Shell(c, out=io.StringIO(), err=err).run_text('use app; db.User["j"].Friends["b"].Messages.psh({})')
        assert "fifo store field User.Friends.Messages" in err.getvalue() and "push" in err.getvalue()


def test_a_read_of_a_deeper_blob_store_is_never_taken_for_a_quick_one(tmp_path):
    """The server runs quick reads on its event loop: a blob's bytes a level deeper are read elsewhere."""
    with hoarddb.open(tmp_path / "data") as c:
        users(c)
        engine = c._executor
        base = {"db": "app", "bucket": "User", "key": "jane", "field": "Friends"}
        assert engine.is_quick_read({**base, "op": "get", "args": {"key": "bob"}})
        photos = {**base, "path": [{"key": "bob", "field": "Photos"}]}
        assert not engine.is_quick_read({**photos, "op": "get", "args": {"key": "x"}})
        messages = {**base, "path": [{"key": "bob", "field": "Messages"}]}
        assert engine.is_quick_read({**messages, "op": "peek", "args": {}})
        assert not engine.is_quick_read({**base, "path": [{"key": "bob", "field": "Nope"}], "op": "peek"})


def test_keys_too_long_to_own_stores_are_refused_with_nothing_written(tmp_path):
    with hoarddb.open(tmp_path / "data") as c:
        u = users(c)
        doc, friend = "d" * 300, "f" * 190
        u.insert({"_id_": doc})
        u[doc].Friends.put(friend, {})  # as an L2 element it fits
        with pytest.raises(errors.BadValueError, match="too long to own stores"):
            u[doc].Friends[friend].Photos.put(b"x")
        assert u[doc].Friends.get(friend) == {} and not any((tmp_path / "data" / "app" / "User" / "fields").iterdir())
        u[doc].Friends.put("short", {})
        u[doc].Friends["short"].Photos.put(b"x")
        assert u[doc].Friends["short"].Photos.length() == 1


def test_check_finds_a_deeper_store_without_its_element_or_its_count(tmp_path):
    import lmdb

    from hoarddb.tools.check import check

    data = tmp_path / "data"
    with hoarddb.open(data) as c:
        u = users(c)
        u.insert({"_id_": "jane"})
        for friend in ("bob", "eve"):
            u["jane"].Friends.put(friend, {})
            u["jane"].Friends[friend].Messages.push({"n": 1})
        u["jane"].Friends["eve"].Photos.put(b"photo")
    assert check(data).problems == []
    dk = encode_key("jane")
    env = lmdb.open(str(data / "app" / "User" / "kv"), subdir=True, max_dbs=0)
    try:
        with env.begin(write=True) as txn:  # bob goes behind hoardDB's back, and eve's messages lose their count
            assert txn.delete(b"F" + dk + b"\x00" + encode_key("bob"))
            assert txn.delete(b"K\x03" + dk + b"\x00" + encode_key("eve") + b"\x00")
    finally:
        env.close()
    found = [p.problem for p in check(data).problems]
    assert any("L3 store Messages holds elements, and the element that owns it does not exist" in p for p in found)
    assert any("L3 store holds 1 elements and has no count record" in p for p in found), found
    assert not any("blob" in p for p in found), found  # eve's photo is owned, its file named
