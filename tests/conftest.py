"""Fixtures shared by the whole suite: a fresh embedded database in a temporary directory."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

import hoarddb

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("slow", max_examples=500, deadline=None)
settings.load_profile("slow" if os.environ.get("HOARDDB_SLOW") == "1" else "ci")


@pytest.fixture
def client(tmp_path):
    """An open embedded hoardDB in a fresh data directory."""
    with hoarddb.open(tmp_path / "data") as c:
        yield c


@pytest.fixture
def db(client):
    """The database ``app`` of a fresh embedded hoardDB."""
    return client["app"]
