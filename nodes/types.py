"""Port data types and the rule for which output may feed which input.

Lives here: `PortType`, the built-in types, `MODEL_PORT_TYPES`, `can_connect`. Imports nothing from Nodeloom.
A type is a name plus a display colour; third-party packs make their own with `PortType(...)`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PortType:
    """A kind of value that travels along a wire."""

    name: str
    color: str = "#9e9e9e"  # hex, used by the editor for ports and wires
    # Other type names this type may also feed (e.g. STRING -> TEXT).
    feeds: frozenset[str] = frozenset()

    def __str__(self) -> str:
        return self.name


# Model handles: lazy references registered with the memory manager, never raw tensors.
DENOISER = PortType("DENOISER", "#b39ddb")
TEXT_ENCODER = PortType("TEXT_ENCODER", "#ffd54f")
VAE = PortType("VAE", "#ef5350")
LLM = PortType("LLM", "#4db6ac")
CONTROL_NET = PortType("CONTROL_NET", "#26a69a")
UPSCALE_MODEL = PortType("UPSCALE_MODEL", "#8d6e63")

# Data.
CONDITIONING = PortType("CONDITIONING", "#ffa726")
LATENT = PortType("LATENT", "#f48fb1")
IMAGE = PortType("IMAGE", "#64b5f6")
# (B, H, W) float in [0, 1]; 1 marks the region to repaint.
MASK = PortType("MASK", "#90a4ae")
TEXT = PortType("TEXT", "#aed581")
STRING = PortType("STRING", "#c5e1a5", feeds=frozenset({"TEXT"}))
INT = PortType("INT", "#80deea", feeds=frozenset({"FLOAT"}))
FLOAT = PortType("FLOAT", "#4dd0e1")
BOOL = PortType("BOOL", "#ce93d8")
# A `pipelines.video.value.Video`: frames (T, H, W, 3) float32 in [0, 1], fps, optional audio.
VIDEO = PortType("VIDEO", "#7986cb")
# A `pipelines.video.value.Audio`: waveform (C, N) float32 in [-1, 1] and its sample rate.
AUDIO = PortType("AUDIO", "#a1887f")
# A noise schedule: a tuple of floats, first level to last (ComfyUI's SIGMAS; nodes/sigmas.py).
SIGMAS = PortType("SIGMAS", "#9575cd")
# LTX-2's latent upsampler (`pipelines.diffusion.ltx2_upsample.LatentUpsamplerRef`; ComfyUI's LATENT_UPSCALE_MODEL).
LATENT_UPSCALE_MODEL = PortType("LATENT_UPSCALE_MODEL", "#a1887f")
# Wan 2.1 I2V's CLIP vision encoder (`pipelines.diffusion.wan_image.ImageEncoderRef`), and a picture paired
# with it (`wan_image.ClipVisionOutput`, ComfyUI's CLIP_VISION_OUTPUT): nodes/clip_vision.py.
CLIP_VISION = PortType("CLIP_VISION", "#80cbc4")
CLIP_VISION_OUTPUT = PortType("CLIP_VISION_OUTPUT", "#7e57c2")
# Accepts anything: for generic sinks such as a preview of any value.
ANY = PortType("ANY", "#e0e0e0")

# The port types that carry a loaded model: a node with one of them may load or use weights.
MODEL_PORT_TYPES: frozenset[str] = frozenset(
    t.name
    for t in (DENOISER, TEXT_ENCODER, VAE, LLM, CONTROL_NET, UPSCALE_MODEL, CLIP_VISION, LATENT_UPSCALE_MODEL)
)

BUILTIN_TYPES: tuple[PortType, ...] = (
    DENOISER,
    TEXT_ENCODER,
    VAE,
    LLM,
    CONTROL_NET,
    UPSCALE_MODEL,
    CONDITIONING,
    LATENT,
    IMAGE,
    MASK,
    TEXT,
    STRING,
    INT,
    FLOAT,
    BOOL,
    VIDEO,
    AUDIO,
    SIGMAS,
    LATENT_UPSCALE_MODEL,
    ANY,
    CLIP_VISION,
    CLIP_VISION_OUTPUT,
)


def can_connect(source: PortType, target: PortType) -> bool:
    """True when a value of type `source` may be wired into an input of type `target`."""
    if target.name == ANY.name or source.name == target.name:
        return True
    # TEXT and STRING are the same value to a node: a multiline prompt vs a one-line field.
    if {source.name, target.name} == {TEXT.name, STRING.name}:
        return True
    return target.name in source.feeds
