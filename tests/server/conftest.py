"""Servers for the server tests: secure ones (TLS and users) and insecure ones, in this process."""

from __future__ import annotations

import pytest

from .server_users import add_users
from hoarddb.testing import ServerThread

@pytest.fixture(scope="module")
def secure_server(tmp_path_factory):
    """TLS with a generated certificate, and the USERS."""
    data = tmp_path_factory.mktemp("secure") / "data"
    add_users(data)
    with ServerThread(data, auth_failure_delay=0.3) as server:
        yield server


@pytest.fixture(scope="module")
def insecure_server(tmp_path_factory):
    with ServerThread(tmp_path_factory.mktemp("insecure") / "data", insecure=True) as server:
        yield server
