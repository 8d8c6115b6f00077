"""ComfyUI's VAE files (`models/vae/`) for the 2026 families: Wan 2.1 / Qwen-Image (original Wan names),
FLUX.2 (LDM names plus batch-norm statistics), Z-Image (Flux's LDM-layout `ae.safetensors`).

Lives here: `VAE_FAMILIES`, `COMFY_FAMILIES`, `vae_layout`, `claims_vae`, `load_comfy_vae`. May import: stdlib,
torch, diffusers, memory, pipelines.diffusion, pipelines.quant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory import MemoryManager
from pipelines.diffusion.assembly import resolve_precision, vae_dtype, vae_ref
from pipelines.diffusion.comfy_layouts.common import (
    KeyMapTensors,
    aligned,
    config_of,
    converted_shapes,
    file_keys,
)
from pipelines.diffusion.comfy_layouts.keys import strip_prefix, vae_to_diffusers
from pipelines.diffusion.comfy_layouts.variants import (
    Variant,
    fits,
    module_shapes,
    pick_variant,
    variants_for,
)
from pipelines.diffusion.families import FAMILIES, Family, UnsupportedModelError
from pipelines.diffusion.lazy_load import KeyMap, header_stubs, trace_conversion
from pipelines.diffusion.values import VaeRef

# --- VAEs ---------------------------------------------------------------------------------------------

# The families whose VAE a ComfyUI VAE file can be, per layout, in the order `auto` tries them.
VAE_FAMILIES = {
    "wan": ("wan", "qwenimage", "qwenimage_edit", "krea2"),
    "flux2": ("flux2_klein", "flux2_dev", "flux3"),
    "ldm": ("zimage",),
    "diffusers": ("qwenimage21",),
}


def vae_layout(keys: list[str]) -> str | None:
    """ "wan" (Wan 2.1 / Qwen-Image, original names), "flux2" (LDM names with batch-norm statistics) or
    None (another VAE: the existing loader reads it)."""
    names = set(strip_prefix(dict.fromkeys(keys)))
    if any(k.startswith(("encoder.downsamples.", "decoder.upsamples.")) for k in names):
        return "wan"
    if any(k.startswith("decoder.up_blocks.") and ".upsampler.resample." in k for k in names) and (
        "decoder.norm_out.gamma" in names
    ):
        return "diffusers"  # Qwen-Image 2.1's VAE (Wan 2.2's block shape) in diffusers' names
    if "bn.running_mean" in names and any(k.startswith(("encoder.down.", "decoder.up.")) for k in names):
        return "flux2"
    return None


def load_comfy_vae(
    mm: MemoryManager,
    path: Path,
    *,
    family: str = "auto",
    dtype: str = "auto",
    config_dir: Path | None = None,
) -> tuple[VaeRef, str]:
    """A Wan 2.1 / Qwen-Image / FLUX.2 / Z-Image VAE file (`models/vae/`) in ComfyUI's names."""
    from pipelines.quant.split import register_built

    keys = file_keys(path)
    layout = vae_layout(keys) or "ldm"
    families = VAE_FAMILIES[layout]
    if family != "auto":
        if layout != "ldm" and family not in families:
            raise UnsupportedModelError(
                f"field 'family' says {FAMILIES[family].title}, but {path.name} is a VAE of "
                + " / ".join(FAMILIES[f].title for f in families)
            )
        families = (family,)
    convert_layout = layout if layout in ("wan", "diffusers") else "ldm"
    stub_shapes = {k: tuple(v.shape) for k, v in header_stubs(path).items()}

    def module_for(v: Variant) -> tuple[dict[str, Any], Family]:
        return config_of(v, "vae"), FAMILIES[v.family]

    def wanted(v: Variant) -> dict[str, tuple[int, ...]]:
        config, fam = module_for(v)
        return module_shapes(lambda: fam.vae_class.from_config(config))

    fitting = _fitting_vae(path, convert_layout, families, config_dir)
    if fitting is None:
        pick_variant(variants_for(families, config_dir), stub_shapes, wanted, what="VAE", file_name=path.name)
        raise AssertionError("unreachable: pick_variant raises when nothing fits")
    variant, key_map = fitting
    config, fam = module_for(variant)
    torch_dtype, storage = resolve_precision(dtype, fam, mm.device)
    torch_dtype = vae_dtype(fam, config, torch_dtype)
    want = wanted(variant)
    key_map = aligned(key_map, want)
    handle = register_built(
        mm,
        origin=path,
        part="vae",
        name="vae",
        kind="vae",
        make=lambda: fam.vae_class.from_config(config),
        tensors=lambda: KeyMapTensors(path, key_map),
        dtype=torch_dtype,
        storage=storage,
        source=str(path),
    )
    return vae_ref(handle, fam, config, torch_dtype), f"{path.name}: {fam.title} VAE, config: {variant.title}"


def _vae_module(v: Variant) -> tuple[dict[str, Any], Family]:
    return config_of(v, "vae"), FAMILIES[v.family]


def _fitting_vae(
    path: Path,
    convert_layout: str,
    families: tuple[str, ...],
    config_dir: Path | None,
    only: Variant | None = None,
) -> tuple[Variant, KeyMap] | None:
    """The first candidate config (or `only`) whose VAE the file fits, with the file's key map for it."""
    for v in [only] if only is not None else variants_for(families, config_dir):
        config, fam = _vae_module(v)
        want = module_shapes(lambda c=config, f=fam: f.vae_class.from_config(c))
        try:
            key_map = trace_conversion(
                path, lambda s, c=config, w=want: vae_to_diffusers(convert_layout, s, c, list(w))
            )
        except (KeyError, IndexError, ValueError):
            continue  # another architecture's names: this converter cannot read them
        if fits(converted_shapes(key_map), want):
            return v, key_map
    return None


# The families whose ComfyUI files these loaders read (the split loader nodes hand them over).
COMFY_FAMILIES = (
    "zimage",
    "qwenimage",
    "flux2_klein",
    "flux2_dev",
    "wan",
    "qwenimage_edit",
    "qwenimage21",
    "krea2",
    "flux3",
)


def claims_vae(path: Path, family: str, config_dir: Path | None = None) -> bool:
    """Whether `load_comfy_vae` is the loader for this VAE file: a Wan / FLUX.2 layout, a 2026 family chosen,
    or (on auto) an LDM-layout VAE whose shapes fit a shipped Z-Image config other than FLUX.1's own VAE (a
    FLUX.1 `ae.safetensors` stays with the Flux loader, whose config it is)."""
    if path.suffix.lower() != ".safetensors":
        return False
    keys = file_keys(path)
    if vae_layout(keys) is not None or family in COMFY_FAMILIES:
        return True
    if family != "auto" or config_dir is not None:
        return False
    flux_vae = config_of(Variant("flux", "flux", "FLUX.1"), "vae")
    own = [v for v in variants_for(VAE_FAMILIES["ldm"]) if config_of(v, "vae") != flux_vae]
    for v in own:
        try:
            if _fitting_vae(path, "ldm", (v.family,), None, only=v) is not None:
                return True
        except (KeyError, IndexError, ValueError):
            continue
    return False
