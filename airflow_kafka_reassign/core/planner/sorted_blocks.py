"""A sorted list kept in blocks: the disk step's per-broker lists of replicas, sorted by size.

The disk step (:mod:`.disk`) keeps, per broker, its movable replicas as (size, entry) pairs (one
int each, :func:`~.disk_index.pack`) in ascending order, and moves one out of a broker's lists and
into another's at every move. In one Python list that is a ``memmove`` of half the list per insert
or delete: at 10M replicas on 100 brokers, lists of 100,000 pairs, six to eight of them per move,
170,000 moves. Here the pairs sit in blocks of at most ``2 * LOAD``: an insert or delete moves at
most that many pointers, after a bisect over the blocks' largest pairs. The order, and where a
pair goes among equal ones, are those of :func:`bisect.insort` and a delete at
:func:`bisect.bisect_left` on one sorted list (``tests/unit/core/test_planner_sorted_blocks.py``
compares both on random operations).

Reading is by walks from a bound, which is what the step does (the largest pairs no larger than a
limit, downwards; the smallest ones above a floor, upwards; the first few): no positional index.
A walk must not outlive a change to the list.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator
from itertools import chain, islice

#: Half a block's most pairs (a block is split above twice this).
LOAD = 1000

Pair = int
"""What the lists hold: the disk step's (size, entry) as one int (:func:`~.disk_index.pack`)."""
Bound = float
"""Where a walk starts (an item or a limit between items; ``inf``: above every item)."""


class SortedBlocks:
    """:data:`Pair` items in ascending order, in blocks."""

    __slots__ = ("_blocks", "_len", "_maxes")

    def __init__(self, items: Iterable[Pair] = ()) -> None:
        """``items`` already in ascending order."""
        data = list(items)
        self._blocks: list[list[Pair]] = [data[i:i + LOAD] for i in range(0, len(data), LOAD)]
        self._maxes: list[Pair] = [b[-1] for b in self._blocks]
        self._len = len(data)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Pair]:
        return chain.from_iterable(self._blocks)

    def __repr__(self) -> str:
        return f"SortedBlocks({list(self)!r})"

    def first(self) -> Pair:
        """The smallest item (the list must not be empty)."""
        return self._blocks[0][0]

    def add(self, item: Pair) -> None:
        """Insert ``item`` after any equal ones (:func:`bisect.insort`)."""
        maxes, blocks = self._maxes, self._blocks
        self._len += 1
        if not maxes:
            blocks.append([item])
            maxes.append(item)
            return
        i = bisect_right(maxes, item)  # the first block whose largest is above ``item``
        if i == len(maxes):
            i -= 1
            block = blocks[i]
            block.append(item)
            maxes[i] = item
        else:
            block = blocks[i]
            insort(block, item)
        if len(block) > 2 * LOAD:
            rest = block[LOAD:]
            del block[LOAD:]
            blocks.insert(i + 1, rest)
            maxes[i] = block[-1]
            maxes.insert(i + 1, rest[-1])

    def discard(self, item: Pair) -> bool:
        """Take out the first item equal to ``item``; whether there was one."""
        maxes, blocks = self._maxes, self._blocks
        i = bisect_left(maxes, item)  # the first block whose largest is not below ``item``
        if i == len(maxes):
            return False
        block = blocks[i]
        j = bisect_left(block, item)
        if block[j] != item:
            return False
        del block[j]
        self._len -= 1
        if not block:
            del blocks[i]
            del maxes[i]
        elif j == len(block):
            maxes[i] = block[-1]
        return True

    def down_from(self, bound: Bound) -> Iterator[Pair]:
        """The items not above ``bound``, largest first."""
        blocks = self._blocks
        i = bisect_right(self._maxes, bound)  # blocks before ``i`` are wholly at or below it
        head: Iterator[Pair] = iter(())
        if i < len(blocks):
            block = blocks[i]
            head = islice(reversed(block), len(block) - bisect_right(block, bound), None)
        return chain(head, chain.from_iterable(map(reversed, blocks[i - 1::-1] if i else ())))

    def up_from(self, bound: Bound) -> Iterator[Pair]:
        """The items above ``bound``, smallest first."""
        blocks = self._blocks
        i = bisect_right(self._maxes, bound)
        if i == len(blocks):
            return iter(())
        block = blocks[i]
        return chain(islice(block, bisect_right(block, bound), None), chain.from_iterable(blocks[i + 1:]))
