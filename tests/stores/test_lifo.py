"""The lifo store on real files: the shared segment-store contract (test_fifo.py), plus what only a stack does."""

from __future__ import annotations

from .test_fifo import SMALL, SegmentStoreContract, doc, everything, ids, open_store

from hoarddb.stores.lifo import LifoStore


class TestLifo(SegmentStoreContract):
    store_class = LifoStore
    lifo = True

    def test_list_is_the_reverse_of_pop_order(self, store):
        store.batch_push([doc(i) for i in range(6)])
        assert ids(store.list()) == list(range(6))
        assert ids(store.peek(6)) == [5, 4, 3, 2, 1, 0]

    def test_a_pop_over_several_segments_is_one_commit_that_survives_reopen(self, bucket):
        store = open_store(LifoStore, bucket, segment_size=SMALL)
        store.batch_push([doc(i, 900) for i in range(10)])  # 4 + 4 + 2 per segment
        assert ids(store.pop(7)) == [9, 8, 7, 6, 5, 4, 3]
        assert sorted(p.name for p in bucket.glob("seg_*")) == ["seg_00001.lifo"]
        store.push(doc(10, 900))
        store.close()
        store = open_store(LifoStore, bucket, segment_size=SMALL)
        assert everything(store) == [0, 1, 2, 10]
        store.close()

    def test_pushes_after_pops_go_where_the_pops_cut(self, bucket):
        store = open_store(LifoStore, bucket, segment_size=SMALL)
        for round_ in range(5):
            store.batch_push([doc(100 * round_ + i, 500) for i in range(9)])
            store.pop(6)
        store.close()
        store = open_store(LifoStore, bucket, segment_size=SMALL)
        assert everything(store) == [100 * r + i for r in range(5) for i in range(3)]
        store.close()
