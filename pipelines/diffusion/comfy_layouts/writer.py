"""The inverse of the loaders: a diffusers folder written out as the files a ComfyUI user has.

Lives here: `COMFY_FILES`, `write_comfy_files`, `write_config_folder`, `text_encoder_to_comfy`; run as
`python -m pipelines.diffusion.comfy_layouts.writer` to refresh the shipped tiny config folders. May import:
stdlib, torch, safetensors, diffusers, transformers, pipelines.paths, pipelines.diffusion,
pipelines.quant.gguf_files.

`write_comfy_files(folder, family, root)` writes `root/models/diffusion_models/`, `text_encoders/` and `vae/`
under the file names ComfyUI's templates ask for, in ComfyUI's tensor names: the transformer plainly (in the
folder's dtype, so a run matches the folder's picture), as `*_fp8_scaled.safetensors` and as a Q8_0 `.gguf`;
the text encoder as ComfyUI's repackaged LLM files are (`model.layers.*`, the vision tower as `visual.*`;
Mistral without its vision tower); the VAE in its original layout. Tests build tiny fixtures with it.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from pipelines.diffusion.comfy_layouts.keys import LAYOUTS, transformer_from_diffusers, vae_from_diffusers
from pipelines.diffusion.comfy_layouts.scaled_fp8 import scaled_fp8_state


@dataclass(frozen=True)
class ComfyFiles:
    """The file names a family's ComfyUI templates load (models/<folder>/<name>)."""

    transformer: str
    text_encoder: str
    vae: str
    vae_layout: str  # "ldm" | "wan"

    @property
    def transformer_fp8(self) -> str:
        return self.transformer.replace(".safetensors", "_fp8_scaled.safetensors")

    @property
    def transformer_gguf(self) -> str:
        return self.transformer.replace(".safetensors", "-Q8_0.gguf")


COMFY_FILES: dict[str, ComfyFiles] = {
    "zimage": ComfyFiles("z_image_turbo_bf16.safetensors", "qwen_3_4b.safetensors", "ae.safetensors", "ldm"),
    "qwenimage": ComfyFiles(
        "qwen_image_bf16.safetensors", "qwen_2.5_vl_7b.safetensors", "qwen_image_vae.safetensors", "wan"
    ),
    "flux2_klein": ComfyFiles(
        "flux-2-klein-4b.safetensors", "qwen_3_4b.safetensors", "flux2-vae.safetensors", "ldm"
    ),
    "flux2_dev": ComfyFiles(
        "flux2_dev.safetensors", "mistral_3_small_flux2_bf16.safetensors", "flux2-vae.safetensors", "ldm"
    ),
    "wan": ComfyFiles(
        "wan2.1_t2v_1.3B_bf16.safetensors",
        "umt5_xxl_fp16.safetensors",
        "wan_2.1_vae.safetensors",
        "wan",
    ),
    "qwenimage_edit": ComfyFiles(
        "qwen_image_edit_2509_bf16.safetensors",
        "qwen_2.5_vl_7b.safetensors",
        "qwen_image_vae.safetensors",
        "wan",
    ),
}


def _contiguous(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous() for k, v in state.items()}


def text_encoder_to_comfy(state: dict[str, torch.Tensor], class_name: str) -> dict[str, torch.Tensor]:
    """A transformers text encoder's state in the names of ComfyUI's text encoder files."""
    out: dict[str, torch.Tensor] = {}
    embed = next((t for n, t in state.items() if n.endswith("embed_tokens.weight")), None)
    for name, t in state.items():
        if name == "lm_head.weight" and embed is not None and t.data_ptr() == embed.data_ptr():
            continue  # tied to the embedding (tiny models): the loader ties it again
        if class_name == "UMT5EncoderModel":
            if name != "encoder.embed_tokens.weight":  # tied to shared.weight: stored once
                out[name] = t
        elif class_name in ("Qwen3Model",):
            out["model." + name] = t
        elif name.startswith("language_model."):  # Qwen3VLModel (Krea 2's): no `model.` level
            out["model." + name.removeprefix("language_model.")] = t
        elif name.startswith("model.language_model."):
            out["model." + name.removeprefix("model.language_model.")] = t
        elif name.startswith("model.visual."):
            out["visual." + name.removeprefix("model.visual.")] = t
        elif name.startswith(("model.vision_tower.", "model.multi_modal_projector.")):
            continue  # ComfyUI's Mistral file for FLUX.2 is the language model only
        else:
            out[name] = t
    return out


def write_comfy_files(folder: Path, family: str, root: Path) -> Path:
    """Write the diffusers `folder` of `family` as ComfyUI's files under `root/models/`; returns `root`."""
    from pipelines.diffusion.assembly import read_json
    from pipelines.diffusion.families import FAMILIES
    from pipelines.quant.gguf_files import write_gguf_denoiser

    fam = FAMILIES[family]
    names = COMFY_FILES[family]
    models = root / "models"
    for sub in ("diffusion_models", "text_encoders", "vae"):
        (models / sub).mkdir(parents=True, exist_ok=True)
    transformer = fam.denoiser_class.from_pretrained(str(folder), subfolder="transformer")
    comfy = _contiguous(transformer_from_diffusers(LAYOUTS[family], transformer.state_dict()))
    save_file(comfy, str(models / "diffusion_models" / names.transformer))
    save_file(scaled_fp8_state(comfy), str(models / "diffusion_models" / names.transformer_fp8))
    write_gguf_denoiser(comfy, models / "diffusion_models" / names.transformer_gguf, "Q8_0", arch=family)
    slot = fam.text_encoders[0]
    encoder_class = read_json(folder / slot.subfolder / "config.json").get("architectures", [""])[0]
    import transformers

    encoder = getattr(transformers, encoder_class).from_pretrained(str(folder), subfolder=slot.subfolder)
    state = text_encoder_to_comfy(encoder.state_dict(), encoder_class)
    save_file(_contiguous(state), str(models / "text_encoders" / names.text_encoder))
    vae = fam.vae_class.from_pretrained(str(folder), subfolder="vae")
    vae_state = {k: v for k, v in vae.state_dict().items() if not k.endswith("num_batches_tracked")}
    save_file(
        _contiguous(vae_from_diffusers(names.vae_layout, vae_state, dict(vae.config))),
        str(models / "vae" / names.vae),
    )
    return root


def write_config_folder(folder: Path, out: Path) -> Path:
    """The config-only copy of a diffusers `folder` (configs, tokenizer, model_index.json; no weights)."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(folder, out, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.gguf"))
    for path in out.rglob("*.json"):  # one stable form: sorted keys, so a rebuild diffs cleanly
        data = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def refresh_tiny_config_folders(work: Path) -> None:
    """Rebuild every shipped tiny config folder from its demo model (written under `work` first)."""
    from pipelines.diffusion.comfy_layouts.variants import TINY_SOURCES, VARIANTS
    from pipelines.diffusion.demo_models import save_demo_model

    for variant in VARIANTS:
        demo = TINY_SOURCES.get(variant.name)
        if demo is not None:
            write_config_folder(save_demo_model(demo, work / demo), variant.folder)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        refresh_tiny_config_folders(Path(tmp))
    print("refreshed", file=sys.stderr)
