"""The config folders shipped for ComfyUI-layout files, and which one a file's tensor shapes fit.

Lives here: `Variant`, `VARIANTS`, `variants_for`, `module_shapes`, `fits`, `pick_variant`. May import:
stdlib, torch, accelerate, diffusers, transformers, pipelines.paths, pipelines.diffusion.families,
pipelines.quant.meta_load.

A ComfyUI file has weights only; its family comes from its tensor names, and its size (the config: layers,
widths, heads, rotary axes) from which shipped config folder its shapes fit. Each folder under
`resources/configs/` is a config-only diffusers folder (model_index.json, configs, and the tokenizer where
one can be shipped), as SD1.x's are. ComfyUI itself does the same from a list of known models
(comfy/supported_models.py), with sizes hard-coded per model. Matching builds the candidate's module on the
meta device (no memory) and compares every tensor name and shape with the file's, converted to diffusers
names; the first folder that fits wins. The tiny folders are the demo models' own configs and tokenizers
(`demo:tiny-zimage` and the others, written by `writer.write_config_folder`), so tiny fixtures in ComfyUI's
layout load as real files do. The released sizes' folders (`released`) carry configs only, no tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from pipelines.diffusion.families import FAMILIES, UnsupportedModelError
from pipelines.paths import RESOURCES_DIR


@dataclass(frozen=True)
class Variant:
    name: str  # the folder's name under resources/configs/
    family: str  # a FAMILIES id
    title: str

    @property
    def folder(self) -> Path:
        return RESOURCES_DIR / "configs" / self.name


# Tried in this order. A fit is exact (every name and shape), so at most one size of a family fits and the
# order only decides speed: the tiny folders build in milliseconds, a released size on meta in seconds.
VARIANTS: tuple[Variant, ...] = (
    Variant("zimage-tiny", "zimage", "Z-Image (tiny demo)"),
    Variant("qwenimage-tiny", "qwenimage", "Qwen-Image (tiny demo)"),
    Variant("flux2-klein-tiny", "flux2_klein", "FLUX.2 [klein] (tiny demo)"),
    Variant("flux2-dev-tiny", "flux2_dev", "FLUX.2 [dev] (tiny demo)"),
    Variant("wan-tiny", "wan", "Wan 2.1 (tiny demo)"),
    Variant("qwenimage21-tiny", "qwenimage21", "Qwen-Image 2.1 (tiny demo)"),
    Variant("qwenimage21-turbo-tiny", "qwenimage21", "Qwen-Image 2.1 Turbo (tiny demo)"),
    Variant("zimage-turbo", "zimage", "Z-Image-Turbo (6B)"),
    Variant("qwen-image", "qwenimage", "Qwen-Image (20B)"),
    Variant("wan2.1-t2v-1.3b", "wan", "Wan 2.1 T2V 1.3B"),
    Variant("wan2.1-t2v-14b", "wan", "Wan 2.1 T2V 14B / a Wan 2.2 A14B expert"),
    Variant("wan22-i2v-tiny", "wan", "Wan 2.2 I2V (tiny demo)"),
    Variant("wan22-ti2v-tiny", "wan", "Wan 2.2 TI2V (tiny demo)"),
    Variant("wan2.2-i2v-a14b", "wan", "a Wan 2.2 I2V A14B expert"),
    Variant("wan-i2v-tiny", "wan", "Wan 2.1 I2V (tiny demo)"),
    Variant("wan2.1-i2v-14b", "wan", "Wan 2.1 I2V 14B (CLIP ViT-H/14 image encoder)"),
    Variant("wan-flf2v-tiny", "wan", "Wan 2.1 FLF2V (tiny demo)"),
    Variant("wan2.1-flf2v-14b", "wan", "Wan 2.1 FLF2V 14B 720P (first and last frames)"),
    # Qwen-Image-Edit 2509's tiny demo (its processor/ too). No released size: 2509 and 2511 differ only in a
    # config flag (zero_cond_t) no tensor shows, so a real edit file takes its own folder as field 'config_dir'.
    Variant("qwenimage-edit-tiny", "qwenimage_edit", "Qwen-Image-Edit 2509 (tiny demo)"),
    Variant("qwen-image-2.1", "qwenimage21", "Qwen-Image 2.1 (8B)"),
    Variant("qwen-image-2.1-turbo", "qwenimage21", "Qwen-Image 2.1 Turbo (8B)"),
    Variant("ltx2-tiny", "ltx2", "LTX-2 (tiny demo)"),
    Variant("ltx-2-19b", "ltx2", "LTX-2.0 19B"),
    Variant("krea2-tiny", "krea2", "Krea 2 (tiny demo)"),
    Variant("krea2-turbo-tiny", "krea2", "Krea 2 Turbo (tiny demo)"),
    Variant("krea-2", "krea2", "Krea 2 (released size)"),
    Variant("krea-2-turbo", "krea2", "Krea 2 Turbo (released size)"),
    Variant("flux3-tiny", "flux3", "FLUX.3 (tiny demo)"),
    Variant("minimax-tiny", "minimax", "MiniMax H3 (tiny demo)"),  # comfy_layouts.minimax_load writes both
    Variant("minimax-h3", "minimax", "MiniMax H3 (33B fl2va, Qwen3-VL-32B to layer 50)"),
)

# The demo model each tiny folder is made from (`writer.write_config_folder`).
TINY_SOURCES = {
    "zimage-tiny": "tiny-zimage",
    "qwenimage-tiny": "tiny-qwenimage",
    "flux2-klein-tiny": "tiny-flux2-klein",
    "flux2-dev-tiny": "tiny-flux2-dev",
    "wan-tiny": "tiny-wan",
    "wan22-i2v-tiny": "tiny-wan22-i2v",
    "wan22-ti2v-tiny": "tiny-wan22-ti2v",
    "wan-i2v-tiny": "tiny-wan-i2v",
    "wan-flf2v-tiny": "tiny-wan-flf2v",
    "qwenimage-edit-tiny": "tiny-qwenimage-edit",
    "qwenimage21-tiny": "tiny-qwenimage21",
    "qwenimage21-turbo-tiny": "tiny-qwenimage21-turbo",
    "ltx2-tiny": "tiny-ltx2",
    "krea2-tiny": "tiny-krea2",
    "krea2-turbo-tiny": "tiny-krea2-turbo",
    "flux3-tiny": "tiny-flux3",
}


def variants_for(families: Iterable[str], config_dir: Path | None = None) -> list[Variant]:
    """The candidates for these families, present on disk; a given `config_dir` is the only candidate."""
    families = list(families)
    if config_dir is not None:
        return [Variant(str(config_dir), families[0], f"the config folder {config_dir}")]
    return [v for v in VARIANTS if v.family in families and (v.folder / "model_index.json").is_file()]


def folder_of(variant: Variant) -> Path:
    return Path(variant.name) if Path(variant.name).is_absolute() else variant.folder


def module_shapes(make: Callable[[], torch.nn.Module]) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every loadable tensor of `make()`, built on the meta device."""
    from accelerate import init_empty_weights
    from transformers.initialization import no_init_weights

    # No weight init: on the meta device it only costs time (~1 s for a tiny Qwen3-VL's 3.7k `normal_` calls).
    with init_empty_weights(include_buffers=False), no_init_weights():
        module = make()
    persistent = {
        f"{prefix}.{name}" if prefix else name
        for prefix, m in module.named_modules()
        for name in m._buffers
        if name not in m._non_persistent_buffers_set
    }
    shapes = {n: tuple(p.shape) for n, p in module.named_parameters(remove_duplicate=False)}
    shapes.update({n: tuple(b.shape) for n, b in module.named_buffers() if n in persistent})
    return shapes


def fits(
    file_shapes: Mapping[str, tuple[int, ...]],
    wanted: Mapping[str, tuple[int, ...]],
    *,
    optional: tuple[str, ...] = (),
    extras: tuple[str, ...] = ("lm_head.",),
) -> bool:
    """Whether the file (diffusers names) has every wanted tensor at its shape and nothing else (names under
    `optional` may be missing; names under `extras`, like an LLM's `lm_head`, may be left over)."""
    from pipelines.quant.meta_load import match_names

    names = match_names(file_shapes.keys(), wanted.keys())
    if any(k not in names and not k.startswith(extras) for k in file_shapes):
        return False  # e.g. more layers than this config has
    by_module = {m: f for f, m in names.items()}
    for name, shape in wanted.items():
        key = by_module.get(name)
        if key is None:
            if name.startswith(optional) or name.endswith("num_batches_tracked"):
                continue
            return False
        if tuple(file_shapes[key]) != tuple(shape):
            return False
    return True


def pick_variant(
    candidates: list[Variant],
    file_shapes: Mapping[str, tuple[int, ...]],
    wanted_for: Callable[[Variant], Mapping[str, tuple[int, ...]]],
    *,
    what: str,
    file_name: str,
    optional: tuple[str, ...] = (),
) -> Variant:
    """The first candidate whose module `file_shapes` fits; raises naming the file and the sizes tried."""
    for variant in candidates:
        if fits(file_shapes, wanted_for(variant), optional=optional):
            return variant
    tried = ", ".join(v.title for v in candidates) or "none shipped"
    families = sorted({FAMILIES[v.family].title for v in candidates})
    raise UnsupportedModelError(
        f"{file_name}: a {' / '.join(families) or 'known'} {what}, but of no size Nodeloom ships a config for "
        f"(tried: {tried}); field 'config_dir': give the model's diffusers folder (configs only are enough)"
    )
