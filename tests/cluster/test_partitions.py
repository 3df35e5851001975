"""The partition map: a key's partition, and a balanced assignment that moves little."""

from bson.int64 import Int64

from hoarddb.cluster.partitions import balance, moves, partition_of


def test_equal_keys_fall_in_one_partition():
    assert partition_of(30, 64) == partition_of(30.0, 64) == partition_of(Int64(30), 64)
    assert partition_of("anything", 1) == 0


def test_keys_spread_over_every_partition():
    seen = {partition_of(f"user{i}", 16) for i in range(2000)}
    assert seen == set(range(16))


def test_balance_gives_each_node_its_share():
    owners = balance(64, ["n1", "n2", "n3"])
    counts = sorted(owners.count(n) for n in ("n1", "n2", "n3"))
    assert counts == [21, 21, 22]


def test_a_node_joining_takes_about_its_share_and_nothing_else_moves():
    before = balance(64, ["n1", "n2", "n3"])
    after = balance(64, ["n1", "n2", "n3", "n4"], before)
    moved = moves(before, after)
    assert len(moved) == 16  # exactly 64/4: every move goes to the new node
    assert all(new == "n4" for _, _, new in moved)
    assert balance(64, ["n1", "n2", "n3", "n4"], after) == after  # balanced: stays


def test_a_node_leaving_hands_only_its_partitions_to_the_others():
    before = balance(60, ["n1", "n2", "n3"])
    after = balance(60, ["n1", "n2"], before)
    moved = moves(before, after)
    assert {old for _, old, _ in moved} == {"n3"} and len(moved) == 20
    assert sorted(after.count(n) for n in ("n1", "n2")) == [30, 30]
