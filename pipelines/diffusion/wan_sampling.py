"""The Wan denoising loop (2.1, and 2.2's two experts), written out like diffusers' `WanPipeline.__call__`.

Lives here: `sample_wan`, `wan_working`, `expert_stages`. May import: stdlib, torch, diffusers, memory,
pipelines.steps, pipelines.diffusion.*.

What differs from the image loops: the latents are 5D, (B, C, latent frames, h, w), drawn in float32 and kept
in float32 between steps as the pipeline keeps them; the transformer predicts the flow velocity; guidance is
the pipeline's `uncond + g * (cond - uncond)` for `g > 1`, with the conditional and unconditional passes as
two calls (not one doubled batch), conditional first. Wan 2.2 A14B has two experts: the high-noise one
(`transformer`) runs the steps with t >= boundary_ratio x num_train_timesteps, the low-noise one
(`transformer_2`) the rest. Each is held through its own `mm.use(...)` for its steps only, so under
`--offload sequential` the high-noise expert is unloaded before the low-noise one loads. The same `cfg` guides
both (the pipeline's `guidance_scale_2` defaults to `guidance_scale`). Previews show the middle latent frame.
Image-to-video (`WanImageToVideoPipeline`): the latent wire carries [mask, encoded start/last frames]
(`pipelines.diffusion.wan_image`), concatenated after the noise in float32 then cast, as the pipeline does, and
Wan 2.1 I2V's CLIP image states go to every call as `encoder_hidden_states_image`. Wan 2.2 TI2V-5B
(`expand_timesteps`) gives each video token its own timestep; for image-to-video the first latent frame is the
image's latents with timestep 0 (the latent's noise mask says which), mixed in before every call and at the end.
Sampler (Advanced) runs the steps [start, end) of the same schedule (ComfyUI's two-file Wan 2.2 A14B layout:
one segment per expert), with or without fresh noise; with flow-matching Euler two segments give the latents
of one run split at the same step, and the image-to-video inputs stay on the output latent for the next one.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from memory import MemoryManager, Working
from pipelines.diffusion.flow_loop import StepReport, check_flow_scheduler
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.sampling import SamplerSettings, batched_conditioning
from pipelines.diffusion.schedulers import K_PREFIX, make_scheduler
from pipelines.diffusion.step_cache import step_cache
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.steps import OnStep


def _patch(denoiser: DenoiserRef) -> tuple[int, int, int]:
    t, h, w = denoiser.config.get("patch_size", (1, 2, 2))
    return int(t), int(h), int(w)


# Fitted on the meta device (tests/test_family_wan.py, tests/live_tensors.py): at Wan 2.1 1.3B's and 14B's
# widths, 33 to 81 frames at 480p and 720p, a call keeps about (4 x hidden + 2 x ffn) values per video token
# alive, plus a little that grows more slowly (time embedding, the 512 text tokens' keys and values).
_PER_TOKEN_HIDDEN, _PER_TOKEN_FFN = 4, 2
# Wan 2.2 TI2V (`expand_timesteps`): a timestep per token makes the time embedding per token too: its
# (tokens, 6 x hidden) projection, and each block's six (tokens, hidden) shift/scale/gate tensors beside it.
# Fitted the same way at TI2V-5B's width (1280x704x121 and 832x480x49).
_PER_TOKEN_TIMESTEP = 13
_MARGIN = 1.03
_FIXED = 64 * 2**20


def wan_working(denoiser: DenoiserRef, latent_shape: tuple[int, ...]) -> Working:
    """One transformer call's activations, from the video token count (latent frames x h/2 x w/2 patches).
    Text enters by cross-attention only; the conditional and unconditional passes are separate calls, so
    guidance does not double the batch. Measured within 1.05x of the live tensors at full size."""
    batch, _, frames, h, w = latent_shape
    pt, ph, pw = _patch(denoiser)
    config = denoiser.config
    hidden = int(config.get("num_attention_heads", 40)) * int(config.get("attention_head_dim", 128))
    ffn = int(config.get("ffn_dim", 13824))
    tokens = batch * (frames // pt) * (h // ph) * (w // pw)
    per_token = _PER_TOKEN_HIDDEN * hidden + _PER_TOKEN_FFN * ffn
    if denoiser.expand_timesteps:
        per_token += _PER_TOKEN_TIMESTEP * hidden
    nbytes = tokens * per_token * torch.finfo(denoiser.dtype).bits // 8
    formula = int(nbytes * _MARGIN) + _FIXED
    scale = denoiser.vae_scale_factor
    return Working(formula, f"{batch}x{frames}x{h * scale}x{w * scale}")


def expert_stages(
    denoiser: DenoiserRef, timesteps: torch.Tensor, num_train_timesteps: int
) -> list[tuple[DenoiserRef, list[int]]]:
    """(expert, step indices) in run order: all steps on `denoiser` for Wan 2.1; for Wan 2.2 the steps with
    t >= boundary on the high-noise expert, then the rest on the low-noise one (the pipeline's test)."""
    if denoiser.low_noise is None or denoiser.boundary_ratio is None:
        return [(denoiser, list(range(len(timesteps))))]
    boundary = denoiser.boundary_ratio * num_train_timesteps
    high = [i for i, t in enumerate(timesteps) if t >= boundary]
    low = [i for i, t in enumerate(timesteps) if not t >= boundary]
    return [(ref, steps) for ref, steps in ((denoiser, high), (denoiser.low_noise, low)) if steps]


def _check(denoiser: DenoiserRef, latents: Latents, settings: SamplerSettings) -> SamplerSettings:
    title = denoiser.family.title
    if settings.scheduler == "k_euler":
        settings = replace(settings, scheduler="euler")  # as the other flow models: ComfyUI's euler is Euler
    elif settings.scheduler.startswith(K_PREFIX):
        raise ValueError(f"{title} runs with scheduler default or euler, not {settings.scheduler!r}")
    check_flow_scheduler(denoiser, settings)
    if settings.denoise < 1.0:
        raise ValueError(f"{title}: denoise below 1 (video-to-video) is not supported yet")
    if latents.samples.ndim != 5:
        raise ValueError(
            f"{title} denoises video latents (batch, channels, frames, h, w), got a {latents.samples.ndim}D "
            "latent: feed the sampler from an Empty Video Latent"
        )
    sizes = latents.samples.shape[2:]
    if any(n % p for n, p in zip(sizes, _patch(denoiser), strict=True)):
        pt, ph, pw = _patch(denoiser)
        raise ValueError(
            f"{title} cuts the latents into {pt}x{ph}x{pw} patches: the latent size must be a multiple of that, "
            f"got {'x'.join(map(str, sizes))} (frames x h x w; picture sides must be multiples of "
            f"{ph * latents.vae_scale_factor})"
        )
    return settings


def _image_inputs(
    mm: MemoryManager, denoiser: DenoiserRef, latents: Latents, batch: int
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(condition channels, CLIP image states) for an image-to-video transformer, (None, None) for text-to-video;
    a latent that does not fit the transformer is refused naming the node to feed it from."""
    from pipelines.diffusion.wan_image import encode_clip_images, i2v_extra_channels

    title = denoiser.family.title
    wanted = i2v_extra_channels(denoiser.config, latents.samples.shape[1])
    given = 0 if latents.concat is None else latents.concat.shape[1]
    if wanted != given:
        if given == 0:
            raise ValueError(
                f"{title}: this is an image-to-video model ({wanted} extra input channels): feed the sampler's "
                "latent from Wan Image To Video (a start image) or Wan First Last Frame To Video"
            )
        raise ValueError(
            f"{title}: the latent carries {given} image-conditioning channels but this model takes {wanted} "
            "(a text-to-video model takes none: feed it from Empty Video Latent)"
        )
    if latents.concat is None:
        return None, None
    condition = latents.concat.to(device=mm.device, dtype=torch.float32)
    if condition.shape[0] != batch:
        condition = condition.repeat(batch // condition.shape[0], 1, 1, 1, 1)
    if denoiser.config.get("image_dim") is None:  # Wan 2.2 I2V: the frames alone condition it
        return condition, None
    encoder = latents.clip_encoder or denoiser.image_encoder  # a CLIP vision file's, else the folder's
    if encoder is None:
        raise ValueError(
            f"{title}: this transformer takes CLIP image states but the folder has no image_encoder: wire a "
            "CLIP Vision Encode (Load CLIP Vision) into Wan Image To Video's clip_vision_output"
        )
    if not latents.clip_images:
        raise ValueError(
            f"{title}: this model needs the start image itself: feed the latent from Wan Image To Video"
        )
    if len(latents.clip_images) > 1 and denoiser.config.get("pos_embed_seq_len") is None:
        raise ValueError(
            f"{title}: this image-to-video model takes one start image; a first and a last frame need a "
            "first-last-frame model (Wan 2.1 FLF2V, or Wan 2.2 I2V)"
        )
    states = encode_clip_images(mm, encoder, latents.clip_images)
    return condition, states.repeat(batch, 1, 1).to(device=mm.device, dtype=denoiser.dtype)


def _first_frame_inputs(
    denoiser: DenoiserRef, latents: Latents
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(keep mask, token mask) for Wan 2.2 TI2V, (None, None) otherwise. `keep` is the latent's noise mask
    (1 = denoise, 0 = the image's first frame, from Wan 2.2 Image To Video Latent); the token mask is its
    patch grid, (frames, h / 2, w / 2), which times t gives each token's timestep (all t for text-to-video)."""
    if not denoiser.expand_timesteps:
        if latents.noise_mask is not None:
            raise ValueError(
                f"{denoiser.family.title}: a latent noise mask (a given first frame) is for Wan 2.2 TI2V models only"
            )
        return None, None
    _, _, frames, h, w = latents.samples.shape
    keep = latents.noise_mask
    mask = keep.float() if keep is not None else torch.ones(1, 1, frames, h, w)
    _, ph, pw = _patch(denoiser)
    return keep, mask[0][0][:, ::ph, ::pw]


@torch.no_grad()
def sample_wan(
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
    settings = _check(denoiser, latents, settings)
    device = mm.device
    batch = latents.samples.shape[0]
    do_cfg = settings.cfg > 1.0 and negative is not None  # the pipeline's `guidance_scale > 1`
    generator = torch.Generator("cpu").manual_seed(settings.seed)

    # 2. Prepare timesteps: "default" is the class the folder was saved with (UniPC on flow sigmas for Wan)
    if settings.scheduler == "default":
        scheduler = make_scheduler("default", denoiser.scheduler_config)
    else:  # flow-matching Euler with the folder's shift (UniPC configs call it `flow_shift`)
        # here: `app plan` reads wan_working without diffusers
        from diffusers import FlowMatchEulerDiscreteScheduler

        config = denoiser.scheduler_config
        shift = config.get("flow_shift", config.get("shift", 1.0))
        scheduler = FlowMatchEulerDiscreteScheduler.from_config(config, shift=shift)
    scheduler.set_timesteps(settings.steps, device=device)
    timesteps = scheduler.timesteps
    start, end = _segment(scheduler, settings)
    if start >= end:
        return latents  # KSamplerAdvanced's empty segment: the latent as it came

    # 3. Prepare latent variables: float32 noise drawn as the pipeline draws it; a later segment continues
    # from the latent it is given (noised to its first sigma only when it adds noise, as ComfyUI's flow models)
    x = _start_latent(latents, settings, scheduler, start, generator, device)
    scheduler.set_begin_index(start)

    # 4. Prepare conditioning (the positive and negative are separate calls: no common length needed)
    dtype = denoiser.dtype
    cond = batched_conditioning(positive, batch).embeds.to(device=device, dtype=dtype)
    uncond = batched_conditioning(negative, batch).embeds.to(device, dtype) if do_cfg and negative else None

    # 5. Image-to-video: the start/last-frame channels beside the noise, and Wan 2.1's CLIP image states
    condition, image_embeds = _image_inputs(mm, denoiser, latents, batch)

    # 6. Wan 2.2 TI2V: a timestep per video token, 0 on a given first frame (kept as the image's latents)
    keep, token_mask = _first_frame_inputs(denoiser, latents)
    keep = keep.to(device=device, dtype=torch.float32) if keep is not None else None
    token_mask = token_mask.to(device) if token_mask is not None else None
    given = latents.samples.to(device=device, dtype=torch.float32) if keep is not None else None

    # 7. Denoising loop, one expert at a time
    working = wan_working(denoiser, tuple(latents.samples.shape))
    middle = latents.samples.shape[2] // 2
    report = StepReport(on_step, len(timesteps), scheduler, unpack=lambda z: z[:, :, middle], x0=_denoised)
    stages = expert_stages(denoiser, timesteps, int(scheduler.config.num_train_timesteps))
    stages = [(ref, [i for i in steps if start <= i < end]) for ref, steps in stages]
    for expert, steps in (stage for stage in stages if stage[1]):
        # Each expert keeps its own cache: the hooks live on that expert for its stretch of the schedule.
        with (
            use_denoiser(mm, expert, working=working) as model,
            step_cache(model, settings.step_cache, len(steps)) as cache,
        ):
            for n, i in enumerate(steps):
                cache.step(n)
                t = timesteps[i]
                model_input = x if condition is None else torch.cat([x, condition], dim=1)
                if keep is not None:
                    model_input = (1 - keep) * given + keep * x
                model_input = model_input.to(expert.dtype)
                if token_mask is None:
                    timestep = t.expand(batch)
                else:  # (batch, tokens), as the pipeline: the mask's patch grid times t
                    timestep = (token_mask * t).flatten().unsqueeze(0).expand(batch, -1)
                with cache.branch("cond"):
                    velocity = model(
                        hidden_states=model_input,
                        timestep=timestep,
                        encoder_hidden_states=cond,
                        encoder_hidden_states_image=image_embeds,
                        return_dict=False,
                    )[0]
                if uncond is not None:
                    with cache.branch("uncond"):
                        velocity_uncond = model(
                            hidden_states=model_input,
                            timestep=timestep,
                            encoder_hidden_states=uncond,
                            encoder_hidden_states_image=image_embeds,
                            return_dict=False,
                        )[0]
                    velocity = velocity_uncond + settings.cfg * (velocity - velocity_uncond)

                before = x
                x = scheduler.step(velocity, t, x, return_dict=False)[0]
                report(i, t, before, x, velocity)

    if keep is not None:  # the first frame is the image's latents exactly, as the pipeline puts it back
        x = (1 - keep) * given + keep * x
    # The image-to-video inputs stay on the wire: a later segment (Wan 2.2's low-noise expert) needs them too.
    return replace(latents, samples=x.cpu(), source="sampled")


def _denoised(scheduler: object, before: torch.Tensor, velocity: torch.Tensor) -> torch.Tensor:
    """x0 = x_t - sigma v (flow matching) at the sigma this step started from, in the latents' float32: the
    velocity is the expert's dtype. The step index is the schedule's: the segment set its begin index."""
    sigma = scheduler.sigmas[scheduler.step_index - 1]  # type: ignore[attr-defined]
    return before - sigma.to(device=before.device, dtype=before.dtype) * velocity.to(before.dtype)


def _segment(scheduler: object, settings: SamplerSettings) -> tuple[int, int]:
    """KSamplerAdvanced's steps [start, end) of the schedule (all of it for Sampler). A segment that stops
    early without leftover noise steps to sigma 0 at its end, as ComfyUI sets the segment's last sigma to 0."""
    start, end = settings.start_step, min(settings.end_step, settings.steps)
    if end < settings.steps and settings.force_full_denoise:
        sigmas = scheduler.sigmas.clone()  # type: ignore[attr-defined]
        sigmas[end] = 0.0
        scheduler.sigmas = sigmas  # type: ignore[attr-defined]
    return start, end


def _start_latent(
    latents: Latents,
    settings: SamplerSettings,
    scheduler: object,
    start: int,
    generator: torch.Generator,
    device: object,
) -> torch.Tensor:
    """Noise for a run from the top; for a segment that adds no noise, the latent it continues; for a later
    segment that adds noise, the latent noised to its first sigma, sigma x noise + (1 - sigma) x latent."""
    shape = tuple(latents.samples.shape)
    if not settings.add_noise:
        return latents.samples.to(device=device, dtype=torch.float32)
    from diffusers.utils.torch_utils import randn_tensor  # here: `app plan` reads wan_working, no diffusers

    noise = randn_tensor(shape, generator=generator, device=torch.device(device), dtype=torch.float32)
    if start == 0:
        return noise  # the pipeline's start: pure noise (the empty latent only gives the shape)
    sigma = float(scheduler.sigmas[start])  # type: ignore[attr-defined]
    return sigma * noise + (1.0 - sigma) * latents.samples.to(device=device, dtype=torch.float32)
