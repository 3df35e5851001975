"""Users for the server tests, and a helper to add them to a data directory."""

from __future__ import annotations

from hoarddb.server.users import UserStore

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
