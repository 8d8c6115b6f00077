"""Weights kept in fp8 / int8: the ledger counts the stored bytes, and pictures stay close to float32.

The model is the shipped shapes-sd (trained, so the comparison means something): txt2img.json at 64x64, 8
steps, once per storage format. The figures (PSNR of the decoded image vs float32) are printed; the bounds
are what the README reports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from memory import MemoryConfig, MemoryManager
from nodes.executor import Executor
from nodes.workflow import workflow_from_dict
from pipelines.diffusion.loading import load_model

# Integration and parity: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

WORKFLOW = Path(__file__).resolve().parent.parent / "resources" / "workflows" / "txt2img.json"


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """Peak signal-to-noise ratio in dB of two images in [0, 1]."""
    mse = torch.mean((a.float() - b.float()) ** 2).item()
    return float("inf") if mse == 0 else 10 * torch.log10(torch.tensor(1.0 / mse)).item()


def stored_bytes(module: torch.nn.Module) -> int:
    """Bytes of the distinct storages behind a module's tensors (measured from storages, not dtypes)."""
    seen: dict[int, int] = {}
    for t in list(module.parameters()) + list(module.buffers()):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def run_txt2img(registry, dtype: str, out: Path, policy: str = "none", steps: int = 8) -> torch.Tensor:
    data = json.loads(WORKFLOW.read_text())
    data["nodes"]["load"]["params"]["dtype"] = dtype
    data["nodes"]["sampler"]["params"].update(steps=steps, preview_every=0)
    data["nodes"]["latent"]["params"].update(width=64, height=64)
    with MemoryManager(MemoryConfig(device="cpu", policy=policy)) as mm:
        result = Executor(registry, memory=mm).run(workflow_from_dict(data, registry), out_dir=out)
        assert result.ok, result.error
        return result.outputs["decode"]["image"]


@pytest.mark.parametrize("storage", ["fp8_e4m3fn", "fp8_e5m2", "int8"])
def test_ledger_counts_stored_bytes(storage: str) -> None:
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        full = load_model(mm, "builtin:shapes-sd", dtype="float32")
        small = load_model(mm, "builtin:shapes-sd", dtype=storage)
        pairs = [(full.denoiser.handle, small.denoiser.handle), (full.vae.handle, small.vae.handle)]
        for ref, handle in pairs + list(
            zip(full.text_encoder.handles, small.text_encoder.handles, strict=True)
        ):
            with mm.use(handle) as module:
                assert handle.weight_bytes == stored_bytes(module) == handle.device_bytes
                eight_bit = {torch.float8_e4m3fn, torch.float8_e5m2, torch.int8}
                assert any(p.dtype in eight_bit for p in module.parameters())
            print(
                f"{storage} {handle.spec.name}: {handle.weight_bytes / ref.weight_bytes:.3f}x float32 bytes"
            )
            assert handle.weight_bytes < 0.5 * ref.weight_bytes
        rows = {r["key"]: r for r in mm.ledger.rows()}
        assert rows[small.denoiser.handle.key]["dtype"] == storage


def test_working_memory_includes_the_largest_upcast_layer() -> None:
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        unet = load_model(mm, "builtin:shapes-sd", dtype="int8").denoiser.handle
        with mm.use(unet, working_bytes=1000) as module:
            layers = [m for m in module.modules() if getattr(m, "weight", None) is not None]
            largest = max(m.weight.numel() for m in layers if m.weight.dtype == torch.int8)
            reserved = mm.ledger.working[f"use:{unet.key}"]
            # The upcast copy of the largest int8 layer (weight + bias at float32) is reserved beside it.
            assert reserved >= 1000 + 4 * largest
            assert reserved <= 1000 + 4 * (largest + 4096)


@pytest.mark.slow
def test_8bit_pictures_stay_close_to_float32(registry, tmp_path: Path) -> None:
    reference = run_txt2img(registry, "float32", tmp_path / "f32")
    figures = {d: psnr(run_txt2img(registry, d, tmp_path / d), reference) for d in ("int8", "fp8_e4m3fn")}
    print("PSNR vs float32 (dB):", {k: round(v, 1) for k, v in figures.items()})
    assert figures["int8"] >= 30.0
    assert figures["fp8_e4m3fn"] >= 20.0


@pytest.mark.parametrize("policy", ["sequential", "stream"])
def test_8bit_models_give_the_same_picture_under_every_policy(registry, tmp_path: Path, policy: str) -> None:
    resident = run_txt2img(registry, "int8", tmp_path / "none", steps=2)
    assert torch.equal(run_txt2img(registry, "int8", tmp_path / policy, policy=policy, steps=2), resident)
