"""A memory plan: the run's loads, unloads and peaks under a policy, decided by the policy's own code, no weights.

Lives here: `PlannedUse`, `PlanStep`, `StepPlan`, `Simulation`, `simulate`, `least_budget`. May import: stdlib,
torch, memory.errors, memory.fit, memory.ledger, memory.placement, memory.policy, memory.telemetry.

`simulate` replays a run's steps (per node: the models it uses with their working memory, and what it reserves
beside them) on a fresh ledger with the run's budgets. Every decision (what to evict and in which order, when to
stream and how many blocks stay resident, what an accelerator keeps in host RAM, what a policy unloads after
use) is `memory.placement.Placer`'s own code: `SimPlacer` replaces only the moves (build, load, stream, evict)
with bookkeeping of bytes from the file headers, so a policy has one owner and the plan cannot drift from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from memory.errors import BudgetExceeded
from memory.fit import block_sizes
from memory.ledger import ComponentSpec, Ledger, ModelHandle
from memory.placement import Placer
from memory.policy import Policy
from memory.telemetry import LoadEvent, Telemetry, UnloadEvent

_BUILT = object()  # stands for a built module: the placer only asks whether there is one


@dataclass(frozen=True)
class PlannedUse:
    """One `MemoryManager.use` a node will make: the model, and the working memory reserved beside it."""

    key: str
    working_bytes: int
    formula_bytes: int | None = None  # when `working_bytes` is a learned peak: the formula it replaced


@dataclass(frozen=True)
class PlanStep:
    """One node in run order: its uses (in order), what it reserves outside them (a KV cache), and the models
    the next node to run uses (a policy that unloads after use keeps those)."""

    node_id: str
    node_type: str
    uses: tuple[PlannedUse, ...] = ()
    reserved_bytes: int = 0
    next_users: frozenset[str] = frozenset()


@dataclass
class StepPlan:
    node_id: str
    device_peak: int = 0  # the most the ledger holds on the device during the node (weights + working)
    host_copies_peak: int = 0  # offloaded copies kept in host RAM (accelerators)
    resident: dict[str, int] = field(default_factory=dict)  # component -> device bytes at the node's peak
    loaded: list[str] = field(default_factory=list)
    unloaded: list[str] = field(default_factory=list)
    streamed: list[str] = field(default_factory=list)


@dataclass
class Simulation:
    policy: str
    fits: bool
    problem: str | None  # why not (the BudgetExceeded message's first line)
    device_peak: int
    host_copies_peak: int
    steps: list[StepPlan]


class _SimStream:
    """What the placer reads of a `StreamState`: which blocks are resident, the window, the pinned copies."""

    class _Block:
        __slots__ = ("resident", "nbytes")

        def __init__(self, resident: bool, nbytes: int) -> None:
            self.resident, self.nbytes = resident, nbytes

    def __init__(self, sizes: list[int], resident: int, cuda: bool) -> None:
        self.blocks = [self._Block(i < resident, n) for i, n in enumerate(sizes)]
        self.cuda = cuda

    def window_bytes(self) -> int:
        biggest = max((b.nbytes for b in self.blocks if not b.resident), default=0)
        return biggest * (2 if self.cuda else 1)

    def pinned_bytes(self) -> int:  # CUDA streams from host copies pinned once; the CPU reads from disk
        return sum(b.nbytes for b in self.blocks if not b.resident) if self.cuda else 0

    def release_idle(self) -> None:
        pass

    def take_transfer_stats(self) -> tuple[int, float]:
        return 0, 0.0


class SimPlacer(Placer):
    """`Placer` with its decisions and bookkeeping moves: nothing is built, read or moved."""

    def __init__(self, ledger: Ledger, device: torch.device, telemetry: Telemetry) -> None:
        super().__init__(ledger, device, telemetry)
        self._where: dict[str, str] = {}  # key -> "device" | "host" | "disk"
        self._fixed: dict[str, int] = {}

    def add(self, h: ModelHandle, sizes: tuple[int, list[int]] | None) -> None:
        if sizes is not None and sizes[1]:
            self._fixed[h.key], self._block_bytes[h.key] = sizes[0], sizes[1]
        self._full_bytes[h.key] = h.weight_bytes or 0

    def can_stream(self, h: ModelHandle) -> bool:
        return super().can_stream(h) and h.key in self._block_bytes  # block sizes known from the headers

    def _build(self, h: ModelHandle) -> None:
        h.module = _BUILT  # type: ignore[assignment]
        self._where[h.key] = "disk"

    def _account(self, h: ModelHandle) -> None:
        where = self._where.get(h.key, "disk") if h.module is not None else "disk"
        full = self.full_bytes(h)
        h.device_bytes = h.host_bytes = h.pinned_bytes = 0
        if h.stream is not None:
            sizes = self._block_bytes[h.key]
            h.device_bytes = full - sum(sizes) + sum(b.nbytes for b in h.stream.blocks if b.resident)
            h.pinned_bytes = h.stream.pinned_bytes()
        elif where == "device":
            h.device_bytes = full
        elif where == "host":
            h.host_bytes = full

    def _load_full(self, h: ModelHandle) -> None:
        h.stream = None
        self._where[h.key] = "device"
        self._account(h)

    def _apply_stream(self, h: ModelHandle, resident_blocks: int) -> None:
        h.stream = _SimStream(self._block_bytes[h.key], resident_blocks, self.device.type == "cuda")
        self._where[h.key] = "device"

    def evict(self, h: ModelHandle, *, to_disk: bool = False) -> None:
        if h.module is None or h.is_locked:
            return
        freed = h.device_bytes or (h.host_bytes + h.pinned_bytes)
        h.stream = None
        keep = self.keeps_host_copy(h, to_disk)  # the placer's own rule
        self._where[h.key] = "host" if keep else "disk"
        if not keep:
            h.module = None
        self._account(h)
        self.telemetry.emit(UnloadEvent(h.spec.name, freed, 0.0))
        if keep:
            self._trim_host_tier()


def block_tables(
    components: Iterable[tuple[ComponentSpec, int | None]],
) -> dict[str, tuple[int, list[int]] | None]:
    """Per component key: bytes outside its streamed blocks and of each block, from the headers (`block_sizes`)."""
    return {spec.key: block_sizes(ModelHandle(spec, w)) for spec, w in components}


def _first_line(exc: BudgetExceeded) -> str:
    return str(exc).splitlines()[0]


def simulate(
    components: Sequence[tuple[ComponentSpec, int | None]],
    steps: Sequence[PlanStep],
    policy: Policy,
    device: torch.device,
    device_budget: int,
    host_budget: int | None,
    blocks: dict[str, tuple[int, list[int]] | None] | None = None,
    baseline: int = 0,
) -> Simulation:
    """Replay `steps` under `policy` on a fresh ledger (`components`: specs with their weight bytes; `blocks`:
    `block_tables(components)`, read once from the headers, else read here).

    `baseline`: the process's own RSS the run counts against a CPU budget (`Ledger.baseline`; 0: none), so
    the plan keeps as many blocks resident as the run will."""
    blocks = blocks if blocks is not None else block_tables(components)
    ledger = Ledger(device, device_budget, host_budget, baseline)
    telemetry = Telemetry()
    placer = SimPlacer(ledger, device, telemetry)
    for spec, weight_bytes in components:
        h = ModelHandle(spec, weight_bytes)
        ledger.handles[spec.key] = h
        placer.add(h, blocks.get(spec.key))
    current: list[StepPlan] = []

    def on_event(event: object) -> None:
        if current and isinstance(event, LoadEvent):
            current[-1].loaded.append(event.component)
        elif current and isinstance(event, UnloadEvent):
            current[-1].unloaded.append(event.component)

    telemetry.subscribe(on_event)
    result = Simulation(policy.name, True, None, 0, 0, [])

    def observe(plan: StepPlan) -> None:
        used = ledger.device_used()
        if used >= plan.device_peak:
            plan.device_peak = used
            plan.resident = {h.spec.name: h.device_bytes for h in ledger.handles.values() if h.device_bytes}
        plan.host_copies_peak = max(plan.host_copies_peak, ledger.host_used())

    for step in steps:
        plan = StepPlan(step.node_id)
        current.append(plan)
        result.steps.append(plan)
        try:
            if step.reserved_bytes:
                placer.make_room(step.reserved_bytes, f"working memory of {step.node_id}", None, policy)
                ledger.working["reserved"] = step.reserved_bytes
            observe(plan)
            for use in step.uses:
                h = ledger.handles[use.key]
                working = use.working_bytes
                try:
                    window = placer.place(h, working, policy)
                except BudgetExceeded:
                    # The manager's rule (MemoryManager.use): a learned peak never refuses what the formula admits.
                    if use.formula_bytes is None or use.formula_bytes >= working:
                        raise
                    working = use.formula_bytes
                    window = placer.place(h, working, policy)
                ledger.touch(h)
                if h.stream is not None and any(not b.resident for b in h.stream.blocks):
                    plan.streamed.append(h.spec.name)
                ledger.working["use"] = working + window
                observe(plan)
                ledger.working.pop("use", None)
                if policy.unloads_after_use and use.key not in step.next_users:
                    placer.evict(h)
        except BudgetExceeded as exc:
            result.fits, result.problem = False, f"node {step.node_id!r}: {_first_line(exc)}"
            break
        ledger.working.clear()
        if policy.unloads_after_use:
            for h in list(ledger.handles.values()):
                if h.key not in step.next_users:
                    placer.evict(h)
    result.device_peak = max((p.device_peak for p in result.steps), default=0)
    result.host_copies_peak = max((p.host_copies_peak for p in result.steps), default=0)
    return result


def least_budget(
    components: Sequence[tuple[ComponentSpec, int | None]],
    steps: Sequence[PlanStep],
    policy: Policy,
    device: torch.device,
    host_budget: int | None,
    upper: int,
    baseline: int = 0,
) -> int | None:
    """The smallest device budget under which `policy` runs `steps` (within 64 KiB), or None above `upper`.

    A bisection: a larger budget never makes a policy need more (it evicts, streams or refuses less). With a
    `baseline` (a CPU run counting its own RSS) the budget found includes it."""

    blocks = block_tables(components)

    def fits(budget: int) -> bool:
        return simulate(components, steps, policy, device, budget, host_budget, blocks, baseline).fits

    if not fits(upper):
        return None
    lo, hi = 0, upper
    while hi - lo > 2**16:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi
