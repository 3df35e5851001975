"""Connection options: one set for URL, keywords and flags; clear errors when a server is not there."""

from __future__ import annotations

import re
import socket

import pytest

import hoarddb
from hoarddb.client import ConnectOptions
from hoarddb.errors import BadValueError, ConnectionError_, HoardTimeoutError, UnknownOptionError


def test_url_and_overrides(monkeypatch):
    monkeypatch.delenv("HOARDDB_PASSWORD", raising=False)
    o = ConnectOptions.from_url("hoarddb://ann:p%40ss@db.example:7080/?tls_fingerprint=" + "ab" * 32 + "&timeout=5")
    assert (o.host, o.port, o.user, o.password, o.timeout, o.insecure) == ("db.example", 7080, "ann", "p@ss", 5.0, False)
    assert ConnectOptions.from_url("hoarddb://h/?insecure=true").insecure
    assert ConnectOptions.from_url("hoarddb://h:1/", port=2).port == 2
    assert ConnectOptions.from_url(None).address == "127.0.0.1:7070"
    assert "p@ss" not in o.url()
    monkeypatch.setenv("HOARDDB_PASSWORD", "from-env")
    assert ConnectOptions.from_url("hoarddb://ann@h/").password == "from-env"


@pytest.mark.parametrize("url, error", [
    ("http://h/", BadValueError), ("hoarddb://h/?tls_fingerprint=nope", BadValueError),
    ("hoarddb://h/?bogus=1", UnknownOptionError), ("hoarddb://h/?insecure=maybe", BadValueError),
    ("hoarddb://h/?insecure=true&tls_ca=x", BadValueError), ("hoarddb://h/app", BadValueError),
])
def test_bad_urls(url, error):
    with pytest.raises(error):
        ConnectOptions.from_url(url)


def test_nothing_listening():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(ConnectionError_, match="is the server running"):
        hoarddb.connect(port=port, insecure=True)


def test_a_server_that_never_answers():
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(HoardTimeoutError, match="hoardDB server"):
            hoarddb.connect(port=listener.getsockname()[1], insecure=True, connect_timeout=0.5)
    finally:
        listener.close()


def test_restart_gives_a_clear_error_then_reconnects(tmp_path):
    from hoarddb.testing import ServerProcess

    server = ServerProcess(tmp_path / "data").start()
    try:
        c = hoarddb.connect(server.url())
        c["app"].create_bucket("Q", type="fifo")
        server.terminate()
        with pytest.raises(ConnectionError_, match="cannot connect|lost"):
            c["app"].Q.push({"n": 1})
        server.start()
        assert c["app"].Q.length() == 0
        c["app"].Q.push({"n": 2})
        assert c["app"].Q.pop() == {"n": 2}
        c.close()
    finally:
        server.stop()


@pytest.mark.parametrize("url, overrides, words", [
    ("hoarddb://h:0/", {}, "port must be 1..65535, got 0"),
    ("hoarddb://h/", {"port": True}, "port must be a whole number"),
    ("hoarddb://h/", {"port": 7070.5}, "port must be a whole number"),
    ("hoarddb://h/", {"port": "70x"}, "port must be a whole number"),
    ("hoarddb://h/?timeout=nan", {}, "timeout must be a finite number"),
    ("hoarddb://h/?timeout=inf", {}, "timeout must be a finite number"),
    ("hoarddb://h/?connect_timeout=nan", {}, "connect_timeout must be a finite number"),
    ("hoarddb://h/", {"timeout": float("nan")}, "timeout must be a finite number"),
    ("hoarddb://h/?timeout=0", {}, "timeout must be a finite number of seconds > 0"),
    ("hoarddb://[::1/", {}, "is not a valid URL"),
    ("hoarddb://h/?route=nearest", {}, "route must be one of owner, any"),
    ("hoarddb://h/", {"route": "ANY"}, "route must be one of owner, any"),
    (5, {}, "a hoardDB URL is a string"),
])
def test_bad_option_values_are_refused_with_a_clear_error(url, overrides, words):
    with pytest.raises(BadValueError, match=re.escape(words)):
        ConnectOptions.from_url(url, **overrides)
    with pytest.raises(BadValueError, match=re.escape(words)):
        hoarddb.connect(url, **overrides)  # before any connection is tried


def test_route_is_owner_unless_the_url_says_any():
    assert ConnectOptions.from_url("hoarddb://h/").route == "owner"
    any_ = ConnectOptions.from_url("hoarddb://h/?route=any&insecure=true")
    assert any_.route == "any" and any_.url() == "hoarddb://h:7070/?insecure=true&route=any"
    assert ConnectOptions.from_url(any_.url()) == any_


def test_good_option_values_still_bind():
    assert ConnectOptions.from_url("hoarddb://h:7071/", port="7072").port == 7072
    assert ConnectOptions.from_url("hoarddb://[::1]:7071/").address == "[::1]:7071"
    assert ConnectOptions.from_url("hoarddb://h/?timeout=0.5&connect_timeout=2").timeout == 0.5


@pytest.mark.parametrize("url, words", [
    ("hoarddb:h", "a hoardDB URL starts with hoarddb://"),
    ("hoarddb:/h", "a hoardDB URL starts with hoarddb://"),
    ("hoarddb://h h/", "host must be a host name"),
    ("hoarddb://%20/", "host must be a host name"),
    ("hoarddb://[::1]x/", "after an IPv6 address in brackets comes only :PORT"),
    ("hoarddb://h/?timeout=1&timeout=2", "timeout is given twice"),
    ("hoarddb://h/?host=other", "host is given twice"),
    ("hoarddb://h/?tls_ca=", "tls_ca has no value"),
    ("hoarddb://h/?tls_fingerprint=", "tls_fingerprint has no value"),
    ("hoarddb://h/?timeout", "timeout has no value"),
    ("hoarddb://h/#x", "a hoardDB URL has no #fragment"),
    ("hoarddb://:pw@h/", "a password without a user"),
])
def test_malformed_urls_are_refused_saying_what_is_accepted(url, words):
    """Regression: these were taken silently (a host with a space, the second of two timeouts, an
    empty CA file meaning the system's CAs, a password with no user...) or refused confusingly."""
    with pytest.raises(BadValueError, match=re.escape(words)):
        ConnectOptions.from_url(url)
    with pytest.raises(BadValueError, match=re.escape(words)):
        hoarddb.connect(url)  # before any connection is tried


def test_keyword_options_are_checked_as_the_url_is():
    with pytest.raises(BadValueError, match="host must be a host name"):
        hoarddb.connect(host="db example", insecure=True)
    with pytest.raises(BadValueError, match="a password without a user"):
        hoarddb.connect(password="secret", insecure=True)
    assert ConnectOptions.from_url("hoarddb://h/?insecure").insecure  # a bare flag is still true
    assert ConnectOptions.from_url("hoarddb://db-1.example.com.:7070/").host == "db-1.example.com."


@pytest.mark.parametrize("url", [
    "http://ann:s3cr3t-pw@h/", "hoarddb://ann:s3cr3t-pw@[::1/", "hoarddb://ann:s3cr3t-pw@h:x/",
    "hoarddb://ann:s3cr3t-pw@h/app", "hoarddb://ann:s3cr/t-pw@h/", "hoarddb://ann:s3cr3t#pw@h/",
    "hoarddb://ann:s3cr3t-pw@h/?bogus=1", "hoarddb:ann:s3cr3t-pw@h",
])
def test_a_password_is_never_in_an_error_about_its_url(url):
    """Regression: an error about a URL quoted it whole, password and all."""
    with pytest.raises((BadValueError, UnknownOptionError)) as e:
        ConnectOptions.from_url(url)
    assert "s3cr" not in str(e.value)
    if "@h" in url and url.startswith("hoarddb://"):
        assert "percent-encode" in str(e.value) or "options:" in str(e.value)


def test_a_password_is_never_in_a_repr_or_a_failed_login(tmp_path):
    """Regression: repr(ConnectOptions) showed the password (and so every log or traceback of it)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
    from server_users import add_users

    options = ConnectOptions.from_url("hoarddb://admin:s3cr3t-pw@h/?insecure=true")
    assert options.password == "s3cr3t-pw"
    assert "s3cr3t" not in repr(options) and "s3cr3t" not in options.url()
    add_users(tmp_path / "data")
    from hoarddb.errors import AuthFailedError
    from hoarddb.testing import ServerThread

    with ServerThread(tmp_path / "data", auth_failure_delay=0.05) as server:
        for user in ("admin", "nobody"):  # a wrong password, an unknown user: one answer
            with pytest.raises(AuthFailedError) as e:
                hoarddb.connect(server.url(user, "s3cr3t-pw"))
            assert e.value.code == 27 and "s3cr3t" not in str(e.value) + repr(e.value)
        with hoarddb.connect(server.url("admin", "admin-pw")) as client:
            assert "admin-pw" not in repr(client._executor.options)


def test_a_ca_file_that_cannot_be_read_is_a_bad_value_before_connecting(tmp_path):
    """Regression: a missing CA file was CONNECTION_ERROR ("the next call reconnects"), and came
    only after the connection was made."""
    import asyncio

    import hoarddb.aio

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]  # nothing listens: a connection attempt would say so instead
    s.close()
    (tmp_path / "not-a-cert.pem").write_text("hello")
    for path in (tmp_path / "missing.pem", tmp_path / "not-a-cert.pem"):
        with pytest.raises(BadValueError, match="tls_ca must be a PEM file"):
            hoarddb.connect(port=port, tls_ca=str(path))
        with pytest.raises(BadValueError, match="tls_ca must be a PEM file"):
            asyncio.run(hoarddb.aio.connect(port=port, tls_ca=str(path)))
