"""FLUX.3's ComfyUI files: the file names its templates load and the fixture writer (a diffusers folder
written as those files).

Lives here: `FLUX3_FILES`, `write_flux3_files`. May import: stdlib, torch, safetensors, diffusers,
transformers, pipelines.diffusion.comfy_layouts.flux3_keys / keys / writer.

The transformer is in the original names (`flux3_keys`); the text encoder is Qwen3-VL-4B as ComfyUI's other VL
files are (`model.layers.*`, `visual.*`), read into `Qwen3VLForConditionalGeneration`; the VAE is FLUX.2's
(`flux2-vae.safetensors`: LDM names plus the batch-norm statistics). The templates' transformer and text encoder
are `int8_convrot` files (that quantized form is another loader's); the fixtures hold plain float tensors under
those names, as the loaders read a file's form from its tensors, not its name.
"""

from __future__ import annotations

from pathlib import Path

import torch

# The file names ComfyUI's FLUX.3 templates load (models/<folder>/<name>).
FLUX3_FILES = {
    "transformer": "flux3-image-klein-base-int8-convrot.safetensors",
    "text_encoder": "qwen3vl_4b_int8_convrot.safetensors",
    "vae": "flux2-vae.safetensors",
}


def write_flux3_files(folder: Path, models: Path) -> Path:
    """Write the FLUX.3 diffusers `folder` as ComfyUI's files under `models/`; returns `models`."""
    from diffusers import AutoencoderKLFlux2, Flux3Transformer2DModel
    from safetensors.torch import save_file
    from transformers import Qwen3VLForConditionalGeneration

    from pipelines.diffusion.comfy_layouts.flux3_keys import from_diffusers
    from pipelines.diffusion.comfy_layouts.keys import vae_from_diffusers
    from pipelines.diffusion.comfy_layouts.writer import text_encoder_to_comfy

    def save(state: dict[str, torch.Tensor], path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().contiguous() for k, v in state.items()}, str(path))

    transformer = Flux3Transformer2DModel.from_pretrained(str(folder), subfolder="transformer")
    save(from_diffusers(transformer.state_dict()), models / "diffusion_models" / FLUX3_FILES["transformer"])
    encoder = Qwen3VLForConditionalGeneration.from_pretrained(str(folder), subfolder="text_encoder")
    state = text_encoder_to_comfy(encoder.state_dict(), "Qwen3VLForConditionalGeneration")
    save(state, models / "text_encoders" / FLUX3_FILES["text_encoder"])
    vae = AutoencoderKLFlux2.from_pretrained(str(folder), subfolder="vae")
    vae_state = {k: v for k, v in vae.state_dict().items() if not k.endswith("num_batches_tracked")}
    save(vae_from_diffusers("ldm", vae_state, dict(vae.config)), models / "vae" / FLUX3_FILES["vae"])
    return models
