"""A real etcd for tests: :class:`EtcdProcess`, one member on free loopback ports (it lives in hoarddb/cluster/etcd.py,
which ``hoarddb cluster up`` uses too).

    >>> from hoarddb.testing.etcd import EtcdProcess
    >>> with EtcdProcess(tmp_path / "etcd") as etcd:
    ...     etcd.url            # 'etcd://127.0.0.1:41234'
"""

from ..cluster.etcd import EtcdNotFound, EtcdProcess, etcd_available, etcd_binary, free_port

__all__ = ["EtcdNotFound", "EtcdProcess", "etcd_available", "etcd_binary", "free_port"]
