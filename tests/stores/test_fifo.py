"""The fifo store on real files, and the contract fifo and lifo share (test_lifo.py runs it too).

:class:`SegmentStoreContract` is every verb, refusal, reopen, a stateful model test and a
kill test, written once; a store type's test class sets ``store_class`` and ``lifo``.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
from collections import deque
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from hoarddb.errors import (
    BadValueError,
    ClosedError,
    DocumentTooLargeError,
    InvalidArgumentError,
    LimitExceededError,
    NotADocumentError,
)
from hoarddb.options import Options
from hoarddb.stores.fifo import FifoStore
from hoarddb.storage.segment import SEGMENT_HEADER_SIZE

from ..killing import SAY_READY, kill_midway

SLOW = os.environ.get("HOARDDB_SLOW") == "1"
SMALL = 4096


def doc(i: int, pad: int = 0) -> dict:
    return {"i": i, "pad": "x" * pad}


def ids(docs) -> list[int]:
    return [d["i"] for d in docs]


def open_store(cls, directory: Path, sync: bool = True, **bucket_options):
    return cls(directory, {"type": cls.type_name, "options": bucket_options}, Options(sync=sync))


def everything(store) -> list[int]:
    out, after = [], 0
    while page := store.list(after=after, limit=1000):
        out.extend(ids(page))
        after += len(page)
    return out


class SegmentStoreContract:
    """What a fifo and a lifo bucket both promise; ``lifo`` says which end pop takes."""

    store_class: type
    lifo: bool

    def order(self, pushed: list[int]) -> list[int]:
        """The order pop takes ``pushed`` in."""
        return list(reversed(pushed)) if self.lifo else list(pushed)

    @pytest.fixture
    def bucket(self, tmp_path: Path) -> Path:
        directory = tmp_path / "Queue"
        directory.mkdir()
        return directory

    @pytest.fixture
    def store(self, bucket: Path):
        store = open_store(self.store_class, bucket)
        yield store
        store.close()

    # -- the type ----------------------------------------------------------------------------

    def test_declares_its_verbs_and_options(self):
        cls = self.store_class
        assert cls.type_name == ("lifo" if self.lifo else "fifo")
        assert set(cls.bucket_options) == ({"segment_size"} if self.lifo else {"segment_size", "max_deliveries", "dead_letter"})

    @pytest.mark.parametrize("bad", [4095, 0, -1, "4096", 4096.0, True, None])
    def test_segment_size_must_be_an_integer_of_at_least_4096(self, bucket, bad):
        if bad is None:
            assert self.store_class.validate_options({}) == {}
            return
        with pytest.raises(BadValueError, match="segment_size"):
            self.store_class.validate_options({"segment_size": bad})
        with pytest.raises(BadValueError):
            open_store(self.store_class, bucket, segment_size=bad)
        assert self.store_class.validate_options({"segment_size": 4096}) == {"segment_size": 4096}

    def test_files_are_named_for_the_type(self, store, bucket):
        store.push(doc(1))
        assert sorted(os.listdir(bucket)) == ["seg_00001." + self.store_class.type_name, "state.bson"]

    # -- push, pop, peek ---------------------------------------------------------------------

    def test_pop_and_peek_on_an_empty_bucket(self, store):
        assert store.pop() is None
        assert store.peek() is None
        assert store.pop(5) == []
        assert store.peek(5) == []
        assert store.list() == []
        assert store.length() == 0

    def test_pop_takes_in_the_type_order(self, store):
        for i in range(5):
            assert store.push(doc(i)) is None
        assert store.length() == 5
        want = self.order(list(range(5)))
        assert store.peek() == doc(want[0])
        assert ids(store.peek(3)) == want[:3]
        assert store.pop() == doc(want[0])
        assert ids(store.pop(2)) == want[1:3]
        assert ids(store.pop(100)) == want[3:]
        assert store.pop() is None and store.length() == 0

    def test_documents_read_back_as_written(self, store):
        import datetime
        import uuid

        from bson.int64 import Int64

        value = {
            "s": "héllo", "n": Int64(2**40), "f": 1.5, "b": b"\x00\x01", "none": None,
            "when": datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.timezone.utc),
            "id": uuid.uuid4(), "nested": {"list": [1, "two", {"three": 3}]},
        }
        store.push(value)
        assert store.peek() == value
        assert store.pop() == value

    def test_batch_push_adds_all_in_order(self, store):
        assert store.batch_push([doc(i) for i in range(10)]) == 10
        assert store.batch_push([]) == 0
        assert store.batch_push(tuple(doc(i) for i in range(10, 12))) == 2
        assert ids(store.pop(100)) == self.order(list(range(12)))

    def test_a_bad_document_refuses_the_whole_batch(self, store, bucket):
        store.push(doc(0))
        before = {p.name: p.stat().st_size for p in bucket.iterdir()}
        with pytest.raises(NotADocumentError, match="position 2"):
            store.batch_push([doc(1), doc(2), "not a doc", doc(4)])
        with pytest.raises(BadValueError, match="position 1"):
            store.batch_push([doc(1), {"x": object()}])
        with pytest.raises(DocumentTooLargeError, match="position 0"):
            store.batch_push([{"big": "x" * (16 * 1024 * 1024)}])
        with pytest.raises(InvalidArgumentError, match="list of documents"):
            store.batch_push(doc(1))
        assert {p.name: p.stat().st_size for p in bucket.iterdir()} == before
        assert everything(store) == [0]

    def test_push_refuses_what_is_not_a_storable_document(self, store):
        with pytest.raises(NotADocumentError):
            store.push([1, 2])
        with pytest.raises(NotADocumentError):
            store.push(None)
        with pytest.raises(BadValueError, match="64-bit"):
            store.push({"n": 2**70})
        with pytest.raises(DocumentTooLargeError, match="16 MiB"):
            store.push({"big": b"\0" * (16 * 1024 * 1024 + 1)})
        assert store.length() == 0

    @pytest.mark.parametrize("verb, maximum", [("pop", 100), ("peek", 1000)])
    def test_limits(self, store, verb, maximum):
        store.batch_push([doc(i) for i in range(3)])
        call = getattr(store, verb)
        for bad in (0, -1, True, "3", 2.0):
            with pytest.raises(BadValueError, match=f"{verb} limit"):
                call(bad)
        with pytest.raises(LimitExceededError, match=f"at most {maximum}"):
            call(maximum + 1)
        assert len(call(maximum)) == 3
        assert store.length() == (3 if verb == "peek" else 0)

    def test_limits_follow_the_options(self, bucket):
        store = self.store_class(bucket, {"type": self.store_class.type_name, "options": {}},
                                 Options(max_pop=3, max_peek=4))
        with pytest.raises(LimitExceededError):
            store.pop(4)
        with pytest.raises(LimitExceededError):
            store.peek(5)
        with pytest.raises(LimitExceededError):
            store.list(limit=5)
        store.close()

    # -- list ----------------------------------------------------------------------------------

    def test_list_reads_oldest_first_in_pages(self, bucket):
        store = open_store(self.store_class, bucket, segment_size=SMALL)
        store.batch_push([doc(i, 300) for i in range(50)])
        store.pop(5)
        left = list(range(45)) if self.lifo else list(range(5, 50))
        assert ids(store.list()) == left
        assert ids(store.list(after=10, limit=7)) == left[10:17]
        assert ids(store.list(40, 100)) == left[40:]
        assert store.list(after=45) == []
        assert store.list(after=10**9) == []
        assert store.length() == 45  # list removes nothing
        store.close()

    @pytest.mark.parametrize("bad", [-1, "3", 1.5, True, None])
    def test_list_after_must_be_a_count(self, store, bad):
        with pytest.raises(BadValueError, match="integer ≥ 0"):
            store.list(after=bad)

    def test_list_limit_is_checked(self, store):
        with pytest.raises(BadValueError, match="list limit"):
            store.list(limit=0)
        with pytest.raises(LimitExceededError):
            store.list(limit=1001)

    # -- export, load, sync (dump, restore, group commit) ---------------------------------------

    def test_export_pages_through_everything_and_load_restores_it(self, bucket, tmp_path):
        store = open_store(self.store_class, bucket, segment_size=SMALL)
        store.batch_push([doc(i, 200) for i in range(25)])
        pages, cursor = [], None
        while True:
            page = store.export(cursor=cursor, limit=10)
            pages.append(ids(page["docs"]))
            if page["next"] is None:
                break
            cursor = page["next"]
        assert pages == [list(range(10)), list(range(10, 20)), list(range(20, 25))]
        (tmp_path / "Copy").mkdir()
        copy = open_store(self.store_class, tmp_path / "Copy")
        assert copy.load(store.export(limit=100)["docs"]) == {"loaded": 25}
        assert ids(copy.pop(100)) == ids(store.pop(100))
        copy.close()
        store.close()

    def test_export_cursor_is_checked(self, store):
        for bad in (-1, "0", 1.5, True):
            with pytest.raises(BadValueError, match="cursor"):
                store.export(cursor=bad)
        with pytest.raises(LimitExceededError):
            store.export(limit=10_001)

    def test_sync_makes_writes_of_a_store_without_sync_durable(self, bucket):
        store = open_store(self.store_class, bucket, sync=False, segment_size=SMALL)
        store.batch_push([doc(i, 900) for i in range(10)])
        store.pop(7)
        store.sync()
        store.push(doc(10))
        store.sync()
        store.close()
        store = open_store(self.store_class, bucket, segment_size=SMALL)
        assert everything(store) == ([0, 1, 2, 10] if self.lifo else [7, 8, 9, 10])
        store.sync()  # a no-op with sync on
        store.close()

    # -- disk --------------------------------------------------------------------------------

    def test_stats(self, bucket):
        store = open_store(self.store_class, bucket, segment_size=SMALL)
        store.batch_push([doc(i, 900) for i in range(10)])
        stats = store.stats()
        assert stats["entries"] == 10 and stats["segments"] == 3
        assert stats["bytes"] >= 3 * SMALL
        store.close()

    def test_reopen_keeps_everything(self, bucket):
        store = open_store(self.store_class, bucket, segment_size=SMALL)
        store.batch_push([doc(i, 700) for i in range(30)])
        store.pop(4)
        store.pop()
        store.close()
        store = open_store(self.store_class, bucket, segment_size=SMALL)
        left = list(range(25)) if self.lifo else list(range(5, 30))
        assert store.length() == 25 and everything(store) == left
        store.push(doc(30, 700))
        assert ids(store.pop(100)) == self.order([*left, 30])
        store.close()
        store = open_store(self.store_class, bucket, segment_size=SMALL)
        assert store.length() == 0 and store.pop() is None
        store.close()

    def test_segments_roll_over_and_go_when_emptied(self, bucket):
        store = open_store(self.store_class, bucket, segment_size=SMALL)
        suffix = self.store_class.type_name
        for i in range(20):
            store.push(doc(i, 900))  # four to a segment
        assert sorted(p.name for p in bucket.glob("seg_*")) == [f"seg_{n:05d}.{suffix}" for n in range(1, 6)]
        store.pop(10)
        assert len(list(bucket.glob("seg_*"))) == 3
        store.pop(10)
        # (a lifo keeps its first segment, holding only the queue's identity: segment_header)
        assert sum(p.stat().st_size for p in bucket.glob("seg_*")) == (SEGMENT_HEADER_SIZE if self.lifo else 0)
        store.close()

    def test_a_closed_store_refuses_verbs(self, store):
        store.close()
        for call in (lambda: store.push(doc(1)), store.pop, store.peek, store.list):
            with pytest.raises(ClosedError):
                call()

    def test_threads_lose_and_repeat_nothing(self, bucket):
        store = open_store(self.store_class, bucket, segment_size=SMALL)
        popped: list[int] = []
        errors: list[BaseException] = []

        def pusher(t):
            try:
                for i in range(100):
                    if i % 10 == 0:
                        store.batch_push([doc(t * 1000 + i + k, 50) for k in range(10)])
            except BaseException as exc:  # pragma: no cover
                errors.append(exc)

        def popper():
            try:
                for _ in range(60):
                    popped.extend(ids(store.pop(5)))
            except BaseException as exc:  # pragma: no cover
                errors.append(exc)

        threads = [threading.Thread(target=pusher, args=(t,)) for t in range(4)]
        threads += [threading.Thread(target=popper) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        rest = everything(store)
        assert sorted(popped + rest) == sorted(t * 1000 + i for t in range(4) for i in range(100))
        store.close()

    # -- a model, and a killed process --------------------------------------------------------

    def test_against_a_model(self):
        run_state_machine(self.store_class, self.lifo)

    def test_a_killed_process_loses_no_acknowledged_write(self, tmp_path):
        run_kill_test(self.store_class.type_name, tmp_path, rounds=10, seed=1)

    @pytest.mark.slow
    @pytest.mark.skipif(not SLOW, reason="set HOARDDB_SLOW=1 for the long kill test")
    def test_a_killed_process_loses_no_acknowledged_write_long(self, tmp_path):
        run_kill_test(self.store_class.type_name, tmp_path, rounds=200, seed=2)


class TestFifo(SegmentStoreContract):
    store_class = FifoStore
    lifo = False

    def test_an_export_cursor_keeps_its_place_while_the_queue_is_popped(self, bucket):
        store = open_store(FifoStore, bucket, segment_size=SMALL)
        store.batch_push([doc(i, 200) for i in range(30)])
        page = store.export(limit=10)
        assert ids(page["docs"]) == list(range(10)) and page["next"] == 10
        store.pop(15)  # past the cursor
        page = store.export(cursor=page["next"], limit=10)
        assert ids(page["docs"]) == list(range(15, 25))
        store.close()

    def test_a_crash_between_the_head_write_and_the_unlink_is_repaired(self, bucket):
        store = open_store(FifoStore, bucket, segment_size=SMALL)
        store.batch_push([doc(i, 900) for i in range(8)])
        first = bucket / "seg_00001.fifo"
        saved = first.read_bytes()
        assert ids(store.pop(5)) == [0, 1, 2, 3, 4]
        store.close()
        first.write_bytes(saved)
        store = open_store(FifoStore, bucket, segment_size=SMALL)
        assert not first.exists()
        assert everything(store) == [5, 6, 7]
        store.close()

    @pytest.mark.parametrize("sync", [True, False])
    def test_a_backup_then_what_changed_since_make_the_queue_as_it_is_now(self, tmp_path, sync):
        """backup_changed leaves out the segments an earlier backup had that were not its last: that backup's copy
        of those still present, and the second backup, open as the queue now is (head, tail, claims)."""
        bucket = tmp_path / "Queue"
        bucket.mkdir()
        store = open_store(FifoStore, bucket, sync=sync, segment_size=SMALL)
        store.batch_push([doc(i, 300) for i in range(60)])
        claimed = store.claim(3, lease=60)
        store.backup(tmp_path / "first")
        first = sorted(p.name for p in (tmp_path / "first").iterdir() if p.name.startswith("seg_"))
        assert len(first) > 3
        store.pop(20)  # the head passes some of the first backup's segments
        store.batch_push([doc(i, 300) for i in range(60, 90)])  # the last one grows, new ones begin
        store.ack(claimed[0]["claimId"])
        names = store.backup_changed(tmp_path / "second", set(first[:-1]))
        copied = {p.name for p in (tmp_path / "second").iterdir() if p.is_file()}
        assert not copied & set(first[:-1]) and set(names) >= copied and "state.bson" in copied
        together = tmp_path / "together"
        shutil.copytree(tmp_path / "second", together)
        for name in names:
            if name in first[:-1]:
                shutil.copyfile(tmp_path / "first" / name, together / name)
        expected = everything(store)
        store.close()
        copy = open_store(FifoStore, together, segment_size=SMALL)
        assert everything(copy) == expected == list(range(23, 90))
        assert copy.ack([c["claimId"] for c in claimed[1:]]) == {"acked": 2}  # the claims, their tokens too
        assert ids(copy.pop(100)) == list(range(23, 90))
        copy.close()


# -- the stateful model test ------------------------------------------------------------------

#: Pads up to 5000 bytes against 4096-byte segments: rollovers, and entries alone in a segment.
PADS = st.one_of(st.integers(0, 1200), st.just(5000))


def run_state_machine(store_class, lifo: bool) -> None:
    class SegmentMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.directory = Path(tempfile.mkdtemp(prefix="hoarddb-model-"))
            self.store = open_store(store_class, self.directory, segment_size=SMALL)
            self.model: deque[int] = deque()
            self.next = 0

        def taken(self, n: int) -> list[int]:
            n = min(n, len(self.model))
            if lifo:
                return [self.model[-1 - k] for k in range(n)]
            return [self.model[k] for k in range(n)]

        @rule(pad=PADS)
        def push(self, pad):
            self.store.push(doc(self.next, pad))
            self.model.append(self.next)
            self.next += 1

        @rule(pads=st.lists(PADS, max_size=12))
        def batch_push(self, pads):
            assert self.store.batch_push([doc(self.next + k, p) for k, p in enumerate(pads)]) == len(pads)
            self.model.extend(range(self.next, self.next + len(pads)))
            self.next += len(pads)

        @rule()
        def pop_one(self):
            want = self.taken(1)
            got = self.store.pop()
            assert (got["i"] if got else None) == (want[0] if want else None)
            if want:
                self.model.pop() if lifo else self.model.popleft()

        @rule(n=st.integers(1, 100))
        def pop_many(self, n):
            want = self.taken(n)
            assert ids(self.store.pop(n)) == want
            for _ in want:
                self.model.pop() if lifo else self.model.popleft()

        @rule(n=st.one_of(st.none(), st.integers(1, 30)))
        def peek(self, n):
            if n is None:
                got = self.store.peek()
                want = self.taken(1)
                assert (got["i"] if got else None) == (want[0] if want else None)
            else:
                assert ids(self.store.peek(n)) == self.taken(n)

        @rule(after=st.integers(0, 40), limit=st.integers(1, 30))
        def list_page(self, after, limit):
            assert ids(self.store.list(after=after, limit=limit)) == list(self.model)[after:after + limit]

        @rule()
        def reopen(self):
            self.store.close()
            self.store = open_store(store_class, self.directory, segment_size=SMALL)

        @invariant()
        def length(self):
            assert self.store.length() == len(self.model)

        def teardown(self):
            try:
                self.store.close()
            finally:  # a close that raises must not leave the folder behind in /tmp
                shutil.rmtree(self.directory, ignore_errors=True)

    SegmentMachine.TestCase.settings = settings(
        max_examples=300 if SLOW else 40, stateful_step_count=50, deadline=None
    )
    SegmentMachine.TestCase().runTest()


# -- the kill test -----------------------------------------------------------------------------

#: The child: push, batch_push and pop in a loop, saying "B ..." before each operation and
#: "A ..." once it returned (acknowledged), each line flushed before going on.
CHILD = r"""
import random, sys
from pathlib import Path
from hoarddb.options import Options
from hoarddb.stores.fifo import FifoStore
from hoarddb.stores.lifo import LifoStore

kind, directory, start, seed = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cls = FifoStore if kind == "fifo" else LifoStore
store = cls(directory, {"type": kind, "options": {"segment_size": 4096}}, Options())
rng = random.Random(seed)

""" + SAY_READY + r"""
i = start
while True:
    r = rng.random()
    if r < 0.4:
        say(f"B push {i}")
        store.push({"i": i, "pad": "x" * rng.randrange(0, 1500)})
        say(f"A push {i}")
        i += 1
    elif r < 0.6:
        batch = list(range(i, i + rng.randrange(1, 12)))
        say("B batch " + " ".join(map(str, batch)))
        store.batch_push([{"i": j, "pad": "y" * rng.randrange(0, 1500)} for j in batch])
        say("A batch")
        i += len(batch)
    elif r < 0.85:
        say("B pop 1")
        d = store.pop()
        say("A pop" + ("" if d is None else f" {d['i']}"))
    else:
        n = rng.randrange(1, 11)
        say(f"B pop {n}")
        docs = store.pop(n)
        say("A pop " + " ".join(str(d["i"]) for d in docs))
"""


def run_kill_test(kind: str, tmp_path: Path, rounds: int, seed: int) -> None:
    from hoarddb.stores.fifo import FifoStore
    from hoarddb.stores.lifo import LifoStore

    cls = FifoStore if kind == "fifo" else LifoStore
    lifo = kind == "lifo"
    directory = tmp_path / "Queue"
    directory.mkdir()
    rng = random.Random(seed)
    model: list[int] = []
    next_id = 0
    for round_ in range(rounds):
        # Only whole lines count: a line the kill cut short was never said.
        lines = kill_midway(CHILD, [kind, directory, next_id, rng.randrange(2**32)], tmp_path / f"round{round_}.out",
                            rng.uniform(0.02, 0.35))
        in_flight = None
        for line in lines:
            words = line.split()
            if words[0] == "B":
                in_flight = words[1:]
                if words[1] in ("push", "batch"):
                    next_id = max(next_id, max(int(w) for w in words[2:]) + 1)
                continue
            what, values = in_flight[0], [int(w) for w in words[2:]]
            if what == "push":
                model.append(int(in_flight[1]))
            elif what == "batch":
                model.extend(int(w) for w in in_flight[1:])
            else:
                n = len(values)
                want = (model[::-1] if lifo else model)[:n]
                assert values == want, f"round {round_}: popped {values}, the model says {want}"
                if lifo:
                    del model[len(model) - n:]
                else:
                    del model[:n]
            in_flight = None

        store = cls(directory, {"type": kind, "options": {"segment_size": SMALL}}, Options())
        try:
            actual = everything(store)
        finally:
            store.close()
        allowed = [model]
        if in_flight:
            what, values = in_flight[0], [int(w) for w in in_flight[1:]]
            if what == "push":
                allowed.append(model + values)
            elif what == "batch":  # a killed batch is all or nothing (MORE bits, docs/dev/segments.md)
                allowed.append(model + values)
            else:
                n = min(values[0], len(model))
                allowed.append(model[:len(model) - n] if lifo else model[n:])
        assert actual in allowed, (
            f"round {round_}: after the kill the bucket holds {actual[-20:]} (last 20 of {len(actual)}); "
            f"in flight: {in_flight}; the model holds {model[-20:]} (last 20 of {len(model)})"
        )
        model = actual
