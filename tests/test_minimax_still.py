"""MiniMax H3 stills (ComfyUI's `image_minimax_h3_t2i`): an image latent denoised as one latent frame with no
sound rows (`pipelines.diffusion.minimax_vae.still_request`), decoded to one picture.

- The published template, imported against tiny MiniMax H3 files under its own file names, passes `app
  check`, plans every node with `app plan` and saves one picture of the size asked for; the same workflow
  reading the demo's diffusers folder gives the same picture.
- The still's packed sequence is diffusers' layout builder's for one latent frame and zero audio latents, and
  ComfyUI's sampler path (the k-samplers over the packed state) gives the native H3 loop's latent for it.
- A still whose latent sides are no whole patches (the template's own size) is sized and padded as ComfyUI
  does: its 8 px grid rounded to the model's 16, the model's input padded around on every call and the output
  cut back (`res_multistep` against a re-write of that).
- One latent frame decodes as ComfyUI's single-image decode.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.comfy_layout_support import run_graph
from tests.template_runs import import_template, max_diff, native_graph, template_file

TEMPLATE = "image_minimax_h3_t2i"
PROMPT = "a small yellow square on a black background"
# The template asks for 1296x728 (ResolutionSelector: 16:9, 0.9 MP, a multiple of 8); scaled by 1/18 onto the
# same 8 px grid, 72x40, small enough for a CPU run. With the tiny 8x VAE that is 9x5 latents: no whole 2x2
# patches, as the template's 81x46 are not at the release's 16x (the loops pad them as ComfyUI does).
WIDTH, HEIGHT = 72, 40
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
@pytest.mark.parametrize("sides", [(6, 8), (5, 9)], ids=["whole-patches", "padded"])
def test_comfyuis_sampler_path_gives_the_native_loops_still(tiny, sides: tuple[int, int]) -> None:
    from pipelines.diffusion.minimax_k_sampling import sample_minimax_k
    from pipelines.diffusion.minimax_sampling import sample_minimax
    from pipelines.diffusion.minimax_vae import still_request
    from pipelines.diffusion.sampling import SamplerSettings
    from pipelines.diffusion.values import Latents

    mm, (loaded, _), positive, image = tiny
    denoiser = loaded.denoiser
    image = Latents(
        samples=torch.zeros(1, image.samples.shape[1], *sides), vae_scale_factor=image.vae_scale_factor
    )
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


def test_an_empty_latent_is_remade_on_the_models_grid_as_comfyui_rounds_it(tiny) -> None:
    """ComfyUI's Empty Latent Image is an 8 px grid; its sampler resizes it to the model's (nearest-exact):
    the template's 1296x728 is 162x91 there and round(162 / 2) x round(91 / 2) = 81x46 at the release's 16x,
    a 1296x736 picture."""
    from pipelines.diffusion.minimax_vae import still_request
    from pipelines.diffusion.values import Latents

    _, (loaded, _), _, _ = tiny
    release_grid = dataclasses.replace(loaded.denoiser, vae_scale_factor=16)
    empty = Latents(samples=torch.zeros(1, 4, 728 // 8, 1296 // 8), vae_scale_factor=8)
    still = still_request(release_grid, empty)
    channels = int(loaded.denoiser.config["in_channels"])
    assert tuple(still.samples.shape) == (1, channels, 1, 46, 81)
    assert still.pixel_size == (736, 1296)


@pytest.mark.slow  # the tiny model: two 3-step runs
def test_a_still_of_odd_latent_sides_is_padded_on_every_call_as_comfyui_does(tiny) -> None:
    """ComfyUI's MiniMax H3 forward pads its input to whole 2x2 patches (`pad_to_patch_size`, circular), builds
    the layout at the padded size and cuts the output back; its sampler's state is the unpadded latent. Here
    the rows carry the padding, made again from the latent before each call; `res_multistep` over both."""
    from pipelines.diffusion.lora import use_denoiser
    from pipelines.diffusion.minimax_k_sampling import sample_minimax_k
    from pipelines.diffusion.minimax_layout import (
        patchify_video_latents,
        row_timesteps,
        unpatchify_video_rows,
    )
    from pipelines.diffusion.minimax_sampling import packed_start
    from pipelines.diffusion.minimax_vae import still_request
    from pipelines.diffusion.sampling import SamplerSettings
    from pipelines.diffusion.values import Latents
    from tests.test_minimax_k_sampling import _comfy_res_multistep, _comfy_simple_sigmas

    mm, (loaded, _), positive, _ = tiny
    denoiser = loaded.denoiser
    channels = int(denoiser.config["in_channels"])
    image = Latents(samples=torch.zeros(1, channels, 5, 9), vae_scale_factor=denoiser.vae_scale_factor)
    steps, seed, shift = 3, 7, 12.0
    settings = SamplerSettings(scheduler="k_res_multistep", sigma_schedule="simple", steps=steps, seed=seed)
    ours = sample_minimax_k(mm, denoiser, positive, image, settings)
    assert tuple(ours.samples.shape) == (1, channels, 1, 5, 9)

    start = packed_start(mm, denoiser, positive, still_request(denoiser, image), seed)
    assert start.padded == (6, 10)
    noise = unpatchify_video_rows(start.x, channels, 1, 6, 10, start.patch)[..., :5, :9]  # the same draw

    with use_denoiser(mm, denoiser) as model:

        def comfy_model(latent: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
            s = float(sigma)
            padded = torch.nn.functional.pad(latent, (0, 1, 0, 1, 0, 0), mode="circular")
            unique, index = row_timesteps(start.layout, 1.0 - s, 1.0 - s)  # no audio rows: t_a unused
            v, _ = model(
                hidden_states=patchify_video_latents(padded, start.patch)[None],
                audio_hidden_states=start.audio[None],
                encoder_hidden_states=start.text,
                timestep=unique,
                timestep_indices=index,
                return_dict=False,
                **start.fields,
            )
            out = -unpatchify_video_rows(v[0].float(), channels, 1, 6, 10, start.patch)[..., :5, :9]
            return latent - s * out  # CONST's clean estimate from the model's -velocity

        theirs = _comfy_res_multistep(comfy_model, noise, _comfy_simple_sigmas(shift, steps))
    # Same float32 model calls on the same padded inputs; the clean estimate is formed along different
    # algebra (x + sigma v vs x - sigma (-v)) and the sigmas along different float32 paths: ~1e-6 seen.
    assert torch.allclose(ours.samples, theirs, atol=1e-4)
    assert ours.samples.abs().max() > 0.1
