"""The blocking client: ``connect(url)`` gives the same :class:`hoarddb.api.Client` as ``hoarddb.open(path)``.

    >>> client = hoarddb.connect("hoarddb://admin:secret@db.example:7070/?tls_fingerprint=AB:CD:...")
    >>> client["app"].Comments.push({"Text": "hi"})

    options.py     ConnectOptions: the URL, keyword arguments and shell flags, one set
    core.py        the client without I/O: ids, encoding, answers, errors, retries, streams, uploads
    connection.py  the blocking adapter: Connection (one socket), RemoteExecutor (what Client runs on)
    aio.py         the asyncio adapter and its Client (public name: hoarddb.aio)
"""

from __future__ import annotations

from ..api import Client
from ..errors import ClosedError
from .connection import Connection, RemoteExecutor
from .options import ConnectOptions

__all__ = ["connect", "ConnectOptions", "Connection", "RemoteExecutor", "pipeline"]


def connect(url: str | None = None, **options) -> Client:
    """A client of the server at ``url`` (``hoarddb://user:password@host:port/?...``).

    Keyword options override the URL: ``host``, ``port``, ``user``, ``password``,
    ``tls_ca``, ``tls_fingerprint``, ``insecure``, ``timeout``, ``connect_timeout``,
    ``busy_poll`` (see :class:`ConnectOptions`). Raises HoardConnectionError, HoardTimeoutError or
    AuthFailedError at once when the server cannot be reached or refuses the login.
    """
    return Client(RemoteExecutor(ConnectOptions.from_url(url, **options)))


def pipeline(client: Client, requests: list[dict]) -> list:
    """Send many operation documents in one round trip; their answers (errors as exception objects)."""
    executor = client._executor
    if isinstance(executor, RemoteExecutor):
        return executor.pipeline(requests)
    out = []
    for request in requests:  # embedded: nothing to save, same answers
        try:
            out.append(executor.execute(request))
        except ClosedError:
            raise  # a closed client answers nothing, as the remote pipeline raises
        except Exception as e:  # noqa: BLE001 - handed back, as the remote pipeline does
            out.append(e)
    return out
