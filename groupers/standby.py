"""Standby replicas: the ``host-affinity`` phase after the active assignment.

With ``standby_replicas=N`` every task gets ``min(N, P - 1)`` standby copies (P live processors),
each on a processor other than its active, never two copies of a task on one processor. The
active assignment is decided first and never changed by this phase. Rules, in this order:

1. **Balance.** Processor p takes at most ``ceil(S * cap(p) / sum(cap))`` standbys, S being the
   number of standbys to place (a hard cap). When every processor under its cap already holds a
   copy of the task, a full processor hands one of its standbys to one of those (a swap); only
   if no swap exists does a copy go over a cap (to the most spread, least loaded processor).
2. **Spread.** A copy goes where it shares least of the location path with the task's other
   copies (active included): another zone first, then another rack, then another host, then any
   other processor: the *spread* of a place is its longest common prefix with any copy.
3. **Stickiness.** A processor that already holds a copy of the task's state
   (``GrouperMetadata.task_state``, any lag) keeps it (pass 1, before any new copy is placed)
   unless a processor under its cap *in the end* offers a better spread: the held copies are
   taken first (a task's most spread, then lowest lag; a processor keeps the most spread, then
   lowest lag, up to its cap), then every kept copy beaten on spread by a processor still under
   its cap is dropped, until none is. Judging on the final loads, not while copies are taken
   one by one, keeps a copy whose better places are filled by their own held copies later.
   Feeding an answer's standbys back as ``task_state`` with the same actives gives the same
   standbys (one replica; see the tests).
4. **Load**, then a fixed interleaved order of processors (round-robin over the location tree, so
   that equal loads alternate zones), then nothing: the answer is deterministic.

Cost: each copy takes a pop from one heap of (load, order) entries, plus the pops of entries
that are too close to the task's copies (few, as equal loads alternate zones), and O(N * depth)
for the best spread: about O(T * N * log P) in all. With one replica the tasks sharing an active
processor are placed as a group (:meth:`_Placer.place_group`): the best spread and each
processor's spread from that active are computed once per group, not per task.
The groups are placed in the interleaved order of their active processors (the heap's own
tie-break): then each processor's copies alternate evenly over the others, whatever the order of
processor ids against locations, and a lost processor's tasks find room at their copies (the
failover keeps balance first).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping

from groupers.api import GrouperMetadata
from groupers.locations import Path, common_depth, location_path

__all__ = ["place_standbys"]


def place_standbys(
    active: Mapping[str, list[str]], metadata: GrouperMetadata, replicas: int
) -> dict[str, list[str]]:
    """Processor id -> the task names it keeps a standby of (every processor of ``active``)."""
    if replicas <= 0 or len(active) < 2:
        return {pid: [] for pid in active}
    owner = {name: pid for pid, names in active.items() for name in names}
    copies = min(replicas, len(active) - 1)
    placer = _Placer(active, metadata, len(owner) * copies)
    chosen: dict[str, list[str]] = {name: [pid] for name, pid in owner.items()}
    state = metadata.task_state
    placer.copies = chosen
    # Tasks sharing an active, the groups in the heap's tie-break order (the interleaved order),
    # so that each processor's copies alternate evenly over the others.
    group_order = sorted(active, key=placer.rank.__getitem__)
    groups = [sorted(active[pid]) for pid in group_order]
    if state:  # pass 1: stickiness
        placer.keep_held([name for group in groups for name in group], state, chosen, copies)
    standbys: dict[str, list[str]] = {pid: [] for pid in active}
    for pid, group in zip(group_order, groups, strict=True):  # pass 2: the rest, by group
        if copies == 1:
            placer.place_group(pid, group, chosen)
        for name in group:
            held = chosen[name]
            while len(held) <= copies:
                held.append(placer.place(name, held))
    for name, copies_of in chosen.items():  # build_containers sorts each list
        if len(copies_of) == 2:
            standbys[copies_of[1]].append(name)
        else:
            for pid in copies_of[1:]:
                standbys[pid].append(name)
    return standbys


def _interleaved(paths: Mapping[str, Path]) -> dict[str, int]:
    """A fixed order of processors that alternates subtrees at every level of the location tree
    (zone-a's first, zone-b's first, ..., zone-a's second, ...): processor id -> rank."""
    children: dict[Path, set[Path]] = defaultdict(set)
    here: dict[Path, list[str]] = defaultdict(list)
    for pid in sorted(paths):
        path = paths[pid]
        here[path].append(pid)
        for depth in range(len(path)):
            children[path[:depth]].add(path[: depth + 1])

    def order(node: Path) -> list[str]:
        runs = [order(child) for child in sorted(children[node])]
        merged = list(here[node])
        for i in range(max((len(run) for run in runs), default=0)):
            merged.extend(run[i] for run in runs if i < len(run))
        return merged

    return {pid: rank for rank, pid in enumerate(order(()))}


class _Placer:
    """Loads, caps and the heap of processors still under their cap."""

    def __init__(
        self, active: Mapping[str, list[str]], metadata: GrouperMetadata, total: int
    ) -> None:
        processors = sorted(active)
        self.path = {pid: location_path(metadata.processor_locality[pid]) for pid in processors}
        whole = sum(metadata.capacity(pid) for pid in processors)
        self.cap = {pid: -(-total * metadata.capacity(pid) // whole) for pid in processors}
        self.load = dict.fromkeys(processors, 0)
        self.rank = _interleaved(self.path)
        self.depth = max((len(p) for p in self.path.values()), default=0)
        self.under: dict[Path, int] = defaultdict(int)  # processors under their cap, per subtree
        self.heap: list[tuple[int, int, str]] = []
        self.held: dict[str, set[str]] = {pid: set() for pid in processors}  # standbys per pid
        self.copies: dict[str, list[str]] = {}  # task -> its copies, active first (set by caller)
        for pid in processors:
            if self.cap[pid] > 0:
                self._count(pid, 1)
                self.heap.append((0, self.rank[pid], pid))
        heapq.heapify(self.heap)

    def _count(self, pid: str, delta: int) -> None:
        path = self.path[pid]
        for depth in range(len(path) + 1):
            self.under[path[:depth]] += delta

    def spread(self, pid: str, copies: Iterable[str]) -> int:
        """The longest common location prefix of ``pid`` with any of the copies."""
        here, path = self.path[pid], self.path
        most = 0
        for copy in copies:
            other = path[copy]
            if other and here and other[0] == here[0]:
                most = max(most, common_depth(here, other))
        return most

    def best_spread(self, copies: list[str]) -> int | None:
        """The least spread a processor under its cap and holding no copy offers (None: every
        processor under its cap holds a copy)."""
        for depth in range(self.depth + 1):
            taken = {self.path[c][: depth + 1] for c in copies if len(self.path[c]) > depth}
            count = self.under[()] - sum(self.under[prefix] for prefix in taken)
            count -= sum(
                1 for c in copies if self.load[c] < self.cap[c] and self.spread(c, copies) <= depth
            )
            if count > 0:
                return depth
        return None

    def take(self, pid: str, name: str) -> None:
        """One more standby on ``pid``: one of task ``name``."""
        self.held[pid].add(name)
        self.load[pid] += 1
        if self.load[pid] == self.cap[pid]:
            self._count(pid, -1)
        elif self.load[pid] < self.cap[pid]:
            heapq.heappush(self.heap, (self.load[pid], self.rank[pid], pid))

    def _drop(self, pid: str, name: str) -> None:
        """One standby (of task ``name``) less on ``pid``."""
        self.held[pid].discard(name)
        self.load[pid] -= 1
        if self.load[pid] == self.cap[pid] - 1:
            self._count(pid, 1)
        if self.load[pid] < self.cap[pid]:
            heapq.heappush(self.heap, (self.load[pid], self.rank[pid], pid))

    def keep_held(
        self,
        order: list[str],
        state: Mapping[str, Mapping[str, int]],
        chosen: dict[str, list[str]],
        copies: int,
    ) -> None:
        """Pass 1: keep the held copies (each task's most spread, then lowest lag, up to
        ``copies``; a processor keeps the most spread, then lowest lag, up to its cap), then drop
        every kept copy that some processor under its cap would beat on spread, until none does.

        The test is on the final loads, not on the loads while the copies are taken one by one:
        a copy taken before the few distant processors are filled by their own held copies would
        see room there and be lost (the first answer filled those processors earlier)."""
        wanted: list[tuple[int, int, int, str, str]] = []
        for rank, name in enumerate(order):
            held = state.get(name)
            if not held:
                continue
            active = chosen[name][:1]
            if len(held) == 1:  # the usual case, without a sort
                ((pid, lag),) = held.items()
                if pid in self.load and pid != active[0]:
                    wanted.append((self.spread(pid, active), lag, rank, name, pid))
                continue
            mine = sorted(
                (self.spread(pid, active), lag, pid)
                for pid, lag in held.items()
                if pid in self.load and pid != active[0]
            )
            wanted.extend((spread, lag, rank, name, pid) for spread, lag, pid in mine[:copies])
        for _, _, _, name, pid in sorted(wanted):
            if self.load[pid] < self.cap[pid]:
                chosen[name].append(pid)
                self.take(pid, name)
        dropped = True
        while dropped:
            dropped = False
            for name in order:
                kept = chosen[name]
                for pid in kept[1:]:
                    others = kept[:1] if len(kept) == 2 else [p for p in kept if p != pid]
                    spread = self.spread(pid, others)  # 0: nothing beats it (the usual case)
                    best = self.best_spread(others) if spread else None
                    if best is not None and best < spread:
                        kept.remove(pid)
                        self._drop(pid, name)
                        dropped = True

    def place_group(self, active: str, names: list[str], chosen: dict[str, list[str]]) -> None:
        """One copy of each of ``names`` (tasks active on ``active``; those with a copy already
        are skipped), as :meth:`place` would, with the best spread computed once for the group
        and the heap's top taken in place; a task that finds no place among the first few
        entries goes to :meth:`place`."""
        best = self.best_spread([active])
        for name in names:
            held = chosen[name]
            if len(held) > 1:
                continue
            pid = self._take_top(best, active, name) if best is not None else None
            if pid is None:
                held.append(self.place(name, held))
                best = self.best_spread([active])
            else:
                held.append(pid)

    def _take_top(self, best: int, active: str, name: str) -> str | None:
        """The least loaded processor under its cap, other than ``active``, whose spread from
        ``active`` is ``best``, if one is among the first few heap entries: it takes the copy of
        ``name`` (else None, nothing taken)."""
        heap, load, cap, path = self.heap, self.load, self.cap, self.path
        here = path[active]
        skipped: list[tuple[int, int, str]] = []
        found = None
        while heap and len(skipped) <= 2:
            count, rank, pid = heap[0]
            if count != load[pid] or count >= cap[pid]:
                heapq.heappop(heap)  # stale
                continue
            other = path[pid]
            spread = common_depth(other, here) if other and here and other[0] == here[0] else 0
            if pid != active and spread == best:
                found = pid
                break
            skipped.append(heapq.heappop(heap))
        if found is not None:
            self.held[found].add(name)
            count += 1
            load[found] = count
            if count < cap[found]:
                heapq.heapreplace(heap, (count, rank, found))
            else:
                heapq.heappop(heap)
                if count == cap[found]:
                    self._count(found, -1)
        for entry in skipped:
            heapq.heappush(heap, entry)
        return found

    def place(self, name: str, chosen: list[str]) -> str:
        """The processor for one more copy of task ``name``, whose copies are on ``chosen``."""
        self.copies[name] = chosen
        best: int | None = 0  # nothing in common: the best there is (the usual case)
        known = False
        skipped: list[tuple[int, int, str]] = []
        while True:
            if not known and (len(skipped) > len(chosen) or not self.heap):  # find the best
                best, known = self.best_spread(chosen), True
                for entry in skipped:  # and look again from the top
                    heapq.heappush(self.heap, entry)
                skipped = []
            if best is None or not self.heap:
                for entry in skipped:
                    heapq.heappush(self.heap, entry)
                return self._swap(name, chosen)
            entry = heapq.heappop(self.heap)
            load, _, pid = entry
            if load != self.load[pid] or load >= self.cap[pid]:
                continue  # stale
            if pid not in chosen and self.spread(pid, chosen) == best:
                break
            skipped.append(entry)
        for entry in skipped:
            heapq.heappush(self.heap, entry)
        self.take(pid, name)
        return pid

    def _swap(self, name: str, chosen: list[str]) -> str:
        """Every processor under its cap holds a copy of ``name``: a full processor ``w`` (most
        spread, least loaded first) hands one of its standbys to an under-cap processor ``u``
        that lacks that task's copy, and takes ``name``'s copy; failing that, the most spread,
        least loaded processor goes over its cap."""
        under = sorted((p for p in chosen if self.load[p] < self.cap[p]), key=self.rank.__getitem__)
        others = sorted(
            (p for p in self.load if p not in chosen),
            key=lambda p: (self.spread(p, chosen), self.load[p], self.rank[p]),
        )
        for w in others:
            for other in sorted(self.held[w]):
                copies = self.copies.get(other)
                target = next((u for u in under if copies and u not in copies), None)
                if copies is not None and target is not None:
                    self._drop(w, other)
                    copies[copies.index(w)] = target
                    self.take(target, other)
                    self.take(w, name)
                    return w
        self.take(others[0], name)
        return others[0]
