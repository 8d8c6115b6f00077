"""Test support for ComfyUI's Wan templates: a ComfyUI root holding a tiny Wan demo model under the file names a
template asks for, and the template run with the CLI.

Lives here: `TEMPLATE_FILES`, `wan_template_root`, `template_path`, `run_template`. May import: stdlib, shutil,
safetensors, diffusers, PIL, app.main, pipelines.diffusion, benchmarks.comfy_templates, tests.comfy_layout_support.

The transformer (both experts of a Wan 2.2 A14B demo folder) is written in ComfyUI's tensor names (`transformer` as the
high-noise file, `transformer_2` as the low-noise one), in the folder's float32, so a run on them can equal
the folder's own two-expert run. The text encoder and VAE come from `write_comfy_files`, renamed; a CLIP vision encoder (Wan 2.1 I2V) is
its transformers state. The files
carry the template's names only: the loaders read what a file is from its tensors (a plain file named
`*_fp8_scaled` loads as plain).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from PIL import Image
from safetensors.torch import save_file

from tests.comfy_layout_support import run_graph

# Template -> (diffusers folder part -> the file name in models/<folder>/), and the start image's name.
TEMPLATE_FILES: dict[str, dict[str, str]] = {
    "video_wan2_2_14B_i2v": {
        "transformer": "wan2.2_i2v_high_noise_14B_fp8_scaled.safetensors",
        "transformer_2": "wan2.2_i2v_low_noise_14B_fp8_scaled.safetensors",
        "text_encoder": "umt5_xxl_fp8_e4m3fn_scaled.safetensors",
        "vae": "wan_2.1_vae.safetensors",
        "image": "video_wan2_2_14B_i2v_input_image.jpg",
    },
    "image_to_video_wan": {
        "transformer": "wan2.1_i2v_480p_14B_fp16.safetensors",
        "text_encoder": "umt5_xxl_fp8_e4m3fn_scaled.safetensors",
        "vae": "wan_2.1_vae.safetensors",
        "clip_vision": "clip_vision_h.safetensors",
        "image": "image_to_video_wan_start_image.png",
    },
    "wan2.1_flf2v_720_f16": {
        "transformer": "wan2.1_flf2v_720p_14B_fp16.safetensors",
        "text_encoder": "umt5_xxl_fp8_e4m3fn_scaled.safetensors",
        "vae": "wan_2.1_vae.safetensors",
        "clip_vision": "clip_vision_h.safetensors",
        "image": "wan2.1_flf2v_720_f16_start_image.png",
    },
    "text_to_video_wan": {
        "transformer": "wan2.1_t2v_1.3B_fp16.safetensors",
        "text_encoder": "umt5_xxl_fp8_e4m3fn_scaled.safetensors",
        "vae": "wan_2.1_vae.safetensors",
    },
    "video_wan2_2_14B_t2v": {
        "transformer": "wan2.2_t2v_high_noise_14B_fp8_scaled.safetensors",
        "transformer_2": "wan2.2_t2v_low_noise_14B_fp8_scaled.safetensors",
        "text_encoder": "umt5_xxl_fp8_e4m3fn_scaled.safetensors",
        "vae": "wan_2.1_vae.safetensors",
    },
}


def template_path(name: str) -> Path:
    from benchmarks.comfy_templates import templates_folder

    return templates_folder() / f"{name}.json"


def wan_template_root(folder: Path, template: str, root: Path, image: Path | None = None) -> Path:
    """A ComfyUI root (models/ and input/) with the demo `folder`'s weights under `template`'s file names."""
    import torch
    from diffusers import WanTransformer3DModel

    from pipelines.diffusion.comfy_layouts.keys import LAYOUTS, transformer_from_diffusers
    from pipelines.diffusion.comfy_layouts.writer import COMFY_FILES, write_comfy_files

    names = TEMPLATE_FILES[template]
    staging = write_comfy_files(folder, "wan", root / "staging")
    models = root / "models"
    for sub in ("diffusion_models", "text_encoders", "vae"):
        (models / sub).mkdir(parents=True, exist_ok=True)
    for part in (p for p in ("transformer", "transformer_2") if p in names):
        expert = WanTransformer3DModel.from_pretrained(str(folder), subfolder=part, dtype=torch.float32)
        state = transformer_from_diffusers(LAYOUTS["wan"], expert.state_dict())
        save_file(
            {k: v.contiguous() for k, v in state.items()}, str(models / "diffusion_models" / names[part])
        )
    if "clip_vision" in names:  # Wan 2.1 I2V's image encoder, in transformers' names as ComfyUI's file is
        from transformers import CLIPVisionModel

        encoder = CLIPVisionModel.from_pretrained(str(folder), subfolder="image_encoder")
        (models / "clip_vision").mkdir(exist_ok=True)
        state = {f"vision_model.{k}": v.contiguous() for k, v in encoder.state_dict().items()}
        save_file(state, str(models / "clip_vision" / names["clip_vision"]))
    written = COMFY_FILES["wan"]
    shutil.copy(
        staging / "models/text_encoders" / written.text_encoder,
        models / "text_encoders" / names["text_encoder"],
    )
    shutil.copy(staging / "models/vae" / written.vae, models / "vae" / names["vae"])
    shutil.rmtree(staging)
    if image is not None and "image" in names:
        (root / "input").mkdir(exist_ok=True)
        Image.open(image).convert("RGB").save(root / "input" / names["image"], quality=95)
    return root


def run_template(
    template: str, root: Path, out: Path, sets: dict, extra: tuple[str, ...] = ()
) -> list[np.ndarray]:
    """The published template run by the CLI against `root` (its models and input folders); PNG frames."""
    return run_graph(template_path(template), out, sets, ("--models-dir", str(root), *extra))
