"""The plan before a run: `--offload auto` picks its policy from it, and a run no policy can fit is refused.

Lives here: `plan_before_run`. Imports `nodes.plan`, `memory`, rich. No Qt.

Called by `app --run` after the memory manager is built and before the executor runs anything: the plan
loads no weights (`nodes.plan`), so a refusal comes before the first load event. A budget too small for a
model's weights alone is left to the executor's own check (`memory.fit`, on the loader node, also before
any load); the plan refuses what that check cannot see: weights plus working memory. A plan that cannot be made
(a node pack that misbehaves outside a run) is a warning, and the run goes on under the policy asked for.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from memory import MemoryManager
from memory.errors import fmt_bytes
from memory.policy import policy_named
from nodes.context import Cancelled, CancelToken
from nodes.plan import make_plan
from nodes.registry import NodeRegistry
from nodes.workflow import Workflow

log = logging.getLogger(__name__)


def plan_before_run(
    wf: Workflow,
    registry: NodeRegistry,
    memory: MemoryManager,
    err: Console,
    out_dir: Path,
    quiet: bool,
    cancel: CancelToken | None = None,
) -> tuple[str | None, dict[str, Any] | None]:
    """(why the run is refused or None, the plan as JSON for the report or None when none could be made).

    Cancelled (Ctrl+C while a loader ran): no plan, and the run stops at once on the same token."""
    try:
        plan = make_plan(wf, registry, memory, out_dir, cancel)
    except Cancelled:
        return None, None
    except Exception as exc:  # the run itself will say what is wrong with a node; the plan only helps
        # Logged, not printed: the run reports what is wrong with a node itself, in its own words.
        log.info("no memory plan for %s: %s", wf.source, exc)
        return None, None
    report = plan.to_json()
    if not any(row["fits"] for row in plan.policies.values()):
        if memory.budget_problem(list(memory.ledger.handles)) is not None:
            # A model that can never fit at all: the executor refuses it on the node that chose it (before its
            # first load too), which names that node in the run's record.
            return None, report
        return (
            f"the plan fits under no memory policy at the {plan.device} budget {fmt_bytes(plan.budget)}: {plan.problem}; "
            f"least budget per policy: {plan.need_text()}; nothing was loaded",
            report,
        )
    if memory.config.policy == "auto":
        memory.config = dataclasses.replace(memory.config, policy=plan.policy)
        memory.policy = policy_named(plan.policy)
        log.info("%s", plan.why)
        if not quiet:
            err.print(f"[dim]memory: {escape(plan.why)}[/]", highlight=False)
    return None, report
