"""Placement and partitions in a bucket's declaration: checked on every server, clustered or not."""

import pytest

import hoarddb
from hoarddb.errors import BadValueError


@pytest.fixture
def client(tmp_path):
    with hoarddb.open(tmp_path) as client:
        yield client


@pytest.fixture
def db(client):
    return client["app"]


def test_whole_and_partitions_are_recorded(db):
    db.create_bucket("Users", type="hash", placement="whole", indices=[{"field": "Email", "unique": True}])
    db.create_bucket("Events", type="hash", partitions=8)
    assert db.Events.insert({"_id_": "e1"}) == "e1"


def test_another_placement_is_refused_with_the_accepted_ones(client, db):
    with pytest.raises(BadValueError, match="accepted: whole"):
        db.create_bucket("Users", type="hash", placement="spread")
    assert "app" not in client.databases()  # nothing of the refused bucket was written


def test_a_unique_index_on_a_spread_bucket_is_refused_with_the_fix(db):
    with pytest.raises(BadValueError, match="needs the bucket whole.*placement: whole"):
        db.create_bucket("Users", type="hash", partitions=4, indices=[{"field": "Email", "unique": True}])


def test_partitions_are_checked(db):
    for bad in (0, 5000, "4", True):
        with pytest.raises(BadValueError, match="partitions must be"):
            db.create_bucket("B", type="hash", partitions=bad)
    with pytest.raises(BadValueError, match="give one of them"):
        db.create_bucket("B", type="hash", partitions=4, placement="whole")
    with pytest.raises(BadValueError, match="partitioned queue, which needs group"):
        db.create_bucket("Q", type="fifo", partitions=4)
    with pytest.raises(BadValueError, match="partitioned queue, which needs group"):
        db.create_bucket("H", type="heap", partitions=4)
    with pytest.raises(BadValueError, match="a hash bucket takes none"):
        db.create_bucket("G", type="hash", group="G")
    with pytest.raises(BadValueError, match="group is the name of a field"):
        db.create_bucket("G", type="lifo", partitions=2, group=3)
    db.create_bucket("Q", type="fifo", partitions=1)
    db.create_bucket("P", type="fifo", partitions=4, group="Customer")  # a single server keeps one order
    db.create_bucket("H", type="heap", partitions=4, group="Customer")


def test_alter_placement_is_checked(client, db):
    db.create_bucket("Users", type="hash")
    with pytest.raises(BadValueError, match="accepted: whole"):
        client.execute({"op": "alter_bucket", "db": "app", "bucket": "Users", "options": {"placement": "x"}})
