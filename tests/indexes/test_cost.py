"""What an index costs (indexes.md, "What an index costs"): one entry per document per index, of a known size."""

from __future__ import annotations

import random

import lmdb

import hoarddb


def entries(path, bucket):
    env = lmdb.open(str(path / "app" / bucket / "kv"), readonly=True, lock=False)
    with env.begin() as txn:
        out = [(k, v) for k, v in txn.cursor() if k.startswith(b"I")]
    st = env.stat()
    env.close()
    return out, st["psize"] * (st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"])


def test_one_entry_per_document_per_index_of_value_plus_key_plus_8_bytes(tmp_path):
    n = 3000
    rng = random.Random(7)
    docs = [{"_id_": f"u{i:06}", "Email": f"user{rng.randrange(10**9):09}@example.com", "Co": f"c{i % 10}"}
            for i in range(n)]
    rng.shuffle(docs)
    with hoarddb.open(tmp_path) as c:
        plain = c["app"].create_bucket("Plain", type="hash")
        indexed = c["app"].create_bucket("Indexed", type="hash", indices=[{"field": "Email", "unique": True}, "Co"])
        for s in range(0, n, 500):
            plain.batch_insert(docs[s:s + 500])
            indexed.batch_insert(docs[s:s + 500])
    got, indexed_bytes = entries(tmp_path, "Indexed")
    _, plain_bytes = entries(tmp_path, "Plain")
    assert len(got) == 2 * n
    by_id = {d["_id_"]: d for d in docs}
    for key, value in got:
        # a string value or key encodes as its bytes plus a tag and a 2-byte terminator (3 bytes),
        # and the entry adds its namespace and index id (2 bytes): 3 + 3 + 2 = 8
        if key[1] == 0:  # Email_1, unique: the holder's key is the value
            ident = value[1:-2].decode()
            assert len(key) + len(value) == len(by_id[ident]["Email"]) + len(ident) + 8
        else:  # Co_1: the document key ends the entry's key
            assert len(key) + len(value) == len("c0") + len("u000000") + 8
    # on disk LMDB adds an 8-byte node header per entry and leaves B+tree pages partly empty
    per_entry = (indexed_bytes - plain_bytes) / (2 * n)
    assert 16 < per_entry < 3 * (32 + 16)


def test_an_index_opens_no_file(tmp_path):
    with hoarddb.open(tmp_path) as c:
        c["app"].create_bucket("A", type="hash")
        c["app"].create_bucket("B", type="hash", indices=["X", "Y", {"fields": ["X", "Y"], "unique": True}])

    def names(bucket):
        return sorted(p.name for p in (tmp_path / "app" / bucket).rglob("*"))

    assert names("A") == names("B")
