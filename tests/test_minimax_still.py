"""MiniMax H3 stills (ComfyUI's `image_minimax_h3_t2i`): an image latent denoised as one latent frame with no
sound rows (`pipelines.diffusion.minimax_vae.still_request`), decoded to one picture.

- The published template, imported against tiny MiniMax H3 files under its own file names, passes `app
  check`, plans every node with `app plan` and saves one picture of the size asked for; the same workflow
  reading the demo's diffusers folder gives the same picture.
- The still's packed sequence is diffusers' layout builder's for one latent frame and zero audio latents, and
  ComfyUI's sampler path (the k-samplers over the packed state) gives the native H3 loop's latent for it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.comfy_layout_support import run_graph
from tests.template_runs import import_template, max_diff, native_graph, template_file

TEMPLATE = "image_minimax_h3_t2i"
PROMPT = "a small yellow square on a black background"
# The template asks for 16:9 (ResolutionSelector: 1296x728, 0.9 MP); MiniMax H3's sides are multiples of 32
# (the tiny fixture's too), so 16:9 on that grid, small enough for a CPU run: 512x288.
WIDTH, HEIGHT = 512, 288
SETS = {
    "empty_latent_image.width": WIDTH,
    "empty_latent_image.height": HEIGHT,
    "sampler_custom_advanced.steps": 2,
    "sampler_custom_advanced.seed": 42,
}


@pytest.mark.slow  # writes the tiny MiniMax H3 files and runs the template twice (~15 s)
def test_the_still_template_saves_one_picture_of_the_size_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.main import main
    from pipelines.diffusion.comfy_layouts.template_fixtures import write_fixture

    template_file(TEMPLATE)  # skips before building anything when the templates package is absent
    write_fixture("minimax", tmp_path)  # tiny-minimax/ and ComfyUI/models/ under the templates' own names
    folder, models = tmp_path / "tiny-minimax", tmp_path / "ComfyUI" / "models"
    dirs = ("--models-dir", str(models))
    imported = tmp_path / f"{TEMPLATE}.nodeloom.json"
    workflow = import_template(TEMPLATE, models, imported)  # `app import`, then `app check` (exit 0)
    types = {node["type"] for node in workflow["nodes"].values()}
    assert {"EmptyLatent", "Sampler", "LTXVSeparateAVLatent", "VAEDecode", "SaveImage"} <= types
    # `app plan` walks every node: the sampler hands on the still's latent, so Separate AV Latent is planned
    # and the decode after it gets its working memory
    capsys.readouterr()  # what import and check printed
    sets = [arg for key, value in SETS.items() for arg in ("--set", f"{key}={value}")]
    assert main(["plan", str(imported), *dirs, *sets, "--device", "cpu", "--json"]) == 0
    nodes = json.loads(capsys.readouterr().out)["nodes"]
    assert not [n for n in nodes if "not simulated" in n.get("note", "")]

    ours = run_graph(imported, tmp_path / "files", SETS, dirs)
    assert len(ours) == 1  # one picture, not a video's frames
    assert ours[0].shape == (HEIGHT, WIDTH, 3)
    assert ours[0].std() > 5  # a real picture, not a flat one
    native = run_graph(native_graph(workflow, folder), tmp_path / "native", SETS, dirs)
    # The same float32 weights read from ComfyUI's files instead of the folder: identical pictures, or 1/255
    # apart where a value sits on a rounding edge.
    assert max_diff(ours, native) <= 1


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    """(memory manager, the loaded tiny MiniMax H3 and its folder, positive, the still's image latent)."""
    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.demo_models import save_demo_model
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.values import Latents

    tmp = tmp_path_factory.mktemp("minimax_still")
    folder = save_demo_model("tiny-minimax", tmp / "tiny-minimax")
    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp / "memory")) as mm:
        loaded = load_model(mm, str(folder))
        positive = encode_prompt(mm, loaded.text_encoder, PROMPT)
        denoiser = loaded.denoiser
        channels, scale = int(denoiser.config["in_channels"]), denoiser.vae_scale_factor
        # an Empty Latent wired to the denoiser: 64x48 px, odd on purpose (nothing assumes square)
        image = Latents(samples=torch.zeros(1, channels, 48 // scale, 64 // scale), vae_scale_factor=scale)
        yield mm, (loaded, folder), positive, image


def test_a_still_is_one_latent_frame_packed_as_diffusers_lays_out_no_sound(tiny) -> None:
    from diffusers.modular_pipelines.minimax_h3.before_denoise import MiniMaxH3PrepareLayoutStep

    from pipelines.diffusion.minimax_layout import AUDIO_TAG, TEXT_TAG, VIDEO_TAG
    from pipelines.diffusion.minimax_sampling import packed_start
    from pipelines.diffusion.minimax_vae import still_request

    mm, (loaded, _), positive, image = tiny
    denoiser = loaded.denoiser
    still = still_request(denoiser, image)
    _, _, h, w = image.samples.shape
    assert tuple(still.samples.shape) == (1, image.samples.shape[1], 1, h, w)
    assert still.audio is not None and still.audio.shape[-1] == 0  # no audio latents
    start = packed_start(mm, denoiser, positive, still, seed=42)
    assert start.audio.shape[0] == 0 and start.x.shape[0] == (h // 2) * (w // 2)

    tags = torch.full((positive.embeds.shape[1],), TEXT_TAG, dtype=torch.long)
    position_ids, token_tags, video, audio, text, video_kept, audio_kept = (
        MiniMaxH3PrepareLayoutStep.build_packed_sequence(tags, 1, h, w, 0, (1, 2, 2), 2, AUDIO_TAG, VIDEO_TAG)
    )
    layout = start.layout
    assert torch.equal(layout.position_ids, position_ids)  # float64 grids, built the same way: exact
    assert torch.equal(layout.token_tags, token_tags)
    assert torch.equal(layout.video_indices, video) and audio.numel() == layout.audio_indices.numel() == 0
    assert (video_kept, audio_kept) == (0, 0)


@pytest.mark.slow  # the tiny model: three 2-step runs
def test_comfyuis_sampler_path_gives_the_native_loops_still(tiny) -> None:
    from pipelines.diffusion.minimax_k_sampling import sample_minimax_k
    from pipelines.diffusion.minimax_sampling import sample_minimax
    from pipelines.diffusion.minimax_vae import still_request
    from pipelines.diffusion.sampling import SamplerSettings

    mm, (loaded, _), positive, image = tiny
    denoiser = loaded.denoiser
    native = sample_minimax(
        mm, denoiser, positive, None, image, SamplerSettings(scheduler="default", steps=2)
    )
    k = SamplerSettings(scheduler="k_euler", sigma_schedule="simple", steps=2)
    ours = sample_minimax_k(mm, denoiser, positive, image, k)
    assert ours.samples.shape == native.samples.shape == still_request(denoiser, image).samples.shape
    assert ours.audio is not None and ours.audio.shape[-1] == 0  # the sound track stays empty
    # The same Euler steps written two ways (the model's own schedule, the k-sampler over ComfyUI's flow
    # sigmas), the sigmas computed in float32 along different paths: float32 rounding, ~1e-6 here.
    assert torch.allclose(ours.samples, native.samples, atol=1e-4)
    assert native.samples.abs().max() > 0.1  # a latent came out, not zeros
    # The explicit one-frame video with an empty sound track is the same request as the image latent.
    explicit = sample_minimax(
        mm,
        denoiser,
        positive,
        None,
        still_request(denoiser, image),
        SamplerSettings(scheduler="default", steps=2),
    )
    assert torch.equal(explicit.samples, native.samples)


def test_the_still_decodes_to_one_picture_as_comfyui_decodes_a_single_image(tiny) -> None:
    """ComfyUI's single-image decode (comfy/ldm/minimax/vae.py, PR #16881): the one latent frame through the
    decoder alone (denormalised, ImageNet pixels undone), the last pixel frame kept."""
    from diffusers import AutoencoderKLMiniMaxH3

    from pipelines.diffusion.minimax_layout import PIXEL_MEAN, PIXEL_STD
    from pipelines.diffusion.minimax_vae import decode_minimax_frames, still_request

    mm, (loaded, folder), _, image = tiny
    vae = loaded.vae
    latent = still_request(loaded.denoiser, image)
    z = torch.randn(latent.samples.shape, generator=torch.Generator().manual_seed(3))
    ours = decode_minimax_frames(mm, vae, type(latent)(samples=z, vae_scale_factor=latent.vae_scale_factor))
    assert ours.shape == (1, 48, 64, 3)

    model = AutoencoderKLMiniMaxH3.from_pretrained(str(folder), subfolder="vae").eval()
    mean = torch.tensor(vae.config["latents_mean"]).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.config["latents_std"]).view(1, -1, 1, 1, 1)
    with torch.no_grad():
        frames = model.decoder(model.post_quant_conv(z * std + mean))  # (1, 3, temporal factor, H, W)
    assert frames.shape[2] > 1  # one latent frame spans several pixel frames: which one is kept matters
    pixels = frames[:, :, -1:] * torch.tensor(PIXEL_STD).view(1, -1, 1, 1, 1)
    theirs = (pixels + torch.tensor(PIXEL_MEAN).view(1, -1, 1, 1, 1)).clamp(0, 1)[0].permute(1, 2, 3, 0)
    # The same float32 decoder on the same input; the folder's VAE is run here through the memory manager
    # (its own module instance): differences are float32 rounding, none seen.
    assert np.allclose(ours.numpy(), theirs.numpy(), atol=1e-5)
