"""Time-range indexes (indexes.md, "Time-range indexes"): declaration rules, windows, counts,
rankings, expiry, unique windows, the timestamps a bucket keeps, and the window verb everywhere."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest

import hoarddb
import hoarddb.aio
from hoarddb.errors import BadValueError, DuplicateKeyError, UnknownOptionError
from hoarddb.hql.parser import parse_statement
from hoarddb.hql.printer import format_answer
from hoarddb.indexes import timerange
from hoarddb.testing import ServerThread
from hoarddb.tools import dump, restore

UTC = datetime.timezone.utc
HOUR = 3600


def at(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, UTC)


def hour_start(offset_hours: int = 0) -> float:
    """The start of the current hour (UTC), moved by whole hours."""
    now = int(time.time())
    return now - now % HOUR + offset_hours * HOUR


def trending(**tr):
    spec = {"on": "At", "range": HOUR, "step": 900, **tr}
    return {"name": "hourly", "fields": ["At", "Tag"], "ranked": True, "timeRange": spec}


@pytest.fixture
def client(tmp_path):
    with hoarddb.open(tmp_path / "data", ttl_sweep_seconds=0) as c:
        yield c


@pytest.fixture
def posts(client):
    return client["app"].create_bucket("Posts", type="hash", indices=[trending(ttl=86400)])


# -- declaration rules ---------------------------------------------------------------------------

REFUSED = [
    ({"timeRange": {"on": "At", "step": 900}}, "timeRange needs range"),
    ({"timeRange": {"on": "At", "range": 0, "step": 1}}, "range is at least 1 second"),
    ({"timeRange": {"on": "At", "range": 60, "step": 0}}, "step is at least 1 second"),
    ({"timeRange": {"on": "At", "range": 1.5, "step": 1}}, "whole number of seconds"),
    ({"timeRange": {"on": "At", "range": True, "step": 1}}, "whole number of seconds"),
    ({"timeRange": {"on": "At", "range": 3600, "step": 700}}, "exact multiple of step"),
    ({"timeRange": {"on": "At", "range": 10**12, "step": 10**12}}, "at most 3155760000 seconds"),
    ({"timeRange": {"on": "At", "range": 3600, "step": 60}}, "at most 24"),
    ({"timeRange": {"on": "At", "range": 3600, "step": 900, "phase": 900}}, "phase is less than step"),
    ({"timeRange": {"on": "At", "range": 3600, "step": 900, "phase": -1}}, "phase is at least 0"),
    ({"timeRange": {"on": "At", "range": 86400 * 800, "step": 86400 * 400, "phase": 31536000}},
     "less than one year"),
    ({"timeRange": {"on": "At", "range": 3600, "step": 900, "ttl": 1800}}, "ttl is from range"),
    ({"timeRange": {"on": "At", "range": 3600, "step": 900, "ttl": 40_000_000}}, "31622400 seconds"),
    ({"timeRange": {"on": "At", "range": 3600, "step": 900, "every": 1}}, "accepts on, range, step, phase, ttl"),
    ({"timeRange": {"on": "Tag", "range": 3600, "step": 900}}, "is the index's first field"),
    ({"timeRange": {"on": "$deletedAt", "range": 3600, "step": 900}}, "\"$createdAt\", \"$updatedAt\" or a date"),
    ({"timeRange": {"on": "At", "range": 3600, "step": 900}, "unique": True}, "range equal to step"),
    ({"timeRange": {"on": "At", "range": 3600, "step": 3600}, "unique": True}, "immutable"),
    ({"fields": ["At"], "timeRange": {"on": "At", "range": 3600, "step": 900}, "expire_after_seconds": 60},
     "does not take expire_after_seconds"),
    ({"timeRange": {"on": "At", "range": 3600, "step": 900}, "desc": True}, "does not take desc"),
    ({"timeRange": {"on": "At", "range": 3600, "step": 900}, "sparse": True}, "does not take sparse"),
    ({"timeRange": "hourly"}, "timeRange is a document"),
    ({"ranked": True}, "it needs timeRange"),
]


@pytest.mark.parametrize("entry, message", REFUSED)
def test_each_rule_is_refused_with_its_reason(client, entry, message):
    index = {"fields": ["At", "Tag"], **entry}
    with pytest.raises(BadValueError, match=message.replace("$", r"\$").replace("(", r"\(")):
        client["app"].create_bucket("Posts", type="hash", indices=[index])
    client["app"].create_bucket("Posts", type="hash")  # nothing of the refused one was kept


def test_a_single_field_time_range_index_cannot_be_ranked(client):
    with pytest.raises(BadValueError, match="single-field time-range index cannot be ranked"):
        client["app"].create_bucket("Posts", type="hash", indices=[
            {"fields": ["At"], "ranked": True, "timeRange": {"on": "At", "range": 60, "step": 60}}])
    b = client["app"].create_bucket("Posts", type="hash", indices=[
        {"name": "perMinute", "fields": ["At"], "timeRange": {"on": "At", "range": 60, "step": 60}}])
    b.insert({"At": at(hour_start())})
    w = b.window("perMinute", byStart=at(hour_start()))
    assert w["count"] == 1
    with pytest.raises(BadValueError, match="ranked: true"):
        b.window("perMinute", byStart=at(hour_start()), top=3)


def test_kept_timestamps_need_the_bucket_option(client):
    index = {"fields": ["$createdAt", "Tag"], "timeRange": {"on": "$createdAt", "range": 60, "step": 60}}
    with pytest.raises(BadValueError, match="timestamps: true"):
        client["app"].create_bucket("Posts", type="hash", indices=[index])
    client["app"].create_bucket("Posts", type="hash", timestamps=True, indices=[index])


def test_the_same_grid_on_the_same_timestamp_declares_the_same_ttl(client):
    a = {"name": "a", "fields": ["At", "Tag"], "timeRange": {"on": "At", "range": HOUR, "step": 900, "ttl": 86400}}
    b = {"name": "b", "fields": ["At", "Owner"], "timeRange": {"on": "At", "range": HOUR, "step": 900}}
    with pytest.raises(BadValueError, match="same grid .* declare the same ttl"):
        client["app"].create_bucket("Posts", type="hash", indices=[a, b])
    other_grid = dict(b, timeRange={"on": "At", "range": 86400, "step": 86400})
    same_fields = dict(a, name="c", timeRange={"on": "At", "range": 86400, "step": 86400})
    client["app"].create_bucket("Posts", type="hash", indices=[a, other_grid, same_fields])


def test_unknown_bucket_options_name_the_new_ones_and_bad_values_are_refused(client):
    with pytest.raises(UnknownOptionError, match="immutable.*timestamps"):
        client["app"].create_bucket("Posts", type="hash", timestamp=True)
    with pytest.raises(BadValueError, match="timestamps is true"):
        client["app"].create_bucket("Posts", type="hash", timestamps="yes")
    with pytest.raises(BadValueError, match="immutable is a non-empty list"):
        client["app"].create_bucket("Posts", type="hash", immutable="At")


def test_a_bucket_without_time_range_indexes_is_unchanged(client):
    b = client["app"].create_bucket("Users", type="hash", indices=["Email"])
    decl = client["app"].Users.stats()["indexes"][0]
    assert "timeRange" not in decl and decl["summary"] == "Email_1"
    b.insert({"_id_": "u1", "Email": "a@x"})
    assert b.get("u1") == {"_id_": "u1", "Email": "a@x"}


# -- windows, counts, rankings -----------------------------------------------------------------


def test_a_document_is_in_every_window_that_holds_its_time(posts):
    base = hour_start(-2)
    posts.insert({"_id_": "p", "At": at(base + 1000), "Tag": "x"})  # 16m40s into the hour
    holding = [w for w in range(-4, 5) if posts.window("hourly", byStart=at(base + w * 900))["count"]]
    assert holding == [-2, -1, 0, 1]  # windows starting at -45m, -30m, -15m, 0m hold +16m40s
    w = posts.window("hourly", byStart=at(base))
    assert w["start"] == at(base) and w["end"] == at(base + HOUR)


def test_counts_and_top_per_window(posts):
    base = hour_start(-3)
    tags = ["a", "b", "a", "c", "a", "b", "d"]
    posts.batch_insert([{"_id_": i, "At": at(base + 60 * i), "Tag": t} for i, t in enumerate(tags)])
    w = posts.window("hourly", byStart=at(base), top=2)
    assert w["count"] == 7 and w["field"] == "Tag"
    assert posts.stats()["indexes"][0]["summary"] == "hourly (timeRange At range 3600s step 900s ttl 86400s, ranked)"
    assert w["top"] == [{"value": "a", "count": 3}, {"value": "b", "count": 2}]
    assert posts.window("hourly", byStart=at(base), counts=True)["counts"] == [
        {"value": "a", "count": 3}, {"value": "b", "count": 2}, {"value": "c", "count": 1}, {"value": "d", "count": 1}]
    # ties are ranked by value, and top may ask for more than there are
    assert [r["value"] for r in posts.window("hourly", byStart=at(base), top=10)["top"]] == ["a", "b", "c", "d"]


def test_an_array_counts_each_distinct_element_once(posts):
    base = hour_start(-3)
    posts.insert({"_id_": 1, "At": at(base), "Tag": ["x", "y", "x"]})
    posts.insert({"_id_": 2, "At": at(base), "Tag": "x"})
    w = posts.window("hourly", byStart=at(base), counts=True)
    assert w["count"] == 2 and w["counts"] == [{"value": "x", "count": 2}, {"value": "y", "count": 1}]


def test_updates_move_documents_between_windows_and_values(posts):
    base = hour_start(-5)
    posts.insert({"_id_": 1, "At": at(base), "Tag": "a"})
    posts.update({"_id_": 1}, {"$set": {"At": at(base + 2 * HOUR), "Tag": "b"}})
    assert posts.window("hourly", byStart=at(base), counts=True)["counts"] == []
    assert posts.window("hourly", byStart=at(base))["count"] == 0
    assert posts.window("hourly", byStart=at(base + 2 * HOUR), top=1)["top"] == [{"value": "b", "count": 1}]
    posts.put({"_id_": 1, "Tag": "b"})  # no date: in no window
    assert posts.window("hourly", byStart=at(base + 2 * HOUR))["count"] == 0
    posts.put({"_id_": 1, "At": at(base + 2 * HOUR), "Tag": "c"})
    posts.delete({"_id_": 1})
    assert posts.window("hourly", byStart=at(base + 2 * HOUR), counts=True)["counts"] == []


def test_newest_and_oldest_are_the_windows_holding_now(posts):
    for _attempt in range(2):  # once more if a window started between the insert and the reads
        now = time.time()
        posts.put({"_id_": "now", "At": at(now), "Tag": "t"})
        newest = posts.window("hourly", newest=True)
        oldest = posts.window("hourly", oldest=True, top=1)
        if int(now) // 900 == int(time.time()) // 900:
            break
    assert newest["start"] <= at(now) < newest["start"] + datetime.timedelta(minutes=15)
    assert oldest["start"] <= at(now) < oldest["end"] and oldest["end"] - at(now) <= datetime.timedelta(minutes=15)
    assert newest["count"] == oldest["count"] == 1 and oldest["top"] == [{"value": "t", "count": 1}]


def test_a_window_not_yet_started_is_empty(posts):
    w = posts.window("hourly", byStart=at(hour_start(+5)), top=3)
    assert w["count"] == 0 and w["top"] == []


@pytest.mark.parametrize("select, message", [
    ({}, "got none"), ({"newest": True, "oldest": True}, "got newest, oldest"),
    ({"byStart": "yesterday"}, "byStart is the date"), ({"newest": 1}, "newest is true"),
    ({"byStart": 2**62}, "byStart is the date"), ({"byStart": 253402300740000}, "before year 10000"),
])
def test_a_query_selects_exactly_one_window(posts, select, message):
    with pytest.raises(BadValueError, match=message):
        posts.window("hourly", **select)


def test_a_start_off_the_grid_is_refused_naming_the_nearest(posts):
    with pytest.raises(BadValueError, match="not the start of a window.*the nearest are"):
        posts.window("hourly", byStart=at(hour_start() + 60))


def test_the_window_verb_names_time_range_indexes(client):
    b = client["app"].create_bucket("Posts", type="hash", indices=["Tag", trending()])
    with pytest.raises(BadValueError, match="not a time-range index; window reads 'hourly'"):
        b.window("Tag_1", newest=True)
    with pytest.raises(BadValueError, match="no time-range index 'daily'; it has 'hourly'"):
        b.window("daily", newest=True)
    with pytest.raises(BadValueError, match="top is how many"):
        b.window("hourly", newest=True, top=0)
    # searches never read a time-range index
    b.insert({"At": at(hour_start()), "Tag": "x"})
    assert b.search({"At": at(hour_start())}).index_used == "none — full scan"


# -- ttl ------------------------------------------------------------------------------------------


def test_an_expired_window_is_refused_and_one_within_ttl_is_read(posts):
    with pytest.raises(BadValueError, match="has expired .*windows starting after"):
        posts.window("hourly", byStart=at(hour_start(-25)))
    posts.insert({"At": at(hour_start(-23)), "Tag": "x"})
    assert posts.window("hourly", byStart=at(hour_start(-23)))["count"] == 1


def _keys(client, bucket="Posts") -> int:
    """How many keys the bucket's first index has in LMDB."""
    with client._executor._stores[("app", bucket)].kv.read() as txn:
        return sum(1 for k in txn.cursor().iternext(values=False) if k.startswith(b"I\x00"))


def test_expired_keys_go_lazily_a_bounded_number_per_write_and_documents_stay(client, tmp_path):
    b = client["app"].create_bucket("Posts", type="hash", indices=[
        {"name": "perSecond", "fields": ["At", "Tag"], "ranked": True,
         "timeRange": {"on": "At", "range": 1, "step": 1, "ttl": 1}}])
    soon = time.time() + 1  # in a window that starts within a second and expires a second later
    b.batch_insert([{"_id_": i, "At": at(soon), "Tag": f"t{i}"} for i in range(300)])
    written = _keys(client)
    assert written == 300 + 1 + 300 + 300  # entries, the count, a count and a ranking key per value
    time.sleep(max(0.0, soon + 1.2 - time.time()))
    b.insert({"_id_": "late", "At": None, "Tag": "x"})  # a write into the index, in no window
    assert _keys(client) == written - timerange.EXPIRY_BUDGET
    while _keys(client):
        b.update({"_id_": "late"}, {"$inc": {"n": 1}})
    assert b.count() == 301  # the documents stay


# -- unique -------------------------------------------------------------------------------------


def test_unique_windows_refuse_a_second_document_naming_the_window(client):
    b = client["app"].create_bucket("Posts", type="hash", timestamps=True, indices=[
        {"name": "onePerDay", "fields": ["$createdAt", "Owner"], "unique": True,
         "timeRange": {"on": "$createdAt", "range": 86400, "step": 86400}}])
    b.insert({"_id_": "p1", "Owner": "u1"})
    b.insert({"_id_": "p2", "Owner": "u2"})
    day = int(time.time()) // 86400 * 86400
    with pytest.raises(DuplicateKeyError) as err:
        b.insert({"_id_": "p3", "Owner": "u1"})
    assert err.value.message == (
        f'Duplicate value for unique index "onePerDay" on bucket "Posts": $createdAt in the window '
        f'ISODate("{at(day).strftime("%Y-%m-%dT%H:%M:%SZ")}") to '
        f'ISODate("{at(day + 86400).strftime("%Y-%m-%dT%H:%M:%SZ")}"), Owner = "u1" is already used by document '
        '"p1". Change the value, update that document instead, or delete it first.')
    assert err.value.code == 15 and err.value.details["holder"] == "p1"
    assert b.get("p3") is None and b.window("onePerDay", newest=True)["count"] == 2
    with pytest.raises(DuplicateKeyError):
        b.update({"_id_": "p2"}, {"$set": {"Owner": "u1"}})
    b.put({"_id_": "p1", "Owner": "u1", "Text": "edited"})  # its own value: not a duplicate
    b.delete({"_id_": "p1"})
    b.insert({"_id_": "p3", "Owner": "u1"})


def test_unique_on_an_immutable_date_field(client):
    index = {"name": "onePerDay", "fields": ["Day", "Owner"], "unique": True,
             "timeRange": {"on": "Day", "range": 86400, "step": 86400}}
    b = client["app"].create_bucket("Posts", type="hash", immutable=["Day"], indices=[index])
    b.insert({"_id_": "p1", "Day": at(hour_start()), "Owner": "u1"})
    with pytest.raises(DuplicateKeyError, match="onePerDay"):
        b.insert({"_id_": "p2", "Day": at(hour_start()), "Owner": "u1"})
    with pytest.raises(BadValueError, match="'Day' of document \"p1\" is immutable"):
        b.update({"_id_": "p1"}, {"$set": {"Day": at(hour_start(-48))}})
    with pytest.raises(BadValueError, match="immutable"):
        b.put({"_id_": "p1", "Owner": "u1"})
    naive = at(hour_start()).replace(tzinfo=None)  # the same date, written without a zone: not a change
    b.put({"_id_": "p1", "Day": naive, "Owner": "u1", "Text": "edited"})
    assert b.get("p1")["Day"] == at(hour_start())


# -- the timestamps a bucket keeps -----------------------------------------------------------


def test_timestamps_are_kept_by_the_engine_and_refused_from_a_client(client):
    b = client["app"].create_bucket("Posts", type="hash", timestamps=True)
    before = datetime.datetime.now(UTC) - datetime.timedelta(milliseconds=1)
    b.insert({"_id_": "p", "Text": "hi"})
    doc = b.get("p")
    assert list(doc) == ["_id_", "$createdAt", "$updatedAt", "Text"]
    assert before <= doc["$createdAt"] == doc["$updatedAt"] <= datetime.datetime.now(UTC)
    time.sleep(0.01)
    b.update({"_id_": "p"}, {"$set": {"Text": "hi"}})  # no change: $updatedAt stays
    assert b.get("p")["$updatedAt"] == doc["$updatedAt"]
    b.update({"_id_": "p"}, {"$set": {"Text": "hello"}})
    after = b.get("p")
    assert after["$createdAt"] == doc["$createdAt"] < after["$updatedAt"]
    b.put({"_id_": "p", "Text": "hello"})  # the same document: not a change
    assert b.get("p") == after
    time.sleep(0.01)
    b.put({"_id_": "p", "Text": "again"})
    assert b.get("p")["$createdAt"] == doc["$createdAt"] and b.get("p")["$updatedAt"] > after["$updatedAt"]
    for write in (lambda: b.insert({"_id_": "q", "$createdAt": before}),
                  lambda: b.put({"_id_": "p", "$updatedAt": before}),
                  lambda: b.batch_insert([{"_id_": "r"}, {"_id_": "s", "$createdAt": before}])):
        with pytest.raises(BadValueError, match=r"\$(created|updated)At is kept by hoardDB"):
            write()
    with pytest.raises(BadValueError):
        b.update({"_id_": "p"}, {"$set": {"$createdAt": before}})
    assert b.count() == 1 and b.get("p")["$createdAt"] == doc["$createdAt"]


def test_updated_at_moves_a_document_to_the_current_windows(client):
    b = client["app"].create_bucket("Posts", type="hash", timestamps=True, indices=[
        {"name": "active", "fields": ["$updatedAt", "Tag"], "ranked": True,
         "timeRange": {"on": "$updatedAt", "range": 1, "step": 1}}])
    b.insert({"_id_": "p", "Tag": "a"})
    first = b.get("p")["$updatedAt"]
    time.sleep(1.05)
    b.update({"_id_": "p"}, {"$set": {"Tag": "b"}})
    second = b.get("p")["$updatedAt"]
    start = lambda d: at(int(d.timestamp()))  # noqa: E731
    assert b.window("active", byStart=start(first))["count"] == 0
    assert b.window("active", byStart=start(second), counts=True)["counts"] == [{"value": "b", "count": 1}]


# -- every face ---------------------------------------------------------------------------------


def test_dump_and_restore_keep_the_declaration_and_the_timestamps(client, tmp_path):
    b = client["app"].create_bucket("Posts", type="hash", timestamps=True, indices=[
        {"name": "hourly", "fields": ["$createdAt", "Tag"], "ranked": True,
         "timeRange": {"on": "$createdAt", "range": HOUR, "step": 900, "phase": 60, "ttl": 86400}}])
    b.batch_insert([{"_id_": i, "Tag": t} for i, t in enumerate("aab")])
    created = b.get(0)["$createdAt"]
    dump(client, "app", tmp_path / "out", buckets=["Posts"])
    restore(client, tmp_path / "out" / "app", db="app2")
    copy = client["app2"].Posts
    assert copy.stats()["indexes"] == b.stats()["indexes"]
    assert copy.get(0)["$createdAt"] == created
    assert copy.window("hourly", newest=True, top=1)["top"] == [{"value": "a", "count": 2}]


def test_hql_reads_a_window(client):
    client["app"].create_bucket("Post", type="hash", timestamps=True, indices=[
        {"name": "hourlyByHashtag", "fields": ["$createdAt", "hashtag"], "ranked": True,
         "timeRange": {"on": "$createdAt", "range": HOUR, "step": 900, "ttl": 86400}}])
    client["app"].Post.batch_insert([{"hashtag": t} for t in ["py", "go", "py"]])
    st = parse_statement('db.Post.window("hourlyByHashtag", {newest: true}).top(10)')
    assert st.request["args"] == {"index": "hourlyByHashtag", "newest": True, "top": 10}
    answer = client.execute({**st.request, "db": "app"})
    assert answer["result"]["top"] == [{"value": "py", "count": 2}, {"value": "go", "count": 1}]
    st = parse_statement('db.Post.window("hourlyByHashtag", {oldest: true}).counts()')
    assert client.execute({**st.request, "db": "app"})["result"]["count"] == 3
    st = parse_statement("describe bucket Post")
    shown = format_answer(st.request["op"], client.execute({**st.request, "db": "app"}))
    assert "Indexes:  hourlyByHashtag (timeRange $createdAt range 3600s step 900s ttl 86400s, ranked)" in shown


def test_the_window_verb_over_the_wire_blocking_and_asyncio(tmp_path):
    with ServerThread(tmp_path / "data", insecure=True) as server:
        with hoarddb.connect(server.url()) as c:
            b = c["app"].create_bucket("Posts", type="hash", indices=[trending(ttl=86400)])
            base = hour_start(-1)
            b.batch_insert([{"At": at(base + i), "Tag": t} for i, t in enumerate("xyx")])
            assert b.window("hourly", byStart=at(base), top=1)["top"] == [{"value": "x", "count": 2}]
            with pytest.raises(BadValueError, match="has expired"):
                b.window("hourly", byStart=at(hour_start(-30)))

        async def read():
            c = await hoarddb.aio.connect(server.url())
            try:
                return await c["app"].Posts.window("hourly", byStart=at(base), counts=True)
            finally:
                await c.close()

        assert asyncio.run(read())["counts"] == [{"value": "x", "count": 2}, {"value": "y", "count": 1}]


def test_a_bucket_with_time_range_indexes_checks_clean_and_survives_a_reopen(tmp_path):
    from hoarddb.tools.check import check
    with hoarddb.open(tmp_path / "data", ttl_sweep_seconds=0) as c:
        b = c["app"].create_bucket("Posts", type="hash", timestamps=True, indices=["Tag", trending(ttl=86400), {
            "name": "onePerDay", "fields": ["$createdAt", "Owner"], "unique": True,
            "timeRange": {"on": "$createdAt", "range": 86400, "step": 86400}}])
        b.batch_insert([{"_id_": i, "At": at(hour_start(-1) + i), "Tag": "xy"[i % 2], "Owner": i} for i in range(20)])
        b.delete({"_id_": 3})
    report = check(tmp_path / "data")
    assert report.ok, "\n".join(report.lines())
    with hoarddb.open(tmp_path / "data", ttl_sweep_seconds=0) as c:
        b = c["app"].Posts
        assert b.window("hourly", byStart=at(hour_start(-1)), top=1)["top"] == [{"value": "x", "count": 10}]
        assert b.window("onePerDay", newest=True)["count"] == 19
        with pytest.raises(DuplicateKeyError):
            b.insert({"Owner": 5})
        assert b.search({"Tag": "y"}).index_used == "Tag_1"


def test_find_and_modify_on_a_bucket_keeping_timestamps(client):
    b = client["app"].create_bucket("Counters", type="hash", timestamps=True)
    first = b.find_and_modify({"_id_": "c"}, {"$inc": {"n": 1}}, new=True, upsert=True)
    assert first["n"] == 1 and first["$createdAt"] == first["$updatedAt"]
    second = b.find_and_modify({"_id_": "c"}, {"$inc": {"n": 1}}, new=True)
    assert second["n"] == 2 and second["$createdAt"] == first["$createdAt"] <= second["$updatedAt"]
    assert b.find_and_modify({"_id_": "c"}, {"$inc": {"n": 1}})["n"] == 2
    assert b.find_and_modify({"_id_": "c"}, remove=True)["n"] == 3 and b.count() == 0


def test_check_reports_time_range_keys_changed_behind_hoarddbs_back(tmp_path):
    import lmdb
    from hoarddb.tools.check import check
    with hoarddb.open(tmp_path / "data", ttl_sweep_seconds=0) as c:
        b = c["app"].create_bucket("Posts", type="hash", indices=[trending(ttl=86400)])
        b.batch_insert([{"_id_": i, "At": at(hour_start(-1) + i), "Tag": "xy"[i % 2]} for i in range(10)])
    env = lmdb.open(str(tmp_path / "data" / "app" / "Posts" / "kv"), max_dbs=0)
    with env.begin(write=True) as txn:
        count = next(k for k in txn.cursor().iternext(values=False) if k.startswith(b"I\x00C"))
        txn.put(count, (99).to_bytes(8, "big"))
        entry = next(k for k in txn.cursor().iternext(values=False) if k.startswith(b"I\x00W"))
        txn.delete(entry)
    env.close()
    lines = "\n".join(check(tmp_path / "data").lines())
    assert 'time-range index "hourly" has 1 key(s) missing' in lines
    assert 'time-range index "hourly" has 1 key(s) with a wrong count' in lines
