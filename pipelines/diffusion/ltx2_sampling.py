"""The LTX-2 denoising loop (video and its sound track together), written out like diffusers'
`LTX2Pipeline.__call__`.

Lives here: `sample_ltx2`, `ltx2_working`, `LTX2Guidance`, `pack_video`, `unpack_video`,
`pack_audio`, `unpack_audio`. May import: stdlib,
torch, numpy, diffusers, memory, pipelines.steps, pipelines.diffusion.*.

What differs from the Wan loop: the transformer denoises two token streams at once, the video latents
packed to (B, F x h x w, C) and the audio latents (B, C, L, mel) to (B, L, C x mel), each with its own text tokens from the
connectors, and predicts a velocity for both. Guidance is the pipeline's, term by term in x0 space: CFG (the
unconditional and conditional passes as one doubled batch, negative first), spatio-temporal guidance (a
pass with self-attention skipped in `stg_blocks`), modality isolation (a pass without the audio<->video
cross-attention), then guidance rescaling, then back to velocities for two Euler schedulers (one per
stream, the same sigmas). `cfg` is the pipeline's `guidance_scale`; every other scale keeps the pipeline's
default (`LTX2Guidance`), so the audio stream is always guided (its CFG is 7) and a negative prompt is always
needed. The schedule is the pipeline's: sigmas 1 -> 1/steps, the dynamic shift `mu` from the video token
count. The frame rate the latent was made for (`Latents.fps`) conditions the video positions.
Image-to-video (`Latents.keep_mask`, from LTXV Image to Video) is `LTX2ImageToVideoPipeline`'s: the first
latent frame starts as the encoded picture, its tokens see timestep 0, and the Euler step skips it. Any
other mask (ComfyUI's LTXVImgToVideoInplace below strength 1: a share of a frame kept) is ComfyUI's noise mask:
each token's timestep is scaled by its denoised share, and both the input and the prediction are blended with
the clean latent by the kept share before the Euler step.
ComfyUI's way (`settings.sigmas`, a SIGMAS wire; `DenoiserRef.ltx2_guidance`, the LTX-2 Guidance node): the
given sigmas are stepped through unshifted, and both streams start from their input latents noised to the
first sigma (`manual_sigmas.noised_start`), so a second stage refines the first one's (upscaled) result; a
guidance whose video and audio CFG are 1 (ComfyUI's CFGGuider at cfg 1) runs one transformer call a step.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from memory import MemoryManager, Working
from pipelines.diffusion.flow_loop import check_flow_scheduler  # not flow_sampling: it imports diffusers
from pipelines.diffusion.k_samplers import gradient_estimate
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.ltx2_vae import DEFAULT_FPS
from pipelines.diffusion.manual_sigmas import check_sigmas, noised_start, set_manual_sigmas
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.schedulers import K_PREFIX, make_scheduler
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.steps import OnStep, Step

# ComfyUI's k-samplers the loop runs: Euler, and gradient estimation (Euler with a correction from the previous
# step's velocity: on a flow model d = (x - x0) / sigma is the velocity, so it rides on the same Euler steps).
_K_SAMPLERS = ("k_euler", "k_gradient_estimation")


@dataclass(frozen=True)
class LTX2Guidance:
    """The pipeline's guidance defaults besides `guidance_scale` (LTX2Pipeline.__call__'s arguments)."""

    stg_scale: float = 1.0
    modality_scale: float = 3.0
    guidance_rescale: float = 0.7
    audio_guidance_scale: float = 7.0
    audio_stg_scale: float = 1.0
    audio_modality_scale: float = 3.0
    audio_guidance_rescale: float = 0.7
    stg_blocks: tuple[int, ...] = (28,)


# Copied from diffusers.pipelines.flux.pipeline_flux.calculate_shift
def calculate_shift(
    image_seq_len,
    base_seq_len: int = 256,
    max_seq_len: int = 4096,
    base_shift: float = 0.5,
    max_shift: float = 1.15,
):
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    b = base_shift - m * base_seq_len
    mu = image_seq_len * m + b
    return mu


# Copied from diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion.rescale_noise_cfg
def rescale_noise_cfg(noise_cfg, noise_pred_text, guidance_rescale=0.0):
    r"""
    Rescales `noise_cfg` tensor based on `guidance_rescale` to improve image quality and fix overexposure. Based on
    Section 3.4 from [Common Diffusion Noise Schedules and Sample Steps are
    Flawed](https://huggingface.co/papers/2305.08891).

    Args:
        noise_cfg (`torch.Tensor`):
            The predicted noise tensor for the guided diffusion process.
        noise_pred_text (`torch.Tensor`):
            The predicted noise tensor for the text-guided diffusion process.
        guidance_rescale (`float`, *optional*, defaults to 0.0):
            A rescale factor applied to the noise predictions.

    Returns:
        noise_cfg (`torch.Tensor`): The rescaled noise prediction tensor.
    """
    std_text = noise_pred_text.std(dim=list(range(1, noise_pred_text.ndim)), keepdim=True)
    std_cfg = noise_cfg.std(dim=list(range(1, noise_cfg.ndim)), keepdim=True)
    # rescale the results from guidance (fixes overexposure)
    noise_pred_rescaled = noise_cfg * (std_text / std_cfg)
    # mix with the original results from guidance by factor guidance_rescale to avoid "plain looking" images
    noise_cfg = guidance_rescale * noise_pred_rescaled + (1 - guidance_rescale) * noise_cfg
    return noise_cfg


def pack_video(x: torch.Tensor, p: int, pt: int) -> torch.Tensor:
    """(B, C, F, H, W) -> (B, F/pt x H/p x W/p, C x pt x p x p), as the pipeline's `_pack_latents`."""
    b, _, f, h, w = x.shape
    x = x.reshape(b, -1, f // pt, pt, h // p, p, w // p, p)
    return x.permute(0, 2, 4, 6, 1, 3, 5, 7).flatten(4, 7).flatten(1, 3)


def unpack_video(x: torch.Tensor, frames: int, h: int, w: int, p: int, pt: int) -> torch.Tensor:
    """The inverse of `pack_video` (the pipeline's `_unpack_latents`); frames/h/w are in patches."""
    x = x.reshape(x.size(0), frames, h, w, -1, pt, p, p)
    return x.permute(0, 4, 1, 5, 2, 6, 3, 7).flatten(6, 7).flatten(4, 5).flatten(2, 3)


def pack_audio(a: torch.Tensor) -> torch.Tensor:
    """(B, C, L, mel) -> (B, L, C x mel), as the pipeline's `_pack_audio_latents` without patches."""
    return a.transpose(1, 2).flatten(2, 3)


def unpack_audio(a: torch.Tensor, mel_bins: int) -> torch.Tensor:
    """The inverse of `pack_audio` (the pipeline's `_unpack_audio_latents`)."""
    return a.unflatten(2, (-1, mel_bins)).transpose(1, 2)


# Fitted on the meta device (tests/test_family_ltx2_working.py, tests/live_tensors.py): at LTX-2 19B's widths
# (4096 video, 2048 audio), 49 to 121 frames at 768x512 and 1280x704, a call keeps about 18.5 values per video
# token x hidden alive, 11 per audio token x audio hidden and 2.3 per text token x both widths (the
# projected captions' keys and values); the CFG call is a doubled batch, so everything counts twice.
_PER_VIDEO_TOKEN, _PER_AUDIO_TOKEN, _PER_TEXT_TOKEN = 19, 12, 3
_FIXED = 64 * 2**20


def ltx2_working(denoiser: DenoiserRef, video_tokens: int, audio_tokens: int, text_tokens: int) -> Working:
    """The largest transformer call's activations: the doubled CFG batch of video + audio tokens."""
    config = denoiser.config
    hidden = int(config.get("num_attention_heads", 32)) * int(config.get("attention_head_dim", 128))
    audio_hidden = int(config.get("audio_num_attention_heads", 32)) * int(
        config.get("audio_attention_head_dim", 64)
    )
    per_batch = (
        video_tokens * _PER_VIDEO_TOKEN * hidden
        + audio_tokens * _PER_AUDIO_TOKEN * audio_hidden
        + text_tokens * _PER_TEXT_TOKEN * (hidden + audio_hidden)
    )
    nbytes = 2 * per_batch * torch.finfo(denoiser.dtype).bits // 8
    return Working(nbytes + _FIXED, f"2x{video_tokens}+{audio_tokens}")


def _check(
    denoiser: DenoiserRef,
    latents: Latents,
    settings: SamplerSettings,
    negative: Conditioning | None,
    guidance: LTX2Guidance,
) -> None:
    title = denoiser.family.title
    if settings.scheduler.startswith(K_PREFIX) and settings.scheduler not in _K_SAMPLERS:
        raise ValueError(
            f"{title} runs with scheduler default, euler, k_euler or k_gradient_estimation, "
            f"not {settings.scheduler!r}"
        )
    if not settings.scheduler.startswith(K_PREFIX):
        check_flow_scheduler(denoiser, settings)
    if settings.denoise < 1.0:
        raise ValueError(f"{title}: denoise below 1 (video-to-video) is not supported yet")
    if settings.step_cache.on:
        raise ValueError(
            f"cache {settings.cache!r}: the step caches do not run in {title}'s loop yet (set cache to off)"
        )
    if latents.keep_mask is not None and (latents.keep_mask.min() < 0 or latents.keep_mask.max() > 1):
        raise ValueError(f"{title}: a conditioning mask keeps between 0 and 1 of a frame")
    if latents.samples.ndim != 5 or latents.audio is None:
        raise ValueError(
            f"{title} denoises a video latent with its sound track: feed the sampler from an Empty Video Latent "
            "wired to this model's VAE"
        )
    if latents.samples.shape[0] != 1:
        raise ValueError(f"{title}: one video at a time, got a batch of {latents.samples.shape[0]}")
    if settings.sigmas is not None:
        check_sigmas(settings.sigmas, "input 'sigmas'", flow=True)
    if negative is None and _uses_negative(settings, guidance):
        raise ValueError(
            f"input 'negative': {title} always guides its sound track (the pipeline's audio guidance is 7): "
            "wire a negative prompt (an empty text is the pipeline's default)"
        )


def _uses_negative(settings: SamplerSettings, guidance: LTX2Guidance) -> bool:
    return settings.cfg != 1.0 or guidance.audio_guidance_scale != 1.0


@torch.no_grad()
def sample_ltx2(
    mm: MemoryManager,
    denoiser: DenoiserRef,
    positive: Conditioning,
    negative: Conditioning | None,
    latents: Latents,
    settings: SamplerSettings,
    *,
    on_step: OnStep | None = None,
    guidance: LTX2Guidance | None = None,
) -> Latents:
    # 1. Check inputs
    guidance = guidance or denoiser.ltx2_guidance or LTX2Guidance()
    _check(denoiser, latents, settings, negative, guidance)
    do_cfg = _uses_negative(settings, guidance)
    assert latents.audio is not None and (negative is not None or not do_cfg)
    device = mm.device
    dtype = denoiser.dtype
    config = denoiser.config
    p, pt = int(config.get("patch_size", 1)), int(config.get("patch_size_t", 1))
    _, channels, frames, height, width = latents.samples.shape
    frames, height, width = frames // pt, height // p, width // p  # in patches
    _, audio_channels, audio_frames, mel_bins = latents.audio.shape
    fps = latents.fps or DEFAULT_FPS
    generator = torch.Generator("cpu").manual_seed(settings.seed)

    # 2. Prepare latent variables: float32 noise, video first then audio, as the pipeline draws them
    from diffusers.utils.torch_utils import randn_tensor  # here: `app plan` reads ltx2_working, no diffusers

    x = randn_tensor(
        tuple(latents.samples.shape), generator=generator, device=torch.device(device), dtype=torch.float32
    )
    a = randn_tensor(
        tuple(latents.audio.shape), generator=generator, device=torch.device(device), dtype=torch.float32
    )
    if settings.sigmas is not None:  # ComfyUI's: the input latents noised to the first sigma
        x = noised_start(latents.samples.to(device), x, settings.sigmas[0])
        a = noised_start(latents.audio.to(device), a, settings.sigmas[0])
    keep = None  # image-to-video: the packed conditioning mask (1, F x h x w), 1 on the first frame's tokens
    first_only = True  # the pipeline's case: the first frame kept whole, nothing else (else ComfyUI's blend)
    if latents.keep_mask is not None:  # the pipeline's interpolation: the encoded frame kept, noise elsewhere
        mask = latents.keep_mask.to(device=device, dtype=torch.float32)
        first_only = bool(mask[:, :, 0].eq(1).all() and mask[:, :, 1:].eq(0).all())
        clean = pack_video(latents.samples.to(device=device, dtype=torch.float32), p, pt)
        if first_only:  # (a partial mask blends at every step instead, from the noised start)
            x = latents.samples.to(device=device, dtype=torch.float32) * mask + x * (1 - mask)
        keep = pack_video(mask, p, pt).squeeze(-1)
    x = pack_video(x, p, pt)  # (1, F x h x w, C)
    a = pack_audio(a)  # (1, L, C x mel)

    # 3. Prepare timesteps: the pipeline's sigmas and dynamic shift, one scheduler per stream
    scheduler = make_scheduler("default", denoiser.scheduler_config)
    sigmas = np.linspace(1.0, 1 / settings.steps, settings.steps)
    sconfig = scheduler.config
    mu = calculate_shift(
        x.shape[1],
        sconfig.get("base_image_seq_len", 1024),
        sconfig.get("max_image_seq_len", 4096),
        sconfig.get("base_shift", 0.95),
        sconfig.get("max_shift", 2.05),
    )
    audio_scheduler = copy.deepcopy(scheduler)
    if settings.sigmas is not None:  # stepped through as given (ComfyUI applies no shift to a SIGMAS input)
        set_manual_sigmas(audio_scheduler, settings.sigmas, device)
        timesteps = set_manual_sigmas(scheduler, settings.sigmas, device)
    else:
        audio_scheduler.set_timesteps(sigmas=sigmas, device=device, mu=mu)
        scheduler.set_timesteps(sigmas=sigmas, device=device, mu=mu)
        timesteps = scheduler.timesteps
        scheduler.set_begin_index(0)
        audio_scheduler.set_begin_index(0)

    # 4. Prepare conditioning: [negative, positive] for the CFG batch (the positive alone without CFG)
    conds = [negative, positive] if do_cfg and negative is not None else [positive]
    video_text = torch.cat([c.embeds for c in conds]).to(device=device, dtype=dtype)
    audio_text = torch.cat([c.audio_embeds for c in conds]).to(device=device, dtype=dtype)
    text_mask = torch.cat([c.attention_mask for c in conds]).to(device)
    pos_video_text, pos_audio_text, pos_mask = video_text[-1:], audio_text[-1:], text_mask[-1:]

    # 5. Denoising loop
    working = ltx2_working(denoiser, x.shape[1], audio_frames, video_text.shape[1])  # (the CFG batch)
    with use_denoiser(mm, denoiser, working=working) as model:
        video_coords = model.rope.prepare_video_coords(1, frames, height, width, x.device, fps=fps)
        audio_coords = model.audio_rope.prepare_audio_coords(1, audio_frames, a.device)
        shared = dict(
            num_frames=frames,
            height=height,
            width=width,
            fps=fps,
            audio_num_frames=audio_frames,
            perturbation_mask=None,
            use_cross_timestep=True,
            return_dict=False,
        )

        def call(xv, xa, t, vt, at, mask, vc, ac, *, isolate=False, stg=None):
            # image-to-video: a per-token video timestep, 0 on the kept frame (the audio's stays per sample)
            video_t = t if keep is None else t.unsqueeze(-1) * (1 - keep.repeat(t.shape[0], 1))
            v, va = model(
                hidden_states=xv.to(dtype),
                audio_hidden_states=xa.to(dtype),
                encoder_hidden_states=vt,
                audio_encoder_hidden_states=at,
                timestep=video_t,
                audio_timestep=None if keep is None else t,
                sigma=t,
                encoder_attention_mask=mask,
                audio_encoder_attention_mask=mask,
                video_coords=vc,
                audio_coords=ac,
                isolate_modalities=isolate,
                spatio_temporal_guidance_blocks=stg,
                **shared,
            )
            return v.float(), va.float()

        def to_x0(sample, velocity, i, sched):
            return sample - velocity * sched.sigmas[i]  # the pipeline's convert_velocity_to_x0

        stg_blocks = list(guidance.stg_blocks)
        do_stg = guidance.stg_scale > 0.0 or guidance.audio_stg_scale > 0.0
        do_modality = guidance.modality_scale > 1.0 or guidance.audio_modality_scale > 1.0
        cfg_coords = (video_coords.repeat(2, 1, 1, 1), audio_coords.repeat(2, 1, 1, 1))
        gradient = settings.scheduler == "k_gradient_estimation"
        old_v: torch.Tensor | None = None
        old_va: torch.Tensor | None = None
        for i, t in enumerate(timesteps):
            if not first_only:  # ComfyUI's noise mask: the kept share of each token is the clean latent
                x = x * (1 - keep.unsqueeze(-1)) + clean * keep.unsqueeze(-1)
            single = (
                t.expand(2).chunk(2)[0],
                pos_video_text,
                pos_audio_text,
                pos_mask,
                video_coords,
                audio_coords,
            )
            if do_cfg:  # CFG: one doubled batch, negative first
                v, va = call(
                    torch.cat([x] * 2),
                    torch.cat([a] * 2),
                    t.expand(2),
                    video_text,
                    audio_text,
                    text_mask,
                    *cfg_coords,
                )
                v_uncond, v = v.chunk(2)
                va_uncond, va = va.chunk(2)
                x0 = to_x0(x, v, i, scheduler)
                video_cfg = (settings.cfg - 1) * (x0 - to_x0(x, v_uncond, i, scheduler))
                a0 = to_x0(a, va, i, audio_scheduler)
                audio_cfg = (guidance.audio_guidance_scale - 1) * (
                    a0 - to_x0(a, va_uncond, i, audio_scheduler)
                )
            else:  # both scales 1: the conditional prediction alone
                v, va = call(x, a, *single)
                x0, a0 = to_x0(x, v, i, scheduler), to_x0(a, va, i, audio_scheduler)
                video_cfg = audio_cfg = 0
            video_stg = audio_stg = video_modality = audio_modality = 0
            if do_stg:  # self-attention skipped in the STG blocks
                v_stg, va_stg = call(x, a, *single, stg=stg_blocks)
                video_stg = guidance.stg_scale * (x0 - to_x0(x, v_stg, i, scheduler))
                audio_stg = guidance.audio_stg_scale * (a0 - to_x0(a, va_stg, i, audio_scheduler))
            if do_modality:  # no audio<->video cross-attention
                v_iso, va_iso = call(x, a, *single, isolate=True)
                video_modality = (guidance.modality_scale - 1) * (x0 - to_x0(x, v_iso, i, scheduler))
                audio_modality = (guidance.audio_modality_scale - 1) * (
                    a0 - to_x0(a, va_iso, i, audio_scheduler)
                )
            # summed left to right, as the pipeline does (float addition is not associative)
            x0_g = x0 + video_cfg + video_stg + video_modality
            a0_g = a0 + audio_cfg + audio_stg + audio_modality
            if guidance.guidance_rescale > 0:
                x0_g = rescale_noise_cfg(x0_g, x0, guidance_rescale=guidance.guidance_rescale)
            if guidance.audio_guidance_rescale > 0:
                a0_g = rescale_noise_cfg(a0_g, a0, guidance_rescale=guidance.audio_guidance_rescale)
            # back to velocities (the pipeline's convert_x0_to_velocity) for the Euler steps
            if not first_only:  # ComfyUI's: the prediction blended with the clean latent by the same mask
                x0_g = x0_g * (1 - keep.unsqueeze(-1)) + clean * keep.unsqueeze(-1)
            v_g = (x - x0_g) / scheduler.sigmas[i]
            va_g = (a - a0_g) / audio_scheduler.sigmas[i]
            if gradient:  # ComfyUI's gradient_estimation: the Euler step along d + (gamma - 1)(d - d_prev)
                v_g, old_v = gradient_estimate(v_g, old_v, scheduler.sigmas[i + 1]), v_g
                va_g, old_va = gradient_estimate(va_g, old_va, audio_scheduler.sigmas[i + 1]), va_g
            if keep is None or not first_only:
                x = scheduler.step(v_g, t, x, return_dict=False)[0]
            else:  # the pipeline steps every frame but the first, which stays the encoded picture
                xs = unpack_video(x, frames, height, width, p, pt)
                vs = unpack_video(v_g, frames, height, width, p, pt)
                rest = scheduler.step(vs[:, :, 1:], t, xs[:, :, 1:], return_dict=False)[0]
                x = pack_video(torch.cat([xs[:, :, :1], rest], dim=2), p, pt)
            a = audio_scheduler.step(va_g, t, a, return_dict=False)[0]

            if on_step is not None:
                middle = frames // 2
                on_step(
                    Step(
                        step=i + 1,
                        total=len(timesteps),
                        timestep=float(t),
                        latents=unpack_video(x, frames, height, width, p, pt)[:, :, middle],
                        denoised=unpack_video(x0_g, frames, height, width, p, pt)[:, :, middle],
                    )
                )

    video = unpack_video(x, frames, height, width, p, pt)
    assert video.shape[1] == channels
    return Latents(
        samples=video.cpu(),
        vae_scale_factor=latents.vae_scale_factor,
        source="sampled",
        audio=unpack_audio(a, mel_bins).cpu(),
        fps=fps,
    )
