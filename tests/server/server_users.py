"""Users for the server tests, a helper to add them to a data directory, and one to log in on a raw socket."""

from __future__ import annotations

from hoarddb.server.users import UserStore
from hoarddb.wire import scram

#: Test users: name -> (password, roles). Iterations are RFC 7677's minimum, to keep tests quick.
USERS = {
    "admin": ("admin-pw", ["admin"]),
    "reader": ("reader-pw", ["read:app"]),
    "writer": ("writer-pw", ["readWrite:app"]),
    "other": ("other-pw", ["readWrite:other"]),
    "dba": ("dba-pw", ["dbAdmin:app"]),
}


def add_users(data):
    store = UserStore(data)
    for name, (password, roles) in USERS.items():
        store.add(name, password, roles, iterations=4096)
    return store


def login(raw, user, password) -> None:
    """Say hello and log in with SCRAM on a RawConnection, as a real client would."""
    raw.hello()
    client = scram.ScramClient(user, password)
    raw.send_doc({"id": 1, "op": "auth_start", "mechanism": "SCRAM-SHA-256", "payload": client.first()})
    first = raw.recv_doc()
    raw.send_doc({"id": 2, "op": "auth_continue", "payload": client.final(first["result"]["payload"])})
    assert raw.recv_doc()["ok"] == 1
