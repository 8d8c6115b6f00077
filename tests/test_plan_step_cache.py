"""A step cache's stored residuals are working memory the memory plan counts (issues 28 and 33).

What a user checks: with `cache` on the Sampler, the plan's working memory for the sampler grows by what the
cache's hooks actually keep between denoiser calls (measured here on the hooks' own state after a real run,
tensor by tensor), and a plan with the cache off is unchanged. The fixtures are the tiny offline demo models.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import pipelines.diffusion.step_cache as step_cache_module
from app.plan_command import load_for_plan
from memory import MemoryConfig, MemoryManager
from nodes.plan import make_plan
from tests.family_support import run_workflow

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / "resources/workflows"


def _held_bytes(model: torch.nn.Module) -> int:
    """Bytes of the distinct tensors in every cache state the model's diffusers hooks keep."""
    seen: set[tuple[int, int]] = set()

    def visit(value: object) -> None:
        if isinstance(value, torch.Tensor):
            seen.add((value.data_ptr(), value.nbytes))
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)

    managers: dict[int, object] = {}
    for module in model.modules():
        registry = getattr(module, "_diffusers_hook", None)
        for hook in getattr(registry, "hooks", {}).values():
            manager = getattr(hook, "state_manager", None)
            if manager is not None:
                managers[id(manager)] = manager
    for manager in managers.values():
        for state in manager._state_cache.values():  # one state per cache context (positive, negative)
            visit(vars(state))
    return sum(nbytes for _, nbytes in seen)


def _sampler_working(plan) -> tuple[int, str]:  # noqa: ANN001 - nodes.plan.Plan
    (node,) = [n for n in plan.nodes if n.node_id == "sampler"]
    (use,) = [w for w in node.working if w["model"]]
    return use["bytes"], use["shape"]


CASES = [
    # (workflow, demo model, sets, cache, threshold): First-Block Cache on FLUX.1 (one pass: distilled
    # guidance); TaylorSeer on Wan (conditional and unconditional passes, two attentions per block).
    ("txt2img_flux", "demo:tiny-flux", {"latent.width": 64, "latent.height": 64}, "first-block", 0.5),
    ("txt2video", "demo:tiny-wan", {}, "taylorseer", 2),
]


@pytest.mark.slow  # runs a tiny graph and plans it twice
@pytest.mark.parametrize(("workflow", "model", "sets", "cache", "threshold"), CASES)
def test_plan_counts_what_a_step_cache_keeps_between_calls(
    workflow: str,
    model: str,
    sets: dict[str, object],
    cache: str,
    threshold: float,
    registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NODELOOM_DATA_DIR", str(tmp_path / "data"))  # nothing learned: the formula
    held: list[int] = []
    remove = step_cache_module._remove_added

    def measured_then_removed(model: torch.nn.Module, before: dict[int, set[str]]) -> None:
        held.append(_held_bytes(model))  # the cache's state at the end of sampling, its largest
        remove(model, before)

    monkeypatch.setattr(step_cache_module, "_remove_added", measured_then_removed)
    base = {"load.path": model, "sampler.steps": 6, "sampler.scheduler": "default", **sets}
    on = {**base, "sampler.cache": cache, "sampler.cache_threshold": threshold}
    assert run_workflow(WORKFLOWS / f"{workflow}.json", tmp_path / "out", on) == 0
    (kept,) = held
    assert kept > 0

    def plan_with(values: dict[str, object]):  # noqa: ANN202 - nodes.plan.Plan
        items = [f"{k}={v}" for k, v in values.items()]
        wf = load_for_plan(WORKFLOWS / f"{workflow}.json", items, [], registry)
        config = MemoryConfig(device="cpu", policy="none", ram_budget="8GiB", data_dir=tmp_path / "plan")
        with MemoryManager(config) as mm:
            return make_plan(wf, registry, mm)

    off_bytes, off_shape = _sampler_working(plan_with(base))
    on_bytes, on_shape = _sampler_working(plan_with(on))
    # Exact: the residuals' shapes are the latent's tokens (and T5's 512 padded tokens for FLUX.1) times the
    # width, which is what the plan multiplies; the cached tensors are all the hooks keep.
    assert on_bytes - off_bytes == kept
    assert on_shape != off_shape and cache in on_shape  # a learned peak with the cache is its own figure
