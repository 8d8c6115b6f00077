"""Loading ComfyUI's files for the 2026 families: a transformer, a text encoder (an LLM or UMT5), a VAE.

Lives here: `denoiser_layout`, `text_encoder_kind`, `vae_layout`, `load_comfy_denoiser`,
`load_comfy_text_encoder`, `load_comfy_vae`, `ShippedTokenizerSource`. May import: stdlib, torch, safetensors,
diffusers, transformers, memory, pipelines.diffusion, pipelines.quant.

Each loader reads the header only, converts the names (`keys`, `scaled_fp8`) into a key map of recipes
(`lazy_load.trace_conversion` on header stubs), picks the config folder the shapes fit (`variants`) and
registers a lazy handle. A plain transformer file is registered with a `CheckpointSource`: the memory manager
fills it tensor by tensor, or streams its blocks from the file. With an 8-bit storage choice, a text encoder,
a VAE or a GGUF file, the handle is built by `meta_load.build_from_tensors`, which reads tensor by tensor from
the memory-mapped file as well (GGUF blocks stay quantized, `storage="gguf"`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from memory import ComponentSpec, MemoryManager
from pipelines.diffusion.assembly import (
    component_keys_for,
    denoiser_ref,
    read_json,
    resolve_precision,
    text_encoder_ref,
    vae_dtype,
    vae_ref,
)
from pipelines.diffusion.comfy_layouts.keys import (
    LAYOUTS,
    strip_prefix,
    transformer_to_diffusers,
    vae_to_diffusers,
)
from pipelines.diffusion.comfy_layouts.scaled_fp8 import dequantize_stubs, is_scaled_fp8
from pipelines.diffusion.comfy_layouts.variants import (
    Variant,
    fits,
    folder_of,
    module_shapes,
    pick_variant,
    variants_for,
)
from pipelines.diffusion.families import FAMILIES, Family, UnsupportedModelError, denoiser_stream_blocks
from pipelines.diffusion.lazy_load import (
    KeyMap,
    Recipe,
    _replay,
    empty_module,
    header_stubs,
    trace_conversion,
)
from pipelines.diffusion.values import DenoiserRef, TextEncoderRef, TokenizerSource, VaeRef


def _keys(path: Path) -> list[str]:
    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def denoiser_layout(keys: list[str]) -> tuple[str, str] | None:
    """(family, "comfy" | "diffusers") of a 2026-family transformer file from its names; None otherwise."""
    names = set(strip_prefix(dict.fromkeys(keys)))

    def has(prefix: str) -> bool:
        return any(k.startswith(prefix) for k in names)

    if has("noise_refiner.") and has("context_refiner."):
        return "zimage", "diffusers" if has("all_x_embedder.") else "comfy"
    if has("double_stream_modulation_img."):
        family = (
            "flux2_dev"
            if has("guidance_in.") or has("time_guidance_embed.guidance_embedder.")
            else "flux2_klein"
        )
        return family, "diffusers" if has("transformer_blocks.") else "comfy"
    if has("txt_norm.") and has("img_in.") and has("transformer_blocks."):
        return "qwenimage", "comfy"  # ComfyUI's Qwen-Image names are diffusers'
    if has("blocks.") and (has("head.modulation") or has("condition_embedder.")):
        return "wan", "diffusers" if has("condition_embedder.") else "comfy"
    return None


def _converted_shapes(key_map: Mapping[str, Recipe]) -> dict[str, tuple[int, ...]]:
    return {name: r.shape for name, r in key_map.items()}


class KeyMapTensors(Mapping[str, torch.Tensor]):
    """module name -> tensor, each read from the file and its recipe replayed when asked for."""

    def __init__(self, path: Path, key_map: KeyMap) -> None:
        self.path, self.key_map = path, key_map

    def __getitem__(self, name: str) -> torch.Tensor:
        recipe = self.key_map[name]
        with safe_open(str(self.path), framework="pt") as f:
            return _replay(recipe.node, {k: f.get_tensor(k) for k in recipe.keys})

    def __iter__(self) -> Iterator[str]:
        return iter(self.key_map)

    def __len__(self) -> int:
        return len(self.key_map)


def _file_key_map(path: Path, convert: Any) -> KeyMap:
    """The recipes of `convert` (ComfyUI names -> diffusers names) over the file, fp8 scales applied first."""
    scaled = is_scaled_fp8(_keys(path))
    return trace_conversion(path, lambda stubs: convert(dequantize_stubs(stubs) if scaled else stubs))


def _aligned(key_map: KeyMap, wanted: Mapping[str, tuple[int, ...]]) -> KeyMap:
    """The key map renamed to the module's names (prefixes stripped as `match_names` does), extras dropped."""
    from pipelines.quant.meta_load import match_names

    return {module: key_map[key] for key, module in match_names(key_map.keys(), wanted.keys()).items()}


def _config_of(variant: Variant, subfolder: str) -> dict[str, Any]:
    return read_json(folder_of(variant) / subfolder / "config.json")


def load_comfy_denoiser(
    mm: MemoryManager,
    path: Path,
    *,
    family: str = "auto",
    dtype: str = "auto",
    config_dir: Path | None = None,
    scheduler_config: dict[str, Any] | None = None,
) -> tuple[DenoiserRef, str]:
    """A Z-Image / Qwen-Image / FLUX.2 / Wan transformer file (`models/diffusion_models/`): bf16 or fp8-scaled
    `.safetensors` in ComfyUI's (or diffusers') names, or a `.gguf` kept quantized."""
    is_gguf = path.suffix.lower() == ".gguf"
    if is_gguf:
        from pipelines.quant.gguf_files import gguf_shapes

        keys = list(gguf_shapes(path))
    else:
        keys = _keys(path)
    found = denoiser_layout(keys)
    if found is None:
        raise UnsupportedModelError(f"{path.name}: not a Z-Image, Qwen-Image, FLUX.2 or Wan transformer")
    detected, names = found
    if family not in ("auto", detected):
        raise UnsupportedModelError(
            f"field 'family' says {FAMILIES[family].title}, but {path.name} is a {FAMILIES[detected].title} transformer"
        )
    fam = FAMILIES[detected]
    layout = LAYOUTS[detected] if names == "comfy" else "qwenimage"  # "qwenimage": names kept as they are

    def convert(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return transformer_to_diffusers(layout, state)

    if is_gguf:
        from pipelines.quant.gguf_files import gguf_tensors

        gguf_state = convert(gguf_tensors(path))
        shapes = {k: tuple(getattr(t, "quant_shape", t.shape)) for k, t in gguf_state.items()}
    else:
        key_map = _file_key_map(path, convert)
        shapes = _converted_shapes(key_map)

    def wanted(v: Variant) -> dict[str, tuple[int, ...]]:
        config = _config_of(v, fam.denoiser_subfolder)
        return module_shapes(lambda: fam.denoiser_class.from_config(config))

    variant = pick_variant(
        variants_for([detected], config_dir), shapes, wanted, what="transformer", file_name=path.name
    )
    folder = folder_of(variant)
    config = _config_of(variant, fam.denoiser_subfolder)
    torch_dtype, storage = resolve_precision(dtype, fam, mm.device)
    form = (
        "GGUF, kept quantized" if is_gguf else "fp8 scaled, dequantized" if is_scaled_fp8(keys) else "plain"
    )
    message = f"{path.name}: {fam.title} transformer ({names} names, {form}), config: {variant.title}"
    blocks = denoiser_stream_blocks(fam, config)

    def make() -> torch.nn.Module:
        return fam.denoiser_class.from_config(config)

    if is_gguf:
        gguf_state = _dequantize_non_linear(gguf_state, make)
    if is_gguf or storage:
        from pipelines.quant.split import register_built

        if is_gguf and storage:
            message += f" (dtype {storage} ignored: a GGUF keeps its own quantization)"
        tensors = (lambda: gguf_state) if is_gguf else (lambda: KeyMapTensors(path, key_map))
        handle = register_built(
            mm,
            origin=path,
            part=fam.denoiser_subfolder,
            name=fam.denoiser_subfolder,
            kind="denoiser",
            make=make,
            tensors=tensors,
            dtype=torch_dtype,
            storage="gguf" if is_gguf else storage,
            source=str(path),
            blocks=blocks,
        )
    else:
        handle = _register_source(
            mm, path, fam.denoiser_subfolder, "denoiser", make, key_map, torch_dtype, blocks
        )
    return denoiser_ref(handle, fam, config, folder, torch_dtype, scheduler_config), message


def _dequantize_non_linear(state: dict[str, torch.Tensor], make: Any) -> dict[str, torch.Tensor]:
    """Quantized tensors that are no Linear/Embedding weight (Z-Image's pad tokens) as plain floats: only
    those layers dequantize per call (`gguf_files.replace_gguf_linears`)."""
    from pipelines.quant.gguf_files import dequantize

    module = empty_module(make)
    layers = {
        f"{n}.weight" for n, m in module.named_modules() if type(m) in (torch.nn.Linear, torch.nn.Embedding)
    }
    return {
        k: dequantize(t, torch.float32) if hasattr(t, "quant_type") and k not in layers else t
        for k, t in state.items()
    }


def _register_source(
    mm: MemoryManager,
    path: Path,
    name: str,
    kind: str,
    make: Any,
    key_map: KeyMap,
    dtype: torch.dtype,
    blocks: tuple[str, ...],
) -> Any:
    """A handle the manager fills tensor by tensor from `path` (or streams by blocks), as single files are."""
    from pipelines.diffusion.lazy_load import CheckpointSource

    source = CheckpointSource(path, key_map)
    source.check(empty_module(make))  # names and shapes now, so a wrong file fails at load, not at run

    def build() -> torch.nn.Module:
        return empty_module(make)  # empty: the manager fills it from `source`

    return mm.register(
        ComponentSpec(
            **component_keys_for(path, name, dtype, "").spec_fields(),
            name=name,
            kind=kind,
            build=build,
            dtype=dtype,
            blocks=blocks,
            source=source,
        )
    )


# --- text encoders ------------------------------------------------------------------------------------

# Which families a text encoder kind serves (ComfyUI's CLIPLoader type: lumina2 / flux2 -> Qwen3,
# qwen_image -> Qwen2.5-VL, flux2 -> Mistral, wan -> UMT5).
TEXT_ENCODER_FAMILIES: dict[str, tuple[str, ...]] = {
    "qwen3": ("zimage", "flux2_klein"),
    "qwen2.5-vl": ("qwenimage",),
    "mistral": ("flux2_dev",),
    "umt5": ("wan",),
}
# Parts of a text encoder's module a file may leave out: Mistral's vision tower (FLUX.2 prompts are text).
_OPTIONAL = ("model.vision_tower.", "model.multi_modal_projector.")


def text_encoder_kind(keys: list[str]) -> str | None:
    """ "qwen3", "qwen2.5-vl", "mistral" or "umt5" from a text encoder file's names; None otherwise."""
    if any(k.startswith(("visual.", "model.visual.")) for k in keys):
        return "qwen2.5-vl"
    if any(".self_attn.q_norm." in k for k in keys):
        return "qwen3"
    if any("encoder.block.1.layer.0.SelfAttention.relative_attention_bias" in k for k in keys):
        return "umt5"  # T5 has the relative attention bias in block 0 only; UMT5 in every block
    if any(".self_attn.q_proj." in k for k in keys) and not any(".self_attn.q_proj.bias" in k for k in keys):
        return "mistral"  # Llama-shaped, no q/k/v biases (Qwen2 has them)
    return None


def _text_encoder_names(name: str, class_name: str) -> str:
    """A ComfyUI text encoder name in the module's names (VLMs nest the LLM under `model.language_model.`)."""
    if class_name in ("Qwen2_5_VLForConditionalGeneration", "Mistral3ForConditionalGeneration"):
        if name.startswith("visual."):
            return "model.visual." + name.removeprefix("visual.")
        if name.startswith("model.") and not name.startswith(
            ("model.language_model.", "model.visual.", "model.vision_tower.", "model.multi_modal_projector.")
        ):
            return "model.language_model." + name.removeprefix("model.")
    return name


class ShippedTokenizerSource(TokenizerSource):
    """The tokenizer of the config folder; a text encoder file carries none, so say where to put one."""

    def load(self) -> Any:
        if not (self.path / self.subfolder).is_dir():
            raise FileNotFoundError(
                f"no tokenizer in {self.path / self.subfolder}: a ComfyUI text encoder file carries none. Give "
                "field 'config_dir' a diffusers folder of the model (its tokenizer/ is enough)"
            )
        return super().load()


def load_comfy_text_encoder(
    mm: MemoryManager,
    path: Path,
    *,
    family: str = "auto",
    dtype: str = "auto",
    config_dir: Path | None = None,
) -> tuple[TextEncoderRef, str]:
    """A Qwen3 / Qwen2.5-VL / Mistral / UMT5 file (`models/text_encoders/`), bf16 or fp8-scaled."""
    from pipelines.quant.split import module_factory, register_built

    keys = _keys(path)
    kind = text_encoder_kind(keys)
    if kind is None:
        raise UnsupportedModelError(f"{path.name}: not a Qwen3, Qwen2.5-VL, Mistral or UMT5 text encoder")
    families = TEXT_ENCODER_FAMILIES[kind]
    if family != "auto":
        if family not in families:
            served = ", ".join(FAMILIES[f].title for f in families)
            raise UnsupportedModelError(
                f"field 'family' says {FAMILIES[family].title}, but {path.name} is a {kind} text encoder ({served})"
            )
        families = (family,)

    def class_of(v: Variant) -> type:
        return FAMILIES[v.family].text_encoders[0].model_class

    def wanted(v: Variant) -> dict[str, tuple[int, ...]]:
        slot = FAMILIES[v.family].text_encoders[0]
        return module_shapes(module_factory(slot.model_class, folder_of(v) / slot.subfolder))

    raw = trace_conversion(path, lambda s: dequantize_stubs(s) if is_scaled_fp8(list(s)) else dict(s))
    candidates = variants_for(families, config_dir)
    fitting = []
    for v in candidates:
        renamed = {_text_encoder_names(k, class_of(v).__name__): r for k, r in raw.items()}
        if fits(_converted_shapes(renamed), wanted(v), optional=_OPTIONAL):
            fitting.append(v)
    if not fitting:
        pick_variant(candidates, {}, wanted, what=f"{kind} text encoder", file_name=path.name)  # raises
    if len({v.family for v in fitting}) > 1:
        both = " and ".join(FAMILIES[v.family].title for v in fitting)
        raise UnsupportedModelError(
            f"{path.name}: this {kind} text encoder serves {both}; field 'family': pick one "
            f"({', '.join(v.family for v in fitting)})"
        )
    variant = fitting[0]
    fam = FAMILIES[variant.family]
    slot = fam.text_encoders[0]
    folder = folder_of(variant)
    make = module_factory(slot.model_class, folder / slot.subfolder)
    shapes = module_shapes(make)
    key_map = _aligned({_text_encoder_names(k, slot.model_class.__name__): r for k, r in raw.items()}, shapes)
    missing = [n for n in shapes if n not in key_map and n.startswith(_OPTIONAL)]
    for name in missing:  # left out of the file (never used for text prompts): zeros stand in
        key_map[name] = Recipe((), ("const", torch.zeros(shapes[name])), shapes[name], torch.float32)
    torch_dtype, storage = resolve_precision(dtype, fam, mm.device)
    handle = register_built(
        mm,
        origin=path,
        part=slot.subfolder,
        name=slot.subfolder,
        kind="text_encoder",
        make=make,
        tensors=lambda: KeyMapTensors(path, key_map),
        dtype=torch_dtype,
        storage=storage,
        source=str(path),
    )
    form = "fp8 scaled, dequantized" if is_scaled_fp8(keys) else "plain"
    message = f"{path.name}: {kind} text encoder for {fam.title} ({form}), config: {variant.title}"
    if missing:
        message += " (no vision tower in the file: text prompts only)"
    tokenizer = ShippedTokenizerSource(folder, slot.tokenizer_subfolder, slot.model_class)
    return text_encoder_ref([handle], [tokenizer], fam, torch_dtype), message


# --- VAEs ---------------------------------------------------------------------------------------------

# The families whose VAE a ComfyUI VAE file can be, per layout, in the order `auto` tries them.
VAE_FAMILIES = {"wan": ("wan", "qwenimage"), "flux2": ("flux2_klein", "flux2_dev"), "ldm": ("zimage",)}


def vae_layout(keys: list[str]) -> str | None:
    """ "wan" (Wan 2.1 / Qwen-Image, original names), "flux2" (LDM names with batch-norm statistics) or
    None (another VAE: the existing loader reads it)."""
    names = set(strip_prefix(dict.fromkeys(keys)))
    if any(k.startswith(("encoder.downsamples.", "decoder.upsamples.")) for k in names):
        return "wan"
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

    keys = _keys(path)
    layout = vae_layout(keys) or "ldm"
    families = VAE_FAMILIES[layout]
    if family != "auto":
        if layout != "ldm" and family not in families:
            raise UnsupportedModelError(
                f"field 'family' says {FAMILIES[family].title}, but {path.name} is a VAE of "
                + " / ".join(FAMILIES[f].title for f in families)
            )
        families = (family,)
    convert_layout = "wan" if layout == "wan" else "ldm"
    stub_shapes = {k: tuple(v.shape) for k, v in header_stubs(path).items()}

    def module_for(v: Variant) -> tuple[dict[str, Any], Family]:
        return _config_of(v, "vae"), FAMILIES[v.family]

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
    key_map = _aligned(key_map, want)
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
    return _config_of(v, "vae"), FAMILIES[v.family]


def _fitting_vae(
    path: Path, convert_layout: str, families: tuple[str, ...], config_dir: Path | None
) -> tuple[Variant, KeyMap] | None:
    """The first candidate config whose VAE the file fits, with the file's key map for it."""
    for v in variants_for(families, config_dir):
        config, fam = _vae_module(v)
        want = module_shapes(lambda c=config, f=fam: f.vae_class.from_config(c))
        try:
            key_map = trace_conversion(
                path, lambda s, c=config, w=want: vae_to_diffusers(convert_layout, s, c, list(w))
            )
        except (KeyError, IndexError, ValueError):
            continue  # another architecture's names: this converter cannot read them
        if fits(_converted_shapes(key_map), want):
            return v, key_map
    return None


# The families whose ComfyUI files these loaders read (the split loader nodes hand them over).
COMFY_FAMILIES = ("zimage", "qwenimage", "flux2_klein", "flux2_dev", "wan")


def claims_vae(path: Path, family: str, config_dir: Path | None = None) -> bool:
    """Whether `load_comfy_vae` is the loader for this VAE file: a Wan / FLUX.2 layout, a 2026 family chosen,
    or (on auto) an LDM-layout VAE whose shapes fit a shipped Z-Image config (Flux's own VAE stays Flux's)."""
    if path.suffix.lower() != ".safetensors":
        return False
    keys = _keys(path)
    if vae_layout(keys) is not None or family in COMFY_FAMILIES:
        return True
    if family != "auto" or config_dir is not None:
        return False
    try:
        load_fit = _fitting_vae(path, "ldm", VAE_FAMILIES["ldm"], None)
    except (KeyError, IndexError, ValueError):
        return False
    return load_fit is not None
