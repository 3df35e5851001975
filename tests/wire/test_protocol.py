"""The state machines, without sockets: hello first, authenticate before anything, then requests."""

from __future__ import annotations

import pytest

from hoarddb.errors import AuthFailedError, ProtocolError
from hoarddb.server.auth import Authenticator
from hoarddb.server.users import UserStore
from hoarddb.values.codec import decode_all, encode
from hoarddb.wire.protocol import Chunk, ClientProtocol, Close, Request, Send, ServerProtocol, State


def answers(events):
    return [d for e in events if isinstance(e, Send) for d in decode_all(e.data)]


def hello(i=1):
    return encode({"id": i, "op": "hello", "protocol": 1})


@pytest.fixture
def authenticator(tmp_path):
    users = UserStore(tmp_path)
    users.add("ann", "pw-ann", ["readWrite:app"], iterations=4096)
    return Authenticator(users)


def test_insecure_server_is_ready_after_hello():
    server = ServerProtocol()
    out = answers(server.receive_data(hello()))
    assert out[0]["ok"] == 1 and out[0]["result"]["auth"] == []
    assert server.state is State.READY
    events = server.receive_data(encode({"id": 2, "op": "push", "db": "a", "bucket": "Q", "args": {}}))
    assert events == [Request(2, {"id": 2, "op": "push", "db": "a", "bucket": "Q", "args": {}})]


def test_first_message_must_be_hello():
    server = ServerProtocol()
    events = server.receive_data(encode({"id": 1, "op": "find"}))
    assert answers(events)[0]["codeName"] == "PROTOCOL_ERROR"
    assert isinstance(events[-1], Close) and server.state is State.CLOSED
    assert server.receive_data(hello()) == []


def test_protocol_version_is_checked():
    server = ServerProtocol()
    events = server.receive_data(encode({"id": 1, "op": "hello", "protocol": 99}))
    assert "protocol 1" in answers(events)[0]["message"] and server.state is State.CLOSED


def test_requests_before_login_are_unauthorized(authenticator):
    server = ServerProtocol(authenticator=authenticator)
    server.receive_data(hello())
    assert server.state is State.AUTHENTICATING
    out = answers(server.receive_data(encode({"id": 2, "op": "list_databases"})))
    assert out == [{"id": 2, "ok": 0, "code": 28, "codeName": "UNAUTHORIZED", "message": out[0]["message"]}]
    chunk = server.receive_data(encode({"id": 3, "op": "chunk", "data": b"x"}))
    assert answers(chunk)[0]["codeName"] == "UNAUTHORIZED"
    assert server.state is State.AUTHENTICATING


def drive(client: ClientProtocol, server: ServerProtocol):
    data = client.start()
    while client.state is not State.READY:
        events = server.receive_data(data)
        for e in events:
            if isinstance(e, Send):
                client.receive_data(e.data)
        data = client.data_to_send()
        if not data and client.state is not State.READY:
            raise AssertionError("stuck")


def test_full_login(authenticator):
    server = ServerProtocol(authenticator=authenticator)
    client = ClientProtocol("ann", "pw-ann")
    drive(client, server)
    assert server.state is State.READY and server.principal.user == "ann"
    assert client.roles == [{"role": "readWrite", "db": "app"}]
    request_id, data = client.request({"op": "length", "db": "app", "bucket": "Q"})
    assert server.receive_data(data)[0].id == request_id


def test_failed_login_is_delayed_and_limited(authenticator):
    server = ServerProtocol(authenticator=authenticator, auth_failure_delay=0.5, max_auth_attempts=2)
    for attempt in range(2):
        client = ClientProtocol("ann", "wrong")
        client.state = State.HANDSHAKE
        if attempt == 0:
            for e in server.receive_data(client.start()):
                client.receive_data(e.data)
        else:
            client._scram = __import__("hoarddb.wire.scram", fromlist=["x"]).ScramClient("ann", "wrong")
            client.state = State.AUTHENTICATING
            client._send_handshake({"op": "auth_start", "mechanism": "SCRAM-SHA-256", "payload": client._scram.first()})
        for e in server.receive_data(client.data_to_send()):
            client.receive_data(e.data)
        events = server.receive_data(client.data_to_send())
        sends = [e for e in events if isinstance(e, Send)]
        assert sends[0].delay == 0.5
        with pytest.raises(AuthFailedError):
            client.receive_data(sends[0].data)
    assert isinstance(events[-1], Close)


def test_client_without_credentials_against_an_auth_server(authenticator):
    server = ServerProtocol(authenticator=authenticator)
    client = ClientProtocol()
    with pytest.raises(AuthFailedError, match="requires authentication"):
        for e in server.receive_data(client.start()):
            client.receive_data(e.data)


def test_not_a_request():
    server = ServerProtocol()
    server.receive_data(hello())
    out = answers(server.receive_data(encode({"op": "find"}) + encode({"id": 5, "op": 3}) + encode({"id": [1]})))
    assert [a["codeName"] for a in out] == ["PROTOCOL_ERROR"] * 3
    assert [a["id"] for a in out] == [None, 5, None]
    assert server.state is State.READY


def test_chunks_and_handshake_ops_in_ready():
    server = ServerProtocol()
    server.receive_data(hello())
    events = server.receive_data(encode({"id": 9, "op": "chunk", "data": b"abc", "end": True}))
    assert events == [Chunk(9, b"abc", True, False)]
    assert answers(server.receive_data(hello(10)))[0]["codeName"] == "PROTOCOL_ERROR"


def test_garbage_closes():
    server = ServerProtocol()
    events = server.receive_data(b"\x05\x00\x00\x00\x01")
    assert isinstance(events[-1], Close)
    server = ServerProtocol()
    server.receive_data(hello())
    events = server.receive_data(b"\x00" * 16)
    assert isinstance(events[-1], Close) and answers(events)[0]["codeName"] == "PROTOCOL_ERROR"


def test_client_sees_a_server_notice():
    client = ClientProtocol()
    client.start()
    with pytest.raises(ProtocolError):
        client.receive_data(encode({"id": None, "ok": 0, "code": 31, "codeName": "PROTOCOL_ERROR", "message": "x"}))


def test_before_login_messages_are_small(authenticator):
    """A peer that has not logged in cannot make the server hold a 16 MiB message for it:
    a big length is refused at once, before its bytes arrive; after login it is accepted."""
    import struct
    big = struct.pack("<i", 1024 * 1024) + b"\x00" * 100
    for server, before in ((ServerProtocol(), b""), (ServerProtocol(authenticator=authenticator), hello())):
        server.receive_data(before)
        events = server.receive_data(big)
        (answer,) = answers(events)
        assert answer["codeName"] == "PROTOCOL_ERROR" and answer["id"] is None
        assert "logged in" in answer["message"] and isinstance(events[-1], Close)
    server = ServerProtocol()
    server.receive_data(hello())
    assert server.receive_data(big) == []  # READY: a message of 1 MiB is being received
    assert server.state is State.READY


def test_an_answer_whose_id_leaves_no_room_is_still_an_answer():
    """An id that nearly fills a message: the answer is over the limit, and so would its
    error be; encode gives an error (without the id) instead of raising into the server."""
    from hoarddb.wire.messages import MAX_MESSAGE_SIZE
    server = ServerProtocol()
    answer = decode_all(server.encode({"id": "i" * (MAX_MESSAGE_SIZE - 100), "ok": 1, "result": "x" * 1000}))[0]
    assert answer["codeName"] == "DOCUMENT_TOO_LARGE" and answer["id"] is None


def _events_one_read_and_one_by_one(make, messages):
    """The events of ``messages`` fed in one read, and fed one message a read (Sends by their bytes)."""
    def plain(events):
        return [(type(e).__name__, e.data, e.delay) if isinstance(e, Send) else e for e in events]
    together = plain(make().receive_data(b"".join(messages)))
    server, apart = make(), []
    for message in messages:
        apart += plain(server.receive_data(message))
    return together, apart


def test_messages_read_together_make_the_events_they_make_one_by_one(authenticator):
    """A pipeline's messages are decoded in one call and plain requests made into events
    without _message: whatever they hold, the events are those of one message at a time."""
    big = {"id": 3, "op": "insert", "db": "a", "bucket": "H", "args": {"doc": {"pad": "x" * 20_000}}}
    messages = [hello(), encode(big), encode({"id": "s", "op": "pop", "db": "a", "bucket": "Q", "args": {}}),
                encode({"id": True, "op": "pop"}), encode({"id": 4.5, "op": "pop"}), encode({"op": "pop"}),
                encode({"id": 5, "op": 7}), encode({"id": 6}), encode({"id": 7, "op": "chunk", "data": b"z"}),
                encode({"id": 8, "op": "chunk", "data": "not binary"}), hello(9),
                encode({"id": 10, "op": "auth_start", "mechanism": "SCRAM-SHA-256", "payload": "n,,n=ann,r=abc"}),
                encode({"id": 2**40, "op": "get", "db": "a", "bucket": "H", "args": {"key": "k"}})]
    together, apart = _events_one_read_and_one_by_one(ServerProtocol, messages)
    assert together == apart and len(apart) == len(messages)  # one event each
    together, apart = _events_one_read_and_one_by_one(lambda: ServerProtocol(authenticator=authenticator), messages)
    assert together == apart and isinstance(apart[-1], Close)  # the big one, before login: refused, closed
    together, apart = _events_one_read_and_one_by_one(ServerProtocol, [encode({"id": 1, "op": "pop"})] + messages)
    assert together == apart and isinstance(apart[-1], Close)  # no hello first: refused, closed, the rest unread


def test_a_message_that_is_not_bson_among_others_closes_after_those_before_it():
    bad = bytearray(encode({"id": 3, "op": "pop", "s": "abc"}))
    bad[4] = 0x7F  # an element type BSON does not have
    messages = [hello(), encode({"id": 2, "op": "pop"}), bytes(bad), encode({"id": 4, "op": "pop"})]
    together, apart = _events_one_read_and_one_by_one(ServerProtocol, messages)
    assert together == apart
    assert [type(e) for e in apart] == [tuple, Request, tuple, Close]  # hello's answer, the pop, the refusal
    assert together[1] == Request(2, {"id": 2, "op": "pop"})
