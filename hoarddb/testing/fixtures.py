"""pytest fixtures for code that talks to a hoardDB server; import them into a conftest.py:

    from hoarddb.testing.fixtures import hoarddb_server, hoarddb_remote_client  # noqa: F401

``hoarddb_server`` is one in-process server per module (insecure, on 127.0.0.1, a
free port); ``hoarddb_remote_client`` a client connected to it. Tests sharing the
server should use database names of their own (``unique_db`` gives one).
"""

from __future__ import annotations

import itertools

import pytest

import hoarddb

from .server import ServerThread

_names = itertools.count(1)


@pytest.fixture(scope="module")
def hoarddb_server(tmp_path_factory):
    """A running insecure server for this test module."""
    with ServerThread(tmp_path_factory.mktemp("hoarddb-server") / "data", insecure=True) as server:
        yield server


@pytest.fixture
def hoarddb_remote_client(hoarddb_server):
    """A client of ``hoarddb_server``, closed after the test."""
    client = hoarddb.connect(hoarddb_server.url())
    yield client
    client.close()


@pytest.fixture
def unique_db() -> str:
    """A database name no other test of this session uses."""
    return f"t{next(_names)}"
