"""The per-topic step: move the fewest replicas of one topic to meet its quotas and racks.

A pure function of one topic's partitions, its quotas (from the global step), the broker
layout and a few knobs, so a Spark job can run it per topic group (``applyInPandas``) in
parallel. Plain lists and ints inside; :class:`TopicMove` tuples out.

With ``need[b] = quota[b] - replicas of the topic on b`` (removed brokers: quota 0):

1. **RF decreases** (explicitly requested only) drop replicas from the brokers most over
   their quota, never below the rack spread and not the preferred leader if avoidable.
2. **Open slots.** Replicas on removed brokers, RF increases and, for partitions spread over
   fewer than ``min(RF, racks)`` racks, a replica of a doubled rack (taken from the broker most
   over its quota) leave open slots. Each slot is filled, at the same position, by the broker
   with the largest need among those that keep the rack spread reachable.
3. **Balance.** Each broker under its quota takes replicas from brokers over theirs: the
   replacement happens in place (the new replica takes the old one's position, so the
   preferred leader stays unless the leader's replica itself moves), only where the receiver
   is not already a replica and the partition keeps ``min(RF, racks)`` racks. Followers are
   taken before preferred leaders (across all over-quota brokers), small partitions before
   large ones (``use_sizes``); replicas this plan placed are re-placed first (free).
4. **Repair.** If a receiver finds no valid replica (every candidate would double a rack or a
   broker), an alternating path re-routes earlier moves: receiver ``y`` takes over a move
   that went to ``y'``, and ``y'`` looks again, until one reaches an over-quota broker's
   replica. This costs no extra move. Only when no such path exists does a broker at its
   quota pass one replica on (one extra move).
5. **Keep leaders.** A preferred leader's replica moved only when no follower fitted; a last
   pass swaps such a move for an equivalent one that moves a follower instead (directly, or
   by re-routing a forced replica through another broker): same moves, same quotas.

Every replica placed is one move (a replica copied to a new broker), so the moves are the
topic's inflow ``sum(max(0, quota - count))`` plus any second hops forced by racks; the global
step chooses quotas that keep that close to the lower bound (see :mod:`.lower_bound`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from airflow_kafka_reassign.core.planner.types import (
    BrokerLayout,
    TopicMove,
    TopicParams,
    TopicPartitions,
    as_quota_map,
)

_OPEN = -1


def plan_topic(
    topic: TopicPartitions,
    quotas: Sequence[int] | Mapping[int, int],
    layout: BrokerLayout,
    params: TopicParams | None = None,
) -> list[TopicMove]:
    """Plan one topic; returns the partitions that change (see the module doc)."""
    return _TopicPlanner(topic, as_quota_map(layout.brokers, quotas), layout, params or TopicParams()).run()


class _TopicPlanner:
    def __init__(
        self, topic: TopicPartitions, quota: dict[int, int], layout: BrokerLayout, params: TopicParams
    ) -> None:
        self.topic = topic
        self.params = params
        self.live = set(layout.brokers)
        self.brokers = layout.brokers
        self.rack_of = layout.rack_of
        self.k_racks = layout.n_racks
        n = len(topic.partitions)
        self.frozen = topic.frozen if topic.frozen is not None else [False] * n
        self.cur: list[list[int]] = [list(r) for r in topic.replicas]
        counts: dict[int, int] = {}
        for reps in topic.replicas:
            for b in reps:
                counts[b] = counts.get(b, 0) + 1
        self.need: dict[int, int] = {b: quota.get(b, 0) - counts.get(b, 0) for b in layout.brokers}
        for b, c in counts.items():
            if b not in self.live:
                self.need[b] = -c
        #: receiver broker -> [(partition index, position)] it was placed at by this plan
        self.placed: dict[int, list[tuple[int, int]]] = {}
        self.original = [set(r) for r in topic.replicas]

    # -- helpers -----------------------------------------------------------------------

    def rack(self, b: int) -> int:
        return self.rack_of.get(b, -1)

    def spread_needed(self, p: int) -> int:
        return min(self.topic.target_rf[p], self.k_racks)

    def replace_ok(self, reps: list[int], x: int, y: int, k: int) -> bool:
        """Can ``y`` replace ``x`` in ``reps`` without losing the rack spread ``k``?"""
        if y in reps:
            return False
        if self.k_racks <= 1:
            return True
        rack_of = self.rack_of
        rx, ry = rack_of.get(x, -1), rack_of.get(y, -1)
        if rx == ry:
            return True
        others = {rack_of.get(b, -1) for b in reps if b != x and b != _OPEN}
        if ry in others:  # y adds no rack: fine only if x's rack was doubled or spread suffices
            return rx in others or len(others) >= k
        return True

    def place(self, p: int, pos: int, y: int) -> None:
        self.cur[p][pos] = y
        self.need[y] -= 1
        self.placed.setdefault(y, []).append((p, pos))

    # -- phases ------------------------------------------------------------------------

    def run(self) -> list[TopicMove]:
        self.shrink()
        self.open_and_fill()
        if self.params.balance:
            self.balance()
        return self.moves()

    def shrink(self) -> None:
        """Phase 1: explicit RF decreases."""
        need, live = self.need, self.live
        for p, reps in enumerate(self.cur):
            target = self.topic.target_rf[p]
            if self.frozen[p] or len(reps) <= target:
                continue
            k = min(target, self.k_racks)
            while len(reps) > target:
                best_pos, best_key = 0, None
                for pos, b in enumerate(reps):
                    rest = {self.rack(o) for i, o in enumerate(reps) if i != pos}
                    key = (b in live, len(rest) < k, pos == 0, need.get(b, 0), -pos)
                    if best_key is None or key < best_key:
                        best_pos, best_key = pos, key
                b = reps.pop(best_pos)
                need[b] = need.get(b, 0) + 1

    def open_and_fill(self) -> None:
        """Phase 2: open slots for removed brokers, RF increases and rack fixes; fill them."""
        need, live, k_racks = self.need, self.live, self.k_racks
        fix_racks = self.params.fix_racks and k_racks > 1
        opened: list[int] = []
        for p, reps in enumerate(self.cur):
            if self.frozen[p]:
                continue
            slots = 0
            for pos, b in enumerate(reps):
                if b not in live:
                    reps[pos] = _OPEN
                    need[b] += 1
                    slots += 1
            add = self.topic.target_rf[p] - len(reps)
            if add > 0:
                reps.extend([_OPEN] * add)
                slots += add
            if fix_racks:
                k = self.spread_needed(p)
                rack_of = self.rack_of
                while True:
                    racks = [rack_of.get(b, -1) for b in reps if b != _OPEN]
                    if len(set(racks)) + slots >= k:
                        break
                    # evict from a doubled rack: the replica most over quota, not the leader
                    best_pos, best_key = -1, None
                    for pos, b in enumerate(reps):
                        if b == _OPEN or racks.count(rack_of.get(b, -1)) < 2:
                            continue
                        key = (need[b], pos == 0, -pos)
                        if best_key is None or key < best_key:
                            best_pos, best_key = pos, key
                    if best_pos < 0:
                        break
                    need[reps[best_pos]] += 1
                    reps[best_pos] = _OPEN
                    slots += 1
            if slots:
                opened.append(p)
        for p in opened:
            reps = self.cur[p]
            k = min(self.topic.target_rf[p], k_racks)
            for pos in range(len(reps)):
                if reps[pos] != _OPEN:
                    continue
                present = [b for b in reps if b != _OPEN]
                present_racks = {self.rack(b) for b in present}
                still_open = reps.count(_OPEN) - 1
                best_y, best_fit = -1, (False, False, 0, False, 0)
                for y in self.brokers:
                    if y in present:
                        continue
                    new_rack = self.rack(y) not in present_racks
                    rack_ok = len(present_racks) + new_rack + still_open >= k
                    fit = (rack_ok, need[y] > 0, need[y], new_rack, -y)
                    if best_y < 0 or fit > best_fit:
                        best_y, best_fit = y, fit
                if best_y < 0:  # pragma: no cover - RF <= live brokers is validated before
                    raise ValueError(f"partition {self.topic.topic}-{self.topic.partitions[p]}: no broker left")
                self.place(p, pos, best_y)

    def balance(self) -> None:
        """Phases 3 and 4: receivers take replicas from brokers over their quota."""
        need = self.need
        overs = [b for b in sorted(need) if need[b] < 0]
        unders = [b for b in self.brokers if need[b] > 0]
        if not overs or not unders:
            return
        sizes = self.topic.sizes if self.params.use_sizes else None
        over_set = set(overs)
        cand: dict[int, list[int]] = {x: [] for x in overs}
        for p, reps in enumerate(self.cur):
            if self.frozen[p]:
                continue
            for b in reps:
                if b in over_set:
                    cand[b].append(p)
        cur = self.cur
        original = self.original
        # replicas this plan placed go first (re-placing them costs no extra move), then
        # followers before preferred leaders, then small partitions
        for x, lst in cand.items():

            def key(p: int, x: int = x) -> tuple[bool, bool, int, int]:
                return (x in original[p], cur[p][0] == x, sizes[p] if sizes is not None else 0, p)

            lst.sort(key=key)
        self.cand = cand
        self.ptr = dict.fromkeys(overs, 0)
        self.over_order = sorted(overs, key=lambda x: (need[x], x))
        unders.sort(key=lambda b: (-need[b], b))
        stuck: list[int] = []
        for y in unders:
            while need[y] > 0:
                if not self.take_direct(y):
                    stuck.append(y)
                    break
        for y in stuck:
            while need[y] > 0 and any(need[x] < 0 for x in overs):
                if not (self.augment(y, allow_extra=False) or self.augment(y, allow_extra=True)):
                    break
        self.keep_leaders()

    def keep_leaders(self) -> None:
        """Undo preferred-leader moves at no cost in moves or quotas.

        A leader move ``p: x -> y`` (x still live) is undone when either

        * a follower replica of ``x`` in an untouched partition ``p2`` can go to ``y``; or
        * ``x`` received a replica in a slot ``s`` (from a removed broker, say) that another
          broker ``w`` can take, and a follower replica of ``w`` can go to ``y``:
          ``s -> w, w -> y`` replaces ``s -> x, x -> y``.

        Every broker keeps its count; the number of moves stays the same.
        """
        cur, original = self.cur, self.topic.replicas
        untouched = [not self.frozen[p] and tuple(reps) == original[p] for p, reps in enumerate(cur)]
        followers: dict[int, list[int]] = {}
        for p, reps in enumerate(cur):
            if untouched[p]:
                for b in reps[1:]:
                    followers.setdefault(b, []).append(p)

        def follower_to(w: int, y: int, skip: int) -> int | None:
            for p2 in followers.get(w, ()):
                reps2 = cur[p2]
                if p2 != skip and untouched[p2] and w in reps2[1:] and y not in reps2 and self.replace_ok(
                    reps2, w, y, self.spread_needed(p2)
                ):
                    return p2
            return None

        budget = 20_000  # bounded search: this only saves leader changes
        for p, reps in enumerate(cur):
            if budget <= 0:
                break
            if self.frozen[p] or not original[p] or reps[0] == original[p][0]:
                continue
            x, y = original[p][0], reps[0]
            if x not in self.live or x in reps or y in original[p] or len(reps) != len(original[p]):
                continue
            if not self.replace_ok(reps, y, x, self.spread_needed(p)):
                continue
            restored = [x if b == y else b for b in reps]
            p2 = follower_to(x, y, p)
            if p2 is not None:
                cur[p] = restored
                cur[p2][cur[p2].index(x)] = y
                untouched[p2] = False
                continue
            for ps, pos in list(self.placed.get(x, ())):
                slot = cur[ps]
                if ps == p or slot[pos] != x:
                    continue
                for w in self.brokers:
                    budget -= 1
                    if w in (x, y) or w in slot or not self.replace_ok(slot, x, w, self.spread_needed(ps)):
                        continue
                    pw = follower_to(w, y, ps)
                    if pw is None or pw == p:
                        continue
                    cur[p] = restored
                    slot[pos] = w
                    cur[pw][cur[pw].index(w)] = y
                    untouched[pw] = False
                    self.placed[x].remove((ps, pos))
                    self.placed.setdefault(w, []).append((ps, pos))
                    break
                else:
                    continue
                break

    def find_direct(self, y: int) -> tuple[int, int, int] | None:
        """A replica (partition, position, broker) of an over-quota broker that ``y`` may take:
        a follower of any such broker if one fits, a preferred leader only otherwise."""
        need, cur = self.need, self.cur
        fallback: tuple[int, int, int] | None = None
        for x in self.over_order:
            if need[x] >= 0:
                continue
            lst = self.cand[x]
            i = self.ptr[x]
            while i < len(lst) and x not in cur[lst[i]]:
                i += 1
            self.ptr[x] = i
            for j in range(i, len(lst)):
                p = lst[j]
                reps = cur[p]
                if x not in reps:
                    continue
                pos = reps.index(x)
                if pos == 0 and fallback is not None:
                    break  # the rest of x's list are leaders too; a fallback exists
                if self.replace_ok(reps, x, y, self.spread_needed(p)):
                    if pos > 0 or x not in self.original[p]:
                        return p, pos, x
                    fallback = (p, pos, x)
                    break
        return fallback

    def take_direct(self, y: int) -> bool:
        found = self.find_direct(y)
        if found is None:
            return False
        p, pos, x = found
        self.need[x] += 1
        self.place(p, pos, y)
        return True

    def augment(self, y0: int, *, allow_extra: bool) -> bool:
        """Phase 4: an alternating path from receiver ``y0`` to an over-quota replica.

        Edges from a receiver ``y``: take over a slot this plan gave to ``y2`` (no extra move),
        or, with ``allow_extra``, take an untouched replica of a broker ``y2`` that is not over
        its quota (one extra move); ``y2`` then needs a replica in turn.
        """
        cur = self.cur
        parent: dict[int, tuple[int, int, int] | None] = {y0: None}
        queue = deque([y0])
        original = self.topic.replicas
        while queue:
            y = queue.popleft()
            found = self.find_direct(y)
            if found is not None:
                p, pos, x = found
                # apply the path back to y0: each step y takes (p, pos) from y2
                self.need[x] += 1
                self.place(p, pos, y)
                node = y
                while parent[node] is not None:
                    prev, pp, ppos = parent[node]  # type: ignore[misc]
                    # prev takes (pp, ppos) from node
                    if not self.replace_ok(cur[pp], node, prev, self.spread_needed(pp)) or cur[pp][ppos] != node:
                        return False  # pragma: no cover - a conflict inside one partition
                    self._unplace(node, pp, ppos)
                    self.place(pp, ppos, prev)
                    node = prev
                return True
            for y2, slots in self.placed.items():
                if y2 in parent:
                    continue
                for p, pos in slots:
                    if cur[p][pos] == y2 and self.replace_ok(cur[p], y2, y, self.spread_needed(p)):
                        parent[y2] = (y, p, pos)
                        queue.append(y2)
                        break
            if allow_extra:
                for p, reps in enumerate(cur):
                    if self.frozen[p]:
                        continue
                    for pos, y2 in enumerate(reps):
                        if (
                            y2 in parent
                            or y2 not in self.live
                            or self.need[y2] < 0
                            or y2 != (original[p][pos] if pos < len(original[p]) else None)
                        ):
                            continue
                        if self.replace_ok(reps, y2, y, self.spread_needed(p)):
                            parent[y2] = (y, p, pos)
                            queue.append(y2)
        return False

    def _unplace(self, y: int, p: int, pos: int) -> None:
        """``y`` gives up its replica at (p, pos): undo a placement or give an original away."""
        self.need[y] += 1
        slots = self.placed.get(y)
        if slots and (p, pos) in slots:
            slots.remove((p, pos))

    def moves(self) -> list[TopicMove]:
        t = self.topic
        out = []
        sizes = t.sizes
        for p, reps in enumerate(self.cur):
            before = t.replicas[p]
            after = tuple(reps)
            if after != tuple(before):
                out.append(TopicMove(t.topic, t.partitions[p], tuple(before), after, sizes[p] if sizes else 0))
        return out
