"""The benchmark scripts' CPU-safe parts: the SD-shaped model, our txt2img loop, the GPU script's guard."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from memory import MemoryConfig, MemoryManager

# Integration and parity: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


@pytest.fixture(scope="module")
def tiny_sd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sd = load("_sd_shaped")
    return sd.build_pipeline_folder(
        tmp_path_factory.mktemp("sd"), unet_width=32, text_layers=1, vae_width=32, text_hidden=64
    )


@pytest.mark.parametrize(("policy", "budget"), [("sequential", None), ("stream", 0.8), ("auto", 0.5)])
def test_txt2img_through_the_manager_matches_diffusers(
    tiny_sd: Path, policy: str, budget: float | None
) -> None:
    from diffusers import StableDiffusionPipeline

    sd = load("_sd_shaped")
    pipe = StableDiffusionPipeline.from_pretrained(
        tiny_sd, safety_checker=None, requires_safety_checker=False
    )
    pipe.set_progress_bar_config(disable=True)
    g = torch.Generator("cpu").manual_seed(0)
    want = (
        pipe("a cat", num_inference_steps=2, height=64, width=64, generator=g, output_type="pt").images * 2
        - 1
    )
    weights = sum(f.stat().st_size for f in tiny_sd.glob("*/*.safetensors"))
    ram = None if budget is None else str(int(budget * weights))
    with MemoryManager(
        MemoryConfig(device="cpu", policy=policy, ram_budget=ram, data_dir=tiny_sd / "d")
    ) as mm:
        got, phases = sd.txt2img(mm, tiny_sd, prompt="a cat", steps=2, size=64)
        assert mm.ledger.device_used() <= mm.budget
        report = mm.report()
    assert set(phases) == {"encode", "denoise", "decode"}
    assert [p["node_id"] for p in report["node_peaks"]] == ["encode", "denoise", "decode"]
    assert len(report["steps"]) == 2
    # Our loop and diffusers' pipeline: the same ops over 2 steps, grouped differently (CFG batch, scheduler
    # arithmetic). Pixels in [-1, 1] (ulp 1.2e-7): 1e-5 is ~80 ulps; seen 6e-8 (half an ulp).
    torch.testing.assert_close(got.clamp(-1, 1), want, atol=1e-5, rtol=0)


def test_gpu_benchmark_builds_its_unet_and_declares_blocks(tmp_path: Path) -> None:
    gpu = load("offload_gpu")
    folder = gpu.build_unet_folder(tmp_path, width=32)
    unet = gpu.load_unet(folder)
    from memory.weights import block_names, header_bytes, module_bytes

    blocks = gpu.unet_blocks(unet)
    names = block_names(unet, blocks)
    assert names[0] == "down_blocks.0.resnets.0" and any(n.startswith("mid_block.") for n in names)
    streamable = sum(module_bytes(unet.get_submodule(n)) for n in names)
    total = module_bytes(unet)
    assert total == header_bytes(folder.glob("*.safetensors"), torch.float16)
    assert streamable > 0.8 * total  # what stays resident under `stream` is small


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_gpu_benchmark_says_it_needs_cuda() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH / "offload_gpu.py")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2
    assert "needs a CUDA GPU" in out.stderr
