"""The MiniMax H3 denoising loop (video and its stereo sound track in one packed sequence), written out like
diffusers' `MiniMaxH3CoreDenoiseStep` / `MiniMaxH3FL2VACoreDenoiseStep`.

Lives here: `sample_minimax`, `minimax_working`, `AUDIO_SCHEDULER_KEY`, `PackedStart`, `packed_start`,
`unpack_result`, `check_request`. May import: stdlib, torch, diffusers,
memory, pipelines.steps, pipelines.diffusion.*.

What differs from the other video loops: one transformer call per step serves text, keyframe anchors, audio
and video rows at once (`minimax_layout`), with a timestep per row; the checkpoint is guidance-distilled, so
there is no unconditional pass, `cfg` and the negative prompt are not used (as the pipeline has neither).
Two `MiniMaxH3Scheduler`s step the video and audio rows (the folder's `scheduler` and `audio_scheduler`,
shift 12 and 3, or MiniMax H3 Sigma Shift's); `steps` counts model calls, as everywhere in Nodeloom and in
ComfyUI: the pipeline's `num_inference_steps` counts the sigma grid's points including the terminal 0, i.e.
`steps + 1`. The schedule is the model's (a Sampler's `sigma_schedule` is not read here; ComfyUI's other
k_* samplers run in `minimax_k_sampling` over ComfyUI's flow sigmas and that schedule). Noise is
drawn from one CPU generator seeded with `seed` in the pipeline's order: one draw per keyframe anchor (noised
to t = 0.999), then the video latent, then the audio rows. Anchors are never stepped. Reference to video
(ref2va) with pictures rides the same mechanism: the pictures are anchors at their own sizes, laid out by
`minimax_refs.build_ref2va_packed_sequence`, and the transformer is the folder's `transformer_ref`.

A still (ComfyUI's `image_minimax_h3_t2i`: an Empty Latent Image under this model) is a one-frame video with no
sound rows (`minimax_vae.still_request`): the image latent gains a time axis of one latent frame, as ComfyUI's
`fix_empty_latent_channels` gives a 3D-latent model, and the audio track has zero latents, so the packed
sequence is [text | video]. That is how H3 is trained on pictures (diffusion-pipe's MiniMax H3 trainer packs an
item without sound with `torch.empty([1, 32, 2, 0])` audio); diffusers' pipeline has no still (it snaps
`num_frames` up to 17n + 5 and always makes sound). The sampled latent keeps its zero-length sound track, so
ComfyUI's Separate AV Latent splits it as it does a video's. A still's latent sides need not be whole 2x2
patches (the template's 1296x728 is 81x46 latents): as ComfyUI's forward (`pad_to_patch_size`, circular, the
layout built at the padded size, the output cut back), the rows cover the latent wrapped around to whole
patches, and that padding is made again from the latent after every step (`PackedStart.repad`), so it is no
state of its own, as in ComfyUI, whose sampler steps the unpadded latent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from diffusers import MiniMaxH3Scheduler
from diffusers.utils.torch_utils import randn_tensor

from memory import MemoryManager, Working
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.minimax_layout import (
    AUDIO_SCHEDULER_KEY,
    KEYFRAME_NOISE_AUG,
    MINIMAX_H3_AUDIO_CHANNELS,
    TEXT_TAG,
    PackedLayout,
    build_packed_sequence,
    patchify_video_latents,
    row_timesteps,
    unpatchify_video_rows,
)
from pipelines.diffusion.minimax_refs import build_ref2va_packed_sequence, is_ref2va, ref2va_denoiser
from pipelines.diffusion.minimax_vae import still_request
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.steps import OnStep, Step

_SCHEDULERS = ("default", "euler", "k_euler")  # the model's own rectified-flow Euler

# Fitted on the meta device (tests/test_family_minimax_working.py, tests/live_tensors.py) at MiniMax H3's
# widths (5376 hidden, 56 x 128 heads, 14336 FFN), 15k to 110k packed rows: a block keeps its SwiGLU's four
# FFN-wide values per row alive beside about five hidden-wide ones (1.004x of the live tensors). One batch:
# the checkpoint is guidance-distilled, there is no CFG pass.
_PER_ROW_FFN, _PER_ROW_HIDDEN = 4, 5
_FIXED = 64 * 2**20


def minimax_working(denoiser: DenoiserRef, tokens: int) -> Working:
    """One transformer call's activations over `tokens` packed rows."""
    config = denoiser.config
    hidden = int(config.get("hidden_size", 5376))
    ffn = int(config.get("ffn_dim", 14336))
    per_row = _PER_ROW_FFN * ffn + _PER_ROW_HIDDEN * hidden + hidden // 8
    nbytes = tokens * per_row * torch.finfo(denoiser.dtype).bits // 8
    return Working(nbytes + _FIXED, f"1x{tokens}")


def _check(
    denoiser: DenoiserRef, positive: Conditioning, latents: Latents, settings: SamplerSettings
) -> None:
    if settings.scheduler not in _SCHEDULERS:
        raise ValueError(
            f"{denoiser.family.title} runs with its own rectified-flow Euler (scheduler default or euler) or "
            f"ComfyUI's flow samplers (k_res_multistep, ...), not {settings.scheduler!r}"
        )
    check_request(denoiser, positive, latents, settings)


def check_request(
    denoiser: DenoiserRef, positive: Conditioning, latents: Latents, settings: SamplerSettings
) -> None:
    """What every MiniMax H3 loop refuses: the steps, denoise, caches, the latent and the prompt's shape."""
    title = denoiser.family.title
    if settings.steps < 1:
        raise ValueError(f"field 'steps': at least 1, got {settings.steps}")
    if settings.denoise < 1.0:
        raise ValueError(f"{title}: denoise below 1 (video-to-video) is not supported yet")
    if settings.step_cache.on:
        raise ValueError(
            f"cache {settings.cache!r}: the step caches do not run in {title}'s loop (set cache to off)"
        )
    if latents.samples.ndim != 5 or latents.audio is None or latents.audio.ndim != 3:
        raise ValueError(
            f"{title} denoises a video latent with its sound track: feed the sampler from an Empty Video Latent "
            "wired to this model's VAE (or MiniMax H3 Image to Video), or an Empty Latent (a still)"
        )
    if latents.samples.shape[0] != 1:
        raise ValueError(f"{title}: one video at a time, got a batch of {latents.samples.shape[0]}")
    if positive.embeds.shape[0] != 1:
        raise ValueError(
            f"input 'positive': {title} packs one prompt into the sequence, got {positive.embeds.shape[0]}"
        )
    if latents.keyframes and positive.token_tags is not None and not (positive.token_tags == 0).any():
        raise ValueError(
            "input 'positive': the latent has keyframes but the prompt was encoded without them: wire the "
            "conditioning of the same MiniMax H3 Image to Video node"
        )


@dataclass(frozen=True)
class PackedStart:
    """The packed sequence a MiniMax H3 loop starts from: the layout, the video rows (keyframe anchors first,
    `kept` of them, never stepped) and the audio rows, noised, with the transformer's fixed inputs."""

    layout: PackedLayout
    x: torch.Tensor  # (anchor rows + F x h x w, C x patch) float32
    audio: torch.Tensor  # (2 x audio latents, audio C) float32
    kept: int
    fields: dict[str, torch.Tensor]
    text: torch.Tensor
    tokens: int
    patch: tuple[int, int, int]
    size: tuple[int, int] = (0, 0)  # the latent's (h, w)
    padded: tuple[int, int] = (0, 0)  # ... rounded up to the patch: what the rows cover

    def video(self, rows: torch.Tensor, channels: int, frames: int) -> torch.Tensor:
        """Target video rows -> the (1, C, F, h, w) latent (the patch padding cut off)."""
        (h, w), (ph, pw) = self.size, self.padded
        return unpatchify_video_rows(rows, channels, frames, ph, pw, self.patch)[..., :h, :w]

    def repad(self, rows: torch.Tensor) -> torch.Tensor:
        """Target video rows with their padding made again from the latent, as ComfyUI pads the model's
        input on every call (`pad_to_patch_size`, circular): the padding is no state of its own."""
        if self.size == self.padded:
            return rows
        channels = rows.shape[1] // math.prod(self.patch)
        frames = rows.shape[0] * self.patch[0] * self.patch[1] * self.patch[2] // math.prod(self.padded)
        return patchify_video_latents(_pad(self.video(rows, channels, frames), self.padded), self.patch)


def _pad(latent: torch.Tensor, padded: tuple[int, int]) -> torch.Tensor:
    """(1, C, F, h, w) -> (1, C, F, *padded), wrapped around (ComfyUI's circular `pad_to_patch_size`)."""
    extra_h, extra_w = padded[0] - latent.shape[-2], padded[1] - latent.shape[-1]
    if not (extra_h or extra_w):
        return latent
    return torch.nn.functional.pad(latent, (0, extra_w, 0, extra_h, 0, 0), mode="circular")


def packed_start(
    mm: MemoryManager, denoiser: DenoiserRef, positive: Conditioning, latents: Latents, seed: int
) -> PackedStart:
    """The layout and the noise of one request: anchors noised to t = 0.999, then pure-noise video and audio
    rows, all drawn from one CPU generator seeded with `seed` in the pipeline's order."""
    assert latents.audio is not None
    device = torch.device(mm.device)
    config = denoiser.config
    patch = tuple(int(p) for p in config.get("patch_size", (1, 2, 2)))
    patch3 = (patch[0], patch[1], patch[2])
    _, _, frames, height, width = latents.samples.shape
    # A still's sides need not be whole patches (ComfyUI's Empty Latent Image steps by 8 px): its rows cover the
    # latent rounded up to the patch, wrapped around as ComfyUI pads it (videos are whole patches already).
    padded = (-(-height // patch3[1]) * patch3[1], -(-width // patch3[2]) * patch3[2])
    _, audio_channels, audio_latents = latents.audio.shape
    generator = torch.Generator("cpu").manual_seed(seed)
    scheduler = MiniMaxH3Scheduler.from_config(
        {k: v for k, v in denoiser.scheduler_config.items() if k != AUDIO_SCHEDULER_KEY}
    )

    # The packed layout: [text | keyframe anchors or reference pictures | target audio | target video]
    tags = positive.token_tags
    if tags is None:
        tags = torch.full((positive.embeds.shape[1],), TEXT_TAG, dtype=torch.long)
    if is_ref2va(latents):
        shapes = tuple((int(c.shape[2]), int(c.shape[3]), int(c.shape[4])) for _, c in latents.keyframes)
        layout = build_ref2va_packed_sequence(tags, shapes, frames, *padded, audio_latents, patch3)
    else:
        anchors = tuple(anchor for anchor, _ in latents.keyframes)
        layout = build_packed_sequence(tags, frames, *padded, audio_latents, patch3, anchors)

    # Anchor noise first, then the video latent, then the audio rows (float32)
    anchor_rows = []
    for _, condition in latents.keyframes:
        noise = randn_tensor(tuple(condition.shape), generator=generator, device=device, dtype=torch.float32)
        noised = scheduler.scale_noise(condition.to(device), KEYFRAME_NOISE_AUG, noise)
        anchor_rows.append(patchify_video_latents(noised, patch3))
    video = randn_tensor(
        tuple(latents.samples.shape), generator=generator, device=device, dtype=torch.float32
    )
    x = patchify_video_latents(_pad(video, padded), patch3)  # (F x h x w, C x patch)
    if anchor_rows:
        x = torch.cat([*anchor_rows, x])
    assert x.shape[0] == layout.video_indices.numel(), (x.shape, layout.video_indices.shape)
    a = randn_tensor(
        (MINIMAX_H3_AUDIO_CHANNELS * audio_latents, audio_channels),
        generator=generator,
        device=device,
        dtype=torch.float32,
    )
    return PackedStart(
        layout=layout,
        x=x,
        audio=a,
        kept=layout.condition_rows,
        fields=layout.fields(device),
        text=positive.embeds.to(device),
        tokens=int(layout.token_tags.numel()),
        patch=patch3,
        size=(height, width),
        padded=padded,
    )


def unpack_result(start: PackedStart, rows: torch.Tensor, audio: torch.Tensor, latents: Latents) -> Latents:
    """The generated video rows and the audio rows (as the mono VAE's two batch items) as a Latents."""
    _, channels, frames, _, _ = latents.samples.shape
    samples = start.video(rows, channels, frames)
    audio_latents = audio.shape[0] // MINIMAX_H3_AUDIO_CHANNELS  # 0 for a still
    audio = (
        audio.reshape(MINIMAX_H3_AUDIO_CHANNELS, audio_latents, audio.shape[-1]).permute(0, 2, 1).contiguous()
    )
    return Latents(
        samples=samples.cpu(),
        vae_scale_factor=latents.vae_scale_factor,
        source="sampled",
        audio=audio.cpu(),
        fps=latents.fps,
    )


@torch.no_grad()
def sample_minimax(
    mm: MemoryManager,
    denoiser: DenoiserRef,
    positive: Conditioning,
    negative: Conditioning | None,
    latents: Latents,
    settings: SamplerSettings,
    *,
    on_step: OnStep | None = None,
) -> Latents:
    del negative  # guidance-distilled: the pipeline has no negative prompt
    # 1. Check inputs
    latents = still_request(denoiser, latents)
    _check(denoiser, positive, latents, settings)
    assert latents.audio is not None
    device = torch.device(mm.device)
    _, channels, frames, _, _ = latents.samples.shape
    scheduler_config = {k: v for k, v in denoiser.scheduler_config.items() if k != AUDIO_SCHEDULER_KEY}
    scheduler = MiniMaxH3Scheduler.from_config(scheduler_config)
    audio_scheduler = MiniMaxH3Scheduler.from_config(
        denoiser.scheduler_config.get(AUDIO_SCHEDULER_KEY, {"shift": 3.0})
    )

    # 2-3. The packed layout and the noised rows
    start = packed_start(mm, denoiser, positive, latents, settings.seed)
    layout, x, a, kept = start.layout, start.x, start.audio, start.kept

    # 4. Prepare timesteps: one schedule per modality (zip: the pipeline walks the video schedule)
    scheduler.set_timesteps(settings.steps + 1, device=device)  # grid points: the calls and the final 0
    audio_scheduler.set_timesteps(settings.steps + 1, device=device)
    plan = [
        tuple(v.to(device) for v in row_timesteps(layout, float(t), float(ta)))
        for t, ta in zip(scheduler.timesteps, audio_scheduler.timesteps, strict=False)
    ]

    # 5. Denoising loop: one forward per step, no guidance
    fields, text, tokens = start.fields, start.text, start.tokens
    model_ref = ref2va_denoiser(denoiser, latents)  # ref2va: the folder's transformer_ref partition
    with use_denoiser(mm, model_ref, working=minimax_working(denoiser, tokens)) as model:
        for i, (t, ta) in enumerate(zip(scheduler.timesteps, audio_scheduler.timesteps, strict=False)):
            unique, index = plan[i]
            v, va = model(
                hidden_states=x[None],
                audio_hidden_states=a[None],
                encoder_hidden_states=text,
                timestep=unique,
                timestep_indices=index,
                return_dict=False,
                **fields,
            )
            x[kept:] = start.repad(scheduler.step(v[0, kept:].float(), t, x[kept:], return_dict=False)[0])
            a = audio_scheduler.step(va[0].float(), ta, a, return_dict=False)[0]

            if on_step is not None:
                middle = frames // 2
                rows = x[kept:]
                denoised = rows + (1 - t) * v[0, kept:].float()  # x0 from the data-ward velocity
                on_step(
                    Step(
                        step=i + 1,
                        total=len(scheduler.timesteps),
                        timestep=float(t),
                        latents=start.video(rows, channels, frames)[:, :, middle],
                        denoised=start.video(denoised, channels, frames)[:, :, middle],
                    )
                )

    # 6. Unpack: the generated video rows, and the audio rows as the mono VAE's two batch items
    return unpack_result(start, x[kept:], a, latents)
