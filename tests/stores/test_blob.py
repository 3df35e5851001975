"""The blob store on real files: every verb, every refusal, checksums, crash leftovers, compaction."""

from __future__ import annotations

import datetime
import hashlib
import io
import logging
import os
import threading
import tracemalloc
import uuid
from pathlib import Path

import pytest

from hoarddb.errors import (
    BadValueError,
    ClosedError,
    CorruptDataError,
    LimitExceededError,
    NotFoundError,
)
from hoarddb.ids import uuid7
from hoarddb.options import Options
from hoarddb.storage import framing
from hoarddb.storage.blobfiles import CHUNK_SIZE, INDEX_NAME
from hoarddb.stores.base import Store
from hoarddb.stores.blob import COMPACT_MIN_RECORDS, MAX_LABEL_BYTES, BlobStore
from hoarddb.values.codec import decode

MiB = 1024 * 1024


@pytest.fixture
def bucket(tmp_path: Path) -> Path:
    directory = tmp_path / "Photos"
    directory.mkdir()
    return directory


def open_store(directory: Path, **options) -> BlobStore:
    return BlobStore(directory, {"type": "blob"}, Options(**options))


@pytest.fixture
def store(bucket: Path):
    s = open_store(bucket)
    yield s
    s.close()


def abandon(store: BlobStore) -> None:
    """Leave the store as a killed process would: no clean close (``_index.closed``), so the
    next open repairs what a crash leaves (after a clean close it refuses it as damage)."""
    store._closed = True
    store._index.close()


def reopen(store: BlobStore, **options) -> BlobStore:
    store.close()
    return open_store(store.directory, **options)


def index_records(directory: Path) -> list[dict]:
    with open(directory / INDEX_NAME, "rb") as f:
        return [decode(payload) for _, payload in framing.scan(f)]


# -- the type -------------------------------------------------------------------------------


def test_class_declares_its_type():
    assert issubclass(BlobStore, Store)
    assert BlobStore.type_name == "blob"
    assert BlobStore.bucket_options == {}


def test_a_new_bucket_is_empty(store):
    assert store.length() == 0
    assert store.list() == []
    assert (store.directory / INDEX_NAME).exists()
    assert store.stats()["entries"] == 0


# -- put and get ----------------------------------------------------------------------------


def test_put_bytes_then_get(store):
    blob_id = store.put(b"hello world", name="hello.txt", type="text/plain")
    assert uuid.UUID(blob_id).version == 7
    got = store.get(blob_id)
    assert got == {
        "_id_": blob_id,
        "data": b"hello world",
        "name": "hello.txt",
        "type": "text/plain",
        "size": 11,
        "sha256": hashlib.sha256(b"hello world").hexdigest(),
    }
    assert (store.directory / blob_id).read_bytes() == b"hello world"  # raw, no header


def test_put_the_spec_document_form(store):
    blob_id = store.put({"data": b"\xff\xd8jpeg", "name": "sunset.jpg", "type": "image/jpeg"})
    got = store.get({"_id_": blob_id})
    assert got["data"] == b"\xff\xd8jpeg"
    assert (got["name"], got["type"]) == ("sunset.jpg", "image/jpeg")


def test_document_form_takes_name_or_type_as_arguments_when_absent(store):
    blob_id = store.put({"data": b"x"}, name="a.bin", type="application/octet-stream")
    assert store.info(blob_id)["name"] == "a.bin"
    assert store.info(blob_id)["type"] == "application/octet-stream"


def test_put_bytearray_memoryview_and_empty(store):
    a = store.put(bytearray(b"abc"))
    b = store.put(memoryview(b"0123456789")[2:5])
    import array

    c = store.put(memoryview(array.array("i", [1, 2])))  # a non-byte format is taken as its bytes
    d = store.put(b"")
    assert store.get(a)["data"] == b"abc"
    assert store.get(b)["data"] == b"234"
    assert store.get(c)["data"] == array.array("i", [1, 2]).tobytes()
    assert store.get(d) | {"data": None} == {
        "_id_": d, "data": None, "name": None, "type": None, "size": 0,
        "sha256": hashlib.sha256(b"").hexdigest(),
    }
    assert list(store.stream(d)) == []


class ReadRecorder:
    """A real binary file that remembers how much each read asked for."""

    def __init__(self, f):
        self.f = f
        self.sizes: list[int] = []

    def read(self, n: int = -1) -> bytes:
        self.sizes.append(n)
        return self.f.read(n)


def test_put_from_a_20_mib_file_reads_it_in_chunks(store, tmp_path):
    source = tmp_path / "big.bin"
    pattern = os.urandom(MiB)
    with open(source, "wb") as f:
        for i in range(20):
            f.write(bytes([i]) + pattern[1:])
    want = hashlib.sha256(source.read_bytes()).hexdigest()
    with open(source, "rb") as f:
        reader = ReadRecorder(f)
        tracemalloc.start()
        try:
            blob_id = store.put(reader, name="big.bin")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert all(0 < n <= CHUNK_SIZE for n in reader.sizes)
    assert peak < 6 * MiB  # a few chunks at most, never the 20 MiB
    info = store.info(blob_id)
    assert info["size"] == 20 * MiB
    assert info["sha256"] == want
    assert (store.directory / blob_id).stat().st_size == 20 * MiB

    digest = hashlib.sha256()
    chunks = 0
    tracemalloc.start()
    try:
        for chunk in store.stream(blob_id):
            assert len(chunk) <= CHUNK_SIZE
            digest.update(chunk)
            chunks += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert digest.hexdigest() == want
    assert chunks == 20
    assert peak < 6 * MiB


def test_put_from_a_file_object_that_returns_short_reads(store):
    class Trickle(io.RawIOBase):
        def __init__(self, data):
            self.data = data

        def readable(self):
            return True

        def readinto(self, b):
            n = min(len(b), 7, len(self.data))
            b[:n], self.data = self.data[:n], self.data[n:]
            return n

    data = bytes(range(256)) * 10
    blob_id = store.put(Trickle(data))
    assert store.get(blob_id)["data"] == data


def test_put_from_bytesio(store):
    blob_id = store.put(io.BytesIO(b"in memory"), type="text/plain")
    assert store.get(blob_id)["data"] == b"in memory"


# -- refusals of put ------------------------------------------------------------------------


@pytest.mark.parametrize("data", ["some text", 42, 4.2, None, ["a"], {"a"}, True])
def test_put_refuses_other_kinds_of_data(store, data):
    with pytest.raises(BadValueError) as err:
        store.put(data)
    assert "bytes, bytearray, memoryview, a binary file object" in err.value.message
    assert err.value.code == 2
    assert store.length() == 0


def test_put_refusal_of_text_says_to_encode(store):
    with pytest.raises(BadValueError, match=r"encode"):
        store.put("caf\u00e9")


def test_put_refuses_a_text_mode_file(store, tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("words")
    with open(path) as f, pytest.raises(BadValueError, match=r"binary mode"):
        store.put(f)
    assert store.length() == 0
    assert [p.name for p in store.directory.iterdir()] == [INDEX_NAME]  # no temp left behind


def test_put_refuses_a_reader_that_returns_str(store):
    class Texty:
        def read(self, n):
            return "abc"

    with pytest.raises(BadValueError, match=r"binary mode"):
        store.put(Texty())
    assert [p.name for p in store.directory.iterdir()] == [INDEX_NAME]


@pytest.mark.parametrize(
    "kwargs",
    [{"name": 5}, {"type": b"image/png"}, {"name": ["a"]}, {"type": 1.5}],
)
def test_put_refuses_name_and_type_that_are_not_strings(store, kwargs):
    with pytest.raises(BadValueError, match=r"must be a string or null"):
        store.put(b"x", **kwargs)
    with pytest.raises(BadValueError, match=r"must be a string or null"):
        store.put({"data": b"x", **kwargs})
    assert store.length() == 0


def test_put_refuses_name_or_type_given_twice(store):
    with pytest.raises(BadValueError, match=r"name twice"):
        store.put({"data": b"x", "name": "a"}, name="b")
    with pytest.raises(BadValueError, match=r"type twice"):
        store.put({"data": b"x", "type": "a/b"}, type="a/b")
    assert store.length() == 0


def test_put_refuses_a_document_without_data_or_with_unknown_fields(store):
    with pytest.raises(BadValueError, match=r"needs a data field"):
        store.put({"name": "a.jpg"})
    with pytest.raises(BadValueError, match=r"unknown field.*size"):
        store.put({"data": b"x", "size": 1})
    with pytest.raises(BadValueError, match=r"got a document"):
        store.put({"data": {"data": b"x"}})
    with pytest.raises(BadValueError, match=r"must be bytes, bytearray"):
        store.put({"data": "text"})
    assert store.length() == 0


def test_put_refuses_an_overlong_name(store):
    store.put(b"x", name="n" * MAX_LABEL_BYTES)
    with pytest.raises(BadValueError, match=r"limit is 1024"):
        store.put(b"x", name="n" * (MAX_LABEL_BYTES + 1))
    with pytest.raises(BadValueError, match=r"not valid Unicode"):
        store.put(b"x", name="\ud800")
    assert store.length() == 1


# -- info, delete, ids ----------------------------------------------------------------------


def test_info_is_metadata_without_data(store):
    before = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    blob_id = store.put(b"abcdef", name="a", type="b/c")
    info = store.info(blob_id)
    assert set(info) == {"_id_", "name", "type", "size", "sha256", "created"}
    assert info["size"] == 6 and info["name"] == "a" and info["type"] == "b/c"
    assert before <= info["created"] <= datetime.datetime.now(datetime.timezone.utc)
    assert info == store.info({"_id_": blob_id})


def test_ids_may_be_given_as_uuid_or_in_upper_case(store):
    blob_id = store.put(b"abc")
    assert store.info(uuid.UUID(blob_id))["_id_"] == blob_id
    assert store.info(blob_id.upper())["_id_"] == blob_id


def test_delete_removes_the_blob_and_its_file(store):
    keep = store.put(b"keep")
    gone = store.put(b"gone")
    assert store.delete({"_id_": gone}) == {"deleted": 1}
    assert not (store.directory / gone).exists()
    assert store.length() == 1
    assert [i["_id_"] for i in store.list()] == [keep]
    for verb in (store.get, store.info, store.stream, store.delete):
        with pytest.raises(NotFoundError):
            verb(gone)
    assert index_records(store.directory)[-1] == {"op": "del", "_id_": gone}


@pytest.mark.parametrize("verb", ["get", "info", "stream", "delete"])
def test_unknown_id_is_not_found_naming_id_and_bucket(store, verb):
    missing = uuid7()
    with pytest.raises(NotFoundError) as err:
        getattr(store, verb)({"_id_": missing})
    assert err.value.code == 16
    assert missing in err.value.message and "Photos" in err.value.message


@pytest.mark.parametrize("verb", ["get", "info", "stream", "delete"])
@pytest.mark.parametrize("bad", [42, None, b"0192a3b4", {"id": "x"}, "../_index.bson", "not-a-uuid"])
def test_ids_that_are_not_dbids_are_refused(store, verb, bad):
    with pytest.raises(BadValueError):
        getattr(store, verb)(bad)


# -- stream ---------------------------------------------------------------------------------


def test_stream_chunks_concatenate_to_the_data(store):
    data = os.urandom(10_000)
    blob_id = store.put(data)
    chunks = list(store.stream(blob_id, chunk_size=3000))
    assert [len(c) for c in chunks] == [3000, 3000, 3000, 1000]
    assert b"".join(chunks) == data
    assert b"".join(store.stream({"_id_": blob_id})) == data


def test_stream_exact_multiple_of_chunk_size(store):
    data = os.urandom(4096)
    blob_id = store.put(data)
    assert [len(c) for c in store.stream(blob_id, chunk_size=1024)] == [1024] * 4


@pytest.mark.parametrize("size", [0, -1, 1.5, "10", True])
def test_stream_refuses_a_bad_chunk_size(store, size):
    blob_id = store.put(b"abc")
    with pytest.raises(BadValueError, match=r"chunk_size"):
        store.stream(blob_id, chunk_size=size)


def test_stream_of_a_deleted_blob_opened_before_still_reads(store):
    data = os.urandom(5000)
    blob_id = store.put(data)
    it = store.stream(blob_id, chunk_size=1000)
    store.delete(blob_id)
    assert b"".join(it) == data  # the open file outlives its name


# -- corruption -----------------------------------------------------------------------------


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


def test_a_flipped_byte_makes_get_raise_corrupt(store):
    blob_id = store.put(b"precious bytes", name="p")
    flip_byte(store.directory / blob_id, 3)
    with pytest.raises(CorruptDataError) as err:
        store.get(blob_id)
    msg = err.value.message
    assert err.value.code == 18
    assert msg.startswith(f"blob {blob_id} is corrupt: sha256 on disk ")
    assert f"differs from {hashlib.sha256(b'precious bytes').hexdigest()} recorded at put" in msg
    assert "backup" in msg and "delete" in msg
    assert store.info(blob_id)["size"] == 14  # metadata is still there; delete works
    assert store.delete(blob_id) == {"deleted": 1}


def test_a_flipped_byte_makes_stream_raise_before_the_last_chunk(store):
    data = os.urandom(10_000)
    blob_id = store.put(data)
    flip_byte(store.directory / blob_id, 9_999)  # in the last chunk
    got = []
    with pytest.raises(CorruptDataError, match=r"is corrupt: sha256 on disk"):
        for chunk in store.stream(blob_id, chunk_size=4000):
            got.append(chunk)
    assert b"".join(got) == data[:8000]  # the last chunk was never handed out


def test_a_flipped_byte_in_a_single_chunk_blob_yields_nothing(store):
    blob_id = store.put(b"short")
    flip_byte(store.directory / blob_id, 0)
    with pytest.raises(CorruptDataError):
        list(store.stream(blob_id))


def test_a_truncated_or_grown_file_is_corrupt(store):
    a = store.put(b"0123456789")
    b = store.put(b"0123456789")
    os.truncate(store.directory / a, 5)
    with open(store.directory / b, "ab") as f:
        f.write(b"x")
    for blob_id, sizes in ((a, "5 bytes on disk, 10 recorded"), (b, "11 bytes on disk, 10 recorded")):
        with pytest.raises(CorruptDataError, match=sizes):
            store.get(blob_id)
        with pytest.raises(CorruptDataError):
            list(store.stream(blob_id, chunk_size=3))


def test_a_missing_file_is_corrupt(store):
    blob_id = store.put(b"data")
    os.unlink(store.directory / blob_id)
    for verb in (store.get, store.stream):
        with pytest.raises(CorruptDataError) as err:
            verb(blob_id)
        assert f"blob {blob_id} is corrupt" in err.value.message
        assert "missing" in err.value.message
    assert store.delete(blob_id) == {"deleted": 1}


# -- length, list, stats --------------------------------------------------------------------


def test_list_pages_in_id_order(store):
    ids = [store.put(bytes([i]), name=f"n{i}") for i in range(25)]
    assert store.length() == 25
    first = store.list(limit=10)
    assert [i["_id_"] for i in first] == ids[:10]
    assert first[0] == store.info(ids[0])
    second = store.list(after=first[-1]["_id_"], limit=10)
    assert [i["_id_"] for i in second] == ids[10:20]
    third = store.list(after={"_id_": second[-1]["_id_"]})
    assert [i["_id_"] for i in third] == ids[20:]
    assert store.list(after=ids[-1]) == []
    store.delete(ids[0])
    store.delete(ids[11])
    assert [i["_id_"] for i in store.list(limit=100)] == ids[1:11] + ids[12:]


def test_list_after_an_id_not_in_the_bucket(store):
    ids = [store.put(b"x") for _ in range(3)]
    store.delete(ids[1])
    assert [i["_id_"] for i in store.list(after=ids[1])] == [ids[2]]
    assert [i["_id_"] for i in store.list(after="00000000-0000-7000-8000-000000000000")] == [ids[0], ids[2]]


def test_list_limit_is_checked(bucket):
    store = open_store(bucket, max_peek=50)
    with pytest.raises(BadValueError):
        store.list(limit=0)
    with pytest.raises(BadValueError):
        store.list(limit="5")
    with pytest.raises(LimitExceededError, match=r"at most 50"):
        store.list(limit=51)
    assert store.list(limit=50) == []
    store.close()


def test_stats_counts_entries_and_bytes_on_disk(store):
    store.put(os.urandom(100_000))
    store.put(b"small")
    stats = store.stats()
    assert stats["entries"] == 2
    assert stats["bytes"] >= 100_000


# -- durability and reopening ---------------------------------------------------------------


def test_close_and_reopen_keeps_everything(store):
    ids = [store.put(os.urandom(1000 * i), name=f"f{i}", type="x/y") for i in range(5)]
    store.delete(ids[2])
    before = store.list()
    again = reopen(store)
    try:
        assert again.length() == 4
        assert again.list() == before
        for blob_id in ids[:2] + ids[3:]:
            assert again.get(blob_id)["sha256"] == again.info(blob_id)["sha256"]
        with pytest.raises(NotFoundError):
            again.get(ids[2])
        newer = again.put(b"after reopen")
        assert newer > ids[-1]
    finally:
        again.close()


def test_a_closed_store_refuses_calls(store):
    blob_id = store.put(b"x")
    store.close()
    for call in (lambda: store.put(b"y"), lambda: store.get(blob_id), lambda: store.length(),
                 lambda: store.delete(blob_id), lambda: store.list()):
        with pytest.raises(ClosedError):
            call()


def test_sync_off_still_stores(bucket):
    store = open_store(bucket, sync=False)
    blob_id = store.put(b"quick")
    store = reopen(store, sync=False)
    assert store.get(blob_id)["data"] == b"quick"
    store.close()


def test_put_appends_one_fixed_size_record_and_never_rewrites_the_index(store):
    index = store.directory / INDEX_NAME
    sizes = [index.stat().st_size]
    previous = index.read_bytes()
    for i in range(40):
        store.put(b"payload %02d" % i, name="same-length.bin", type="application/x")
        now = index.read_bytes()
        assert now.startswith(previous)  # appended, the old bytes untouched
        previous = now
        sizes.append(len(now))
    steps = {b - a for a, b in zip(sizes, sizes[1:])}
    assert len(steps) == 1  # every put adds exactly one record of the same size
    assert len(index_records(store.directory)) == 40


def test_torn_index_tail_is_cut_back_and_its_blob_removed(store, caplog):
    a = store.put(b"first")
    b = store.put(b"second")
    index = store.directory / INDEX_NAME
    abandon(store)
    whole = index.stat().st_size
    os.truncate(index, whole - 10)  # a crash in the middle of b's append
    with caplog.at_level(logging.WARNING):
        again = open_store(store.directory)
    try:
        assert "torn tail" in caplog.text
        assert again.length() == 1
        assert again.get(a)["data"] == b"first"
        assert not (store.directory / b).exists()  # b's file had no whole record
        assert b in caplog.text
        c = again.put(b"third")
        assert len(index_records(store.directory)) == 2
    finally:
        again.close()
    again = open_store(store.directory)
    assert [i["_id_"] for i in again.list()] == [a, c]
    again.close()


def test_zeros_and_partial_headers_at_the_tail_are_cut(store, caplog):
    a = store.put(b"first")
    index = store.directory / INDEX_NAME
    abandon(store)
    good = index.stat().st_size
    with open(index, "ab") as f:
        f.write(b"\x00" * 4096)
    with caplog.at_level(logging.WARNING):
        again = open_store(store.directory)
    assert "torn tail of 4096 bytes" in caplog.text
    assert index.stat().st_size == good
    assert again.get(a)["data"] == b"first"
    again.close()


def test_damage_before_whole_records_is_refused_not_cut(store):
    ids = [store.put(b"x%d" % i) for i in range(3)]
    index = store.directory / INDEX_NAME
    abandon(store)  # even after a crash: this is no torn tail
    flip_byte(index, framing.HEADER_SIZE + 20)  # inside the first record
    with pytest.raises(CorruptDataError, match=r"whole entries follow"):
        open_store(store.directory)
    assert all((store.directory / i).exists() for i in ids)  # nothing was deleted


def test_blob_files_without_an_index_are_refused(bucket):
    (bucket / uuid7()).write_bytes(b"a blob")
    with pytest.raises(CorruptDataError, match=r"no _index.bson"):
        open_store(bucket)


def test_open_removes_temp_files_and_unindexed_blob_files(store, caplog):
    kept = store.put(b"kept")
    abandon(store)  # (a crash: after a clean close an unnamed blob file is refused)
    (store.directory / ".tmp-0192a3b4-c5d6-7890-abcd-ef12345678a1").write_bytes(b"half a put")
    (store.directory / ".tmp-index").write_bytes(b"half a compaction")
    orphan = uuid7()
    (store.directory / orphan).write_bytes(b"renamed, never indexed")
    (store.directory / "README").write_text("not ours")
    with caplog.at_level(logging.WARNING):
        again = open_store(store.directory)
    try:
        names = sorted(p.name for p in store.directory.iterdir())
        assert names == sorted([INDEX_NAME, kept, "README"])
        assert orphan in caplog.text and ".tmp-index" in caplog.text
        assert again.length() == 1
    finally:
        again.close()


def test_open_drops_index_records_whose_file_is_missing(store, caplog):
    kept = store.put(b"kept")
    lost = store.put(b"lost", name="lost.jpg")
    abandon(store)  # a crash (sync off, or a delete on a full disk): after a clean close the record stays
    os.unlink(store.directory / lost)
    with caplog.at_level(logging.WARNING):
        again = open_store(store.directory)
    assert lost in caplog.text and "missing" in caplog.text and "lost.jpg" in caplog.text
    assert again.length() == 1 and again.list()[0]["_id_"] == kept
    caplog.clear()
    again = reopen(again)
    assert lost not in caplog.text  # reported once: the drop was recorded
    assert again.length() == 1
    again.close()


def test_compaction_keeps_live_entries(bucket, caplog):
    store = open_store(bucket, sync=False)
    ids = [store.put(b"%d" % i, name=f"n{i}") for i in range(COMPACT_MIN_RECORDS // 2 + 100)]
    index = bucket / INDEX_NAME
    size_before = index.stat().st_size
    deleted = ids[:500]
    with caplog.at_level(logging.INFO):
        for blob_id in deleted:
            store.delete(blob_id)
    assert "compacted" in caplog.text
    records = index_records(bucket)
    assert len(records) < COMPACT_MIN_RECORDS
    assert index.stat().st_size < size_before
    live = ids[500:]
    assert store.length() == len(live)
    assert [i["_id_"] for i in store.list(limit=1000)] == live
    later = store.put(b"after compaction")
    store = reopen(store, sync=False)
    assert [i["_id_"] for i in store.list(limit=1000)] == live + [later]
    for blob_id in live[:5] + [later]:
        assert store.get(blob_id)["sha256"]
    assert not list(bucket.glob(".tmp-*"))
    store.close()


def test_concurrent_puts_and_deletes(bucket):
    store = open_store(bucket, sync=False)
    made: list[list[str]] = [[] for _ in range(8)]

    def work(out):
        for i in range(40):
            blob_id = store.put(b"t%d" % i)
            out.append(blob_id)
            if i % 4 == 0:
                store.delete(blob_id)

    threads = [threading.Thread(target=work, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    live = sorted(i for out in made for n, i in enumerate(out) if n % 4)
    assert store.length() == len(live) == 8 * 30
    assert [i["_id_"] for i in store.list(limit=1000)] == live
    store = reopen(store)
    assert [i["_id_"] for i in store.list(limit=1000)] == live
    store.close()


# -- a real crash ---------------------------------------------------------------------------

CHILD = r"""
import hashlib, sys
from pathlib import Path
from hoarddb.options import Options
from hoarddb.stores.blob import BlobStore

store = BlobStore(Path(sys.argv[1]), {"type": "blob"}, Options())
i = 0
while True:
    data = hashlib.sha256(b"%d" % i).digest() * (8192 * (1 + i % 8))
    blob_id = store.put(data, name=str(i))
    print(i, blob_id, flush=True)
    i += 1
"""


def expected_data(i: int) -> bytes:
    return hashlib.sha256(b"%d" % i).digest() * (8192 * (1 + i % 8))


@pytest.mark.parametrize("acks_before_kill", [3, 17])
def test_a_killed_writer_loses_no_acknowledged_put(bucket, acks_before_kill):
    import signal
    import subprocess
    import sys

    import hoarddb

    env = dict(os.environ, PYTHONPATH=str(Path(hoarddb.__file__).parent.parent))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(bucket)], stdout=subprocess.PIPE, env=env
    )
    lines = [child.stdout.readline() for _ in range(acks_before_kill)]
    child.send_signal(signal.SIGKILL)  # most likely in the middle of the next put
    lines += child.stdout.read().splitlines()
    child.wait()
    acked = dict(line.split() for line in lines if line.strip())
    assert len(acked) >= acks_before_kill

    store = open_store(bucket)
    try:
        ids = {info["_id_"]: info for info in store.list(limit=1000)}
        for i, blob_id in acked.items():
            blob_id = blob_id.decode()
            assert store.get(blob_id)["data"] == expected_data(int(i))
        # At most one put beyond the acknowledged ones: indexed, then killed before it printed.
        assert 0 <= len(ids) - len(acked) <= 1
        on_disk = {p.name for p in bucket.iterdir()}
        assert on_disk == set(ids) | {INDEX_NAME}  # no temp files, no unindexed blobs
    finally:
        store.close()


def test_an_id_with_anything_around_it_is_not_a_dbid(tmp_path):
    """``_ID_TEXT`` is matched whole: a trailing newline once slipped past ``$`` and made a second file."""
    import hoarddb
    from hoarddb.errors import BadValueError

    with hoarddb.open(tmp_path / "d") as client:
        db = client["app"]
        db.create_bucket("B", type="blob")
        good = db.B.put(b"hi")
        for bad in (good + "\n", " " + good, good + "x", good.upper() + "\n"):
            with pytest.raises(BadValueError, match="is not a DbID"):
                db.B.load([{"_id_": bad, "data": b"x", "name": "n", "type": "text/plain",
                            "sha256": "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"}])
            with pytest.raises(BadValueError, match="is not a DbID"):
                db.B.get(bad)
        assert sorted(p.name for p in (tmp_path / "d" / "app" / "B").iterdir() if len(p.name) >= 36) == [good]
