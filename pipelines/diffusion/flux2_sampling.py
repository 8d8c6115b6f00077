"""The FLUX.2 denoising loop, written out like diffusers' `Flux2KleinPipeline.__call__` / `Flux2Pipeline`'s.

Lives here: `sample_flux2`, `compute_empirical_mu`, `flux2_working_bytes`, `is_distilled`. May import: stdlib,
torch, numpy, diffusers, memory, pipelines.steps, pipelines.diffusion.*.

A FLUX.2 LATENT is the VAE's own layout, (B, latent channels, H / scale, W / scale), already normalised:
the VAE's batch-norm statistics live in its 2x2-patchified space (4 x latent channels), so normalising is
patchify -> (x - mean) / std -> unpatchify (`flux2_latents`); `pipelines.diffusion.vae` undoes it before
decoding. The loop itself runs where the pipeline does: noise drawn as (B, 4 x C, h / 2, w / 2) with the
seed's CPU generator, packed to tokens, and a transformer call per guidance branch (the pipeline runs
positive and negative as two calls, not one doubled batch). The schedule is the pipeline's: sigmas
1 -> 1/steps with `compute_empirical_mu` (image tokens and step count) as the dynamic shift. `cfg` is the
pipeline's `guidance_scale`: for [klein], true CFG `neg + g * (pos - neg)` when g > 1 and the folder is not
step-distilled (`model_index.json` `is_distilled`; a distilled Klein ignores it, as the pipeline does); for
[dev] (a transformer with `guidance_embeds`), the embedded guidance value, one call a step. Reference
pictures (editing) join as extra tokens after the image's. No image-to-image: diffusers has no FLUX.2
img2img (its `image=` is reference conditioning for editing).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.utils.torch_utils import randn_tensor

from memory import MemoryManager, Working
from memory.estimates import element_size
from pipelines.diffusion.flow_loop import StepReport, check_flow_inputs
from pipelines.diffusion.flux2_latents import patchify, unpatchify
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.previews import model_folder
from pipelines.diffusion.sampling import SamplerSettings, batched_conditioning
from pipelines.diffusion.schedulers import make_scheduler
from pipelines.diffusion.step_cache import step_cache
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.steps import OnStep


# Copied from diffusers.pipelines.flux2.pipeline_flux2.compute_empirical_mu
def compute_empirical_mu(image_seq_len: int, num_steps: int) -> float:
    a1, b1 = 8.73809524e-05, 1.89833333
    a2, b2 = 0.00016927, 0.45666666

    if image_seq_len > 4300:
        mu = a2 * image_seq_len + b2
        return float(mu)

    m_200 = a2 * image_seq_len + b2
    m_10 = a1 * image_seq_len + b1

    a = (m_200 - m_10) / 190.0
    b = m_200 - 200.0 * a
    mu = a * num_steps + b

    return float(mu)


def _ids(batch: int, t: int, h: int, w: int, length: int) -> torch.Tensor:
    """(B, t*h*w*length, 4) position ids (T, H, W, L), as the pipeline's `_prepare_*_ids`."""
    coords = torch.cartesian_prod(torch.arange(t), torch.arange(h), torch.arange(w), torch.arange(length))
    return coords.unsqueeze(0).expand(batch, -1, -1)


def is_distilled(denoiser: DenoiserRef) -> bool:
    """The folder's `model_index.json` `is_distilled` (a step-distilled Klein ignores guidance); False when
    the denoiser is not in a diffusers folder."""
    folder = model_folder(denoiser.handle.spec.files)
    if folder is None:
        return False
    try:
        return bool(json.loads((folder / "model_index.json").read_text(encoding="utf-8")).get("is_distilled"))
    except (OSError, ValueError):
        return False


def flux2_working_bytes(config: dict[str, Any], tokens: int, rows: int, dtype: torch.dtype) -> int:
    """Activation bytes of one `Flux2Transformer2DModel` call over `tokens` (image + text) per row.

    The widest moment is inside a single-stream block: its fused QKV + SwiGLU-in projection (3 + 2 x
    mlp_ratio hidden widths per token) is alive while q and k are normalised and rotated, the attention
    output and the gated MLP are made and concatenated, beside the residual stream and its modulated copy.
    The count below adds all of those as if alive together (3 + 2r, 4, 1, r, 1 + r, 2): an upper bound that
    the live tensors of FLUX.2 [klein] 4B, 9B and [dev] widths at 512-1536 px sit 4-10% under (tests).
    Guidance does not double the rows: the pipeline calls the transformer once per branch.
    """
    hidden = int(config.get("num_attention_heads", 48)) * int(config.get("attention_head_dim", 128))
    ratio = float(config.get("mlp_ratio", 3.0))
    widths = (3 + 2 * ratio) + 4 + 1 + ratio + (1 + ratio) + 2
    large = int(rows * tokens * hidden * widths) * element_size(dtype)
    return large + large // 64  # the small tensors beside them, as in `diffusion_working_bytes`


@torch.no_grad()
def sample_flux2(
    mm: MemoryManager,
    denoiser: DenoiserRef,
    positive: Conditioning,
    negative: Conditioning | None,
    latents: Latents,
    settings: SamplerSettings,
    *,
    on_step: OnStep | None = None,
) -> Latents:
    # 1. Check inputs (diffusers has no FLUX.2 img2img: its `image=` is reference conditioning for editing)
    title = denoiser.family.title
    latent_channels = int(denoiser.config.get("in_channels", 128)) // 4
    check_flow_inputs(
        denoiser, latents, settings, channels=latent_channels, any_empty_channels=True, img2img=False
    )
    device = mm.device
    batch, _, h, w = latents.samples.shape
    distilled = is_distilled(denoiser)
    # [dev] is guidance-distilled: cfg goes in as the transformer's guidance embedding, one call a step
    embedded = bool(denoiser.config.get("guidance_embeds"))
    do_cfg = settings.cfg > 1.0 and not (distilled or embedded) and negative is not None
    generator = torch.Generator("cpu").manual_seed(settings.seed)
    dtype = denoiser.dtype

    # 2. Prepare latent variables: noise in the patchified shape, packed to (B, tokens, 4C)
    noise = randn_tensor(
        (batch, latent_channels * 4, h // 2, w // 2),
        generator=generator,
        device=torch.device(device),
        dtype=dtype,
    )
    x = noise.reshape(batch, latent_channels * 4, -1).permute(0, 2, 1)
    img_ids = _ids(batch, 1, h // 2, w // 2, 1).to(device)

    # 3. Prepare timesteps: sigmas 1 -> 1/steps, shifted by the pipeline's empirical mu
    if settings.scheduler == "default":
        scheduler = make_scheduler("default", denoiser.scheduler_config)
    else:
        scheduler = FlowMatchEulerDiscreteScheduler.from_config(denoiser.scheduler_config)
    sigmas = None if scheduler.config.get("use_flow_sigmas") else _default_sigmas(settings.steps)
    mu = compute_empirical_mu(image_seq_len=x.shape[1], num_steps=settings.steps)
    if sigmas is None:
        scheduler.set_timesteps(settings.steps, device=device, mu=mu)
    else:
        scheduler.set_timesteps(sigmas=sigmas, device=device, mu=mu)
    scheduler.set_begin_index(0)
    timesteps = scheduler.timesteps

    # 4. Prepare conditioning: each prompt's tokens with its (0, 0, 0, l) ids
    def text(cond: Conditioning) -> tuple[torch.Tensor, torch.Tensor]:
        embeds = batched_conditioning(cond, batch).embeds.to(device=device, dtype=dtype)
        return embeds, _ids(batch, 1, 1, 1, embeds.shape[1]).to(device)

    refs, ref_ids = _references(positive, batch, device, x.shape[2], title)
    pos_embeds, pos_ids = text(positive)
    neg_embeds, neg_ids = text(negative) if do_cfg and negative is not None else (None, None)

    # 5. Denoising loop
    text_tokens = max(e.shape[1] for e in (pos_embeds, neg_embeds) if e is not None)
    working = Working(
        flux2_working_bytes(denoiser.config, x.shape[1] + refs.shape[1] + text_tokens, batch, dtype),
        f"{batch}x{h * latents.vae_scale_factor}x{w * latents.vae_scale_factor}+{text_tokens}t",
    )
    guidance = torch.full([batch], settings.cfg, device=device, dtype=torch.float32) if embedded else None
    report = StepReport(on_step, len(timesteps), scheduler, unpack=lambda z: _unpack(z, h, w))
    with (
        use_denoiser(mm, denoiser, working=working) as model,
        step_cache(model, settings.step_cache, len(timesteps)) as cache,
    ):
        for i, t in enumerate(timesteps):
            cache.step(i)
            timestep = t.expand(batch).to(x.dtype)
            # Reference tokens follow the image's (both branches see them, as in the pipeline)
            model_input = torch.cat([x, refs], dim=1).to(dtype)
            model_ids = torch.cat([img_ids, ref_ids], dim=1)
            with cache.branch("cond"):
                noise_pred = model(
                    hidden_states=model_input,
                    timestep=timestep / 1000,
                    guidance=guidance,
                    encoder_hidden_states=pos_embeds,
                    txt_ids=pos_ids,
                    img_ids=model_ids,
                    return_dict=False,
                )[0][:, : x.size(1)]
            if do_cfg:
                with cache.branch("uncond"):
                    neg_pred = model(
                        hidden_states=model_input,
                        timestep=timestep / 1000,
                        guidance=None,
                        encoder_hidden_states=neg_embeds,
                        txt_ids=neg_ids,
                        img_ids=model_ids,
                        return_dict=False,
                    )[0][:, : x.size(1)]
                noise_pred = neg_pred + settings.cfg * (noise_pred - neg_pred)

            before = x
            x = scheduler.step(noise_pred, t, x, return_dict=False)[0]
            report(i, t, before, x, noise_pred)

    return Latents(
        samples=_unpack(x, h, w).cpu(), vae_scale_factor=latents.vae_scale_factor, source="sampled"
    )


def _references(
    cond: Conditioning, batch: int, device: torch.device | str, channels: int, title: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference LATENTs as tokens (B, N, 4C) and their ids: picture i at time coordinate 10 + 10 i, its
    own (h, w) grid, as `Flux2KleinPipeline.prepare_image_latents` / `_prepare_image_ids`."""
    tokens, ids = [], []
    for i, ref in enumerate(cond.references):
        patches = patchify(ref.samples[:1].to(device=device, dtype=torch.float32))  # (1, 4C, h, w)
        _, c4, h, w = patches.shape
        if c4 != channels:
            raise ValueError(
                f"reference {i + 1}: {title} takes {channels // 4}-channel latents, got {c4 // 4}"
            )
        tokens.append(patches.reshape(1, c4, h * w).permute(0, 2, 1)[0])
        coords = torch.cartesian_prod(
            torch.tensor([10 + 10 * i]), torch.arange(h), torch.arange(w), torch.arange(1)
        )
        ids.append(coords)
    if not tokens:
        return torch.zeros(batch, 0, channels, device=device), torch.zeros(
            batch, 0, 4, dtype=torch.long, device=device
        )
    packed = torch.cat(tokens, dim=0)[None].repeat(batch, 1, 1).to(device)
    return packed, torch.cat(ids, dim=0)[None].repeat(batch, 1, 1).to(device)


def _default_sigmas(steps: int) -> list[float]:
    """Flux2KleinPipeline's `np.linspace(1.0, 1 / steps, steps)` (float64; the scheduler casts to float32)."""
    return np.linspace(1.0, 1 / steps, steps).tolist()


def _unpack(tokens: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """(B, h/2 * w/2, 4C) tokens -> the LATENT layout (B, C, h, w)."""
    b, _, c4 = tokens.shape
    return unpatchify(tokens.permute(0, 2, 1).reshape(b, c4, h // 2, w // 2))
