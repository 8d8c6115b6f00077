"""A diffusers LTX-2 folder written as ComfyUI's LTX-2 files (the one-file checkpoint and the Gemma 3 file), for
tests and demos.

Lives here: `write_ltx2_files`. May import: stdlib, torch, safetensors, diffusers, transformers,
pipelines.diffusion.comfy_layouts (`ltx2` names, `scaled_fp8`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from pipelines.diffusion.comfy_layouts import ltx2


def _save(state: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in state.items()}, str(path))


def write_ltx2_files(folder: Path, models: Path, *, scaled_fp8: bool = False) -> Path:
    """Write the diffusers LTX-2 `folder` as ComfyUI's files under `models/` (`checkpoints/` and
    `text_encoders/`, the LTX-2.3 templates' names), plain float tensors, or the checkpoint's 2-D weights
    fp8 "scaled" as the released file is; returns `models`."""
    from diffusers import AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, LTX2VideoTransformer3DModel
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from transformers import Gemma3ForConditionalGeneration

    from pipelines.diffusion.ltx2_vae import _vocoder_class

    classes = {
        "transformer": LTX2VideoTransformer3DModel,
        "connectors": LTX2TextConnectors,
        "vae": AutoencoderKLLTX2Video,
        "audio_vae": AutoencoderKLLTX2Audio,
        "vocoder": _vocoder_class(folder).load(),
    }
    checkpoint: dict[str, torch.Tensor] = {}
    for part, cls in classes.items():
        state = cls.from_pretrained(str(folder), subfolder=part).state_dict()
        checkpoint.update(ltx2.part_from_diffusers(part, state))
    # The released file also carries these two statistics, which diffusers' modules do not hold.
    for prefix in ("vae.", "audio_vae."):
        means = checkpoint[prefix + "per_channel_statistics.mean-of-means"]
        checkpoint[prefix + "per_channel_statistics.mean-of-stds"] = torch.ones_like(means)
        checkpoint[prefix + "per_channel_statistics.channel"] = torch.arange(
            means.numel(), dtype=torch.float32
        )
    if scaled_fp8:
        from pipelines.diffusion.comfy_layouts.scaled_fp8 import scaled_fp8_state

        checkpoint = scaled_fp8_state(checkpoint)
    _save(checkpoint, models / "checkpoints" / ltx2.LTX2_FILES["checkpoint"])
    encoder = Gemma3ForConditionalGeneration.from_pretrained(str(folder), subfolder="text_encoder")
    _save(
        ltx2.gemma_from_diffusers(encoder.state_dict()),
        models / "text_encoders" / ltx2.LTX2_FILES["text_encoder"],
    )
    return models
