"""Large pictures and local edits without extra models: tiled VAE, latent upscale, masks, inpainting.

What a user checks: a tiled decode looks like diffusers' tiled decode; with a small budget the decode
tiles by itself and the report says so; masks grow, feather and invert as drawn; an inpainting run keeps
the unmasked part of the picture; the shipped hires-fix and inpaint workflows run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from diffusers import AutoencoderKL
from diffusers.image_processor import VaeImageProcessor
from PIL import Image

from memory import MemoryConfig, MemoryManager
from nodes.executor import Executor
from nodes.png import alpha_mask
from nodes.registry import default_registry
from nodes.workflow import load_workflow, workflow_from_dict
from pipelines.diffusion.latent_ops import latent_noise_mask
from pipelines.diffusion.loading import load_model
from pipelines.diffusion.tiled_vae import decode_tiled, plan_decode
from pipelines.diffusion.values import Latents
from pipelines.image import ops

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / "resources" / "workflows"


@pytest.fixture(scope="module")
def data_dir():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield Path(os.environ["NODELOOM_DATA_DIR"])


@pytest.fixture
def cpu_manager():
    managers: list[MemoryManager] = []

    def make(**kwargs: object) -> MemoryManager:
        mm = MemoryManager(MemoryConfig(device="cpu", **kwargs))
        managers.append(mm)
        return mm

    yield make
    for mm in managers:
        mm.close()


def test_tiled_decode_equals_diffusers_enable_tiling(data_dir, cpu_manager) -> None:
    mm = cpu_manager(policy="sequential")
    model = load_model(mm, "builtin:shapes-sd")
    latents = Latents(samples=torch.randn(1, 4, 24, 24, generator=torch.Generator().manual_seed(0)))
    plan = plan_decode(mm, model.vae, latents, tiling="on", tile_px=64)
    assert plan.tiled and plan.tile_px == 64
    ours = decode_tiled(mm, model.vae, latents, plan)

    vae = AutoencoderKL.from_pretrained(REPO / "resources/models/shapes-sd", subfolder="vae")
    vae.enable_tiling()
    vae.tile_sample_min_size, vae.tile_latent_min_size = 64, 8
    with torch.no_grad():
        pixels = vae.decode(latents.samples / vae.config.scaling_factor, return_dict=False)[0]
    theirs = VaeImageProcessor(vae_scale_factor=8).postprocess(pixels, output_type="pt").permute(0, 2, 3, 1)
    assert ours.shape == (1, 192, 192, 3)
    assert (ours - theirs).abs().max().item() <= 1e-4
    # And the tiles really were blended: the picture differs from a full decode (seams are smoothed).
    with torch.no_grad():
        vae.disable_tiling()
        full = vae.decode(latents.samples / vae.config.scaling_factor, return_dict=False)[0]
    assert (
        VaeImageProcessor().postprocess(full, output_type="pt").permute(0, 2, 3, 1) - ours
    ).abs().max() > 1e-3


def _decode_graph(registry, width: int) -> dict:
    return {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {
            "load": {"type": "LoadDiffusionModel", "params": {"path": "builtin:shapes-sd"}, "inputs": {}},
            "latent": {
                "type": "EmptyLatent",
                "params": {"width": width, "height": width, "batch": 1},
                "inputs": {"vae": ["load", "vae"]},
            },
            "decode": {
                "type": "VAEDecode",
                "params": {},
                "inputs": {"vae": ["load", "vae"], "latent": ["latent", "latent"]},
            },
        },
    }


@pytest.mark.slow
def test_decode_tiles_by_itself_when_the_budget_is_too_small_and_the_report_says_so(
    data_dir, cpu_manager, tmp_path
) -> None:
    registry = default_registry(entry_point_packs=False)
    wf = workflow_from_dict(_decode_graph(registry, 512), registry)
    # The full 512x512 decode of the shapes VAE is predicted at (32 + 3 x 16) x 512^2 x 4 B = 80 MiB.
    small = cpu_manager(policy="sequential", ram_budget="40MiB")
    result = Executor(registry, memory=small).run(wf, out_dir=tmp_path, targets=["decode"])
    assert result.ok, result.error
    metrics = result.nodes["decode"].metrics
    assert metrics["vae_tiled"] == 1.0 and 64 <= metrics["vae_tile_px"] < 512
    assert result.outputs["decode"]["image"].shape == (1, 512, 512, 3)
    roomy = cpu_manager(policy="sequential", ram_budget="4GiB")
    result = Executor(registry, memory=roomy).run(wf, out_dir=tmp_path, targets=["decode"])
    assert result.ok and "vae_tiled" not in result.nodes["decode"].metrics


def test_masks_grow_feather_invert_and_come_from_alpha() -> None:
    mask = torch.zeros(1, 9, 9)
    mask[0, 4, 4] = 1.0
    grown = ops.mask_grow(mask, 2)
    assert grown.sum().item() == 25 and grown[0, 2:7, 2:7].min().item() == 1.0
    assert torch.equal(ops.mask_grow(grown, -2), mask)
    soft = ops.mask_feather(grown, 2)
    assert 0.0 < soft[0, 1, 4].item() < 1.0 and soft[0, 0, 0].item() < soft[0, 4, 4].item()
    assert torch.equal(ops.mask_invert(ops.mask_invert(mask)), mask)
    rgba = Image.new("RGBA", (4, 2), (255, 0, 0, 255))
    rgba.putpixel((1, 0), (0, 0, 0, 0))
    from_alpha = alpha_mask(rgba)
    assert from_alpha.shape == (1, 2, 4) and from_alpha.sum().item() == 1.0 and from_alpha[0, 0, 1] == 1.0
    assert alpha_mask(Image.new("RGB", (4, 2))).sum().item() == 0.0


def test_canny_and_lineart_find_the_square() -> None:
    image = torch.zeros(1, 32, 32, 3)
    image[0, 8:24, 8:24] = 1.0
    edges = ops.canny(image)
    assert edges.shape == image.shape
    assert edges[0, 8:24, 7:9].max().item() == 1.0 and edges[0, 14:18, 14:18].max().item() == 0.0
    lines = ops.lineart(ops.invert(image), threshold=0.5)
    assert torch.equal(lines, image)
    with pytest.raises(ValueError, match="low <= high"):
        ops.canny(image, 200, 100)


def test_noise_mask_keeps_the_unmasked_latents_exactly(data_dir, cpu_manager) -> None:
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.sampling import SamplerSettings

    mm = cpu_manager(policy="none")
    model = load_model(mm, "builtin:shapes-sd")
    original = Latents(
        samples=torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1)), source="encoded"
    )
    mask = torch.zeros(1, 64, 64)
    mask[0, :, 32:] = 1.0  # repaint the right half
    masked = latent_noise_mask(original, mask)
    positive = encode_prompt(mm, model.text_encoder, "a small red circle on a black background")
    out = sample(mm, model.denoiser, positive, None, masked, SamplerSettings(steps=6, cfg=1.0, seed=3))
    assert torch.equal(out.samples[..., :4], original.samples[..., :4])
    assert not torch.allclose(out.samples[..., 4:], original.samples[..., 4:])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hires_fix.json", "inpaint.json"])
def test_shipped_workflows_run(name: str, data_dir, cpu_manager, tmp_path) -> None:
    registry = default_registry(entry_point_packs=False)
    wf = load_workflow(WORKFLOWS / name, registry)
    data = json.loads((WORKFLOWS / name).read_text())
    assert data["meta"]["title"]
    result = Executor(registry, memory=cpu_manager(policy="sequential")).run(wf, out_dir=tmp_path)
    assert result.ok, result.error
    pngs = sorted(tmp_path.glob("*.png"))
    assert pngs, "the workflow saved no picture"
    with Image.open(pngs[-1]) as picture:
        assert picture.size == (128, 128) if name == "hires_fix.json" else picture.size == (64, 64)


class _TinyUpscaler(torch.nn.Module):
    """2x: two 3x3 convs (a 5-pixel receptive field) and a pixel shuffle, seeded."""

    def __init__(self, fail_above: int = 0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 12, 3, padding=1),
            torch.nn.PixelShuffle(2),
        )
        self.fail_above = fail_above

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fail_above and x.shape[-1] > self.fail_above:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return torch.sigmoid(self.body(x))


def test_tiled_upscale_equals_untiled_away_from_seams_and_within_1_255_at_them() -> None:
    from pipelines.image.upscale import upscale_tiled

    model = _TinyUpscaler().eval()
    pixels = torch.rand(1, 3, 70, 90, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        whole = model(pixels)
    tiled = upscale_tiled(model, pixels, tile=32, overlap=8)
    assert tiled.shape == whole.shape == (1, 3, 140, 180)
    diff = (tiled - whole).abs()
    assert diff.max().item() <= 1 / 255
    # Output pixels more than the receptive field away from every tile edge: bit-for-bit the same maths.
    assert diff[..., 2 * 4 : 2 * 20, 2 * 4 : 2 * 20].max().item() <= 1e-4
    assert diff.max().item() > 0  # tiles really were cut (the seams are where they differ at all)


def test_upscale_shrinks_tiles_after_out_of_memory(cpu_manager, tmp_path) -> None:
    from memory import ComponentSpec
    from pipelines.image.upscale import UpscaleModelRef, upscale_image

    mm = cpu_manager(policy="sequential")
    handle = mm.register(
        ComponentSpec(
            key="tiny-upscaler", name="tiny", kind="upscaler", build=lambda: _TinyUpscaler(fail_above=40)
        )
    )
    image = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(1))
    out, tile = upscale_image(mm, UpscaleModelRef(handle, tmp_path / "x"), image, tile=128, overlap=8)
    assert tile == 32 and out.shape == (1, 128, 128, 3)


def test_upscale_model_without_spandrel_says_how_to_get_it(cpu_manager, tmp_path, monkeypatch) -> None:
    import sys

    from safetensors.torch import save_file

    from pipelines.image.upscale import UpscalerUnavailable, load_upscale_model, upscale_image

    path = tmp_path / "4x_tiny.safetensors"
    save_file(_TinyUpscaler().state_dict(), str(path))
    monkeypatch.setitem(sys.modules, "spandrel", None)  # as if it were not installed
    mm = cpu_manager(policy="sequential")
    ref = load_upscale_model(mm, path)
    # The ledger knows its exact bytes from the header before anything is loaded.
    assert ref.handle.weight_bytes == sum(t.numel() * 4 for t in _TinyUpscaler().state_dict().values())
    with pytest.raises(UpscalerUnavailable, match=r"pip install 'nodeloom\[upscale\]'"):
        upscale_image(mm, ref, torch.rand(1, 16, 16, 3))


@pytest.fixture(scope="module")
def tiny_inpaint(data_dir, tmp_path_factory) -> Path:
    """The tiny SD demo model with its UNet swapped for a 9-channel (inpainting) one, seeded."""
    import shutil

    from diffusers import UNet2DConditionModel

    from pipelines.diffusion.demo_models import TINY_SD_UNET, ensure_demo_model

    folder = tmp_path_factory.mktemp("tiny-inpaint") / "model"
    shutil.copytree(ensure_demo_model("tiny-sd"), folder)
    shutil.rmtree(folder / "unet")
    torch.manual_seed(0)
    UNet2DConditionModel(**{**TINY_SD_UNET, "in_channels": 9}).save_pretrained(folder / "unet")
    return folder


def _picture_and_mask() -> tuple[torch.Tensor, torch.Tensor]:
    image = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(5))
    mask = torch.zeros(1, 64, 64)
    mask[0, 16:48, 24:56] = 1.0
    return image, mask


def test_inpainting_model_matches_diffusers_inpaint_pipeline(tiny_inpaint, cpu_manager) -> None:
    from diffusers import DPMSolverMultistepScheduler, StableDiffusionInpaintPipeline

    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.inpaint import inpaint_latents
    from pipelines.diffusion.sampling import SamplerSettings
    from pipelines.diffusion.vae import decode

    prompt = "a small yellow triangle on a black background"
    image, mask = _picture_and_mask()
    mm = cpu_manager(policy="sequential")
    model = load_model(mm, str(tiny_inpaint))
    latents = inpaint_latents(mm, model.vae, image, mask, noise_mask=False)
    assert latents.concat is not None and latents.concat.shape == (1, 5, 8, 8)
    positive = encode_prompt(mm, model.text_encoder, prompt)
    negative = encode_prompt(mm, model.text_encoder, "")
    settings = SamplerSettings(scheduler="dpmpp_2m", steps=5, cfg=4.0, seed=11)
    ours = decode(mm, model.vae, sample(mm, model.denoiser, positive, negative, latents, settings))

    pipe = StableDiffusionInpaintPipeline.from_pretrained(
        str(tiny_inpaint), safety_checker=None, requires_safety_checker=False
    )
    pipe.scheduler = DPMSolverMultistepScheduler.from_config(pipe.scheduler.config)
    pipe.set_progress_bar_config(disable=True)
    theirs = pipe(
        prompt,
        image=image.permute(0, 3, 1, 2),
        mask_image=mask[:, None],
        # The masked picture's latents as we computed them (the distribution's mode); the pipeline would
        # otherwise draw a sample from its generator.
        masked_image_latents=latents.concat[:, 1:],
        negative_prompt="",
        height=64,
        width=64,
        strength=1.0,
        num_inference_steps=5,
        guidance_scale=4.0,
        generator=torch.Generator("cpu").manual_seed(11),
        output_type="pt",
    ).images
    assert (ours.permute(0, 3, 1, 2) - theirs).abs().max().item() <= 1e-4


def test_inpainting_model_without_its_channels_says_what_to_wire(tiny_inpaint, cpu_manager) -> None:
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.sampling import SamplerSettings

    mm = cpu_manager(policy="none")
    model = load_model(mm, str(tiny_inpaint))
    positive = encode_prompt(mm, model.text_encoder, "x")
    with pytest.raises(ValueError, match="Inpaint Conditioning"):
        sample(mm, model.denoiser, positive, None, Latents(torch.zeros(1, 4, 8, 8)), SamplerSettings(steps=2))
