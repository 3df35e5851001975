"""Framing: a BSON document carries its own length; the reader cuts any split of the stream the same way."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from hoarddb.errors import DocumentTooLargeError, ProtocolError
from hoarddb.values.codec import encode
from hoarddb.wire.framing import FrameReader, decode_frame, decode_frames, encode_message, split_frames

_TEXT = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))  # BSON strings are UTF-8
docs = st.lists(st.dictionaries(st.text(_TEXT, max_size=5),
                                st.one_of(st.integers(-2**63, 2**63 - 1), st.text(_TEXT), st.binary(), st.none()),
                                max_size=4), min_size=1, max_size=6)


@given(docs, st.lists(st.integers(1, 40), max_size=30))
def test_any_split_of_the_stream_gives_the_same_documents(messages, cuts):
    stream = b"".join(encode(m) for m in messages)
    reader, out, pos = FrameReader(), [], 0
    for cut in cuts + [len(stream)]:
        reader.feed(stream[pos:pos + cut])
        pos += cut
        while (frame := reader.next_frame()) is not None:
            out.append(decode_frame(frame))
    assert out == messages
    assert reader.buffered == 0


def test_fed_byte_by_byte():
    data = encode({"id": 1, "op": "hello"}) * 3
    reader, frames = FrameReader(), []
    for b in data:
        reader.feed(bytes([b]))
        while (frame := reader.next_frame()) is not None:
            frames.append(frame)
    assert len(frames) == 3


@pytest.mark.parametrize("head, words", [
    (b"\x00\x00\x00\x00", "at least 5"),
    (b"\xff\xff\xff\x7f", "over the"),
    (b"\x16\x03\x01\x02\x00", "TLS"),
    (b"GET /metrics HTTP/1.1\r\n", "text"),
])
def test_bad_lengths_are_protocol_errors(head, words):
    reader = FrameReader()
    reader.feed(head)
    with pytest.raises(ProtocolError, match=words):
        reader.next_frame()


def test_a_document_must_end_with_zero():
    bad = bytearray(encode({"a": 1}))
    bad[-1] = 7
    reader = FrameReader()
    reader.feed(bytes(bad))
    with pytest.raises(ProtocolError, match="0x00"):
        reader.next_frame()


def test_invalid_bson_inside_a_good_frame():
    frame = b"\x0c\x00\x00\x00\x99x\x00\x01\x00\x00\x00\x00"
    with pytest.raises(ProtocolError, match="not valid BSON"):
        decode_frame(frame)


def test_encode_limit():
    with pytest.raises(DocumentTooLargeError):
        encode_message({"data": b"x" * 200}, max_size=100)


def test_next_frames_gives_every_whole_document_at_once():
    docs = [{"id": i, "ok": 1, "result": "x" * i} for i in range(5)]
    data = b"".join(encode(d) for d in docs)
    reader = FrameReader()
    reader.feed(data[:-3])  # the last one is not whole yet
    first = reader.next_frames()
    assert decode_frames(first) == docs[:4] and [decode_frame(f) for f in split_frames(first)] == docs[:4]
    assert reader.next_frames() == b""
    reader.feed(data[-3:])
    assert decode_frames(reader.next_frames()) == docs[4:]


def test_next_frames_stops_before_a_bad_length_and_raises_it_next():
    good = encode({"id": 1})
    reader = FrameReader()
    reader.feed(good + (3).to_bytes(4, "little") + b"\x00" * 8)
    assert reader.next_frames() == good
    with pytest.raises(ProtocolError):
        reader.next_frames()


def test_decode_frames_refuses_what_is_not_bson():
    bad = bytearray(encode({"id": 1, "s": "abc"}))
    bad[4] = 0x7F  # an element type BSON does not have
    with pytest.raises(ProtocolError):
        decode_frames(encode({"id": 0}) + bytes(bad))


def test_a_big_message_is_not_kept_once_taken():
    """A connection's reader let go of nothing until the next message came: each idle
    connection could hold a copy of the last message it received, up to 16 MiB."""
    import tracemalloc

    big = encode({"blob": b"x" * (4 << 20)})
    reader = FrameReader()
    tracemalloc.start()
    try:
        reader.feed(big)
        before = tracemalloc.get_traced_memory()[0]
        frame = reader.next_frame()
        assert frame == big
        del frame
        assert tracemalloc.get_traced_memory()[0] < before - (3 << 20)  # the buffer's 4 MiB went
        reader.feed(big + big[:10])
        assert len(reader.next_frames()) == len(big) and reader.buffered == 10  # the rest kept
        assert reader.next_frame() is None
    finally:
        tracemalloc.stop()
