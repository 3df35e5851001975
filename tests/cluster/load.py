"""Client threads that run against real nodes while partitions move: the start, stop and clients the cluster tests' loads share.

A load (``Load`` in test_moves.py, ``QueueLoad`` in test_queue_moves.py, ...) subclasses
:class:`ClientThreads`, adds its threads in ``__init__`` and notes under :attr:`ClientThreads.lock`
what was acknowledged, refused or of unknown outcome; its ``check`` holds the cluster to that.
"""

import threading

import hoarddb


class ClientThreads:
    """Threads started when a ``with`` block opens, which run until it ends (each looping until
    :attr:`stop` is set), and the lock and list of errors they share."""

    def __init__(self, nodes):
        self.nodes = nodes
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors = []
        self.threads = []

    def add(self, target, *args):
        """One more thread, running ``target(*args)`` once the ``with`` block opens."""
        self.threads.append(threading.Thread(target=target, args=args))

    def connect(self, i):
        """A client given every node, starting from node ``i`` (modulo their number): so threads numbered
        in turn first ask different nodes, and each fails over to the others."""
        k = i % len(self.nodes)
        hosts = ",".join(n.address for n in self.nodes[k:] + self.nodes[:k])
        return hoarddb.connect(f"hoarddb://{hosts}/?insecure=true&timeout=30")

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(60)
