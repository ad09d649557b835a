"""lite.plan_cache.PlanCache: the least recently used entry goes first, past the entry bound or the
byte budget, and the newest entry always stays."""

from __future__ import annotations

import pytest

from lite.plan_cache import PlanCache


def test_the_least_recently_used_entry_goes_first():
    cache: PlanCache[str] = PlanCache(entries=3)
    for key in "abc":
        cache.put(key, key.upper())
    assert cache.get("a") == "A"  # a is now the most recently used: b goes next
    cache.put("d", "D")
    assert cache.keys() == ["c", "a", "d"]
    cache.put("e", "E")
    assert cache.keys() == ["a", "d", "e"] and "c" not in cache and cache.get("c") is None


def test_reading_without_get_marks_nothing_as_used():
    cache: PlanCache[int] = PlanCache(entries=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache["a"] == 1 and cache.items() == [("a", 1), ("b", 2)] and list(cache) == ["a", "b"]
    cache.put("c", 3)
    assert cache.keys() == ["b", "c"]


def test_a_value_of_none_is_kept_and_told_from_a_miss():
    cache: PlanCache[None] = PlanCache()
    missing = object()
    cache.put("declined", None)
    assert cache.get("declined", missing) is None and cache.get("other", missing) is missing


def test_the_byte_budget_drops_the_least_recently_used_until_it_holds():
    cache: PlanCache[str] = PlanCache(entries=10, budget=100)
    cache.put("a", "a", 40)
    cache.put("b", "b", 40)
    cache.get("a")
    cache.put("c", "c", 40)  # 120 bytes: b, the least recently used, goes
    assert cache.keys() == ["a", "c"] and cache.nbytes == 80
    cache.put("a", "a again", 10)  # replacing an entry counts its new size only
    assert cache.nbytes == 50 and cache.keys() == ["c", "a"]
    cache.pop("c")
    assert cache.nbytes == 10 and len(cache) == 1


def test_an_entry_larger_than_the_budget_stays_alone():
    cache: PlanCache[str] = PlanCache(entries=10, budget=100)
    cache.put("a", "a", 30)
    cache.put("big", "big", 500)
    assert cache.keys() == ["big"] and cache.nbytes == 500
    cache.put("b", "b", 30)
    assert cache.keys() == ["b"] and cache.nbytes == 30


def test_clear_empties_it():
    cache: PlanCache[str] = PlanCache()
    cache.put("a", "a", 7)
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0


@pytest.mark.parametrize("entries, budget", [(0, 10), (1, -1)])
def test_bounds_that_keep_nothing_are_refused(entries, budget):
    with pytest.raises(ValueError, match="at least one entry"):
        PlanCache(entries=entries, budget=budget)


def test_affords_tells_whether_more_bytes_fit_and_an_empty_cache_affords_any():
    cache: PlanCache[str] = PlanCache(budget=100)
    assert cache.affords(500)  # the one entry that may exceed the budget
    cache.put("a", "a", 60)
    assert cache.affords(40) and not cache.affords(41)
