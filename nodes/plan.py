"""Will it fit? A run's memory plan, before the run: per node, what is resident, loaded, unloaded, streamed.

Lives here: `MemoryPlan`, `NodePlan`, `make_plan`, `choose_policy`. Imports `memory`, `nodes.*`.

`make_plan` finds each node's uses without loading weights (`nodes.plan_walk`), then replays them under every
policy with the policy's own placement code (`memory.plan.simulate`) on the manager's budgets. Predicted
peaks: device = the most the ledger holds (weights + working memory); host = the process baseline (the RSS
measured in this process after the loader nodes ran, i.e. interpreter + libraries + tokenizers and configs:
`MemoryManager.process_baseline`) plus, on a CPU, the device peak (the device is RAM) or, with an accelerator,
the copies kept in host RAM. On a CPU whose budget counts the process's own RSS (`counts_baseline`), the
simulation takes the same baseline off the budget as the run's placer does, so both keep the same blocks.
A policy that does not fit gets the smallest budget it would need (a bisection over the same simulation).
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memory import MemoryManager
from memory.errors import fmt_bytes
from memory.plan import PlannedUse, PlanStep, Simulation, block_tables, least_budget, simulate
from memory.policy import POLICIES, Policy, policy_named
from nodes.context import CancelToken
from nodes.executor import Executor
from nodes.plan_walk import NodeUses, walk
from nodes.registry import NodeRegistry
from nodes.workflow import Workflow

AUTO_ORDER = ("none", "auto", "sequential", "stream")
"""What `--offload auto` tries, fastest first: everything resident, keep while it fits, one at a time, stream."""


@dataclass
class NodePlan:
    node_id: str
    node_type: str
    resident: dict[str, int]  # component -> device bytes at the node's peak
    # Per use: component, bytes, source (learned | formula | fixed | none | unknown), shape key, model True;
    # then what the node reserves outside a use (model False).
    working: list[dict[str, Any]]
    device_peak: int
    host_peak: int
    loads: list[str]
    unloads: list[str]
    streams: list[str]
    note: str = ""


@dataclass
class MemoryPlan:
    workflow: str
    device: str
    policy: str  # the policy planned (for --offload auto: the one chosen)
    requested: str
    budget: int
    fits: bool
    problem: str | None
    baseline_rss: int
    predicted_peak: dict[str, int]  # host, device
    nodes: list[NodePlan]
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> fits, peaks, least budget
    why: str = ""
    # Modules a run imports that `baseline_rss` leaves out: only when no policy fits (the plan then answers
    # without importing them); empty otherwise.
    baseline_without: list[str] = field(default_factory=list)
    # On a CPU whose budget bounds the run's RSS: the baseline is taken off the budget before models are placed.
    baseline_counted: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def need_text(self) -> str:
        """What each policy would need, for a message: "none 1.2 GiB, sequential 700 MiB"."""
        parts = []
        for name, row in self.policies.items():
            least = row.get("least_budget")
            parts.append(f"{name} {fmt_bytes(least)}" if least is not None else f"{name}: never")
        return ", ".join(parts)


def _steps(found: list[NodeUses]) -> list[PlanStep]:
    # The executor's hint: the models the next node to run uses are kept by a policy that unloads after use.
    users = [frozenset(u.key for u in n.uses) for n in found]
    return [
        PlanStep(
            n.node_id,
            n.node_type,
            tuple(PlannedUse(u.key, u.working_bytes, u.formula_bytes) for u in n.uses),
            n.reserved_bytes,
            users[i + 1] if i + 1 < len(found) else frozenset(),
        )
        for i, n in enumerate(found)
    ]


def _host_peak(memory: MemoryManager, baseline: int, device_peak: int, host_copies: int) -> int:
    return baseline + (device_peak if memory.device.type == "cpu" else host_copies)


def _failure_note(node_id: str, failed: str | None, problem: str | None) -> str:
    return f"does not fit the budget here ({problem})" if failed is not None and node_id == failed else ""


def make_plan(
    wf: Workflow,
    registry: NodeRegistry,
    memory: MemoryManager,
    out_dir: Path | str = "outputs",
    cancel: CancelToken | None = None,
) -> MemoryPlan:
    """The plan of one first run of `wf` (no cache) on `memory`'s device and budgets; nothing is loaded.

    The loader nodes run for real (they only register models) with `memory`, so the run that follows finds
    the same handles. `cancel`: the run's token (a loader in a long call stops on Ctrl+C: `Cancelled`)."""
    order = Executor(registry, memory).plan(wf)
    deferred: list[str] = []  # what the nodes announced they import (diffusers, transformers): not yet
    found = walk(wf, registry, memory, order, Path(out_dir), cancel or CancelToken(), deferred)
    steps = _steps(found)
    keys = {u.key for s in steps for u in s.uses}
    components = [(h.spec, h.weight_bytes) for k, h in memory.ledger.handles.items() if k in keys]
    budget, host_budget = memory.budget, memory.ledger.host_budget

    def counted(baseline: int) -> int:  # what the run takes off its budget: `MemoryManager.counts_baseline`
        return baseline if memory.counts_baseline else 0

    blocks = block_tables(components)  # read once from the headers

    def simulate_all(baseline: int) -> dict[str, Simulation]:
        return {
            p.name: simulate(
                components, steps, p, memory.device, budget, host_budget, blocks, counted(baseline)
            )
            for p in POLICIES
        }

    # Before the deferred imports the baseline is a lower bound: what does not fit now never will.
    baseline = memory.process_baseline()
    sims = simulate_all(baseline)
    if any(sim.fits for sim in sims.values()):
        # The run will import them: the baseline counts them. A graph no policy fits is answered without
        # (seconds of imports for a "no"), and the plan says what its baseline leaves out.
        for name in deferred:
            importlib.import_module(name)
        # After the loader nodes and the imports a run makes before its first use: the run's own figure.
        baseline = memory.process_baseline()
        if counted(baseline):
            sims = simulate_all(baseline)
    deferred = [name for name in deferred if name not in sys.modules]  # a later node may have imported one
    # An upper bound for the bisection: every weight and every working figure at once always fits.
    upper = (
        counted(baseline)
        + sum(w or 0 for _, w in components)
        + sum(s.reserved_bytes + sum(u.working_bytes for u in s.uses) for s in steps)
    )
    upper = max(upper, 2**20)
    rows: dict[str, dict[str, Any]] = {}
    for p in POLICIES:
        sim = sims[p.name]
        rows[p.name] = {
            "fits": sim.fits,
            "problem": sim.problem,
            "predicted_peak": {
                "host": _host_peak(memory, baseline, sim.device_peak, sim.host_copies_peak),
                "device": sim.device_peak,
            },
            "least_budget": least_budget(
                components, steps, p, memory.device, host_budget, upper, counted(baseline)
            ),
        }
    requested = memory.config.policy
    chosen, why = choose_policy(requested, sims, budget)
    sim = sims[chosen.name]
    least = rows[chosen.name]["least_budget"]
    # A plan that does not fit stops at the node that fails; its predicted peak is the one at the least budget
    # that fits (what the run would need).
    peak_sim = (
        sim
        if sim.fits or least is None
        else simulate(components, steps, chosen, memory.device, least, host_budget, blocks, counted(baseline))
    )
    # The rows of a plan that does not fit are those at its least budget (what each node would need, every
    # node listed): the failing simulation stops part-way, at a node whose model it could not place.
    failed = None if sim.fits else (sim.steps[-1].node_id if sim.steps else None)
    nodes = []
    for n, s in zip(found, peak_sim.steps, strict=False):
        nodes.append(
            NodePlan(
                n.node_id,
                n.node_type,
                s.resident,
                [
                    {
                        "component": u.component,
                        "bytes": u.working_bytes,
                        "source": u.source,
                        "shape": u.shape_key,
                        "formula": u.formula_bytes,
                        "model": True,
                    }
                    for u in n.uses
                ]
                + [  # reserved outside a model use: a KV cache, a GGUF conversion
                    {
                        "component": what,
                        "bytes": nbytes,
                        "source": "formula",
                        "shape": "",
                        "formula": None,
                        "model": False,
                    }
                    for what, nbytes in n.reserved.items()
                ],
                s.device_peak,
                _host_peak(memory, baseline, s.device_peak, s.host_copies_peak),
                s.loaded,
                s.unloaded,
                s.streamed,
                "; ".join(x for x in (n.note, _failure_note(n.node_id, failed, sim.problem)) if x),
            )
        )
    return MemoryPlan(
        wf.source,
        str(memory.device),
        chosen.name,
        requested,
        budget,
        sim.fits,
        sim.problem.rstrip(".") if sim.problem else sim.problem,  # callers go on with "; each policy needs"
        baseline,
        {
            "host": _host_peak(memory, baseline, peak_sim.device_peak, peak_sim.host_copies_peak),
            "device": peak_sim.device_peak,
        },
        nodes,
        rows,
        why,
        deferred,
        bool(counted(baseline)),
    )


def choose_policy(requested: str, sims: dict[str, Simulation], budget: int) -> tuple[Policy, str]:
    """The policy to run: the one asked for, or for `auto` the fastest whose plan fits (AUTO_ORDER)."""
    if requested != "auto":
        return policy_named(requested), f"{requested}: asked for"
    for name in AUTO_ORDER:
        if sims[name].fits:
            tried = AUTO_ORDER[: AUTO_ORDER.index(name)]
            before = "; ".join(f"{t} does not fit ({sims[t].problem})" for t in tried)
            return policy_named(name), (
                f"auto chose {name}: the fastest policy whose plan fits {fmt_bytes(budget)} "
                f"(predicted device peak {fmt_bytes(sims[name].device_peak)})"
                + (f"; {before}" if before else "")
            )
    return policy_named("stream"), f"no policy fits {fmt_bytes(budget)}"
