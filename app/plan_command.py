"""`app plan WORKFLOW`: will it fit? The memory plan of a run, without loading any weights.

Lives here: `plan_command`, `load_for_plan`, `plan_text`. Imports `app.cli` (workflow loading, overrides,
the memory config), `nodes.plan`, `memory`, rich. No Qt.

Exit 0 when the plan fits, 1 when it does not (the message names what each policy would need), 2 for an
invalid file or flag. `--json` prints the plan as JSON on stdout (`fits`, `policy`, `predicted_peak`,
`nodes`, `policies`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from app.comfy_commands import add_models_dir_argument, library_from, load_run_workflow
from app.exit_codes import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from app.memory_args import add_memory_arguments
from memory import MemoryManager
from memory.errors import fmt_bytes
from nodes.modes import prepare_run
from nodes.plan import MemoryPlan, make_plan
from nodes.registry import NodeRegistry
from nodes.workflow import Workflow, WorkflowError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="app plan", description="the memory plan of a run, without loading weights"
    )
    p.add_argument("workflow", type=Path)
    p.add_argument(
        "--set", action="append", metavar="NODE.PARAM=VALUE", help="override a parameter; repeatable"
    )
    add_memory_arguments(p)
    add_models_dir_argument(p)
    p.add_argument("--json", action="store_true", help="print the plan as JSON on stdout")
    return p


def load_for_plan(path: Path, sets: list[str], models_dir: Any, registry: NodeRegistry) -> Workflow:
    """The workflow as `--run` would run it (overrides applied, bypassed/unneeded nodes rewritten)."""
    from app.cli import apply_overrides, parse_set

    overrides, errors = parse_set(sets)
    if errors:
        raise ValueError(errors[0])
    wf = load_run_workflow(
        path, registry, library_from(models_dir), edit=lambda wf: apply_overrides(wf, overrides, registry)
    )
    prepared = prepare_run(wf, registry)
    if prepared.problems:
        raise WorkflowError(prepared.problems)
    return prepared.workflow


def plan_text(plan: MemoryPlan) -> str:
    """The plan for people: one block per node, then the run's peak and the verdict."""
    lines = [
        f"memory plan of {plan.workflow} on {plan.device}, budget {fmt_bytes(plan.budget)}, policy {plan.policy}"
        + (f" ({plan.why})" if plan.requested == "auto" else ""),
        f"process baseline {fmt_bytes(plan.baseline_rss)} (RSS measured in this process after imports and loaders"
        + (
            f"; without {', '.join(plan.baseline_without)}, not imported: nothing fits)"
            if plan.baseline_without
            else ")"
        )
        + (
            f", counted against the budget: {fmt_bytes(max(plan.budget - plan.baseline_rss, 0))} left for models"
            if plan.baseline_counted
            else ""
        ),
    ]
    for n in plan.nodes:
        lines.append(
            f"  {n.node_id} ({n.node_type}): device peak {fmt_bytes(n.device_peak)}, host {fmt_bytes(n.host_peak)}"
            + (f"  [{n.note}]" if n.note else "")
        )
        if n.resident:
            lines.append("    resident: " + ", ".join(f"{k} {fmt_bytes(v)}" for k, v in n.resident.items()))
        for w in n.working:
            lines.append(f"    working: {w['component']} {fmt_bytes(w['bytes'])} ({w['source']})")
        for verb, items in (("load", n.loads), ("unload", n.unloads), ("stream", n.streams)):
            if items:
                lines.append(f"    {verb}: " + ", ".join(items))
    peak = plan.predicted_peak
    lines.append(
        f"predicted peak: device {fmt_bytes(peak['device'])}, host (process RSS) {fmt_bytes(peak['host'])}"
    )
    for name, row in plan.policies.items():
        least = row["least_budget"]
        lines.append(
            f"  {name:<10} {'fits' if row['fits'] else 'does not fit'}; peak {fmt_bytes(row['predicted_peak']['device'])}"
            f"; needs at least {fmt_bytes(least) if least is not None else 'more than every weight and working figure'}"
        )
    lines.append(
        "fits" if plan.fits else f"does not fit: {plan.problem}; each policy needs: {plan.need_text()}"
    )
    return "\n".join(lines)


def plan_command(argv: list[str], registry: NodeRegistry) -> int:
    err = Console(stderr=True, soft_wrap=True)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        wf = load_for_plan(args.workflow, args.set or [], args.models_dir, registry)
    except (WorkflowError, ValueError) as exc:
        err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return EXIT_INVALID
    from app.cli import memory_config

    try:
        memory = MemoryManager(memory_config(args))
    except (ValueError, RuntimeError) as exc:
        err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return EXIT_INVALID
    try:
        plan = make_plan(wf, registry, memory)
    except WorkflowError as exc:
        err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return EXIT_INVALID
    finally:
        memory.close()
    if args.json:
        sys.stdout.write(json.dumps(plan.to_json(), indent=2) + "\n")
    else:
        print(plan_text(plan))
    if not plan.fits:
        err.print(
            f"[red]does not fit[/]: {escape(plan.problem or '')}; least budget per policy: {escape(plan.need_text())}",
            highlight=False,
        )
        return EXIT_FAILED
    return EXIT_OK
