"""What a separate model file holds, from its tensor names and shapes alone (no tensor data read).

Lives here: `Detected`, `detect_denoiser`, `detect_text_encoder`, `detect_vae`, `UNET_PREFIXES`.
May import: stdlib, pipelines.diffusion.families.

Names decide the family and the key layout (diffusers, or the original one of the public release); shapes
decide what names cannot (CLIP-L vs CLIP-G by width, Flux dev vs schnell by its guidance embedder). Each
answer carries a sentence for the user saying what was found.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pipelines.diffusion.families import UnsupportedModelError

# Prefixes a component's keys may carry when it was cut out of a full checkpoint.
UNET_PREFIXES = ("model.diffusion_model.", "diffusion_model.")
VAE_PREFIXES = ("first_stage_model.", "vae.")


@dataclass(frozen=True)
class Detected:
    family: str  # a FAMILIES key ("sd", "sdxl", "sd3", "flux", "pixart_sigma"); "" for text encoders
    layout: str  # "diffusers" | "ldm" (CompVis/SGM) | "bfl" (Black Forest Labs) | "sd3" (SAI) | "clip" | "t5"
    prefix: str  # key prefix to strip ("" when none)
    message: str


def _prefix(keys: Mapping[str, object], candidates: tuple[str, ...]) -> str:
    return next((p for p in candidates if any(k.startswith(p) for k in keys)), "")


def detect_denoiser(shapes: Mapping[str, tuple[int, ...]]) -> Detected:
    """A UNet or DiT file: family and layout. Raises `UnsupportedModelError` naming what it looks like."""
    prefix = _prefix(shapes, UNET_PREFIXES)
    keys = {k.removeprefix(prefix) for k in shapes}

    def has(p: str) -> bool:
        return any(k.startswith(p) for k in keys)

    if has("double_blocks."):
        dev = "guidance_in.in_layer.weight" in keys
        return Detected(
            "flux", "bfl", prefix, f"Flux transformer ({'dev' if dev else 'schnell'}, BFL layout)"
        )
    if has("single_transformer_blocks.") and has("transformer_blocks."):
        return Detected("flux", "diffusers", prefix, "Flux transformer (diffusers layout)")
    if has("joint_blocks."):
        return Detected("sd3", "sd3", prefix, "SD3 transformer (original layout)")
    if has("transformer_blocks.") and "pos_embed.pos_embed" in keys and has("context_embedder."):
        return Detected("sd3", "diffusers", prefix, "SD3 transformer (diffusers layout)")
    if has("adaln_single."):
        return Detected("pixart_sigma", "diffusers", prefix, "PixArt-Sigma transformer (diffusers layout)")
    if has("input_blocks."):
        xl = has("label_emb.")
        return Detected(
            "sdxl" if xl else "sd", "ldm", prefix, f"{'SDXL' if xl else 'SD1.x/2.x'} UNet (original layout)"
        )
    if has("down_blocks.") and "conv_in.weight" in keys:
        xl = has("add_embedding.")
        return Detected(
            "sdxl" if xl else "sd",
            "diffusers",
            prefix,
            f"{'SDXL' if xl else 'SD1.x/2.x'} UNet (diffusers layout)",
        )
    if has("encoder.down") or has("decoder.up"):
        raise UnsupportedModelError("this is a VAE, not a UNet/transformer: load it with Load VAE")
    raise UnsupportedModelError("no UNet or transformer weights recognised (Flux, SD3, SDXL, SD1.x, PixArt)")


def detect_text_encoder(shapes: Mapping[str, tuple[int, ...]]) -> Detected:
    """CLIP (L or G, transformers layout, with or without `text_model.`) or T5 encoder."""
    keys = list(shapes)
    if any("SelfAttention.q.weight" in k for k in keys):
        width = next(v[1] for k, v in shapes.items() if k.endswith("shared.weight") or "embed_tokens" in k)
        return Detected("", "t5", "", f"T5 encoder (width {width})")
    emb = next((v for k, v in shapes.items() if k.endswith("embeddings.token_embedding.weight")), None)
    if emb is not None:
        width = emb[1]
        name = {768: "CLIP-L", 1280: "CLIP-G (OpenCLIP bigG)"}.get(width, f"CLIP (width {width})")
        return Detected("", "clip", "", name)
    if any(".resblocks." in k for k in keys):
        raise UnsupportedModelError(
            "this text encoder is in OpenCLIP's layout (resblocks); save it in transformers' layout first"
        )
    raise UnsupportedModelError("no CLIP or T5 text encoder weights recognised")


def clip_width(shapes: Mapping[str, tuple[int, ...]]) -> int:
    return next(v[1] for k, v in shapes.items() if k.endswith("embeddings.token_embedding.weight"))


def detect_vae(shapes: Mapping[str, tuple[int, ...]]) -> Detected:
    """An AutoencoderKL file: layout, and 4 (SD/SDXL) vs 16 (SD3/Flux) latent channels."""
    prefix = _prefix(shapes, VAE_PREFIXES)
    keys = {k.removeprefix(prefix): v for k, v in shapes.items()}
    if "encoder.conv_out.weight" not in keys and "decoder.conv_in.weight" not in keys:
        raise UnsupportedModelError("no VAE weights recognised (encoder.conv_out / decoder.conv_in)")
    channels = (
        keys["decoder.conv_in.weight"][1]
        if "decoder.conv_in.weight" in keys
        else keys["encoder.conv_out.weight"][0] // 2
    )
    layout = "diffusers" if any(k.startswith("decoder.up_blocks.") for k in keys) else "ldm"
    if channels == 16:
        return Detected("flux", layout, prefix, f"16-channel VAE ({layout} layout): Flux (or SD3: pick sd3)")
    return Detected(
        "sd", layout, prefix, f"{channels}-channel VAE ({layout} layout): SD1.x (or SDXL: pick sdxl)"
    )
