"""The plan of a model kept in 8 bits counts its stored bytes, estimated from the headers before any build."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.plan_command import load_for_plan
from memory import MemoryConfig, MemoryManager
from nodes.plan import make_plan

TXT2IMG = Path(__file__).resolve().parent.parent / "resources/workflows/txt2img.json"


@pytest.mark.slow  # plans txt2img on shapes-sd and builds its int8 UNet (~2 s)
@pytest.mark.parametrize("storage", ["int8", "fp8_e4m3fn"])
def test_an_8bit_models_plan_counts_the_bytes_its_build_holds(storage: str, registry, tmp_path: Path) -> None:
    wf = load_for_plan(TXT2IMG, [f"load.dtype={storage}"], [], registry)
    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp_path)) as mm:
        plan = make_plan(wf, registry, mm)
        resident = next(n for n in plan.nodes if n.node_id == "sampler").resident
        unet = next(h for h in mm.ledger.handles.values() if h.spec.name == "unet")
        planned = unet.weight_bytes
        assert resident["unet"] == planned and planned > 0  # before: nothing (no files to read bytes from)
        with mm.use(unet):
            built = unet.weight_bytes  # the module's exact bytes replace the estimate
    # The estimate reads which tensors go to 8 bits from names and shapes; the build from layer types and the
    # model's declared skip patterns: a few small layers may differ, within 5 % here.
    assert abs(planned - built) <= 0.05 * built, (planned, built)
