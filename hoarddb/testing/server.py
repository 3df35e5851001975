"""Running servers for tests: in a thread of this process, or as a child process.

Both listen on 127.0.0.1 on a free port, with the metrics endpoint on another, and
give ``url`` (for :func:`hoarddb.connect`), ``port`` and, with TLS, ``fingerprint``.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..server.config import ServerConfig
from ..server.server import Server

_START = re.compile(r"listening on (\S+):(\d+), .*")
_FINGERPRINT = re.compile(r"fingerprint ([0-9A-F:]{95})")
_METRICS = re.compile(r"metrics http://[^ ]+:(\d+)/metrics")


class _Handle:
    host = "127.0.0.1"
    port = 0
    metrics_port: int | None = None
    fingerprint: str | None = None
    insecure = True
    data: Path

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def url(self, user: str | None = None, password: str | None = None) -> str:
        """``hoarddb://`` URL of this server: insecure, or pinned to its fingerprint."""
        cred = f"{user}:{password}@" if user else ""
        query = "insecure=true" if self.insecure else f"tls_fingerprint={self.fingerprint}"
        return f"hoarddb://{cred}{self.address}/?{query}"

    @property
    def cert(self) -> Path:
        return Path(self.data) / "tls" / "server.crt"


class ServerThread(_Handle):
    """ServerThread runs a :class:`Server` on its own event loop in a background thread.

    Keyword arguments are :class:`ServerConfig` fields (``insecure=True``,
    ``idle_timeout=1``...). ``server`` is the Server itself, for white-box checks
    (its ``engine``, ``metrics``, ``committer``).
    """

    def __init__(self, data, **config):
        config.setdefault("port", 0)
        config.setdefault("metrics_port", 0)
        config.setdefault("auth_failure_delay", 0.2)
        self.data = Path(data)
        self.config = ServerConfig(data=str(data), **config).check()
        self.insecure = self.config.insecure
        self.server = Server(self.config)
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def start(self, timeout: float = 30) -> "ServerThread":
        self._thread = threading.Thread(target=self._run, name="hoarddb-test-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the test server did not start in time")
        if self._error is not None:
            raise self._error
        self.port = self.server.port
        self.metrics_port = self.server.metrics_port
        self.fingerprint = self.server.fingerprint
        return self

    def _run(self) -> None:
        async def main():
            self.loop = asyncio.get_running_loop()
            try:
                await self.server.start()
            except BaseException as e:
                self._error = e
                self._ready.set()
                return
            self._ready.set()
            await self.server._stop_event.wait()
            await self.server.stop()

        with asyncio.Runner(loop_factory=self.config.loop_factory()) as runner:
            runner.run(main())

    def call(self, fn, timeout: float = 30):
        """Run ``fn()`` on the server's loop (a coroutine function or a plain one); its result."""
        async def wrapper():
            result = fn()
            if asyncio.iscoroutine(result):
                result = await result
            return result
        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(timeout)

    def stop(self, timeout: float = 30) -> None:
        """Stop gracefully and wait for the thread."""
        if self._thread is None:
            return
        if self.loop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.server.request_stop)
        self._thread.join(timeout)
        self._thread = None

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class ServerProcess(_Handle):
    """ServerProcess runs ``python -m hoarddb.cli server`` as a child, to kill or stop it.

    ``args`` are extra command-line flags; ``env`` extra environment variables. The
    child's log goes to ``DATA/../server-<n>.log`` (``log_text()`` reads it).
    """

    _count = 0

    def __init__(self, data, *args: str, insecure: bool = True, env: dict | None = None, port: int = 0):
        self.data = Path(data)
        self.args = list(args)
        self.insecure = insecure
        self.env = dict(env or {})
        self.requested_port = port
        self.proc: subprocess.Popen | None = None
        ServerProcess._count += 1
        self.log_path = self.data.parent / f"server-{os.getpid()}-{ServerProcess._count}.log"

    def start(self, timeout: float = 30) -> "ServerProcess":
        repo = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""), **self.env)
        cmd = [sys.executable, "-m", "hoarddb.cli", "server", "--data", str(self.data),
               "--port", str(self.port or self.requested_port), "--metrics-port", "0", *self.args]
        if self.insecure:
            cmd.append("--insecure")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self._offset = self._log.tell()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_text()
            m = _START.search(text)
            if m:
                line = m.group(0)
                self.port = int(m.group(2))
                fp, metrics = _FINGERPRINT.search(line), _METRICS.search(line)
                self.fingerprint = fp.group(1) if fp else None
                self.metrics_port = int(metrics.group(1)) if metrics else None
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"the server did not start within {timeout} s:\n{self.log_text()}")

    def log_text(self) -> str:
        """What the child logged since its last start."""
        with open(self.log_path, "rb") as f:
            f.seek(self._offset)
            return f.read().decode("utf-8", "replace")

    def kill(self) -> None:
        """SIGKILL: no cleanup, no flush; what was acknowledged must survive."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM and wait; the exit status."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        try:
            self.terminate(30)
        except subprocess.TimeoutExpired:
            self.kill()
        if getattr(self, "_log", None):
            self._log.close()

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
