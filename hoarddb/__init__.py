"""hoardDB: a document database whose documents own queues, stacks, sorted lists, heaps and files.

    >>> import hoarddb, tempfile
    >>> with hoarddb.open(tempfile.mkdtemp()) as client:
    ...     db = client["app"]
    ...     _ = db.create_bucket("Comments", type="fifo")
    ...     db.Comments.push({"Author": "Bob", "Text": "Nice photo!"})
    ...     db.Comments.pop()
    {'Author': 'Bob', 'Text': 'Nice photo!'}
"""

from __future__ import annotations

from . import errors
from .api import Bucket, Client, Database
from .errors import DuplicateKeyError, HoardError

from .version import __version__

__all__ = ["open", "connect", "Client", "Database", "Bucket", "HoardError", "DuplicateKeyError", "errors",
           "__version__"]


def open(path, **options) -> Client:  # noqa: A001 - the name users expect
    """Open (creating if needed) an embedded database in the data directory ``path``.

    ``options`` are the knobs of :class:`hoarddb.options.Options` (``sync``,
    ``segment_size``, ...); an unknown one is refused, listing them.
    """
    from .engine import Engine
    from .options import Options

    return Client(Engine(path, Options.from_kwargs(**options)))


def connect(url: str | None = None, **options) -> Client:
    """A client of a hoardDB server: ``hoarddb.connect("hoarddb://user:password@host:7070/")``.

    The same Client as :func:`open` returns, talking to the server over the wire; see
    :func:`hoarddb.client.connect` for the URL and the options (``tls_ca``,
    ``tls_fingerprint``, ``insecure``, ``timeout``...).
    """
    from .client import connect as _connect

    return _connect(url, **options)
