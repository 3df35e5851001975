"""Many clients race to insert the same unique values: exactly one wins each value, the rest get DUPLICATE_KEY."""

from __future__ import annotations

import threading
from collections import Counter

import hoarddb
from hoarddb.errors import DuplicateKeyError


def test_concurrent_clients_race_on_a_unique_index(insecure_server):
    with hoarddb.connect(insecure_server.url()) as c:
        c["race"].create_bucket("Users", type="hash", indices=[{"field": "Email", "unique": True}])
    clients, values = 12, 40
    wins, losses, failures = Counter(), Counter(), []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def racer(n):
        try:
            with hoarddb.connect(insecure_server.url(), timeout=30) as c:
                users = c["race"].Users
                barrier.wait(30)
                for v in range(values):
                    try:
                        users.insert({"_id_": f"c{n}-v{v}", "Email": f"user{v}@example.com"})
                        with lock:
                            wins[v] += 1
                    except DuplicateKeyError as e:
                        assert e.code == 0x0F
                        with lock:
                            losses[v] += 1
        except Exception as e:  # noqa: BLE001
            failures.append(e)

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures
    assert all(wins[v] == 1 for v in range(values)), wins
    assert all(losses[v] == clients - 1 for v in range(values))
    with hoarddb.connect(insecure_server.url()) as c:
        users = c["race"].Users
        assert users.count() == values
        for v in range(0, values, 7):
            found = users.search({"Email": f"user{v}@example.com"})
            assert len(found) == 1 and found.index_used == "Email_1"
