"""Every knob of the server, with its default, its environment variable and its risk, in one place.

A value comes from, first to last: a command-line flag, the environment variable
``HOARDDB_<NAME>`` (``HOARDDB_PORT=7080``), the YAML file given with ``--config``
(``port: 7080``), the default below. Adding an option: a field here with its comment,
a flag in ``hoarddb/cli.py``'s ``server`` command, and a row in docs/user/server.md.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable

from ..busypoll import MAX_BUSY_POLL
from ..errors import BadValueError, UnknownOptionError
from ..wire.messages import DEFAULT_METRICS_PORT, DEFAULT_PORT, MAX_MESSAGE_SIZE


@dataclass(frozen=True)
class ServerConfig:
    #: The data directory (created if missing). Required.
    data: str = ""
    #: Address to listen on. Anything but loopback exposes the server to the network:
    #: keep TLS and authentication on then (``insecure`` is refused there).
    host: str = "127.0.0.1"
    #: Port to listen on; 0 picks a free one (the start line says which).
    port: int = DEFAULT_PORT
    #: Port of the HTTP endpoint with /metrics and /healthz, on ``metrics_host``; 0 picks
    #: a free one, -1 turns it off. It has no authentication: keep it on loopback or a
    #: private network.
    metrics_port: int = DEFAULT_METRICS_PORT
    metrics_host: str = "127.0.0.1"
    #: Plaintext and no authentication, for local development. Refused unless ``host``
    #: is a loopback address.
    insecure: bool = False
    #: Certificate and key (PEM) to serve; when both are empty a self-signed pair is made
    #: in DATA/tls/ on first start and reused after.
    tls_cert: str = ""
    tls_key: str = ""
    #: Open connections beyond this are told so and closed.
    max_connections: int = 1000
    #: Seconds a connection may stay without a request before it is closed (0: never);
    #: also the time a message has to arrive whole from its first byte (slow senders).
    idle_timeout: float = 300.0
    #: Seconds a new connection has to finish TLS, hello and login.
    handshake_timeout: float = 10.0
    #: Seconds before a failed login is answered (slows password guessing).
    auth_failure_delay: float = 1.0
    #: Lockouts (hoarddb/server/logins.py): failed logins to one user name within
    #: ``auth_lockout`` seconds after which every login to it is refused for
    #: ``auth_lockout`` seconds, the right password too (0: no limit per name). Anyone
    #: can lock a name out this way, for that long: the price of stopping a guesser.
    auth_user_failures: int = 5
    #: The same per client address (its IP), whatever names it tries; users who logged in
    #: from that address before are still let in (0: no limit per address). Clients behind
    #: one NAT share an address: raise it for them.
    auth_address_failures: int = 20
    #: Seconds failed logins are remembered, and a lockout lasts (0: no lockouts at all).
    auth_lockout: float = 60.0
    #: Characters a new password must have at least: the admin made from
    #: HOARDDB_ADMIN_PASSWORD at a first start, and ``hoarddb user add`` / ``passwd``, which
    #: read HOARDDB_MIN_PASSWORD_LENGTH too. (Over the wire the password never travels:
    #: the client that derives the keys checks it.)
    min_password_length: int = 8
    #: Bytes of messages not yet received whole, all connections together. A connection whose
    #: message would take them past it is read no further: what it sent before is answered,
    #: then it gets CONNECTION_ERROR saying so and is closed. At least one message of the
    #: largest size (16 MiB and 64 KiB); each connection may hold up to one such message.
    receive_budget: int = 256 * 1024 * 1024
    #: Requests one connection may have queued or running; past it the server stops
    #: reading from that connection until some are answered (backpressure).
    max_pipeline: int = 128
    #: Bytes of answers waiting to be sent to one connection before the server stops
    #: running its requests until the client reads (a stalled reader holds no more).
    write_buffer: int = 4 * 1024 * 1024
    #: Threads running reads, and threads running writes. Reads have their own threads
    #: so that they never wait behind a write or an fsync.
    read_threads: int = 8
    write_threads: int = 4
    #: Seconds a graceful stop (SIGTERM, Ctrl-C) waits for requests in flight.
    shutdown_timeout: float = 30.0
    #: Group commit: writes run without fsync and the server makes them durable with
    #: one ``Engine.sync()`` for every group of concurrent writes, before answering any of
    #: them. False: every write fsyncs on its own (slower with many clients, same safety).
    group_commit: bool = True
    #: Logging level: debug, info, warning, error.
    log_level: str = "info"
    #: How log lines are written to standard error: ``text`` for people, ``json`` (one
    #: object a line: time, level, logger, message, and fields such as peer and user) for
    #: a log collector.
    log_format: str = "text"
    #: Requests that take at least this many milliseconds, from arrival to answer, are logged
    #: as warnings and kept in the slow log (``hoarddb slowlog``); 0 keeps every request
    #: (costly: for a short look only).
    slow_ms: float = 100.0
    #: Entries the slow log keeps, newest first; older ones are forgotten.
    slowlog_length: int = 128
    #: Seconds a cursor (the rest of a read asked with batch_size, read with ``more``) may
    #: sit unread before it is closed (0: until its connection closes). MongoDB's is 10 minutes.
    cursor_timeout: float = 600.0
    #: Cursors open at once, all connections together, and on one connection: one more is
    #: refused with LIMIT_EXCEEDED. Each holds at most a 256 KiB chunk of documents (and a
    #: sorted result while it sorts in memory); none holds an LMDB reader between batches.
    max_cursors: int = 1000
    max_cursors_per_connection: int = 100
    #: The event loop: ``uvloop`` (libuv, in C), ``asyncio`` (the standard library's), or
    #: ``auto``: uvloop where it is installed (a dependency everywhere but Windows).
    #: uvloop spends less CPU per request; with many connections the server does a third
    #: more work in the same CPU (docs/benchmarks.md). asyncio is there for debugging.
    event_loop: str = "auto"
    #: Microseconds the event loop polls a lone connection's socket after answering it,
    #: awake, before it sleeps (0: never). A client that sends its next request within
    #: that time is served without the wake-up of a sleeping thread, which costs 40–100 µs
    #: on a virtual machine. Only with one connection open and two CPUs or more; polls
    #: that see no request in time make the next ones rarer (hoarddb/busypoll.py).
    busy_poll: int = 200
    #: Seconds a regular expression may spend matching one value before its request is
    #: refused with REGEX_TIMEOUT (0: no limit). Matching lets go of the GIL,
    #: so it holds only its own thread; the limit stops a pattern that backtracks
    #: catastrophically (``(a|aa)+$``), which would hold that thread and a CPU for hours, and
    #: an update's or delete's in the group commit holds every write meanwhile.
    regex_timeout: float = 1.0
    #: ``etcd://host:port[,host:port...]``: run as a node of the cluster whose map and
    #: catalog these etcd members hold (docs/user/cluster.md); empty: a single server.
    cluster: str = ""
    #: This node's name in the cluster (unique; letters, digits, '_' or '-'). Required with ``cluster``.
    node_id: str = ""
    #: ``host:port`` where other nodes and clients reach this node (default: host and port).
    advertise: str = ""
    #: Seconds this node's lease in etcd lives without renewal: when a node dies, its
    #: partitions are given up this long after (and it stops serving them itself before).
    node_ttl: int = 5
    #: At start, once this node is up, take its share of every spread bucket's partitions (the plan of
    #: ``hoarddb cluster add-node`` for itself), retrying while moves are under way or a node is down.
    join: bool = False
    #: At SIGTERM or SIGINT, first move this node's partitions to the others (the plan of ``hoarddb cluster
    #: remove-node`` for itself) while serving, then stop; a second signal stops at once.
    drain_on_stop: bool = False
    #: Seconds a stop waits for the drain's moves; past it the node stops, its moves left to resume when it
    #: starts again (its partitions not yet moved are unavailable meanwhile).
    drain_timeout: float = 300.0

    def check(self) -> "ServerConfig":
        """The config, checked; BadValueError naming the option otherwise."""
        if not self.data:
            raise BadValueError("the server needs a data directory: --data DIR (or HOARDDB_DATA, or data: in --config)")
        if not 0 <= self.port <= 65535:
            raise BadValueError(f"port must be 0..65535, got {self.port}")
        if not -1 <= self.metrics_port <= 65535:
            raise BadValueError(f"metrics_port must be 0..65535, or -1 for none, got {self.metrics_port}")
        if self.insecure and not is_loopback(self.host):
            raise BadValueError(
                f"--insecure (no TLS, no authentication) is only for loopback addresses such as 127.0.0.1; "
                f"refusing to listen on {self.host}. Drop --insecure, or listen on 127.0.0.1")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise BadValueError("give both --tls-cert and --tls-key, or neither (a self-signed pair is made)")
        for name in ("max_connections", "max_pipeline", "write_buffer", "read_threads", "write_threads",
                     "slowlog_length", "max_cursors", "max_cursors_per_connection"):
            if getattr(self, name) < 1:
                raise BadValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.receive_budget < MAX_MESSAGE_SIZE:
            raise BadValueError(f"receive_budget must be at least {MAX_MESSAGE_SIZE} bytes (one message of the "
                                f"largest size), got {self.receive_budget}")
        for name in ("auth_user_failures", "auth_address_failures", "min_password_length"):
            if getattr(self, name) < 0:
                raise BadValueError(f"{name} must be 0 (no limit) or more, got {getattr(self, name)}")
        for name in ("idle_timeout", "handshake_timeout", "auth_failure_delay", "shutdown_timeout", "regex_timeout",
                     "auth_lockout", "slow_ms", "cursor_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                unit = "milliseconds" if name == "slow_ms" else "seconds"
                raise BadValueError(f"{name} must be a finite number of {unit} ≥ 0, got {value!r}")
        if not 0 <= self.busy_poll <= MAX_BUSY_POLL:
            raise BadValueError(f"busy_poll must be 0..{MAX_BUSY_POLL} microseconds (0 turns it off), "
                                f"got {self.busy_poll}")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise BadValueError(f"log_level must be debug, info, warning or error, got {self.log_level!r}")
        if self.log_format not in ("text", "json"):
            raise BadValueError(f"log_format must be text or json, got {self.log_format!r}")
        if self.event_loop not in ("auto", "uvloop", "asyncio"):
            raise BadValueError(f"event_loop must be auto, uvloop or asyncio, got {self.event_loop!r}")
        if self.event_loop == "uvloop" and uvloop() is None:
            raise BadValueError("event_loop is uvloop but uvloop is not installed: pip install uvloop, "
                                "or choose event_loop auto or asyncio")
        if self.cluster:
            from ..cluster.coord import parse_cluster_url
            parse_cluster_url(self.cluster)
            if not self.node_id or not all(c.isalnum() or c in "_-" for c in self.node_id) or len(self.node_id) > 64:
                raise BadValueError("a cluster node needs --node-id NAME: 1 to 64 letters, digits, '_' or '-', "
                                    f"unique in the cluster; got {self.node_id!r}")
            if self.advertise and not self.advertise.rpartition(":")[2].isdigit():
                raise BadValueError(f"--advertise takes host:port (where other nodes reach this one), "
                                    f"got {self.advertise!r}")
            if self.node_ttl < 2:
                raise BadValueError(f"node_ttl must be at least 2 seconds, got {self.node_ttl}")
        elif self.node_id or self.advertise or self.join or self.drain_on_stop:
            raise BadValueError("--node-id, --advertise, --join and --drain-on-stop are for a cluster node: give "
                                "--cluster etcd://HOST:PORT too")
        if not (math.isfinite(self.drain_timeout) and self.drain_timeout > 0):
            raise BadValueError(f"drain_timeout must be a finite number of seconds > 0, got {self.drain_timeout!r}")
        return self

    def loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        """What makes the server's event loop (see ``event_loop``)."""
        module = uvloop() if self.event_loop != "asyncio" else None
        return module.new_event_loop if module is not None else asyncio.new_event_loop

    @property
    def tls(self) -> bool:
        return not self.insecure

    @property
    def auth(self) -> bool:
        return not self.insecure

    @classmethod
    def load(cls, flags: dict[str, Any] | None = None, config_file: str | None = None,
             environ: dict[str, str] | None = None) -> "ServerConfig":
        """The config from flags (None = not given), environment and YAML file, checked."""
        environ = os.environ if environ is None else environ
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        if config_file:
            import yaml

            try:
                loaded = yaml.safe_load(Path(config_file).read_text()) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise BadValueError(f"cannot read the config file {config_file}: {exc}") from None
            if not isinstance(loaded, dict):
                raise BadValueError(f"the config file {config_file} must be a YAML mapping such as `port: 7070`")
            for key, value in loaded.items():
                name = str(key).replace("-", "_")
                if name not in known:
                    raise UnknownOptionError(
                        f"unknown option {key!r} in {config_file}; options: {', '.join(sorted(known))}")
                values[name] = _convert(known[name], value, f"{key} in {config_file}")
        for name, f in known.items():
            raw = environ.get("HOARDDB_" + name.upper())
            if raw is not None and raw != "":
                values[name] = _convert(f, raw, "HOARDDB_" + name.upper())
        for name, value in (flags or {}).items():
            if value is not None:
                if name not in known:
                    raise UnknownOptionError(f"unknown server option {name!r}")
                values[name] = _convert(known[name], value, "--" + name.replace("_", "-"))
        return replace(cls(), **values).check()


def uvloop():
    """The uvloop module, or None where it is not installed."""
    try:
        import uvloop as module
    except ImportError:
        return None
    return module


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _convert(f, value: Any, where: str) -> Any:
    kind = f.type if isinstance(f.type, str) else f.type.__name__
    if value is None:  # a YAML key without a value (`host:`): not the default, not the text "None"
        raise BadValueError(f"{where} has no value; give one, or leave the option out for its default "
                            f"({getattr(ServerConfig, f.name)!r})")
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if kind == "int":
            if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
                raise ValueError(value)  # 1.7 connections is a mistake, not 1
            return int(value)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError(value)
            number = float(value)
            if not math.isfinite(number):  # nan would turn every timeout off without a word
                raise ValueError(value)
            return number
        if isinstance(value, (dict, list)):
            raise ValueError(value)
        return str(value)
    except (TypeError, ValueError):
        what = {"int": "a whole number", "float": "a finite number", "bool": "true or false",
                "str": "a text"}.get(kind, f"a {kind}")
        raise BadValueError(f"{where} must be {what}, got {value!r}") from None
