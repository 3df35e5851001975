"""The client's core without sockets: bytes in, answers filed by id, errors, the retry rule, streams, uploads.

The handshake is held against the server's own state machine (hoarddb.wire's
ServerProtocol) in memory; answers are fed as the bytes a server sends.
"""

from __future__ import annotations

import io

import pytest

from hoarddb import operations
from hoarddb.client.core import (ClientCore, Stream, check_request, may_resend, result, retryable, stream_of,
                                 unanswered, upload_source)
from hoarddb.errors import (BadValueError, ClosedError, ConnectionError_, DuplicateKeyError, InvalidArgumentError,
                            NotFoundError, ProtocolError, HoardTimeoutError)
from hoarddb.wire.framing import decode_frame, encode_message, split_frames
from hoarddb.wire.messages import CHUNK_SIZE, INLINE_BLOB_MAX
from hoarddb.wire.protocol import Send, ServerProtocol


def ready_core(**kwargs) -> ClientCore:
    """A core logged in to an in-memory server without authentication."""
    core = ClientCore(**kwargs)
    server = ServerProtocol(server_info={"version": "test"})
    events = server.receive_data(core.start())
    assert not core.ready
    out = core.handshake(b"".join(e.data for e in events if isinstance(e, Send)))
    assert out == b"" and core.ready and core.server_info["version"] == "test"
    return core


def answer(request_id, **fields) -> bytes:
    return encode_message({"id": request_id, **fields})


def test_requests_get_increasing_ids_and_are_encoded_as_the_server_reads_them():
    core = ready_core()
    first, data = core.request({"op": "get", "db": "a", "bucket": "B", "args": {"key": "k"}})
    assert decode_frame(data) == {"id": first, "op": "get", "db": "a", "bucket": "B", "args": {"key": "k"}}
    ids, data = core.requests([{"op": "length", "db": "a", "bucket": "Q", "args": {}}] * 3)
    assert list(ids) == [first + 1, first + 2, first + 3]
    assert [decode_frame(f)["id"] for f in split_frames(data)] == list(ids)
    chunk = decode_frame(core.chunk(first, b"xyz", end=True))
    assert chunk == {"id": first, "op": "chunk", "data": b"xyz", "end": True}


def test_answers_are_filed_by_id_in_any_order_and_split_anywhere():
    core = ready_core()
    one, _ = core.request({"op": "get"})
    two, _ = core.request({"op": "get"})
    data = answer(two, ok=1, result=2) + answer(one, ok=1, result=1)
    assert core.next(one) is None
    for i in range(0, len(data), 7):  # a few bytes at a time: frames cut anywhere
        assert core.feed(data[i:i + 7]) is None
    assert core.next(one, last=True) == {"id": one, "ok": 1, "result": 1}
    assert core.next(two, last=True)["result"] == 2
    assert core.answers == {} and core.next(one) is None


def test_an_answer_nobody_waits_for_is_dropped():
    core = ready_core()
    request_id, _ = core.request({"op": "count"})
    core.finish(request_id)  # its caller was interrupted
    core.feed(answer(request_id, ok=1, result=3) + answer(999, ok=1, result=0))
    assert core.answers == {} and not core.has_message(request_id)


def test_the_servers_goodbye_is_an_error_after_the_answers_before_it():
    core = ready_core()
    request_id, _ = core.request({"op": "get"})
    late, _ = core.request({"op": "get"})
    goodbye = core.feed(answer(request_id, ok=1, result="kept")
                        + answer(None, ok=0, code=26, codeName="SHUTTING_DOWN", message="the server is stopping")
                        + answer(late, ok=1, result="never read"))
    assert goodbye is not None and goodbye.code == 26 and goodbye.server_closed
    assert core.next(request_id, last=True)["result"] == "kept"
    assert core.next(late) is None


def test_bytes_that_are_not_messages_raise_protocol_error():
    core = ready_core()
    with pytest.raises(ProtocolError):
        core.feed(b"GET / HTTP/1.1\r\n\r\n")


def test_a_request_that_nobody_reads_spools_past_a_few_messages_in_order():
    core = ready_core(arrived=lambda request_id: arrivals.append(request_id))
    arrivals: list = []
    stream_id, _ = core.request({"op": "stream"})
    total = ClientCore.IN_MEMORY * 3
    messages = [answer(stream_id, ok=1, chunk=bytes([n]) * 10) for n in range(total)]
    core.feed(b"".join(messages[:ClientCore.IN_MEMORY + 2]))  # decoded together: the overflow is spooled
    core.feed(b"".join(messages[ClientCore.IN_MEMORY + 2:]))  # spooling: these stay undecoded
    assert stream_id in core.spools and len(core.answers[stream_id]) == ClientCore.IN_MEMORY
    assert arrivals == [stream_id] * total
    taken = []
    while (message := core.next(stream_id)) is not None:
        taken.append(message["chunk"][0])
    assert taken == list(range(total))
    core.finish(stream_id)
    assert core.spools == {} and core.answers == {}


def test_result_maps_an_error_answer_to_its_class_and_code():
    assert result({"id": 4, "ok": 1, "result": [1]}) == {"ok": 1, "result": [1]}
    with pytest.raises(DuplicateKeyError) as e:
        result({"id": 4, "ok": 0, "code": 15, "codeName": "DUPLICATE_KEY", "message": "taken"})
    assert e.value.code == 0x0F and e.value.message == "taken"
    with pytest.raises(NotFoundError):
        result({"id": 5, "ok": 0, "code": 16, "codeName": "NOT_FOUND", "message": "no"})
    with pytest.raises(InvalidArgumentError):
        check_request({"db": "a"})


def test_the_retry_rule():
    lost, silent = ConnectionError_("lost"), HoardTimeoutError("silent")
    assert may_resend(lost, False, "get")
    assert not may_resend(lost, True, "get")  # a fresh connection that fails: the server is down
    assert not may_resend(lost, False, "insert")  # a write is never sent twice
    assert not may_resend(silent, False, "get")  # a server that fell silent is not asked again
    silent.server_closed = True  # ... unless it said it closed the connection
    assert may_resend(silent, False, "get")
    for name, op in operations.VERBS.items():
        assert retryable(name) is (not op.write), name
    assert retryable("list_databases") and not retryable("create_bucket")


def test_unanswered_says_whether_a_write_may_have_been_applied():
    write = unanswered(ConnectionError_("lost"), "insert", True)
    assert isinstance(write, ConnectionError_) and write.outcome_unknown
    assert "may or may not have been applied" in write.message
    read = unanswered(HoardTimeoutError("silent"), "get", False, closed=True)
    assert isinstance(read, ClosedError) and read.outcome_unknown is False and "changed nothing" in read.message


def test_a_stream_is_recut_to_its_chunk_size():
    request = {"op": "stream", "args": {"id": "x", "chunk_size": 4}}
    assert stream_of(request, {"ok": 1, "result": None}) is None
    assert stream_of({"op": "get"}, {"ok": 1, "chunk": b""}) is None
    stream = stream_of(request, {"ok": 1, "chunk": b"abcdef"})
    assert isinstance(stream, Stream)
    assert stream.step({"ok": 1, "chunk": b"abcdef"}) == ([b"abcd"], False)
    assert stream.step({"ok": 1, "chunk": b"ghi"}) == ([b"efgh"], False)
    assert stream.step({"ok": 1, "end": True}) == ([b"i"], True)
    with pytest.raises(NotFoundError):
        Stream(4).step({"ok": 0, "code": 16, "codeName": "NOT_FOUND", "message": "no such blob"})


def test_an_upload_is_chunks_then_the_end_or_an_abort_once_refused():
    core = ready_core()
    data = b"x" * (CHUNK_SIZE * 2 + 5)
    frames = [decode_frame(f) for f in core.upload(7, io.BytesIO(data), lambda: False)]
    assert [len(f["data"]) for f in frames] == [CHUNK_SIZE, CHUNK_SIZE, 5, 0]
    assert frames[-1]["end"] and not any(f.get("abort") for f in frames)
    refused = [decode_frame(f) for f in core.upload(7, io.BytesIO(data), lambda: True)]
    assert len(refused) == 2 and refused[-1]["abort"] and refused[-1]["end"]


def test_which_puts_upload_their_data():
    small = {"op": "put", "db": "a", "bucket": "B", "args": {"doc": b"x" * 10}}
    assert upload_source(small) is None
    big = b"x" * (INLINE_BLOB_MAX + 1)
    request, source = upload_source({"op": "put", "db": "a", "bucket": "B", "args": {"doc": {"data": big, "n": 1}}})
    assert source is big and request["args"] == {"doc": {"n": 1}}
    request, source = upload_source({"op": "put", "args": {"doc": io.BytesIO(b"abc")}})
    assert request["args"] == {} and source.read() == b"abc"
    with pytest.raises(BadValueError):
        upload_source({"op": "put", "args": {"doc": io.StringIO("text")}})
