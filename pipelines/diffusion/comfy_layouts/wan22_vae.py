"""The Wan 2.2 VAE's ComfyUI key table: the original Wan 2.2 names (`wan2.2_vae.safetensors`) <-> diffusers'.

Lives here: `is_wan22_vae`, `wan22_vae_table`, and what both Wan VAE tables share (`WAN_RESNET`,
`wan_resnet_name`, `wan_vae_shared_name`). May import: stdlib only (keys.py dispatches here).

Wan 2.2's VAE (TI2V 5B; diffusers' `AutoencoderKLWan(is_residual=True)`) nests each stage: the original keeps
`encoder.downsamples.I.downsamples.J` (the stage's resnets, then its resample at J = the resnet count) and
`decoder.upsamples.I.upsamples.J` the same way; diffusers names them `down_blocks.I.resnets.J` /
`down_blocks.I.downsampler` and `up_blocks.I.resnets.J` / `up_blocks.I.upsampler`. The shortcut averaging
(AvgDown3D / DupUp3D) has no weights. The middle, head, `conv1` / `conv2` and each resnet's inner names are
Wan 2.1's (`residual.0` norm1, `residual.2` conv1, `residual.3` norm2, `residual.6` conv2, `shortcut`), as
in diffusers' `scripts/convert_wan_to_diffusers.py` (`convert_vae_22`), which this table inverts.
"""

from __future__ import annotations

import re

WAN_RESNET = {"norm1": "residual.0", "conv1": "residual.2", "norm2": "residual.3", "conv2": "residual.6"}
WAN_RESNET.update(conv_shortcut="shortcut")
_SIDES = {
    "encoder": ("down_blocks", "downsamples", "downsampler"),
    "decoder": ("up_blocks", "upsamples", "upsampler"),
}


def is_wan22_vae(diffusers_keys: list[str]) -> bool:
    """Whether these diffusers VAE names are Wan 2.2's residual stages (a `downsampler` / `upsampler`)."""
    return any(re.search(r"\.(down|up)_blocks\.\d+\.(down|up)sampler\.", k) for k in diffusers_keys)


def wan_resnet_name(rest: str) -> str:
    """A diffusers resnet's inner name (`norm1.weight`) in the original Wan VAE's (`residual.0.weight`)."""
    part, _, tail = rest.partition(".")
    return f"{WAN_RESNET.get(part, part)}.{tail}"


def wan_vae_shared_name(k: str) -> str | None:
    """The original name of a diffusers key both Wan VAEs (2.1 and 2.2) name alike: the 1x1 convs, the
    stems, the heads and the middle block; None for a stage's key (each table maps those its own way)."""
    side, _, rest = k.partition(".")
    if k.startswith(("quant_conv.", "post_quant_conv.")):
        return ("conv1." if k.startswith("quant_conv.") else "conv2.") + k.split(".", 1)[1]
    if rest.startswith("conv_in."):
        return f"{side}.conv1.{rest.removeprefix('conv_in.')}"
    if rest.startswith("norm_out."):
        return f"{side}.head.0.{rest.removeprefix('norm_out.')}"
    if rest.startswith("conv_out."):
        return f"{side}.head.2.{rest.removeprefix('conv_out.')}"
    if m := re.match(r"mid_block\.resnets\.(\d+)\.(.*)$", rest):
        return f"{side}.middle.{2 * int(m.group(1))}.{wan_resnet_name(m.group(2))}"
    if m := re.match(r"mid_block\.attentions\.0\.(.*)$", rest):
        return f"{side}.middle.1.{m.group(1)}"
    return None


def wan22_vae_table(diffusers_keys: list[str]) -> dict[str, str]:
    """ComfyUI (original Wan 2.2) VAE name -> diffusers `AutoencoderKLWan(is_residual=True)` name."""
    resnets: dict[tuple[str, int], int] = {}  # (side, stage) -> its resnet count: the resample's index
    for k in diffusers_keys:
        if m := re.match(r"(encoder|decoder)\.(?:down|up)_blocks\.(\d+)\.resnets\.(\d+)\.", k):
            key = (m.group(1), int(m.group(2)))
            resnets[key] = max(resnets.get(key, 0), int(m.group(3)) + 1)
    table: dict[str, str] = {}
    for k in diffusers_keys:
        side, _, rest = k.partition(".")
        orig = wan_vae_shared_name(k)
        if orig is None and side in _SIDES:
            blocks, flat, sampler = _SIDES[side]
            if m := re.match(rf"{blocks}\.(\d+)\.resnets\.(\d+)\.(.*)$", rest):
                orig = f"{side}.{flat}.{m.group(1)}.{flat}.{m.group(2)}.{wan_resnet_name(m.group(3))}"
            elif m := re.match(rf"{blocks}\.(\d+)\.{sampler}\.(.*)$", rest):
                stage = int(m.group(1))
                orig = f"{side}.{flat}.{stage}.{flat}.{resnets.get((side, stage), 0)}.{m.group(2)}"
        if orig is None:
            raise KeyError(f"no Wan 2.2 VAE name for {k!r}")
        table[orig] = k
    return table
