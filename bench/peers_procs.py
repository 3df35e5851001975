"""Servers for bench/peers.py: hoardDB, redis-server and a throwaway PostgreSQL cluster, on loopback.

Each ``start_*`` returns a handle whose ``stop()`` ends the server and everything it
started; bench/peers.py calls it in a ``finally``. Nothing here installs anything:
:func:`missing_peers` says what is absent and how to install it.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A port free on 127.0.0.1 now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Child:
    """Child is a process in a session of its own; ``stop()`` ends its whole process group."""

    def __init__(self, cmd: list[str], log: Path, env: dict | None = None, cwd: Path | None = None):
        self.cmd = cmd
        self.log_path = log
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, cwd=cwd, start_new_session=True)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace: float = 20.0) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        try:  # whatever is left of the group (the leader may have exited before its children)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()


# -- hoardDB -------------------------------------------------------------------------

_LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


class HoardServer:
    """``python -m hoarddb.cli server --data DIR --port 0 --insecure``: the default durability (group commit)."""

    def __init__(self, data: Path, log: Path, extra: tuple[str, ...] = ()):
        # This checkout's hoardDB, whatever the current directory: `python -m` puts the
        # current directory first on sys.path, ahead of PYTHONPATH, so the child runs in REPO
        # (an A/B of two checkouts otherwise runs the same server twice).
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, "-m", "hoarddb.cli", "server", "--data", str(data), "--port", "0",
               "--metrics-port", "-1", "--insecure", *extra]
        self.child = Child(cmd, log, env, cwd=REPO)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = _LISTENING.search(self.child.log_text())
            if m:
                self.port = int(m.group(1))
                self.url = f"hoarddb://127.0.0.1:{self.port}/?insecure=true"
                self.pid = self.child.proc.pid
                return
            if not self.child.alive():
                break
            time.sleep(0.05)
        text = self.child.log_text()
        self.child.stop()
        raise RuntimeError(f"the hoardDB server did not start:\n{text[-2000:]}")

    def stop(self) -> None:
        self.child.stop()


# -- Redis ---------------------------------------------------------------------------

class RedisServer:
    """redis-server on a free loopback port, AOF on with ``appendfsync always``, no RDB snapshots."""

    def __init__(self, directory: Path):
        import redis

        self.port = free_port()
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(directory),
               "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
               "--protected-mode", "yes"]
        self.child = Child(cmd, directory / "redis.log")
        deadline = time.monotonic() + 30
        while True:
            try:
                client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
                client.ping()
                client.close()
                return
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or not self.child.alive():
                    text = self.child.log_text()
                    self.child.stop()
                    raise RuntimeError(f"redis-server did not start:\n{text[-2000:]}")
                time.sleep(0.05)

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port)

    def stop(self) -> None:
        self.child.stop()


# -- PostgreSQL ----------------------------------------------------------------------

def pg_bindir() -> str | None:
    """The directory of initdb/pg_ctl/postgres: on PATH, else Debian's /usr/lib/postgresql/N/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return str(Path(os.path.realpath(found)).parent)
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True):
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    return None


class PostgresServer:
    """A throwaway cluster: initdb in a temporary directory, pg_ctl start on a free loopback port.

    initdb refuses to run as root; as root the cluster belongs to the ``postgres`` user
    (``runuser -u postgres --``), which Debian's package creates. Settings are the
    defaults (fsync on, synchronous_commit on, full_page_writes on).
    """

    def __init__(self):
        self.bindir = pg_bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="hoarddb-peers-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.prefix: list[str] = []
        self.started = False
        try:
            if os.geteuid() == 0:
                import pwd

                user = pwd.getpwnam("postgres")
                os.chown(self.dir, user.pw_uid, user.pw_gid)
                self.prefix = ["runuser", "-u", "postgres", "--"]
            self._run([f"{self.bindir}/initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                       "--no-sync"], 120)
            self.started = True  # from here on stop() must try pg_ctl stop, even if start failed half way
            self._run([f"{self.bindir}/pg_ctl", "-D", str(self.data), "-l", str(self.dir / "postgres.log"), "-w",
                       "-t", "60", "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1", "start"], 90)
        except BaseException:
            self.stop()
            raise
        self.dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _run(self, cmd: list[str], timeout: float) -> None:
        out = subprocess.run(self.prefix + cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:2])} failed ({out.returncode}):\n{out.stdout.decode(errors='replace')[-2000:]}")

    def stop(self) -> None:
        try:
            if self.started:
                for mode in ("fast", "immediate"):
                    try:
                        self._run([f"{self.bindir}/pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30",
                                   "stop"], 60)
                        break
                    except (RuntimeError, subprocess.TimeoutExpired):
                        continue
            pidfile = self.data / "postmaster.pid"
            if pidfile.exists():  # pg_ctl could not stop it: kill the postmaster and its backends
                try:
                    pid = int(pidfile.read_text().split()[0])
                    os.kill(pid, signal.SIGQUIT)
                    time.sleep(1)
                    os.kill(pid, signal.SIGKILL)
                except (ValueError, IndexError, ProcessLookupError, PermissionError, OSError):
                    pass
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


# -- what is installed ---------------------------------------------------------------

def missing_peers() -> dict[str, str]:
    """peer -> how to install what it lacks; an absent key means the peer can run."""
    missing = {}
    need = []
    if shutil.which("redis-server") is None:
        need.append("apt-get install redis-server")
    try:
        import redis  # noqa: F401
    except ImportError:
        need.append("pip install redis (or pip install -e '.[bench]')")
    if need:
        missing["redis"] = "; ".join(need)
    need = []
    if pg_bindir() is None:
        need.append("apt-get install postgresql")
    elif os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam("postgres")
        except KeyError:
            need.append("initdb refuses root and there is no 'postgres' user: run as another user, "
                        "or apt-get install postgresql (it creates one)")
        if shutil.which("runuser") is None:
            need.append("runuser (util-linux) is needed to run initdb as 'postgres'")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        need.append("pip install 'psycopg[binary]' (or pip install -e '.[bench]')")
    if need:
        missing["postgres"] = "; ".join(need)
    return missing


def _version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30).stdout.decode().strip()
    except (OSError, subprocess.TimeoutExpired):
        return "not installed"


def fsync_ms(directory: str, n: int = 200) -> float:
    """Median milliseconds of write(200 B) + fsync in ``directory``: the floor of one durable write."""
    path = os.path.join(directory, "fsync.probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    times = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, b"x" * 200)
            os.fsync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.unlink(path)
    return statistics.median(times) * 1000


def machine(tmp: str) -> list[str]:
    """Lines describing this machine and the versions under test."""
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import hoarddb

    commit = _version(["git", "-C", str(REPO), "describe", "--always", "--dirty"])
    lines = [
        f"CPU: {os.cpu_count()} × {cpu}; {platform.system()} {platform.release()}",
        f"Python {platform.python_version()}; hoardDB {hoarddb.__version__} (git {commit})",
        f"redis-server: {_version(['redis-server', '--version']) if shutil.which('redis-server') else 'not installed'}",
        f"PostgreSQL: {_version([pg_bindir() + '/postgres', '--version']) if pg_bindir() else 'not installed'}",
        f"SQLite {sqlite3.sqlite_version} (Python's sqlite3)",
    ]
    clients = []
    for name, module in (("redis-py", "redis"), ("psycopg", "psycopg")):
        try:
            clients.append(f"{name} {__import__(module).__version__}")
        except ImportError:
            pass
    if clients:
        lines.append("clients: " + ", ".join(clients))
    lines.append(f"disk: one 200-byte write + fsync in {tmp} takes {fsync_ms(tmp):.2f} ms (median of 200)")
    return lines
