"""``host-affinity``: balanced, movement-minimal, locality-maximal task assignment.

Theory of operation
===================

Priorities, strictly in this order (DESIGN.md "Grouper contract"):

1. **Balance.** With T tasks and P live processors every processor ends with ``floor(T/P)`` or
   ``ceil(T/P)`` tasks; the option ``balance_slack=k`` widens that to
   ``[floor(T/P) - k, ceil(T/P) + k]``. With ``GrouperMetadata.processor_capacity`` the bounds
   are per processor: floor and ceil of ``T * cap(p) / sum(cap)`` (all 1: the same as above).
2. **Stickiness.** As few tasks as possible change processor. Every processor keeps
   ``min(previous tasks, upper bound)`` of its previous tasks. The tasks that must move are the
   *orphans* (previous processor gone, or new tasks) and the *mandatory sheds* (a processor above
   the upper bound). If they cannot fill every processor up to the lower bound, exactly the
   missing number of *optional sheds* is taken from processors above the lower bound; otherwise
   exactly the surplus goes into *optional slots* (room between a processor's count and the
   upper bound). Either way the number of moves equals the lower bound (orphans plus what
   survivors must shed, the ``T mod P`` larger targets going to the fullest survivors).
3. **Locality.** Moving tasks are matched to free slots on the tree of location ids
   (``zone/rack/host``; a flat id is a one-level tree), deepest nodes first: at every node, tasks
   and slots still unmatched below it are paired, then the leftovers go up to the parent. For
   tree-shaped (ultrametric) similarity this greedy pairs as many tasks as possible within every
   subtree at once, so it maximises the tasks kept at their exact location, then those kept in
   their rack, then in their zone. Within a node, mandatory slots are filled before optional
   ones so the optional budget is spent where it buys locality. A processor that must shed
   gives up first the tasks whose recorded location is farthest from it (keeping one whose
   state is not there buys nothing).
4. **Spread.** Among equally good tasks, choices follow the spread order
   (:func:`groupers.spread.spread_order`: streams dealt round-robin), so every processor of a
   fresh or rebalanced assignment gets a share of every stream; name order when all tasks read
   the same streams. The tasks a node's room takes are dealt to its processors by stream,
   largest stream first, so each holds floor or ceil of its share of every stream whatever the
   streams' sizes (:meth:`groupers.assignment.Assignment.deal`), and the phases that read
   ``task_state`` (failover, warm-up) follow the same order, so copies that single out no
   processor change nothing (issue 26).
5. **Determinism.** Every choice is made in sorted order of tasks (spread order), processor ids
   and location paths, never in hash or input order, so the output depends only on the inputs
   (invariant I6).

Code map
========

:func:`assign` runs five phases over one :class:`groupers.assignment.Assignment` (the state:
bounds, budgets, the location tree, what is kept, placed and given up), as Kafka Streams'
``HighAvailabilityTaskAssignor.assign`` does:

1. *budgets* (:func:`_budgets`): the balance bounds, and the budget of optional slots or of
   optional sheds (priority 2);
2. *keep* (:func:`_keep`): what every processor keeps, what it must shed (forced) or may shed
   (optional), all laid out on the location tree; then (2b) *failover*
   (:func:`groupers.failover.fail_over_to_copies`): tasks whose processor is gone take the room
   of processors holding a caught-up copy of their state (``task_state``; nothing without it),
   in spread order, nearest holder first;
3. *forced sheds* (:func:`_place_at_exact_locations`): moving tasks at their exact locations,
   then forced sheds matched exactly to the room at their tasks' locations
   (:func:`groupers.matching.max_flow_bipartite`), then the sheds that gain locality;
4. *optional sheds* (:func:`_zero_loss_optional_sheds`): local tasks handed to another
   processor at their own location when optional sheds would otherwise cost a location;
5. *locality placement* (:func:`_place_by_locality`): pass A, everything rises through the
   tree taking the room nearest its location; pass B places the rest losing as little as
   possible (sheds that lose nothing, then the nearest lossy ones, then anything).

After :func:`assign`, :meth:`HostAffinityGrouper.group` places the standby replicas
(``standby_replicas``, :func:`groupers.standby.place_standbys`), which never change the actives.
Before them, :func:`groupers.holdback.hold_back` holds balance moves back: warm-up
(``max_warmup_replicas``, :mod:`groupers.warmup`: the room a move to a processor with no
caught-up copy would fill goes first to tasks with a caught-up copy there, and only then does a
move wait for a warm-up replica) and the movement limit (``max_moves_per_rebalance``); with both
at their defaults it does not run.

The moves every phase is made of (fill room, shed, sweep the tree) and the named predicates are
in :mod:`groupers.assignment` and :mod:`groupers.tree`; the shed policies of phases 3 to 5 in
:mod:`groupers.sheds`.

Cost: O(T log T + P log P) time (sorting dominates; each task rises at most ``depth`` levels of
the location tree) and O(T + P) memory.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from groupers.api import GrouperError, GrouperMetadata, build_containers, tasks_by_name
from groupers.assignment import Assignment
from groupers.failover import fail_over_to_copies
from groupers.holdback import HoldBack, hold_back
from groupers.locations import common_depth
from groupers.measures import balance_bounds
from groupers.sheds import LossySheds, ZeroLossLocal, forced_sheds_matched
from groupers.spread import spread_of
from groupers.standby import place_standbys
from groupers.tree import Candidate, Node, Slots, anything, loses_nothing, sweep
from groupers.virtual import inherit_locality, needs_inheritance
from metadata.model import ContainerModel, TaskModel

__all__ = ["HostAffinityGrouper", "assign"]


@dataclass(frozen=True)
class HostAffinityGrouper:
    """The default TaskNameGrouper: previous processor, else same location, else nearest."""

    balance_slack: int = 0
    standby_replicas: int = 0
    max_warmup_replicas: int = 0
    acceptable_recovery_lag: int = 0
    max_moves_per_rebalance: int | None = None

    def __post_init__(self) -> None:
        for option in (
            "balance_slack",
            "standby_replicas",
            "max_warmup_replicas",
            "acceptable_recovery_lag",
        ):
            _check_count(option, getattr(self, option), 0)
        if self.max_moves_per_rebalance is not None:
            _check_count("max_moves_per_rebalance", self.max_moves_per_rebalance, 1)

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        by_name = tasks_by_name(tasks)
        if needs_inheritance(
            by_name,
            metadata.task_locality,
            metadata.previous_task_to_processor,
            metadata.previous_task_to_ssps,
        ):  # SEP-32 split/merge: history recorded under the old virtual task names
            locality, previous = inherit_locality(
                by_name.values(),
                metadata.task_locality,
                metadata.previous_task_to_ssps,
                metadata.previous_task_to_processor,
            )
            metadata = replace(
                metadata, task_locality=locality, previous_task_to_processor=previous
            )
        spread = spread_of(by_name.values())
        order = spread.order if spread is not None else None
        assignment = assign(
            list(by_name),
            metadata,
            order=order,
            streams=spread.stream if spread is not None else None,
            balance_slack=self.balance_slack,
            acceptable_recovery_lag=self.acceptable_recovery_lag,
        )
        return self._finish(assignment, by_name, metadata, order)

    def _finish(
        self,
        assignment: dict[str, list[str]],
        by_name: dict[str, TaskModel],
        metadata: GrouperMetadata,
        order: list[str] | None,
    ) -> set[ContainerModel]:
        """Hold balance moves back (warm-up, movement limit), then place the standbys; a
        warm-up replica is a standby on its task's target."""
        options = HoldBack(
            self.max_warmup_replicas, self.acceptable_recovery_lag, self.max_moves_per_rebalance
        )
        warmups: dict[str, list[str]] = {}
        if options.active and metadata.processor_locality:
            rank = {name: i for i, name in enumerate(order)} if order is not None else None
            lower, _ = balance_bounds(
                sorted(metadata.processor_locality), len(by_name), metadata, self.balance_slack
            )
            assignment, warmups = hold_back(assignment, metadata, options, rank, lower)
        standbys = place_standbys(assignment, metadata, self.standby_replicas)
        for pid, names in warmups.items():
            if names:
                standbys[pid] = sorted(set(standbys[pid]).union(names))
        return build_containers(assignment, by_name, metadata.processor_locality, standbys)


def _check_count(option: str, value: object, least: int) -> None:
    """An option that is a count: an integer >= ``least`` (the message names the option)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise GrouperError(f"{option} must be an integer, got {value!r}")
    if value < least:
        raise GrouperError(f"{option} must be >= {least}, got {value}")


def assign(
    task_names: Collection[str],
    metadata: GrouperMetadata,
    *,
    order: list[str] | None = None,
    streams: Mapping[str, str] | None = None,
    balance_slack: int = 0,
    acceptable_recovery_lag: int = 0,
) -> dict[str, list[str]]:
    """Processor id -> task names, by the priorities of the module docstring.

    Every live processor appears (possibly with no task). With no live processor the answer is
    empty (and the caller's validation reports the unassigned tasks).
    """
    if not metadata.processor_locality:
        return {}
    # ---------------------------------------------------------------- 1. budgets
    state = _budgets(task_names, metadata, balance_slack, order, streams)
    # ---------------------------------------------------------------- 2. keep
    _keep(state, metadata)
    # ---------------------------------------------------------------- 2b. failover to copies
    fail_over_to_copies(state, metadata, acceptable_recovery_lag)
    # ---------------------------------------------------------------- 3. forced sheds
    _place_at_exact_locations(state)
    # ---------------------------------------------------------------- 4. optional sheds
    _zero_loss_optional_sheds(state)
    # ---------------------------------------------------------------- 5. locality placement
    _place_by_locality(state)
    return state.result()


# ------------------------------------------------------------------------ 1. budgets


def _budgets(
    task_names: Collection[str],
    metadata: GrouperMetadata,
    balance_slack: int,
    order: list[str] | None = None,
    streams: Mapping[str, str] | None = None,
) -> Assignment:
    """Bounds, kept and orphaned tasks, and the budgets: every processor keeps
    ``min(previous tasks, upper)``; the surplus of moving tasks over the room below the lower
    bound goes to optional slots, or the shortfall is made up by optional sheds (exactly one of
    the two budgets is non-zero, or both are zero)."""
    state = Assignment.start(task_names, metadata, balance_slack, order, streams)
    upper, lower = state.upper, state.lower
    keeping = {pid: min(len(tasks), upper[pid]) for pid, tasks in state.kept.items()}
    moving = len(state.orphans) + sum(len(state.kept[p]) - keeping[p] for p in state.processors)
    mandatory = sum(max(0, lower[pid] - keeping[pid]) for pid in state.processors)
    state.optional_budget = max(0, moving - mandatory)
    state.supply_budget = max(0, mandatory - moving)
    return state


# ------------------------------------------------------------------------ 2. keep


def _keep(state: Assignment, metadata: GrouperMetadata) -> None:
    """Lay out the location tree: orphans at their recorded locations; each processor's room
    (mandatory below the lower bound, optional up to the upper) at its location; and what it
    must or may give up as candidates at their tasks' locations."""
    task_locality = metadata.task_locality
    for name in state.orphans:
        state.nodes[state.path_of(task_locality.get(name))].tasks.append(name)
    for pid in state.processors:
        lower, upper = state.lower[pid], state.upper[pid]
        node = state.nodes[state.processor_path[pid]]
        have = min(len(state.kept[pid]), upper)
        if have < lower:
            node.mandatory.append(Slots(pid, lower - have))
        if state.optional_budget and upper > max(have, lower):
            node.optional.append(Slots(pid, upper - max(have, lower)))
        excess = len(state.kept[pid]) - have
        optional = have - lower if state.supply_budget and have > lower else 0
        if excess or optional:
            _candidates(state, pid, task_locality, excess, optional)


def _candidates(
    state: Assignment, pid: str, task_locality: Mapping[str, str], excess: int, optional: int
) -> None:
    """What ``pid`` gives up: ``excess`` forced sheds (from its non-local tasks; beyond them,
    local tasks that move for certain), and at most ``optional`` optional ones."""
    here = state.processor_path[pid]
    nodes, path_of, keeps_location = state.nodes, state.path_of, state.keeps_location
    order_of = state.order_of
    node = nodes[here]
    local: list[str] = []
    for name in state.kept[pid]:
        where = path_of(task_locality.get(name))
        if keeps_location(where, pid):
            local.append(name)
        else:
            nodes[where].candidates.append(
                Candidate(common_depth(where, here), name, pid, False, order_of(name))
            )
    non_local = len(state.kept[pid]) - len(local)
    # Sheds beyond the non-local tasks must give up local ones: they move for certain, so they
    # join the moving tasks at this location (the last names go).
    forced_local = max(0, excess - non_local)
    if forced_local:
        leaving = local[len(local) - forced_local :]
        node.tasks.extend(leaving)
        state.given_up.update(leaving)
        local = local[: len(local) - forced_local]
    if excess - forced_local:
        state.must_shed[pid] = excess - forced_local
    if optional:
        state.may_shed[pid] = optional
        # Local tasks are interchangeable here and at most ``optional`` of them can go.
        depth = len(here)
        node.candidates.extend(
            Candidate(depth, name, pid, True, order_of(name))
            for name in local[len(local) - optional :]
        )


# ------------------------------------------------------------------------ 3. forced sheds


def _place_at_exact_locations(state: Assignment) -> None:
    """Exact locations first, whatever their depth (a flat ``host-5`` beside
    ``zone-a/rack-0/host-0``): moving tasks, then forced sheds (matched exactly: one
    processor's quota, several locations; one location, several processors), then every node's
    sheds that gain locality, each node with only its own items."""

    key = state.task_key()

    def movers_only(node: Node, depth: int) -> None:
        if depth:
            state.place_movers(node)

    sweep(state.nodes, movers_only, rise=False, key=key)
    if state.must_shed:
        forced_sheds_matched(state)
    sweep(state.nodes, state.gain, rise=False, key=key)


# ------------------------------------------------------------------------ 4. optional sheds


def _zero_loss_optional_sheds(state: Assignment) -> None:
    """Make the zero-loss optional sheds of local tasks now, before rack- or zone-level
    matches take that room."""
    if not state.supply_budget:
        return
    non_local_left: dict[str, int] = defaultdict(int)
    for node in state.nodes.values():
        for candidate in node.candidates:
            if not candidate.is_local:
                non_local_left[candidate.processor_id] += 1
    reserved = {
        pid: min(left, max(0, non_local_left[pid] - state.must_shed.get(pid, 0)))
        for pid, left in state.may_shed.items()
    }
    phase = ZeroLossLocal(state, reserved, state.supply_budget - sum(reserved.values()))
    if phase.shortfall > 0:
        sweep(state.nodes, phase.visit, rise=False, key=state.task_key())


# ------------------------------------------------------------------------ 5. locality placement


def _place_by_locality(state: Assignment) -> None:
    """Pass A rises through the tree: everything takes the room nearest its location, as long
    as that gains locality. Pass B places what is left, losing as little as possible: a
    candidate stands at the part of its location it shares with its own processor (what it can
    keep), slots at their processors, tasks with nowhere near to go at the root."""
    key = state.task_key()
    root = sweep(state.nodes, state.gain, key=key)
    # B1: sheds that lose nothing: the room shares with the task all its processor did.
    root = sweep(
        state.positioned(root),
        lambda node, depth: state.shed(node, loses_nothing, depth),
        key=key,
    )
    layout = state.positioned(root)
    lossy = LossySheds.count(state, layout[()])
    # B2: the sheds that must lose, nearest first (deepest common node with some room): first
    # non-local tasks (they lose a rack or a zone at most), then local ones (an exact location).
    for local_ones in (False, True):
        if any(state.lossy_forced.values()) or lossy.supply:
            lossy.local_ones = local_ones
            layout = state.positioned(sweep(layout, lossy.visit, key=key))
    root = sweep(layout, lambda node, depth: None, key=key)
    # B3: what is left has nothing to lose: sheds first (forced ones, then optional), then the
    # tasks that must move, to whatever room remains.
    state.shed(root, anything, 0)
    state.place_movers(root)
    state.check_done(root)
