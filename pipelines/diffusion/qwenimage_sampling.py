"""The Qwen-Image denoising loop, written out like diffusers' `QwenImagePipeline.__call__`.

Lives here: `sample_qwenimage`, `true_cfg`, `pack_references`. May import: stdlib, numpy, torch, diffusers, memory,
pipelines.steps, pipelines.diffusion.*.

What differs from the other flow-matching loops (flow_sampling.py): the latents are packed into 2x2 patches
like Flux's, but the transformer takes the image's patch grid as `img_shapes` instead of position ids and
the prompt as one variable-length caption. Guidance is the pipeline's "true CFG": a separate call for the
negative prompt (never a doubled batch), `neg + cfg * (pos - neg)` as SD's rule, then every token's
prediction is rescaled to the norm of the positive one (`true_cfg`). `sampler.cfg` is the pipeline's
`true_cfg_scale`: guidance runs when it is above 1 and a negative prompt is wired, as the pipeline's
`do_true_cfg`. An imported ComfyUI graph's sampler says `cfg_rule` comfyui instead: ComfyUI's plain CFG, with
its CFGNorm in x0 space when the graph has one (`pipelines.diffusion.guidance`). The latents stay in the
model's dtype, as the pipeline keeps them.

Editing (Qwen-Image-Edit): a prompt's `references` (the edit pictures' latents) are packed the same way and
appended to the image tokens of that prompt's call, each with its own patch grid in `img_shapes`; only the
image's own tokens of the prediction are kept, as `QwenImageEditPlusPipeline` does.

Odd latent sides (a picture ComfyUI's ImageScaleToTotalPixels sized, FireRed-Image-Edit 1.1's template):
ComfyUI pads each model input to the 2x2 patches (circularly) and crops the output; here the latent and the
references are padded once the same way, the run is at the padded size and the result is cropped (an approximation
of ComfyUI's: the padded border evolves instead of being re-copied each step).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.utils.torch_utils import randn_tensor

from memory import MemoryManager
from pipelines.diffusion.flow_loop import StepReport, check_flow_inputs
from pipelines.diffusion.flow_sampling import config_shift, pack_latents, start_partway, unpack_latents
from pipelines.diffusion.guidance import comfy_guidance, runs_negative
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.manual_sigmas import check_sigmas, noised_start, set_manual_sigmas
from pipelines.diffusion.qwenimage_working import qwenimage_working
from pipelines.diffusion.sampling import SamplerSettings, batched_conditioning
from pipelines.diffusion.schedulers import make_scheduler
from pipelines.diffusion.step_cache import step_cache
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.steps import OnStep


def true_cfg(pos: torch.Tensor, neg: torch.Tensor, scale: float) -> torch.Tensor:
    """The pipeline's combination: SD's rule, then each token rescaled to the positive prediction's norm
    over its channels ("Qwen's true-CFG has its own norm"). (B, tokens, C) in and out."""
    combined = neg + scale * (pos - neg)
    cond_norm = torch.norm(pos, dim=-1, keepdim=True)
    noise_norm = torch.norm(combined, dim=-1, keepdim=True)
    return combined * (cond_norm / noise_norm)


def pack_references(
    cond: Conditioning, batch: int, channels: int, title: str
) -> tuple[torch.Tensor | None, list[tuple[int, int, int]]]:
    """A prompt's reference latents packed and joined, (B, tokens, C x 4), and each one's patch grid."""
    packed, grids = [], []
    for i, ref in enumerate(cond.references):
        samples = ref.samples
        _, c, rh, rw = samples.shape
        if c != channels or rh % 2 or rw % 2:
            raise ValueError(
                f"{title}: reference picture {i + 1} has a {c}-channel {rh}x{rw} latent; it needs "
                f"{channels} channels and an even size (encode it with this model's VAE)"
            )
        packed.append(pack_latents(samples.expand(batch, -1, -1, -1)))
        grids.append((1, rh // 2, rw // 2))
    return (torch.cat(packed, dim=1) if packed else None), grids


def _predict(
    model: torch.nn.Module,
    x: torch.Tensor,
    timestep: torch.Tensor,
    embeds: torch.Tensor,
    img_shapes: list[list[tuple[int, int, int]]],
    references: torch.Tensor | None = None,
) -> torch.Tensor:
    """One transformer call on the packed latents (B, tokens, C x 4) for one prompt's embeddings; the
    prompt's packed reference latents, if any, ride after the image's tokens and are cut off the output."""
    hidden = x if references is None else torch.cat([x, references], dim=1)
    return model(
        hidden_states=hidden,
        timestep=timestep,
        guidance=None,
        encoder_hidden_states_mask=None,  # one unpadded prompt: every token is real
        encoder_hidden_states=embeds,
        img_shapes=img_shapes,
        return_dict=False,
    )[0][:, : x.shape[1]]


def _pad_even(samples: torch.Tensor) -> torch.Tensor:
    """(.., h, w) padded at the bottom / right to even sides, circularly (ComfyUI's `pad_to_patch_size`)."""
    h, w = samples.shape[-2:]
    return torch.nn.functional.pad(samples.float(), (0, w % 2, 0, h % 2), mode="circular").to(samples.dtype)


def _padded_refs(cond: Conditioning | None) -> Conditioning | None:
    if cond is None or not cond.references:
        return cond
    refs = tuple(replace(r, samples=_pad_even(r.samples)) for r in cond.references)
    return replace(cond, references=refs)


@torch.no_grad()
def sample_qwenimage(
    mm: MemoryManager,
    denoiser: DenoiserRef,
    positive: Conditioning,
    negative: Conditioning | None,
    latents: Latents,
    settings: SamplerSettings,
    *,
    on_step: OnStep | None = None,
) -> Latents:
    """Denoise `latents`; odd sides run padded to even and come back cropped (module docstring)."""
    odd_h, odd_w = latents.samples.shape[-2:]
    refs = [*positive.references, *(negative.references if negative is not None else ())]
    if odd_h % 2 or odd_w % 2 or any(r.samples.shape[-2] % 2 or r.samples.shape[-1] % 2 for r in refs):
        mask = latents.noise_mask
        padded = replace(
            latents,
            samples=_pad_even(latents.samples),
            noise_mask=None if mask is None else _pad_even(mask),
        )
        pos = _padded_refs(positive)
        assert pos is not None
        out = _sample(mm, denoiser, pos, _padded_refs(negative), padded, settings, on_step=on_step)
        return replace(out, samples=out.samples[..., :odd_h, :odd_w])
    return _sample(mm, denoiser, positive, negative, latents, settings, on_step=on_step)


def _sample(
    mm: MemoryManager,
    denoiser: DenoiserRef,
    positive: Conditioning,
    negative: Conditioning | None,
    latents: Latents,
    settings: SamplerSettings,
    *,
    on_step: OnStep | None = None,
) -> Latents:
    # 1. Check inputs
    in_channels = denoiser.config.get("in_channels")
    wanted = None if in_channels is None else int(in_channels) // 4  # the transformer takes 2x2 patches
    check_flow_inputs(denoiser, latents, settings, channels=wanted)
    if denoiser.config.get("guidance_embeds", False):
        raise ValueError(
            f"{denoiser.family.title}: this transformer is guidance-distilled (guidance_embeds); "
            "such Qwen-Image models are not supported yet"
        )
    device = mm.device
    batch, channels, h, w = latents.samples.shape
    do_cfg = runs_negative(settings.cfg_rule, settings.cfg, negative is not None)  # pipeline: `do_true_cfg`
    generator = torch.Generator("cpu").manual_seed(settings.seed)
    dtype = denoiser.dtype

    # 2. Prepare latent variables: noise as the pipeline draws it, (B, 1 frame, C, h, w), then packed
    noise = randn_tensor(
        (batch, 1, channels, h, w), generator=generator, device=torch.device(device), dtype=dtype
    )
    noise = noise.view(batch, channels, h, w)  # the frame axis is 1: the same values in the same order

    # 3. Prepare timesteps: sigmas 1 -> 1/steps, shifted for the image's token count
    # "default": the class the folder was saved with; "euler": flow-matching Euler on the folder's settings.
    if settings.scheduler == "default":
        scheduler = make_scheduler("default", denoiser.scheduler_config)
    else:
        scheduler = FlowMatchEulerDiscreteScheduler.from_config(denoiser.scheduler_config)
    mu = config_shift(scheduler.config, (h // 2) * (w // 2))
    if settings.sigmas is not None:  # a SIGMAS wire: stepped through as given, the latent noised to its first
        if settings.denoise < 1.0:
            raise ValueError("input 'sigmas': a schedule sets the strength itself (leave denoise at 1)")
        check_sigmas(settings.sigmas, "input 'sigmas'", flow=True)
        timesteps = set_manual_sigmas(scheduler, settings.sigmas, device)
        start = latents.samples.to(device=device, dtype=dtype)
        x = pack_latents(noised_start(start, noise, settings.sigmas[0]))
    else:
        scheduler.set_timesteps(
            sigmas=np.linspace(1.0, 1 / settings.steps, settings.steps), device=device, mu=mu
        )
        timesteps = start_partway(scheduler, settings)
        if len(timesteps) == 0:
            return latents
        if settings.denoise >= 1.0:
            x = pack_latents(noise)
        else:
            init = latents.samples.to(device=device, dtype=dtype)
            x = pack_latents(scheduler.scale_noise(init, timesteps[:1].repeat(batch), noise))

    # 4. Prepare conditioning: one caption per call, the patch grid for the rotary positions
    pos_embeds = batched_conditioning(positive, batch).embeds.to(device=device, dtype=dtype)
    neg_embeds = None
    if do_cfg and negative is not None:
        neg_embeds = batched_conditioning(negative, batch).embeds.to(device=device, dtype=dtype)
    img_shapes = [[(1, h // 2, w // 2)]] * batch
    title = denoiser.family.title
    pos_refs, pos_grids = pack_references(positive, batch, channels, title)
    pos_refs = None if pos_refs is None else pos_refs.to(device=device, dtype=dtype)
    pos_shapes = [[(1, h // 2, w // 2), *pos_grids]] * batch
    neg_refs, neg_shapes = None, img_shapes
    if neg_embeds is not None and negative is not None:
        neg_refs, neg_grids = pack_references(negative, batch, channels, title)
        neg_refs = None if neg_refs is None else neg_refs.to(device=device, dtype=dtype)
        neg_shapes = [[(1, h // 2, w // 2), *neg_grids]] * batch

    # 5. Denoising loop
    text_tokens = max(e.shape[1] for e in (pos_embeds, neg_embeds) if e is not None)
    reference_tokens = max(0 if r is None else r.shape[1] for r in (pos_refs, neg_refs))
    working = qwenimage_working(denoiser, h, w, batch, text_tokens, reference_tokens)
    report = StepReport(on_step, len(timesteps), scheduler, unpack=lambda z: unpack_latents(z, h, w))
    with (
        use_denoiser(mm, denoiser, working=working) as model,
        step_cache(model, settings.step_cache, len(timesteps)) as cache,
    ):
        for i, t in enumerate(timesteps):
            cache.step(i)
            timestep = t.expand(batch).to(x.dtype) / 1000

            with cache.branch("cond"):
                noise_pred = _predict(model, x, timestep, pos_embeds, pos_shapes, pos_refs)
            neg_pred = None
            if neg_embeds is not None:
                with cache.branch("uncond"):
                    neg_pred = _predict(model, x, timestep, neg_embeds, neg_shapes, neg_refs)
            if settings.cfg_rule != "pipeline":  # ComfyUI's rule; its CFGNorm sees (B, C, h, w) latents
                noise_pred = comfy_guidance(
                    settings.cfg_rule,
                    settings.cfg,
                    settings.cfg_norm,
                    noise_pred,
                    neg_pred,
                    x,
                    float(t) / 1000,  # the step's sigma (the timestep is sigma x 1000, as the model is fed)
                    lambda z: unpack_latents(z, h, w),
                    pack_latents,
                )
            elif neg_pred is not None:
                noise_pred = true_cfg(noise_pred, neg_pred, settings.cfg)

            before = x
            x = scheduler.step(noise_pred, t, x, return_dict=False)[0]
            report(i, t, before, x, noise_pred)

    return Latents(
        samples=unpack_latents(x, h, w).cpu(), vae_scale_factor=latents.vae_scale_factor, source="sampled"
    )
