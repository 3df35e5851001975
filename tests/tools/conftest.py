"""Fixtures for the ingest, dump and restore tests: a database without a background sweeper."""

from __future__ import annotations

import pytest

import hoarddb


@pytest.fixture
def client(tmp_path):
    """An embedded hoardDB whose TTL sweeper runs only when a test calls sweep_ttl()."""
    with hoarddb.open(tmp_path / "data", ttl_sweep_seconds=0) as c:
        yield c

