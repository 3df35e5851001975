"""The hoardDB server: asyncio on top of the sans-IO protocol of :mod:`hoarddb.wire`.

    config.py      ServerConfig: every option, its default, flag, environment variable
    server.py      Server: listener, dispatch to the engine, graceful stop; run(config)
    connection.py  one connection: ordering, backpressure, blob uploads
    commit.py      group commit: one Engine.sync() for many writes
    auth.py        roles and the permission each operation needs
    users.py       users and their SCRAM keys in DATA/_users/users.bson
    logins.py      failed logins: lockouts per user name and per client address
    tls.py         certificates: given, or self-signed in DATA/tls/
    metrics.py     the server's prometheus metrics, /metrics and /healthz
"""

from .config import ServerConfig
from .server import Server, run

__all__ = ["ServerConfig", "Server", "run"]
