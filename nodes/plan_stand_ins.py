"""Latents a memory plan hands on for the image-to-video nodes, which it stops at their VAE use.

Lives here: `latent_stand_in`. Imports `pipelines.diffusion` (inside the functions, as the nodes do).

A node stopped at its first model use has no outputs; `nodes.plan_walk` makes stand-ins by port type, and a
latent it can only pass through from an input. The image-to-video nodes have no latent input, yet their
latent has exactly the shape of the empty latent the text-to-video nodes make from the same fields (the
encoded frames go into `concat` or the first frame); without it the sampler after them would be planned at
the denoiser's native picture size, without frames. Each entry builds that empty latent (zeros: no weights
read, no VAE run); the conditioning outputs pass their inputs through, as the nodes do.
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
