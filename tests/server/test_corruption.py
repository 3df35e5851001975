"""A damaged data directory served: where a server differs from an embedded open; and the
server's own files (its users, its TLS pair), which stop its start.

A server is one process for every bucket, so what embedded would be one failed call is
there everybody's: a crash in LMDB's reader (a data.mdb cut short under its pages was a
SIGBUS of the whole server) takes every bucket down with it. And a server opens its data
with sync off (group commit), where an opener repairs what a power cut may leave: damage
that a clean shutdown rules out must still be refused, not cut away. tests/test_corruption.py
holds the table of files and damage, embedded; these run a real server in a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import hoarddb
from hoarddb import errors
from hoarddb.server.tls import cert_fingerprint, ensure_self_signed, make_self_signed
from hoarddb.server.users import UserStore
from hoarddb.testing import ServerProcess, ServerThread
from hoarddb.values.codec import decode, encode

from ..test_corruption import BUCKETS, build, corrupt_document, damage, read
from .server_users import add_users

DAMAGED = {  # bucket -> (file, damage, what the error names)
    "H": ("app/H/kv/data.mdb", "truncate-half", "data.mdb"),  # before: SIGBUS, the server gone
    "Q": ("app/Q/seg_00002.fifo", "flip-middle", "seg_00002.fifo"),  # before: cut (sync off), entries lost
    "B": ("app/B/_index.bson", "truncate-half", "_index.bson"),  # before: cut, and blob files deleted
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server on a built directory with three buckets damaged (and T's documents undecodable)."""
    base = tmp_path_factory.mktemp("served")
    data = base / "data"
    build(data)
    with hoarddb.open(data) as c:
        expected = {name: read(c, name) for name in [*BUCKETS, "C"]}
    for rel, how, _ in DAMAGED.values():
        damage(data, rel, how)
    corrupt_document(data / "app" / "T" / "kv" / "data.mdb", b"t" * 50)
    with ServerProcess(data) as server:
        yield server, expected


def test_damaged_buckets_answer_corrupt_data_and_the_server_serves_the_rest(served):
    server, expected = served
    with hoarddb.connect(server.url(), timeout=20) as c:
        for bucket, (_rel, _how, named) in DAMAGED.items():
            for _ in range(2):
                with pytest.raises(errors.CorruptDataError) as caught:
                    read(c, bucket)
                assert named in caught.value.message and "restore" in caught.value.message.lower()
        for name in [*BUCKETS, "C"]:
            if name not in DAMAGED and name != "T":
                assert read(c, name) == expected[name], name
        c["app"].Q2.push({"n": 1000})  # and writes go on
        c["ctl"].C.insert({"_id_": "new"})
    assert server.proc.poll() is None, server.log_text()


def test_a_document_that_does_not_decode_is_corrupt_data_not_an_internal_error(served):
    server, _expected = served
    with hoarddb.connect(server.url(), timeout=20) as c:
        with pytest.raises(errors.CorruptDataError, match="app/T"):
            c["app"].T.list(limit=1000)


def test_a_queue_a_server_closed_cleanly_refuses_damage_instead_of_cutting_it(tmp_path):
    """A server writes with sync off; its clean shutdown still flushes and marks every queue
    closed, so damage found at the next start is refused (before: cut as a power cut's)."""
    data = tmp_path / "data"
    with ServerProcess(data) as server:
        with hoarddb.connect(server.url(), timeout=20) as c:
            q = c["app"].create_bucket("Q", type="fifo", segment_size=4096)
            q.batch_push([{"n": i, "pad": "q" * 100} for i in range(80)])
            c["app"].create_bucket("Other", type="lifo").push({"n": 1})
    assert server.proc.returncode == 0
    segments = sorted((data / "app" / "Q").glob("seg_*.fifo"))
    assert len(segments) == 3
    damage(data, f"app/Q/{segments[-1].name}", "flip-start")
    with ServerProcess(data) as server:
        with hoarddb.connect(server.url(), timeout=20) as c:
            with pytest.raises(errors.CorruptDataError, match=segments[-1].name):
                c["app"].Q.length()
            assert c["app"].Other.list() == [{"n": 1}]
    assert len(list((data / "app" / "Q").glob("seg_*.fifo"))) == 3  # nothing was cut


# -- the server's own files: DATA/_users/users.bson and DATA/tls/ ---------------------------------
#
# Not buckets: without them nobody can log in or connect, so a damaged one stops the start with
# one line naming it (CORRUPT_DATA), instead of a traceback, or a failure at every login.


def refused_start(data, *args: str) -> str:
    """Start a secure server (the CLI, in a child) that must refuse to start; what it printed."""
    server = ServerProcess(data, *args, insecure=False)
    try:
        server.start()
    except RuntimeError:
        text = server.log_text()
        assert server.proc.returncode == 1, text
        lines = text.strip().splitlines()
        assert len(lines) == 1 and " ERROR " in lines[0] and "Traceback" not in text, text
        return lines[0]
    finally:
        server.stop()
    pytest.fail(f"the server started:\n{server.log_text()}")


def users_data(base):
    data = base / "data"
    add_users(data)
    return data, data / "_users" / "users.bson"


def flip_in(path, word: bytes) -> None:
    """Change the last letter of ``word`` where it stands in the file (a field's name)."""
    raw = bytearray(path.read_bytes())
    at = raw.index(word) + len(word) - 1
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("how", ["truncate-half", "flip-field-name"])
def test_a_damaged_users_file_stops_the_start_with_one_line(tmp_path, how):
    """Before: a cut file stopped the start with a bson.errors.InvalidBSON traceback; a changed
    byte (a field's name) started, then failed inside SCRAM at every login with a traceback,
    and the client was told the server did not answer as a hoardDB server."""
    data, users = users_data(tmp_path)
    if how == "truncate-half":
        os.truncate(users, users.stat().st_size // 2)
    else:
        flip_in(users, b"stored_key")
    before = users.read_bytes()
    line = refused_start(data)
    assert "users.bson is damaged" in line and "Restore it from a backup" in line
    assert "hoarddb user add" in line and f"--data {data}" in line
    with pytest.raises(errors.CorruptDataError, match="users.bson") as caught:
        UserStore(data).users()
    assert caught.value.code == 18
    assert users.read_bytes() == before  # nothing was changed
    env = dict(os.environ, HOARDDB_PASSWORD="pw")
    result = subprocess.run([sys.executable, "-m", "hoarddb.cli", "user", "add", "ann", "--role", "admin",
                             "--data", str(data), "--iterations", "4096"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 1 and "users.bson is damaged" in result.stderr
    assert "Traceback" not in result.stderr and users.read_bytes() == before


WRONG_SHAPES = {  # what is changed in the file's document -> what the error names
    "no credentials": (lambda d: d["users"][0].pop("credentials"), "credentials"),
    "no stored_key": (lambda d: d["users"][0]["credentials"].pop("stored_key"), "credentials"),
    "iterations as text": (lambda d: d["users"][0]["credentials"].update(iterations="4096"), "credentials"),
    "a short server_key": (lambda d: d["users"][0]["credentials"].update(server_key=b"k" * 31), "credentials"),
    "roles not a list": (lambda d: d["users"][0].update(roles="admin"), "roles"),
    "an unknown role": (lambda d: d["users"][0].update(roles=[{"role": "root"}]), "not a role"),
    "a role without its db": (lambda d: d["users"][0].update(roles=[{"role": "read"}]), "not a role"),
    "a name of the wrong type": (lambda d: d["users"][0].update(name=7), "name"),
    "no created": (lambda d: d["users"][0].pop("created"), "created"),
    "users not a list": (lambda d: d.update(users={"admin": d["users"][0]}), "'users'"),
    "a second admin": (lambda d: d["users"].append(dict(d["users"][0])), "two users"),
    "format 2": (lambda d: d.update(format=2), "format"),
}


@pytest.mark.parametrize("shape", list(WRONG_SHAPES))
def test_a_users_record_of_the_wrong_shape_is_refused_when_read_not_at_login(tmp_path, shape):
    """A record that decodes but lacks a field or has one of the wrong type is damage when the
    file is read (before: found at a login, where SCRAM failed with a traceback)."""
    data, users = users_data(tmp_path)
    doc = decode(users.read_bytes())
    change, named = WRONG_SHAPES[shape]
    change(doc)
    users.write_bytes(encode(doc))
    with pytest.raises(errors.CorruptDataError, match="users.bson is damaged") as caught:
        UserStore(data).get("reader")
    assert named in caught.value.message
    if shape == "no stored_key":  # and a server refuses to start on it (in this process)
        with pytest.raises(errors.CorruptDataError, match="users.bson"):
            ServerThread(data).start()


def test_a_users_file_damaged_under_a_running_server_refuses_logins_and_says_why(tmp_path, caplog):
    """The server rereads the file when it changes: damaged then, every login is refused
    (AUTH_FAILED, as for a wrong password) and the server logs why, once; repaired, logins work.
    Before: the damage raised inside the login and the client was cut off (PROTOCOL_ERROR)."""
    data, users = users_data(tmp_path)
    good = users.read_bytes()
    with ServerThread(data) as server:
        with hoarddb.connect(server.url("admin", "admin-pw")):
            pass
        temp = users.with_name("damaged")
        temp.write_bytes(good[:len(good) // 2])
        os.replace(temp, users)
        with caplog.at_level("ERROR", logger="hoarddb.server"):
            for _ in range(2):
                with pytest.raises(errors.AuthFailedError):
                    hoarddb.connect(server.url("admin", "admin-pw"))
        damaged = [r for r in caplog.records if "users.bson is damaged" in r.getMessage()]
        assert len(damaged) == 1 and "every login is refused" in damaged[0].getMessage()
        temp.write_bytes(good)
        os.replace(temp, users)
        with hoarddb.connect(server.url("admin", "admin-pw")):
            pass


def test_damaged_tls_files_stop_the_start_with_one_line(tmp_path):
    """Before: "[SSL] PEM lib" and no advice (or, for damage OpenSSL reads past, a traceback
    from the certificate's dates)."""
    data, _users = users_data(tmp_path)
    cert, key, _ = ensure_self_signed(data)
    good = {cert: cert.read_bytes(), key: key.read_bytes()}
    _other_cert, other_key = make_self_signed()
    damages = [  # (file, its damaged bytes, what the line says)
        (cert, good[cert][:len(good[cert]) // 2], "server.crt does not read as a PEM certificate"),
        (key, good[key].replace(b"\n", b"\n!", 2), "server.key does not read as a PEM private key"),
        (key, other_key, "server.key is not the key of the certificate"),
    ]
    for path, damaged, says in damages:
        path.write_bytes(damaged)
        line = refused_start(data)
        assert says in line, line
        assert "Restore server.crt and server.key together" in line and "delete both" in line
        assert "pin the old fingerprint" in line
        assert path.read_bytes() == damaged  # nothing was replaced
        path.write_bytes(good[path])
    with ServerProcess(data, insecure=False) as server:  # whole again: it starts
        assert server.fingerprint == cert_fingerprint(cert)
