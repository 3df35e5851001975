"""Regular expressions in filters: matched by the regex package, without the GIL, within a time limit."""

from __future__ import annotations

import re
import threading
import time

import pytest
from bson.regex import Regex

from hoarddb.errors import BadValueError, RegexTimeoutError
from hoarddb.values.filter import (DEFAULT_REGEX_TIMEOUT, MAX_REGEX_LENGTH, compile_filter, filter_has_regex,
                                   regex_time_limit, regex_timeout)
from hoarddb.values.update import apply_update

CATASTROPHIC = "(a|aa)+$"  # exponential on "a" * n + "b" (Python's re: hours at n = 50)
VICTIM = {"Name": "a" * 50 + "b"}


def test_a_catastrophic_pattern_stops_at_the_limit():
    with regex_time_limit(0.2):
        match = compile_filter({"Name": {"$regex": CATASTROPHIC}})
    started = time.monotonic()
    with pytest.raises(RegexTimeoutError, match=r"regex_timeout.*anchor") as caught:
        match(VICTIM)
    assert time.monotonic() - started < 5
    assert caught.value.code == 33 and "'Name'" in caught.value.message
    assert match({"Name": "aaa"})  # the limit is per value: the next document is tested as usual


def test_the_limit_is_per_value_so_long_scans_of_quick_matches_run_through():
    # Many quick matches add up to more than the limit, and none is refused: a long scan
    # is not a pathological match.
    with regex_time_limit(0.05):
        match = compile_filter({"Name": {"$regex": "b$"}})
    short = {"Name": "a" * 22 + "b"}
    started = time.monotonic()
    n = 0
    while time.monotonic() - started < 0.3:
        assert all(match(short) for _ in range(1000))
        n += 1000
    assert n > 1000
    # a filter compiled with a longer limit keeps it after the block
    with regex_time_limit(5):
        lenient = compile_filter({"Name": {"$regex": CATASTROPHIC}})
    assert lenient({"Name": "a" * 12 + "b"}) is False


def test_every_way_of_writing_a_regex_is_limited():
    with regex_time_limit(0.1):
        for flt in ({"Name": re.compile(CATASTROPHIC)}, {"Name": Regex(CATASTROPHIC)},
                    {"Name": {"$in": ["x", Regex(CATASTROPHIC)]}}, {"Name": {"$not": Regex(CATASTROPHIC)}},
                    {"Name": {"$all": [Regex(CATASTROPHIC)]}}, {"$or": [{"Name": {"$regex": CATASTROPHIC}}]},
                    {"Names": {"$elemMatch": {"$regex": CATASTROPHIC}}}):
            doc = {"Names": [VICTIM["Name"]], **VICTIM}
            with pytest.raises(RegexTimeoutError):
                compile_filter(flt)(doc)
        with pytest.raises(RegexTimeoutError):
            apply_update({"Tags": [VICTIM["Name"]]}, {"$pull": {"Tags": {"$regex": CATASTROPHIC}}})


def test_matching_lets_other_threads_run():
    # Python's re held the GIL for the whole match: nothing else in the process ran.
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    with regex_time_limit(0.5):
        match = compile_filter({"Name": {"$regex": CATASTROPHIC}})
    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        time.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(RegexTimeoutError):
            match(VICTIM)
        ended = time.monotonic()
    finally:
        stop.set()
        thread.join()
    during = [t for t in ticks if started < t < ended]
    assert len(during) >= 5, f"{len(during)} ticks of another thread in {ended - started:.2f} s of matching"


def test_the_default_limit_and_no_limit():
    assert regex_timeout() == DEFAULT_REGEX_TIMEOUT == 1.0
    with regex_time_limit(0):
        assert regex_timeout() == 0
        assert compile_filter({"Name": {"$regex": "^a+b$"}})(VICTIM)
    assert regex_timeout() == 1.0
    for bad in (-1, "1", None, float("nan"), True):
        with pytest.raises(BadValueError):
            with regex_time_limit(bad):
                pass


def test_ordinary_patterns_match_as_before():
    m = lambda flt, doc: compile_filter(flt)(doc)  # noqa: E731
    assert m({"a": {"$regex": "^Jo", "$options": "i"}}, {"a": "john"})
    assert m({"a": re.compile(r"\d{3}-\d{4}")}, {"a": "call 555-1234"})
    assert m({"a": {"$regex": "^x.y$", "$options": "s"}}, {"a": "x\ny"})
    assert m({"a": {"$regex": "^b$", "$options": "m"}}, {"a": "a\nb"})
    assert m({"a": {"$regex": " b # a comment", "$options": "x"}}, {"a": "ab"})
    assert m({"a": Regex("^x", "i")}, {"a": Regex("^x", "i")})  # a stored regex equals the same regex
    assert not m({"a": Regex("^x", "i")}, {"a": Regex("^x")})
    assert m({"a": {"$regex": "(?:a{1,1000}){1,1000}"}}, {"a": "aaa"})


def test_patterns_too_big_to_compile_are_refused():
    with pytest.raises(BadValueError, match="repeats too much"):
        compile_filter({"a": {"$regex": "(?:(?:a{1000}){1000}){1000}"}})  # tens of GB in the regex package
    with pytest.raises(BadValueError, match="repeats too much"):
        compile_filter({"a": {"$regex": "a{200000}"}})
    with pytest.raises(BadValueError, match="characters long"):
        compile_filter({"a": {"$regex": "a" * (MAX_REGEX_LENGTH + 1)}})
    with pytest.raises(BadValueError, match="bad regular expression"):
        compile_filter({"a": {"$regex": "(" * 5000 + ")" * 5000}})
    compile_filter({"a": {"$regex": "a" * MAX_REGEX_LENGTH}})
    compile_filter({"a": {"$regex": "(?:a{300}){300}"}})  # 90,000 items: under the bound


def test_filter_has_regex():
    assert not filter_has_regex(None) and not filter_has_regex({"a": 1, "b": {"$in": [1, 2]}})
    assert filter_has_regex({"a": {"$regex": "x"}}) and filter_has_regex({"a": re.compile("x")})
    assert filter_has_regex({"$or": [{"b": 1}, {"a": {"$in": [Regex("x")]}}]})
    assert filter_has_regex({"a": {"$elemMatch": {"b": {"$not": Regex("x")}}}})
