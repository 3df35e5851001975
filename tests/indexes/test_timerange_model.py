"""A time-range index held against brute force: per-window counts, counts per value and the top
ranking, through inserts, updates that move timestamps and values, deletes, and windows expiring.

The grid is short (windows of 2 s starting every second, readable for 3 s), and the machine
waits now and then, so windows expire while it runs. The clock is the real one: a window is
compared only when it is surely live (it expires after the check ends) or surely expired (it
expired before the check began); one expiring during the check is left alone.
"""

from __future__ import annotations

import datetime
import time

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import hoarddb
from hoarddb.errors import BadValueError

UTC = datetime.timezone.utc
RANGE, STEP, TTL = 2000, 1000, 3000  # ms
KEYS = st.integers(0, 7)
TAGS = st.one_of(st.sampled_from(["a", "b", "c", "d"]), st.none(),
                 st.lists(st.sampled_from(["a", "b", "c"]), max_size=3))
OFFSETS = st.integers(-5000, 2000)  # ms from now


def now_ms() -> int:
    return int(time.time() * 1000)


def date(ms: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1, tzinfo=UTC) + datetime.timedelta(milliseconds=ms)


def values(tag) -> list:
    if isinstance(tag, list):
        return list(dict.fromkeys(tag)) if tag else [[]]
    return [tag]


def order(value):
    return (0, "") if value is None else (1, value) if isinstance(value, str) else (2, "")


class TimeRangeModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        import tempfile
        self.dir = tempfile.TemporaryDirectory()
        self.client = hoarddb.open(self.dir.name, ttl_sweep_seconds=0)
        self.b = self.client["app"].create_bucket("Posts", type="hash", indices=[
            {"name": "w", "fields": ["At", "Tag"], "ranked": True,
             "timeRange": {"on": "At", "range": RANGE // 1000, "step": STEP // 1000, "ttl": TTL // 1000}}])
        self.docs: dict[int, dict] = {}  # key -> {"at": ms or None, "tag": ...}

    def teardown(self):
        self.client.close()
        self.dir.cleanup()

    @rule(key=KEYS, offset=OFFSETS, tag=TAGS)
    def insert(self, key, offset, tag):
        at = now_ms() + offset
        if key in self.docs:
            return
        self.b.insert({"_id_": key, "At": date(at), "Tag": tag})
        self.docs[key] = {"at": at, "tag": tag}

    @rule(key=KEYS, offset=OFFSETS)
    def move(self, key, offset):
        at = now_ms() + offset
        self.b.update({"_id_": key}, {"$set": {"At": date(at)}})
        if key in self.docs:
            self.docs[key]["at"] = at

    @rule(key=KEYS, tag=TAGS)
    def retag(self, key, tag):
        self.b.update({"_id_": key}, {"$set": {"Tag": tag}})
        if key in self.docs:
            self.docs[key]["tag"] = tag

    @rule(key=KEYS, tag=TAGS)
    def put_without_time(self, key, tag):
        self.b.put({"_id_": key, "Tag": tag})
        self.docs[key] = {"at": None, "tag": tag}

    @rule(key=KEYS)
    def delete(self, key):
        self.b.delete({"_id_": key})
        self.docs.pop(key, None)

    @rule()
    def wait(self):
        time.sleep(0.4)

    @invariant()
    def windows_agree_with_brute_force(self):
        before = now_ms()
        first = (before - 8000) // STEP * STEP
        answers = {}
        for start in range(first, before + 3000, STEP):
            try:
                answers[start] = self.b.window("w", byStart=date(start), counts=True)
                answers[start]["top"] = self.b.window("w", byStart=date(start), top=2)["top"]
            except BadValueError as exc:
                assert "has expired" in str(exc)
                answers[start] = None
        after = now_ms()
        for start, got in answers.items():
            if start + TTL <= before:
                assert got is None, start
                continue
            if start + TTL <= after:
                continue  # expired during the check: either answer is right
            inside = [d for d in self.docs.values() if d["at"] is not None and start <= d["at"] < start + RANGE]
            counts: dict = {}
            for d in inside:
                for v in values(d["tag"]):
                    k = repr(v)
                    counts[k] = (v, counts.get(k, (v, 0))[1] + 1)
            every = sorted(counts.values(), key=lambda vc: order(vc[0]) if not isinstance(vc[0], list) else (3, ""))
            assert got["count"] == len(inside), (start, got, inside)
            assert [(c["value"], c["count"]) for c in got["counts"]] == every
            ranked = sorted(every, key=lambda vc: -vc[1])  # stable: ties keep value order
            assert [(c["value"], c["count"]) for c in got["top"]] == ranked[:2]


TimeRangeModel.TestCase.settings = settings(max_examples=12, stateful_step_count=25, deadline=None,
                                            suppress_health_check=list(HealthCheck))
TestTimeRangeIndexMatchesBruteForce = TimeRangeModel.TestCase
