"""Filters whose evaluation could cost far more than their size suggests stay linear."""

from __future__ import annotations

import time

from bson.regex import Regex
from hypothesis import given, settings
from hypothesis import strategies as st

from hoarddb.values.filter import compile_filter
from hoarddb.values.order import values_equal
from hoarddb.values.update import apply_update

from .values_strategies import mixed


def test_all_of_many_values_is_linear():
    # Regression: each value of $all scanned the whole array, 10^8 comparisons here
    # (about 6 s for one document, on a read thread, per document of the bucket).
    tags = [f"t{i}" for i in range(10_000)]
    doc = {"Tags": tags}
    started = time.monotonic()
    assert compile_filter({"Tags": {"$all": tags}})(doc)
    assert not compile_filter({"Tags": {"$all": tags + ["missing"]}})(doc)
    assert compile_filter({"Tags": {"$all": ["t1"] * 100_000}})(doc)
    assert time.monotonic() - started < 2


def test_all_of_many_values_keeps_its_meaning():
    values = [1, 2.0, "x", {"a": 1}, [1, 2], None, 7, 8, 9, 10]
    doc = {"f": [1, 2, "x", {"a": 1}, [1, 2], None, 7, 8, 9, 10, 11]}
    assert compile_filter({"f": {"$all": values}})(doc)
    assert not compile_filter({"f": {"$all": values + [12]}})(doc)
    # the whole array is one of the field's values, as for a single value
    assert compile_filter({"f": {"$all": [doc["f"]] + list(range(7, 11)) + [1, 2, "x", 2.0]}})(doc)
    # null matches a missing field, a regex matches strings, numbers by value
    assert compile_filter({"g": {"$all": [None]}})(doc)
    assert compile_filter({"f": {"$all": [Regex("^x$"), 1, 2, 7, 8, 9, 10, 11, 1.0, 2.0]}})(doc)
    assert not compile_filter({"f": {"$all": [Regex("^y$"), 1, 2, 7, 8, 9, 10, 11, 1.0, 2.0]}})(doc)
    assert compile_filter({"n": {"$all": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}})({"n": list(range(1, 11))})
    assert not compile_filter({"n": {"$all": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}})({"n": 1})


def test_add_to_set_and_pull_all_of_many_values_are_linear():
    # Regression: every value was compared with every element: 2,000 values against an
    # array of 200,000 took 70 s, in the group commit, every other client's write waiting.
    doc = {"arr": list(range(20_000))}
    news = list(range(-2_000, 0)) + list(range(0, 2_000))
    started = time.monotonic()
    added = apply_update(doc, {"$addToSet": {"arr": {"$each": news}}})
    pulled = apply_update(doc, {"$pullAll": {"arr": news}})
    assert time.monotonic() - started < 2
    assert added["arr"] == doc["arr"] + list(range(-2_000, 0))
    assert pulled["arr"] == list(range(2_000, 20_000))


@settings(max_examples=100, deadline=None)
@given(st.lists(mixed, min_size=70, max_size=80), st.lists(mixed, min_size=60, max_size=70))
def test_keyed_add_to_set_and_pull_all_agree_with_pairwise(array, values):
    # Past _KEYED_ABOVE comparisons (here always: 70 x 60 > 4096) the elements are keyed;
    # equal values have equal keys, so the answer is the pairwise one.
    doc = {"arr": array}
    added = []
    for v in values:
        if not any(values_equal(e, v) for e in array + added):
            added.append(v)
    pulled = [e for e in array if not any(values_equal(e, v) for v in values)]
    with_keys = apply_update(doc, {"$addToSet": {"arr": {"$each": values}}})["arr"]
    assert len(with_keys) == len(array) + len(added)
    assert all(values_equal(a, b) for a, b in zip(with_keys, array + added))
    without = apply_update(doc, {"$pullAll": {"arr": values}})["arr"]
    assert len(without) == len(pulled) and all(values_equal(a, b) for a, b in zip(without, pulled))
