"""The contract of blob stores, as buckets and as store fields: put forms, ids, SHA-256, streams, pages, refusals."""

from __future__ import annotations

import datetime
import functools
import hashlib
import io
import uuid

import pytest

from .places import refused

#: What get answers besides the bytes; info and list answer these and ``created``.
META = {"_id_", "name", "type", "size", "sha256"}


def is_dbid(text) -> bool:
    return isinstance(text, str) and text == str(uuid.UUID(text)) and uuid.UUID(text).version == 7


# -- put, get, info -----------------------------------------------------------------------------

def test_put_answers_a_uuid7_id_and_get_the_bytes_with_their_metadata(place):
    b = place.make("blob")
    data = b"sunset" * 1000
    blob_id = b.put(data, name="sunset.jpg", type="image/jpeg")
    assert is_dbid(blob_id)
    got = b.get(blob_id)
    # (a field's get answers created too, as its info does; a bucket's answers the spec's fields)
    assert set(got) - {"created"} == META | {"data"}
    assert got["data"] == data and got["_id_"] == blob_id
    assert (got["name"], got["type"], got["size"]) == ("sunset.jpg", "image/jpeg", len(data))
    assert got["sha256"] == hashlib.sha256(data).hexdigest()
    info = b.info(blob_id)
    assert set(info) == META | {"created"} and {k: got[k] for k in META} == {k: info[k] for k in META}
    assert isinstance(info["created"], datetime.datetime)
    assert b.length() == 1


def test_every_form_of_put(place):
    b = place.make("blob")
    forms = [
        (lambda: b.put(b"bytes"), b"bytes", None, None),
        (lambda: b.put({"data": b"spec", "name": "s.txt", "type": "text/plain"}), b"spec", "s.txt", "text/plain"),
        (lambda: b.put(b"opts", {"name": "o.pdf", "type": "application/pdf"}), b"opts", "o.pdf", "application/pdf"),
        (lambda: b.put(b"kw", name="k.bin"), b"kw", "k.bin", None),
        (lambda: b.put(b""), b"", None, None),
    ]
    ids = []
    for put, data, name, type_ in forms:
        blob_id = put()
        ids.append(blob_id)
        got = b.get(blob_id)
        assert (got["data"], got["name"], got["type"], got["size"]) == (data, name, type_, len(data))
        assert got["sha256"] == hashlib.sha256(data).hexdigest()
    assert len(set(ids)) == len(forms) and b.length() == len(forms)


@pytest.mark.parametrize("form", ["bytearray", "memoryview", "file", "text file"])
def test_put_of_a_buffer_or_a_file_object(place, form):
    """Embedded and over a server alike: a bytearray or memoryview is uploaded (only bytes are a BSON
    value), and a file object to a store field as to a bucket."""
    b = place.make("blob")
    data = b"0123456789abcdef" * 100_000  # 1.6 MB: more than one chunk of a file's upload
    if form == "text file":
        refused("BAD_VALUE", lambda: b.put(io.StringIO("text")), "binary mode")
        assert b.length() == 0
        return
    source = {"bytearray": bytearray(data), "memoryview": memoryview(data), "file": io.BytesIO(data)}[form]
    blob_id = b.put(source, name=form)
    got = b.get(blob_id)
    assert (got["data"], got["name"], got["size"]) == (data, form, len(data))
    assert got["sha256"] == hashlib.sha256(data).hexdigest()


def test_an_id_given_as_text_as_a_document_or_in_capitals_is_one_blob(place):
    b = place.make("blob")
    blob_id = b.put(b"x")
    for same in (blob_id, {"_id_": blob_id}, blob_id.upper(), uuid.UUID(blob_id)):
        assert b.info(same)["_id_"] == blob_id
        assert b.get(same)["data"] == b"x"
        assert b"".join(b.stream(same)) == b"x"
    assert b.delete({"_id_": blob_id.upper()}) == {"deleted": 1} and b.length() == 0


# -- stream -------------------------------------------------------------------------------------

def test_stream_gives_the_bytes_in_chunks(place):
    b = place.make("blob")
    data = bytes(range(256)) * 40 + b"tail"
    blob_id = b.put(data)
    assert b"".join(b.stream(blob_id)) == data
    chunks = list(b.stream(blob_id, chunk_size=1000))
    assert [len(c) for c in chunks] == [1000] * 10 + [244] and b"".join(chunks) == data
    assert list(b.stream({"_id_": b.put(b"ab")}, chunk_size=1)) == [b"a", b"b"]
    assert list(b.stream(b.put(b""))) == []
    refused("BAD_VALUE", lambda: list(b.stream(blob_id, chunk_size=0)), "chunk_size")


# -- list, delete -------------------------------------------------------------------------------

def test_list_in_id_order_which_is_put_order(place):
    b = place.make("blob")
    ids = [b.put(bytes([n]) * n, name=f"{n}.bin") for n in range(12)]
    assert ids == sorted(ids)
    listed = b.list()
    assert [e["_id_"] for e in listed] == ids
    assert all(set(e) == META | {"created"} for e in listed)
    assert [e["size"] for e in listed] == list(range(12)) and [e["name"] for e in listed] == [f"{n}.bin" for n in range(12)]
    assert [e["_id_"] for e in b.list(after=ids[3], limit=4)] == ids[4:8]
    assert [e["_id_"] for e in b.list({"after": {"_id_": ids[9]}})] == ids[10:]
    assert b.list(after=ids[-1]) == []
    b.delete(ids[5])
    assert [e["_id_"] for e in b.list(after=ids[3], limit=3)] == [ids[4], ids[6], ids[7]]
    assert [e["_id_"] for e in b.list(after=ids[5], limit=1)] == [ids[6]]  # after an id deleted since
    refused("LIMIT_EXCEEDED", lambda: b.list(limit=1001), "1000")
    refused("BAD_VALUE", lambda: b.list(limit=0))
    refused("BAD_VALUE", lambda: b.list(after="not an id"), "DbID")


def test_delete_then_every_read_of_it_is_not_found(place):
    b = place.make("blob")
    keep, gone = b.put(b"keep"), b.put(b"gone")
    assert b.delete(gone) == {"deleted": 1}
    for call in (lambda: b.get(gone), lambda: b.info(gone), lambda: list(b.stream(gone)), lambda: b.delete(gone)):
        refused("NOT_FOUND", call, gone)
    never = "0192a3b4-c5d6-7890-abcd-ef12345678a1"
    for call in (lambda: b.get(never), lambda: b.info(never), lambda: b.delete(never)):
        refused("NOT_FOUND", call, never)
    assert b.length() == 1 and [e["_id_"] for e in b.list()] == [keep] and b.get(keep)["data"] == b"keep"


# -- refusals -----------------------------------------------------------------------------------

def test_what_put_refuses_and_nothing_is_written(place):
    b = place.make("blob")
    for call, code, says in [
        (lambda: b.put("text is not bytes"), "BAD_VALUE", "encode"),
        (lambda: b.put({"name": "no data"}), "BAD_VALUE", "data"),
        (lambda: b.put({"data": b"x", "size": 1}), "BAD_VALUE", "size"),
        (lambda: b.put({"data": {"nested": 1}}), "BAD_VALUE", "document"),
        (lambda: b.put({"data": b"x", "name": 5}), "BAD_VALUE", "name"),
        (lambda: b.put(12345), "BAD_VALUE", "int"),
        (lambda: b.put(b"x", name=5), "INVALID_ARGUMENT", "name"),
        # (both refuse a name given twice; a field's put binds its options document as a parameter and
        # its verb refuses the second name, a bucket's binding refuses it)
        (lambda: b.put(b"x", {"name": "a", "type": "b"}, name="c"), "BAD_VALUE" if b.is_field else "INVALID_ARGUMENT",
         "twice"),
        (lambda: b.put({"data": b"x", "name": "a"}, name="b"), "BAD_VALUE", "twice"),
        (lambda: b.put(b"x", name="n" * 1025), "BAD_VALUE", "1024"),
    ]:
        refused(code, call, says)
    assert b.length() == 0 and b.list() == []


def test_put_with_options_that_are_not_name_and_type(place):
    b = place.make("blob")
    # a field's put(data, options) takes an options document of name and type only (BAD_VALUE);
    # a bucket's put binds the options document to its arguments, and names the one it has not
    code = "BAD_VALUE" if b.is_field else "INVALID_ARGUMENT"
    refused(code, lambda: b.put(b"x", {"name": "a.pdf", "owner": "me"}), "owner")
    if b.is_field:
        refused("BAD_VALUE", lambda: b.put(b"x", "a.pdf"), "options document")
    else:
        refused("INVALID_ARGUMENT", lambda: b.put(b"x", "a.pdf"), "at most 1 argument")
    assert b.length() == 0


def test_an_id_that_is_no_dbid_is_refused(place):
    b = place.make("blob")
    b.put(b"x")
    for bad in ("nope", "0192a3b4-c5d6-7890-abcd", 42, {"id": "x"}):
        for verb in (b.get, b.info, b.delete, lambda blob_id: list(b.stream(blob_id))):
            refused("BAD_VALUE", functools.partial(verb, bad))
    assert b.length() == 1


# -- checked by SHA-256 -------------------------------------------------------------------------

def test_a_blob_altered_on_disk_is_corrupt_never_returned(place):
    b = place.make("blob")
    data = b"0123456789" * 300
    blob_id = b.put(data)
    path = b.files / blob_id
    assert path.read_bytes() == data  # the raw bytes, no encoding
    path.write_bytes(data[:1500] + b"X" + data[1501:])
    refused("CORRUPT_DATA", lambda: b.get(blob_id), blob_id, "sha256")
    received = []

    def read_all():
        for chunk in b.stream(blob_id, chunk_size=1000):
            received.append(len(chunk))
    refused("CORRUPT_DATA", read_all, "sha256")
    assert received == [1000, 1000]  # the last chunk is never handed out
    assert b.info(blob_id)["sha256"] == hashlib.sha256(data).hexdigest()  # metadata still answers
    path.unlink()
    refused("CORRUPT_DATA", lambda: b.get(blob_id), "missing")
    assert b.delete(blob_id) == {"deleted": 1} and b.length() == 0
