"""Latents a memory plan hands on for the image-to-video nodes, which it stops at their VAE use, and for the
samplers, which it does not run.

Lives here: `latent_stand_in`, `sampled_stand_in`. Imports `pipelines.diffusion` (inside the functions, as the
nodes do).

A node stopped at its first model use has no outputs; `nodes.plan_walk` makes stand-ins by port type, and a
latent it can only pass through from an input. The image-to-video nodes have no latent input, yet their
latent has exactly the shape of the empty latent the text-to-video nodes make from the same fields (the
encoded frames go into `concat` or the first frame); without it the sampler after them would be planned at
the denoiser's native picture size, without frames. Each entry builds that empty latent (zeros: no weights
read, no VAE run); the conditioning outputs pass their inputs through, as the nodes do.

A sampler's latent is its input's, but for MiniMax H3 on an image latent (ComfyUI's still template): the run
hands on a one-frame video with a zero-length sound track (`minimax_vae.still_request`), which Separate AV
Latent splits and VAE Decode decodes, so the plan hands that on too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _wan(kwargs: dict[str, Any]) -> dict[str, Any]:
    import torch

    from pipelines.diffusion.values import Latents
    from pipelines.diffusion.video_vae import video_latent_shape

    vae = kwargs["vae"]
    _, channels, frames, h, w = video_latent_shape(
        vae.config, int(kwargs["width"]), int(kwargs["height"]), int(kwargs["length"])
    )
    samples = torch.zeros(int(kwargs.get("batch_size") or 1), channels, frames, h, w)
    latent = Latents(samples=samples, vae_scale_factor=vae.scale_factor, source="empty")
    return {"positive": kwargs.get("positive"), "negative": kwargs.get("negative"), "latent": latent}


def _ltx2(kwargs: dict[str, Any]) -> dict[str, Any]:
    from pipelines.diffusion.ltx2_nodes import empty_ltx2_latent

    latent = empty_ltx2_latent(
        kwargs["vae"],
        kwargs.get("denoiser"),
        int(kwargs["width"]),
        int(kwargs["height"]),
        int(kwargs["frames"]),
        float(kwargs["fps"]),
    )
    return {"latent": latent}


def _minimax(kwargs: dict[str, Any]) -> dict[str, Any]:
    # The keyframes and references ride along as anchors and rows of their own; the video and sound
    # latents have the text-to-video shapes, which are what the sampler and the decode after it plan with.
    from pipelines.diffusion.minimax_vae import empty_minimax_latent

    latent = empty_minimax_latent(
        kwargs["vae"],
        kwargs.get("denoiser"),
        int(kwargs["width"]),
        int(kwargs["height"]),
        int(kwargs["frames"]),
    )
    return {"latent": latent}


_STAND_INS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "WanImageToVideo": _wan,
    "WanFirstLastFrameToVideo": _wan,
    "LTXVImageToVideo": _ltx2,
    "MiniMaxH3ImageToVideo": _minimax,
    "MiniMaxH3ReferenceToVideo": _minimax,
}


def latent_stand_in(node_type: str, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The outputs to plan the rest of the graph with, for a node of `node_type` stopped at its VAE use;
    None for other nodes, or when its fields do not make a latent (the run will name the field)."""
    make = _STAND_INS.get(node_type)
    if make is None:
        return None
    try:
        return make(kwargs)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def sampled_stand_in(denoiser: Any, latent: Any) -> Any:
    """The latent a sampler on `denoiser` hands on for `latent` (the plan does not run the sampler)."""
    if getattr(getattr(denoiser, "family", None), "denoiser_call", None) != "minimax":
        return latent
    from pipelines.diffusion.minimax_vae import still_request

    try:
        return still_request(denoiser, latent)
    except (ValueError, AttributeError):  # the run names the field; the plan passes the latent on
        return latent
