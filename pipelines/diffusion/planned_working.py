"""The working memory a Sampler will ask for, from what a memory plan knows before any prompt is encoded.

Lives here: `planned_sampler_working`. May import: stdlib, torch, memory, pipelines.diffusion.* (the video
families' loop modules import diffusers: they are imported only for a graph of that family).

The plan (`nodes.plan_walk`) stops each text encoder at its first model use, so a sampler's conditioning is
not there yet: what is known is the denoiser, the latent wire and the Sampler's fields. Each family's figure
is the function its own loop calls before `mm.use(...)` (same formula, same shape key, so a learned peak
replaces it on the next plan), with the caption length the family pads to where the loop would read it from
the conditioning. A step cache (`cache` on the Sampler) adds the residuals its hooks keep between calls
(`step_cache.cache_bytes`): working memory for the whole run, beside each call's activations.
"""

from __future__ import annotations

from typing import Any

import torch

from memory import Working
from pipelines.diffusion.guidance import runs_negative
from pipelines.diffusion.sampling import denoiser_working
from pipelines.diffusion.step_cache import StepCache, cache_bytes
from pipelines.diffusion.values import DenoiserRef, Latents


def _text_tokens(denoiser: DenoiserRef) -> int:
    family = denoiser.family
    return int(family.joint_text_tokens or family.max_text_tokens or 77)


def _image_tokens(denoiser: DenoiserRef, samples_shape: tuple[int, ...]) -> int:
    """Tokens of one call's image (or video) stream, batch included: 2x2 latent patches for the image DiTs
    (Flux packs them itself, the others' patch_size is 2), Wan's (t, h, w) patches for a 5D latent."""
    config = denoiser.config
    if len(samples_shape) == 5:
        batch, _, frames, h, w = samples_shape
        pt, ph, pw = (int(p) for p in config.get("patch_size", (1, 2, 2)))
        return batch * (frames // pt) * (h // ph) * (w // pw)
    batch, _, h, w = samples_shape
    patch = 2 if denoiser.family.packs_latents else int(config.get("patch_size", 2) or 2)
    if config.get("all_patch_size"):
        patch = int(config["all_patch_size"][0])
    return batch * (h // patch) * (w // patch)


def _with_cache(
    working: Working, cache: StepCache, denoiser: DenoiserRef, samples_shape: tuple[int, ...], passes: int
) -> Working:
    if not cache.on:
        return working
    batch = samples_shape[0]
    extra = cache_bytes(
        cache,
        denoiser.config,
        image_tokens=_image_tokens(denoiser, samples_shape),
        text_tokens=batch * _text_tokens(denoiser),
        passes=passes,
        esize=torch.finfo(denoiser.dtype).bits // 8,
    )
    return Working(working.formula_bytes + extra, f"{working.shape_key}+{cache.method}{cache.threshold:g}")


def planned_sampler_working(
    denoiser: DenoiserRef, latent: Latents | None, height: int, width: int, batch: int, params: dict[str, Any]
) -> Working:
    """One sampling run's working memory for `denoiser` on `latent` (None: the denoiser's native size, as
    the Sampler does unwired; `height`/`width`/`batch` are then that size). `params`: the Sampler's fields
    (`cfg`, `cfg_rule`, `cache`, `cache_threshold`) and whether a negative prompt is wired (`negative`)."""
    cfg, negative = float(params.get("cfg") or 0.0), params.get("negative") is not None
    family = denoiser.family
    call = family.denoiser_call
    shape = tuple(latent.samples.shape) if latent is not None else (batch, 4, height // 8, width // 8)
    if call == "wan" and len(shape) == 5:
        from pipelines.diffusion.wan_sampling import wan_working

        guided = cfg > 1.0 and negative
        working = wan_working(denoiser, shape)  # type: ignore[arg-type]
        passes = 2 if guided else 1  # conditional and unconditional calls, each with its own cache state
    elif call == "ltx2" and len(shape) == 5 and latent is not None and latent.audio is not None:
        from pipelines.diffusion.ltx2_sampling import ltx2_working

        p, pt = int(denoiser.config.get("patch_size", 1)), int(denoiser.config.get("patch_size_t", 1))
        _, _, frames, h, w = shape
        video_tokens = (frames // pt) * (h // p) * (w // p)
        working = ltx2_working(denoiser, video_tokens, int(latent.audio.shape[2]), _text_tokens(denoiser))
        passes = 1  # no step cache in LTX-2's loop (it refuses one)
    elif family.flow and call == "qwenimage":
        from pipelines.diffusion.qwenimage_working import qwenimage_working

        h, w = shape[-2], shape[-1]
        guided = runs_negative(str(params.get("cfg_rule") or "pipeline"), cfg, negative)
        working = qwenimage_working(denoiser, h, w, batch, _text_tokens(denoiser))
        passes = 2 if guided else 1
    else:
        if family.flow and call == "zimage":
            guided = cfg > 0.0 and negative
        elif family.flow and call not in ("sd3",):
            guided = False  # Flux: distilled guidance is an input, one batch
        else:
            guided = cfg > 1.0 and negative
        text = _text_tokens(denoiser) if call == "zimage" else None
        working = denoiser_working(denoiser, height, width, batch, guided, text)
        # SD3 guides one doubled batch (one cache state for twice the tokens); Z-Image calls twice.
        passes = 2 if guided else 1
    return _with_cache(working, StepCache(*_cache_fields(params)), denoiser, shape, passes)


def _cache_fields(params: dict[str, Any]) -> tuple[str, float]:
    method = params.get("cache") or "off"
    threshold = params.get("cache_threshold")
    return str(method), float(0.1 if threshold is None else threshold)
