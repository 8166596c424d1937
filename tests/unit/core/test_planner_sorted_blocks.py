"""The disk step's blocked sorted lists (core/planner/sorted_blocks.py) against one sorted Python
list with :mod:`bisect` (what the disk step used before), on random inserts, deletes and walks,
with blocks small enough to split and empty many times."""

from __future__ import annotations

import bisect
import random

import pytest

from airflow_kafka_reassign.core.planner import sorted_blocks
from airflow_kafka_reassign.core.planner.sorted_blocks import SortedBlocks


def drop(lst: list[int], item: int) -> bool:
    """The disk step's delete from one sorted list: the first equal item, at bisect_left."""
    i = bisect.bisect_left(lst, item)
    if i < len(lst) and lst[i] == item:
        del lst[i]
        return True
    return False


@pytest.mark.parametrize("seed", range(6))
def test_same_order_and_walks_as_one_sorted_list(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    monkeypatch.setattr(sorted_blocks, "LOAD", 3)
    rng = random.Random(seed)
    start = sorted(rng.randint(0, 300) for _ in range(rng.randint(0, 25)))
    ref = list(start)
    blocks = SortedBlocks(start)
    for _ in range(600):
        op = rng.random()
        item = rng.randint(0, 300)
        if op < 0.4:
            bisect.insort(ref, item)
            blocks.add(item)
        elif op < 0.75:
            if ref and rng.random() < 0.7:
                item = rng.choice(ref)  # mostly items that are there
            assert blocks.discard(item) == drop(ref, item)
        bound = rng.randint(-1, 301) + rng.choice((0, 0.5, float("inf")))
        cut = bisect.bisect_right(ref, bound)
        assert list(blocks.down_from(bound)) == ref[:cut][::-1]
        assert list(blocks.up_from(bound)) == ref[cut:]
        assert list(blocks) == ref
        assert len(blocks) == len(ref)
        if ref:
            assert blocks.first() == ref[0]
    assert len(blocks._blocks) > 2  # the walks crossed blocks


def test_an_empty_list() -> None:
    blocks = SortedBlocks()
    assert not blocks
    assert list(blocks.down_from(5)) == []
    assert list(blocks.up_from(5)) == []
    assert blocks.discard(1) is False
    blocks.add(1)
    assert blocks.first() == 1
    assert blocks.discard(1) is True
    assert not blocks and list(blocks) == []
