"""Video VAE decode in pieces: frame chunks equal a whole decode, spatial tiles are close to it, and the plan the
memory manager's budget picks has a lower working-memory formula than a whole decode.

The decodes run the tiny `demo:tiny-wan` VAE (4x in space, 2x in time) on random latents through the memory
manager; the plans are checked at full size too (Wan 2.1's VAE config, 832x480x81, meta tensors).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from memory import MemoryManager
from pipelines.diffusion.values import Latents, VaeRef
from pipelines.diffusion.video_tiling import decode_video_planned, plan_video_decode
from tests.demo_support import copy_demo_model

# Wan 2.1's VAE config (the released diffusers folder's vae/config.json, the fields the formulas read).
WAN21_VAE = {"base_dim": 96, "z_dim": 16, "scale_factor_spatial": 8, "scale_factor_temporal": 4}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_demo_model("tiny-wan", tmp_path_factory.mktemp("wan-tiles") / "tiny-wan")


def _latents(frames: int, h: int, w: int, scale: int, *, device: str = "cpu") -> Latents:
    generator = torch.Generator("cpu").manual_seed(0)
    if device == "meta":
        samples = torch.empty(1, 16, frames, h, w, device="meta")
    else:
        samples = torch.randn(1, 16, frames, h, w, generator=generator)
    return Latents(samples=samples, vae_scale_factor=scale, source="sampled")


def full_size_ref() -> VaeRef:
    from pipelines.diffusion.families import FAMILIES

    return VaeRef(handle=None, family=FAMILIES["wan"], config=WAN21_VAE, dtype=torch.bfloat16)  # type: ignore[arg-type]


def test_the_plan_follows_the_budget_and_each_step_down_needs_less() -> None:
    """832x480x81 (21 latent frames): a budget above the whole decode keeps it whole; just under it, frame
    chunks; far under it, spatial tiles, whose formula is lower still."""
    ref = full_size_ref()
    latents = _latents(21, 60, 104, 8, device="meta")
    whole = plan_video_decode(ref, latents, 10**12)
    assert whole.mode == "full" and whole.working_bytes == whole.full_bytes
    chunks = plan_video_decode(ref, latents, whole.full_bytes - 1)
    assert chunks.mode == "temporal" and chunks.working_bytes < whole.full_bytes
    tiles = plan_video_decode(ref, latents, whole.full_bytes // 4)
    assert tiles.mode == "spatial" and tiles.working_bytes <= whole.full_bytes // 4
    assert tiles.tile_px < 832 and tiles.tile_px % 32 == 0  # whole latents, stride of whole latents
    assert plan_video_decode(ref, latents, 10**12, tiling="on").mode == "spatial"
    assert plan_video_decode(ref, latents, 1, tiling="off").mode == "full"
    with pytest.raises(ValueError, match="tiling"):
        plan_video_decode(ref, latents, 1, tiling="sometimes")


@pytest.mark.slow  # builds and decodes with the tiny VAE (a few seconds)
def test_frame_chunks_equal_a_whole_decode_and_tiles_are_close(
    folder: Path, cpu_memory: MemoryManager
) -> None:
    from pipelines.diffusion.loading import load_model

    vae = load_model(cpu_memory, str(folder)).vae
    latents = _latents(5, 16, 24, vae.scale_factor)  # 96x64 px, 9 frames
    available = 10**12
    whole = plan_video_decode(vae, latents, available)
    full = decode_video_planned(cpu_memory, vae, latents, whole)
    assert full.shape == (9, 64, 96, 3)

    chunked_plan = plan_video_decode(vae, latents, whole.full_bytes - 1)
    assert chunked_plan.mode == "temporal" and chunked_plan.working_bytes < whole.full_bytes
    chunked = decode_video_planned(cpu_memory, vae, latents, chunked_plan)
    # The same per-frame decoder calls on the same cache, in the same order: only where the output waits
    # differs, so the frames are the same numbers.
    assert torch.equal(chunked, full)

    tiled_plan = plan_video_decode(vae, latents, available, tiling="on", tile_px=32)
    assert tiled_plan.mode == "spatial" and tiled_plan.tile_px == 32
    tiled = decode_video_planned(cpu_memory, vae, latents, tiled_plan)
    assert tiled.shape == full.shape
    diff = (tiled - full).abs()
    print(f"spatial tiles vs whole: mean {diff.mean():.4f}, max {diff.max():.4f}")
    # Tiles see less context than the whole picture and are blended over a quarter of a tile, so pixels differ
    # near the seams (and, at 32 px tiles of a 3-stage decoder, inside them too). A random-weight VAE gives no
    # smoothness to lean on: 0.036 of full scale was measured on average (0.067 between unrelated latents).
    assert diff.mean() < 0.05
    assert not torch.equal(tiled, full)  # it really tiled
    assert torch.equal(tiled, diffusers_tiled(folder, latents, tile_px=32))  # and as diffusers tiles


def diffusers_tiled(folder: Path, latents: Latents, *, tile_px: int) -> torch.Tensor:
    """The same latents through diffusers' own `enable_tiling()` decode at the same tile size and stride."""
    from diffusers import AutoencoderKLWan
    from diffusers.video_processor import VideoProcessor

    vae = AutoencoderKLWan.from_pretrained(str(folder), subfolder="vae", dtype=torch.float32)
    stride = tile_px * 3 // 4
    vae.enable_tiling(tile_px, tile_px, stride, stride)
    config = vae.config
    mean = torch.tensor(config.latents_mean).view(1, config.z_dim, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(config.latents_std).view(1, config.z_dim, 1, 1, 1)
    with torch.no_grad():
        video = vae.decode(latents.samples / inv_std + mean, return_dict=False)[0]
    frames = VideoProcessor(vae_scale_factor=config.scale_factor_spatial).postprocess_video(
        video, output_type="pt"
    )
    return frames[0].permute(0, 2, 3, 1).float()
