"""The Qwen-Image 2.1 denoising loop, written out like diffusers' `QwenImage21Pipeline.__call__`.

Lives here: `sample_qwenimage21`, `sample_sigmas`, `flatten_latents`, `unflatten_latents`, `call_inputs`.
May import: stdlib, json, numpy, torch, diffusers, memory, pipelines.steps, pipelines.diffusion.*.

What differs from the other flow-matching loops: the latents are not packed (one token per latent pixel,
raster order), and the transformer drops them into the prompt's sequence: each image slot of the encoded
prompt stands for a 2x2 group of a reference picture's latents, and the target image's slots are appended.
Attention is block-causal, and with `causal_condition` the text and reference tokens are modulated at t = 0,
so their keys and values are computed once, on the first step, and cached for the rest (the pipeline's
`use_kv_cache` default): one `QwenImage21KVCache` per prompt. Guidance is the pipeline's true CFG without
a rescale, `neg + cfg * (pos - neg)`, a second call for the negative prompt when cfg > 1 and a negative is
wired; `cfg_rule` comfyui (an imported ComfyUI graph) is the same sum with ComfyUI's negative call (cfg != 1)
and its CFGNorm when the graph has one (`pipelines.diffusion.guidance`). The schedule is the folder's `sample_sigmas` (model_index.json: Turbo's shipped grid, whose length
sets the steps) when the scheduler is `default`, else sigmas 1 -> 1/steps; the shift is resolution-dependent.
A SIGMAS wire (ComfyUI's ManualSigmas) is stepped through as given, unshifted, the latent noised to its first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.utils.torch_utils import randn_tensor

from memory import MemoryManager, Working
from pipelines.diffusion.flow_loop import StepReport, check_flow_inputs
from pipelines.diffusion.flow_sampling import config_shift
from pipelines.diffusion.guidance import comfy_guidance, runs_negative
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.manual_sigmas import check_sigmas, noised_start, set_manual_sigmas
from pipelines.diffusion.previews import model_folder
from pipelines.diffusion.qwenimage21_working import qwenimage21_working_bytes
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.schedulers import make_scheduler
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.steps import OnStep

TOKENS_PER_SLOT = 4  # an image slot of the prompt stands for 2x2 latent tokens


@dataclass(frozen=True)
class _PromptCall:
    """One prompt's transformer inputs, fixed for the loop."""

    refs: torch.Tensor | None  # (B, reference tokens, C): its pictures' latents, flattened and joined
    img_shapes: list[list[tuple[int, int, int]]]  # per sample: references first, the target last
    img_mask: torch.Tensor  # (1, S + target slots): True at image slots
    embeds: torch.Tensor  # (B, S, D)
    text_mask: torch.Tensor | None  # (B, S), None when nothing is padded


def sample_sigmas(denoiser: DenoiserRef) -> list[float] | None:
    """The model's `sample_sigmas`: set on it (QwenImage21Sigmas, a ComfyUI-layout config folder's) or its
    folder's model_index.json (Turbo's shipped grid); None when it has none."""
    given = denoiser.scheduler_config.get("sample_sigmas")
    if given:
        return [float(s) for s in given]
    folder = model_folder(denoiser.handle.spec.files)
    if folder is None:
        return None
    try:
        sigmas = json.loads((Path(folder) / "model_index.json").read_text(encoding="utf-8")).get(
            "sample_sigmas"
        )
    except (OSError, ValueError):
        return None
    return [float(s) for s in sigmas] if sigmas else None


def flatten_latents(samples: torch.Tensor) -> torch.Tensor:
    """(B, C, h, w) -> (B, h x w, C): `QwenImage21Pipeline._pack_latents`, a plain spatial flatten."""
    batch, channels, h, w = samples.shape
    return samples.reshape(batch, channels, h * w).transpose(1, 2)


def unflatten_latents(x: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """(B, h x w, C) -> (B, C, h, w): `_unpack_latents` without the frame axis."""
    batch, _, channels = x.shape
    return x.transpose(1, 2).reshape(batch, channels, h, w)


def call_inputs(
    cond: Conditioning, batch: int, h: int, w: int, channels: int, title: str
) -> tuple[torch.Tensor | None, list[tuple[int, int, int]], torch.Tensor]:
    """A prompt's reference latents flattened and joined (B, tokens, C), the `img_shapes` row (references
    first, the target last) and its image-slot mask with the target's slots appended (1, S + h w / 4)."""
    refs, shapes = [], []
    for i, ref in enumerate(cond.references):
        _, c, rh, rw = ref.samples.shape
        if c != channels or rh % 2 or rw % 2:
            raise ValueError(
                f"{title}: reference picture {i + 1} has a {c}-channel {rh}x{rw} latent; it needs {channels} "
                "channels and an even size (encode it with this model's VAE)"
            )
        refs.append(flatten_latents(ref.samples.expand(batch, -1, -1, -1)))
        shapes.append((1, rh, rw))
    shapes.append((1, h, w))
    slots = cond.image_slots
    if slots is None:
        slots = torch.zeros(1, cond.embeds.shape[1], dtype=torch.bool)
    want = sum(s[1] * s[2] for s in shapes[:-1]) // TOKENS_PER_SLOT
    if int(slots[0].sum()) != want:
        raise ValueError(
            f"{title}: the prompt has {int(slots[0].sum())} picture slots for {want} reference tokens (encode "
            "the prompt with its pictures and this model's VAE wired)"
        )
    mask = torch.cat([slots[:1], slots.new_ones(1, (h * w) // TOKENS_PER_SLOT)], dim=1)
    return (torch.cat(refs, dim=1) if refs else None), shapes, mask


@torch.no_grad()
def sample_qwenimage21(
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
    from diffusers.models.transformers.transformer_qwenimage21 import QwenImage21KVCache

    title = denoiser.family.title
    in_channels = denoiser.config.get("in_channels")
    check_flow_inputs(
        denoiser,
        latents,
        settings,
        how="fills each image slot with 2x2 latents",
        channels=None if in_channels is None else int(in_channels),  # one token per latent pixel: no packing
        img2img=False,
    )
    device = mm.device
    batch, channels, h, w = latents.samples.shape
    if settings.sigmas is not None:
        check_sigmas(settings.sigmas, "input 'sigmas'", flow=True)
    if settings.step_cache.on:
        raise ValueError(f"cache {settings.cache!r} is not supported for {title} (set cache to off)")
    do_cfg = runs_negative(settings.cfg_rule, settings.cfg, negative is not None)  # pipeline: `do_true_cfg`
    generator = torch.Generator("cpu").manual_seed(settings.seed)
    dtype = denoiser.dtype

    # 2. Prepare latent variables: noise drawn as (B, 1 frame, C, h, w), then flattened
    noise = randn_tensor(
        (batch, 1, channels, h, w), generator=generator, device=torch.device(device), dtype=dtype
    )
    x = flatten_latents(noise.reshape(batch, channels, h, w))

    # 3. Prepare timesteps: the folder's sigmas (default scheduler) or 1 -> 1/steps, shifted by token count
    shipped = sample_sigmas(denoiser) if settings.scheduler == "default" else None
    scheduler_config = {k: v for k, v in denoiser.scheduler_config.items() if k != "sample_sigmas"}
    if settings.scheduler == "default":
        scheduler = make_scheduler("default", scheduler_config)
    else:
        scheduler = FlowMatchEulerDiscreteScheduler.from_config(scheduler_config)
    sigmas = shipped if shipped is not None else np.linspace(1.0, 1 / settings.steps, settings.steps)
    mu = config_shift(scheduler.config, x.shape[1])
    if settings.sigmas is not None:  # a SIGMAS wire (ComfyUI's ManualSigmas): stepped through as given
        timesteps = set_manual_sigmas(scheduler, settings.sigmas, device)
        start = latents.samples.to(device=device, dtype=dtype)
        x = flatten_latents(noised_start(start, noise.reshape(batch, channels, h, w), settings.sigmas[0]))
    else:
        scheduler.set_timesteps(sigmas=sigmas, device=device, mu=mu)
        timesteps = scheduler.timesteps
        scheduler.set_begin_index(0)

    # 4. Prepare conditioning: each prompt's references, image shapes and slot mask, and its KV cache
    prompts = [positive] + ([negative] if do_cfg and negative is not None else [])
    calls = []
    for cond in prompts:
        refs, shapes, mask = call_inputs(cond, batch, h, w, channels, title)
        text_mask = cond.attention_mask  # None for one prompt: nothing is padded
        calls.append(
            _PromptCall(
                refs=None if refs is None else refs.to(device=device, dtype=dtype),
                img_shapes=[shapes] * batch,
                img_mask=mask.to(device),
                embeds=cond.embeds.to(device=device, dtype=dtype).expand(batch, -1, -1),
                text_mask=None if text_mask is None else text_mask.to(device),
            )
        )
    causal = bool(denoiser.config.get("causal_condition", True))

    # 5. Denoising loop
    text_tokens = max(c.embeds.shape[1] for c in calls)
    ref_tokens = max(refs_tokens(c.img_shapes[0]) for c in calls)
    working = Working(
        qwenimage21_working_bytes(denoiser, h, w, batch, text_tokens, ref_tokens, prompts=len(calls)),
        f"{batch}x{h}x{w}+{text_tokens}t+{ref_tokens}r" + ("+cfg" if len(calls) > 1 else ""),
    )
    report = StepReport(on_step, len(timesteps), scheduler, unpack=lambda z: unflatten_latents(z, h, w))
    with use_denoiser(mm, denoiser, working=working) as model:
        caches = [QwenImage21KVCache(len(model.transformer_blocks)) if causal else None for _ in calls]
        for i, t in enumerate(timesteps):
            # The first step fills each prompt's cache of its prefix; later steps run the target only.
            mode = None if not causal else ("extract" if i == 0 else "cached")
            timestep = t.expand(batch).to(x.dtype)
            preds = []
            for call, cache in zip(calls, caches, strict=True):
                hidden = x if call.refs is None else torch.cat([call.refs, x], dim=1)
                out = model(
                    hidden_states=hidden,
                    timestep=timestep / 1000,
                    encoder_hidden_states=call.embeds,
                    encoder_hidden_states_mask=call.text_mask,
                    img_shapes=call.img_shapes,
                    img_mask=call.img_mask,
                    kv_cache=cache,
                    kv_cache_mode=mode,
                    return_dict=False,
                )[0]
                preds.append(out[:, -x.shape[1] :])  # the target's tokens (references come first)
            noise_pred = preds[0]
            if settings.cfg_rule != "pipeline":  # ComfyUI's rule; its CFGNorm sees (B, C, h, w) latents
                noise_pred = comfy_guidance(
                    settings.cfg_rule,
                    settings.cfg,
                    settings.cfg_norm,
                    preds[0],
                    preds[1] if len(preds) == 2 else None,
                    x,
                    float(t) / 1000,  # the step's sigma (the timestep is sigma x 1000, as the model is fed)
                    lambda z: unflatten_latents(z, h, w),
                    flatten_latents,
                )
            elif len(preds) == 2:
                noise_pred = preds[1] + settings.cfg * (preds[0] - preds[1])

            before = x
            x = scheduler.step(noise_pred, t, x, return_dict=False)[0]
            report(i, t, before, x, noise_pred)

    return Latents(
        samples=unflatten_latents(x, h, w).cpu(), vae_scale_factor=latents.vae_scale_factor, source="sampled"
    )


def refs_tokens(shapes: list[tuple[int, int, int]]) -> int:
    """Latent tokens of the reference pictures in one `img_shapes` row (all but the target)."""
    return sum(s[1] * s[2] for s in shapes[:-1])
