"""Helpers for testing code that uses hoardDB, shipped with it (as asyncpg ships its _testbase).

    server.py     ServerThread (a server in this process) and ServerProcess (a child
                  process you can SIGKILL or SIGTERM), both started on a free port
    proxy.py      FaultProxy: a TCP proxy that can cut, stall or slow connections
    fixtures.py   pytest fixtures: hoarddb_server, hoarddb_remote_client

    >>> from hoarddb.testing import ServerThread
    >>> with ServerThread(tmp_path / "data", insecure=True) as server:
    ...     client = hoarddb.connect(server.url())
"""

from .proxy import FaultProxy
from .server import ServerProcess, ServerThread

__all__ = ["FaultProxy", "ServerProcess", "ServerThread"]
