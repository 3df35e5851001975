"""Connection options: one set for URL, keywords and flags; clear errors when a server is not there."""

from __future__ import annotations

import re
import socket

import pytest

import hoarddb
from hoarddb.client import ConnectOptions
from hoarddb.errors import BadValueError, ConnectionError_, TimeoutError_, UnknownOptionError


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
        with pytest.raises(TimeoutError_, match="hoardDB server"):
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
    (5, {}, "a hoardDB URL is a string"),
])
def test_bad_option_values_are_refused_with_a_clear_error(url, overrides, words):
    with pytest.raises(BadValueError, match=re.escape(words)):
        ConnectOptions.from_url(url, **overrides)
    with pytest.raises(BadValueError, match=re.escape(words)):
        hoarddb.connect(url, **overrides)  # before any connection is tried


def test_good_option_values_still_bind():
    assert ConnectOptions.from_url("hoarddb://h:7071/", port="7072").port == 7072
    assert ConnectOptions.from_url("hoarddb://[::1]:7071/").address == "[::1]:7071"
    assert ConnectOptions.from_url("hoarddb://h/?timeout=0.5&connect_timeout=2").timeout == 0.5
