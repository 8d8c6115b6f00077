"""The denoising loop: our own, written out like a diffusers pipeline's `__call__`, one step at a time.

Lives here: `SamplerSettings`, `sample`, `batched_conditioning`, `unet_conditioning`,
`denoiser_working_bytes`.
May import: stdlib, torch, diffusers, memory, pipelines.steps, pipelines.diffusion.*.

Why our own loop: each step reports a `pipelines.steps.Step` to a callback (progress, latent preview,
cancellation: the callback may raise; the node times the step), and the denoiser is held through
`mm.use(...)` with a working-memory estimate, so the memory manager loads it per policy and knows what the
step needs. The numerics are the diffusers pipelines' (same noise draw, same scheduler calls, same CFG), so
images match theirs for the same seed.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from diffusers.utils.torch_utils import randn_tensor

from memory import MemoryManager, Working
from pipelines.diffusion.controlnet import ActiveControls
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.schedulers import make_scheduler
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.diffusion.working import diffusion_working_bytes
from pipelines.steps import OnStep, Step


@dataclass(frozen=True)
class SamplerSettings:
    scheduler: str = "dpmpp_2m"
    steps: int = 20
    cfg: float = 4.0
    seed: int = 42
    # 1.0: start from pure noise (text-to-image; the input latent only gives the shape). Below 1: noise the
    # input latent to that fraction of the schedule and denoise from there (image-to-image).
    denoise: float = 1.0
    eta: float = 0.0  # DDIM's eta, as the pipelines pass it
    # The k-diffusion samplers (scheduler "k_<name>", see k_sampling): ComfyUI's `scheduler`, and
    # KSamplerAdvanced's segment: run steps [start_step, end_step) of the schedule, optionally without
    # adding noise first and keeping the leftover noise at the end.
    sigma_schedule: str = "normal"
    start_step: int = 0
    end_step: int = 10000
    add_noise: bool = True
    force_full_denoise: bool = True


def predicted_original(scheduler: Any, step_output: Any) -> torch.Tensor | None:
    """x0 after a scheduler step: Euler/DDIM return it; DPM++/UniPC keep it as their last model output."""
    pred = getattr(step_output, "pred_original_sample", None)
    if pred is None:
        outputs = getattr(scheduler, "model_outputs", None)
        if outputs and outputs[-1] is not None:
            pred = outputs[-1]
    return pred


def denoiser_working_bytes(ref: DenoiserRef, height: int, width: int, batch: int, guidance: bool) -> int:
    """Activation estimate for one denoiser call (pipelines.diffusion.working's UNet and DiT facts). The
    manager replaces it by the measured peak once the node has run."""
    config = ref.config
    common = dict(height=height, width=width, batch=batch, dtype=ref.dtype, vae_scale=ref.vae_scale_factor)
    if "block_out_channels" in config:  # UNet
        layers = config.get("layers_per_block", 2)
        layers = max(layers) if isinstance(layers, list) else int(layers)
        down = list(config.get("down_block_types") or ["CrossAttnDownBlock2D"])
        attention = next((i for i, b in enumerate(down) if "Attn" in b), 0)
        return diffusion_working_bytes(
            "denoiser",
            block_out_channels=tuple(config["block_out_channels"]),
            layers_per_block=layers,
            attention_level=attention,
            guidance=guidance,
            **common,
        )
    # DiT: hidden = heads x head_dim at every block. Flux packs 2x2 latent pixels into a token itself
    # (FluxPipeline._pack_latents), so its config says patch_size 1.
    hidden = int(config.get("num_attention_heads", 16)) * int(config.get("attention_head_dim", 72))
    patch = 2 if ref.family.packs_latents else int(config.get("patch_size", 2) or 2)
    return diffusion_working_bytes(
        "dit",
        hidden_size=hidden,
        patch_size=patch,
        text_tokens=ref.family.joint_text_tokens,
        guidance=guidance,
        **common,
    )


def denoiser_working(ref: DenoiserRef, height: int, width: int, batch: int, guidance: bool) -> Working:
    """The formula plus the shape it depends on: the manager replaces the formula by the measured peak
    for this shape once one exists."""
    formula = denoiser_working_bytes(ref, height, width, batch, guidance)
    return Working(formula, f"{batch}x{height}x{width}" + ("+cfg" if guidance else ""))


def _extra_step_kwargs(scheduler: Any, generator: torch.Generator, eta: float) -> dict[str, Any]:
    # As diffusers' prepare_extra_step_kwargs: only DDIM-like schedulers take eta, only stochastic ones a generator.
    accepted = set(inspect.signature(scheduler.step).parameters)
    kwargs: dict[str, Any] = {}
    if "eta" in accepted:
        kwargs["eta"] = eta
    if "generator" in accepted:
        kwargs["generator"] = generator
    return kwargs


def batched_conditioning(cond: Conditioning, batch: int) -> Conditioning:
    """Repeat a one-prompt conditioning for a batch of latents (num_images_per_prompt)."""
    if cond.embeds.shape[0] == batch:
        return cond

    def rep(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.repeat(batch, *([1] * (t.ndim - 1)))

    return Conditioning(
        embeds=rep(cond.embeds),
        pooled=rep(cond.pooled),
        attention_mask=rep(cond.attention_mask),
        family=cond.family,
        text=cond.text,
        controls=cond.controls,
    )


def same_length(conds: list[Conditioning]) -> list[Conditioning]:
    """Make the positive and negative token counts equal by repeating each to their least common multiple.

    Long prompts are 77 * n tokens (prompt_weights.py), so under CFG a 2-chunk positive meets a 1-chunk
    negative; ComfyUI repeats both to the LCM (`CONDCrossAttn.concat`), which leaves cross-attention's
    softmax over each prompt unchanged.
    """
    lengths = {c.embeds.shape[1] for c in conds}
    if len(lengths) == 1 or any(c.attention_mask is not None for c in conds):
        return conds
    target = math.lcm(*lengths)
    return [dataclasses.replace(c, embeds=c.embeds.repeat(1, target // c.embeds.shape[1], 1)) for c in conds]


def unet_conditioning(
    denoiser: DenoiserRef,
    positive: Conditioning,
    negative: Conditioning | None,
    do_cfg: bool,
    batch: int,
    pixel_size: tuple[int, int],
    device: torch.device | str,
) -> tuple[Conditioning, dict[str, torch.Tensor] | None]:
    """The text conditioning of one UNet call: negative then positive as one doubled batch under CFG, and
    SDXL's pooled embeddings and size ids (`added_cond_kwargs`). `positive` is already batched."""
    conds = (
        [batched_conditioning(negative, batch), positive] if do_cfg and negative is not None else [positive]
    )
    conds = same_length(conds)
    embeds = torch.cat([c.embeds for c in conds]).to(device=device, dtype=denoiser.dtype)
    mask = None
    if positive.attention_mask is not None:
        mask = torch.cat([c.attention_mask for c in conds]).to(device)
    cond = Conditioning(embeds=embeds, attention_mask=mask, family=denoiser.family.name)
    if not denoiser.family.size_conditioning:
        return cond, None
    time_ids = _sdxl_time_ids(*pixel_size, embeds.dtype).repeat(batch, 1)
    return cond, {
        "text_embeds": torch.cat([c.pooled for c in conds]).to(device=device, dtype=denoiser.dtype),
        "time_ids": torch.cat([time_ids] * len(conds)).to(device),
    }


def _sdxl_time_ids(height: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    # SDXL's size conditioning: original_size + crops_coords_top_left + target_size (no crop, no resize).
    return torch.tensor([[height, width, 0, 0, height, width]], dtype=dtype)


def _predict_noise(
    model: torch.nn.Module,
    ref: DenoiserRef,
    x: torch.Tensor,
    t: torch.Tensor,
    cond: Conditioning,
    added_cond_kwargs: dict[str, Any] | None,
    control_residuals: dict[str, Any] | None = None,
) -> torch.Tensor:
    """One denoiser call on a (possibly CFG-doubled) batch; `control_residuals` are ControlNets' outputs."""
    if ref.family.denoiser_call == "pixart":
        # PixArt takes the timestep as a batch vector and returns (noise, variance) when it learned sigma.
        timestep = t[None].to(x.device).expand(x.shape[0]) if t.ndim == 0 else t.expand(x.shape[0])
        out = model(
            x,
            encoder_hidden_states=cond.embeds,
            encoder_attention_mask=cond.attention_mask,
            timestep=timestep,
            added_cond_kwargs={"resolution": None, "aspect_ratio": None},
            return_dict=False,
        )[0]
        if model.config.out_channels // 2 == x.shape[1]:
            out = out.chunk(2, dim=1)[0]
        return out
    return model(
        x,
        t,
        encoder_hidden_states=cond.embeds,
        timestep_cond=None,
        added_cond_kwargs=added_cond_kwargs,
        return_dict=False,
        **(control_residuals or {}),
    )[0]


def _inpaint_channels(
    denoiser: DenoiserRef, latents: Latents, do_cfg: bool, device: torch.device
) -> torch.Tensor | None:
    """The extra input channels an inpainting UNet expects, checked against its config."""
    wanted = int(denoiser.config.get("in_channels", latents.samples.shape[1])) - latents.samples.shape[1]
    given = 0 if latents.concat is None else latents.concat.shape[1]
    if wanted != given:
        if given == 0:
            raise ValueError(
                f"this denoiser takes {wanted} extra input channels (an inpainting model): feed its latent "
                "through Inpaint Conditioning (picture + mask)"
            )
        raise ValueError(f"the latent carries {given} inpainting channels but this denoiser takes {wanted}")
    if latents.concat is None:
        return None
    concat = latents.concat.to(device=device, dtype=denoiser.dtype)
    if concat.shape[0] != latents.samples.shape[0]:
        concat = concat.repeat(latents.samples.shape[0] // concat.shape[0], 1, 1, 1)
    return torch.cat([concat] * 2) if do_cfg else concat


def _keep_unmasked(
    scheduler: Any,
    x: torch.Tensor,
    keep: tuple[torch.Tensor, torch.Tensor],
    noise: torch.Tensor,
    timesteps: torch.Tensor,
    i: int,
) -> torch.Tensor:
    """Outside the noise mask, put back the original latents noised to the next step's level (exact at the
    last step), as diffusers' StableDiffusionInpaintPipeline does for 4-channel UNets."""
    mask, original = keep
    if i < len(timesteps) - 1:
        original = scheduler.add_noise(original, noise, timesteps[i + 1 : i + 2].repeat(original.shape[0]))
    return (1 - mask) * original + mask * x


@torch.no_grad()
def sample(
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
    family = denoiser.family.name
    for name, cond in (("positive", positive), ("negative", negative)):
        if cond is not None and cond.family != family:
            raise ValueError(f"{name} conditioning is for {cond.family!r}, the denoiser is {family!r}")
    if not 0.0 < settings.denoise <= 1.0:
        raise ValueError(f"denoise must be in (0, 1], got {settings.denoise}")
    extras = latents.noise_mask is not None or latents.concat is not None
    extras = extras or bool(positive.controls) or (negative is not None and bool(negative.controls))
    if settings.scheduler.startswith("k_") and extras:
        raise ValueError(
            "ControlNet and inpainting run with the diffusers schedulers (dpmpp_2m, euler, ...); "
            f"{settings.scheduler} does not support them yet"
        )
    if denoiser.family.flow and latents.noise_mask is not None:
        raise ValueError(f"a latent noise mask (inpainting) is not supported for {family!r} models yet")
    if denoiser.family.flow and (positive.controls or (negative is not None and negative.controls)):
        raise ValueError(f"ControlNet is not supported for {family!r} models yet (SD 1.x and SDXL are)")
    if settings.scheduler.startswith("k_"):
        if denoiser.family.flow and settings.scheduler == "k_euler":
            # Flow models keep their flow-matching Euler loop (ComfyUI's euler on a flow model is Euler too).
            settings = replace(settings, scheduler="euler")
        else:
            from pipelines.diffusion.k_sampling import sample_k  # builds on this module: imported late

            return sample_k(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
    if denoiser.family.flow:
        # Flow-matching loops live in flow_sampling, which builds on this module: imported late.
        from pipelines.diffusion.flow_sampling import sample_flux, sample_sd3

        if denoiser.family.denoiser_call == "sd3":
            return sample_sd3(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
        return sample_flux(mm, denoiser, positive, latents, settings, on_step=on_step)
    device = mm.device
    batch = latents.samples.shape[0]
    height, width = latents.pixel_size
    do_cfg = settings.cfg > 1.0 and negative is not None
    if denoiser.family.denoiser_subfolder == "unet" and denoiser.config.get("time_cond_proj_dim") is not None:
        do_cfg = False  # guidance-distilled UNets (LCM) take the scale as an embedding instead; not supported
    generator = torch.Generator("cpu").manual_seed(settings.seed)

    # 2. Prepare timesteps (denoise < 1 starts partway, as StableDiffusionImg2ImgPipeline.get_timesteps does)
    scheduler = make_scheduler(settings.scheduler, denoiser.scheduler_config)
    scheduler.set_timesteps(settings.steps, device=device)
    timesteps = scheduler.timesteps
    t_start = 0
    if settings.denoise < 1.0:
        init_timestep = min(int(settings.steps * settings.denoise), settings.steps)
        t_start = max(settings.steps - init_timestep, 0)
        timesteps = timesteps[t_start * scheduler.order :]
        if len(timesteps) == 0:
            return latents
    if hasattr(scheduler, "set_begin_index"):
        scheduler.set_begin_index(t_start * scheduler.order)

    # 3. Prepare latent variables: the noise comes from a CPU generator, so a seed gives the same image anywhere
    shape = tuple(latents.samples.shape)
    noise = randn_tensor(shape, generator=generator, device=torch.device(device), dtype=denoiser.dtype)
    if settings.denoise >= 1.0:
        x = noise * scheduler.init_noise_sigma
    else:
        init = latents.samples.to(device=device, dtype=denoiser.dtype)
        x = scheduler.add_noise(init, noise, timesteps[:1].repeat(batch))
    extra_step_kwargs = _extra_step_kwargs(scheduler, generator, settings.eta)
    concat = _inpaint_channels(denoiser, latents, do_cfg, device)
    keep = None
    if latents.noise_mask is not None:  # inpainting with an ordinary model: (mask, original latents)
        keep = (
            latents.noise_mask.to(device=device, dtype=denoiser.dtype),
            latents.samples.to(device, denoiser.dtype),
        )

    # 4. Prepare conditioning: negative first, then positive, as one doubled batch under CFG
    positive = batched_conditioning(positive, batch)
    cond, added_cond_kwargs = unet_conditioning(
        denoiser, positive, negative, do_cfg, batch, (height, width), device
    )

    controls = ActiveControls(
        mm, positive, negative, do_cfg=do_cfg, batch=batch, height=height, width=width, dtype=denoiser.dtype
    )

    # 5. Denoising loop (the ControlNets, if any, are held next to the denoiser for the whole loop)
    working = denoiser_working(denoiser, height, width, batch, do_cfg)
    with use_denoiser(mm, denoiser, working=working) as model, controls:
        for i, t in enumerate(timesteps):
            model_input = torch.cat([x] * 2) if do_cfg else x
            model_input = scheduler.scale_model_input(model_input, t)

            residuals = (
                controls.residuals(model_input, t, cond.embeds, i, len(timesteps), added_cond_kwargs)
                if controls
                else None
            )
            if concat is not None:  # inpainting UNet: [latents, mask, masked-picture latents]
                model_input = torch.cat([model_input, concat], dim=1)
            noise_pred = _predict_noise(model, denoiser, model_input, t, cond, added_cond_kwargs, residuals)

            if do_cfg:
                noise_pred_uncond, noise_pred_text = noise_pred.chunk(2)
                noise_pred = noise_pred_uncond + settings.cfg * (noise_pred_text - noise_pred_uncond)

            stepped = scheduler.step(noise_pred, t, x, **extra_step_kwargs, return_dict=True)
            x = stepped.prev_sample
            if keep is not None:
                x = _keep_unmasked(scheduler, x, keep, noise, timesteps, i)

            if on_step is not None:
                on_step(
                    Step(
                        step=i + 1,
                        total=len(timesteps),
                        timestep=float(t),
                        latents=x,
                        denoised=predicted_original(scheduler, stepped),
                    )
                )

    return Latents(
        samples=x.cpu(),
        vae_scale_factor=latents.vae_scale_factor,
        source="sampled",
        noise_mask=latents.noise_mask,
    )
