"""FLUX.1 and SD3 / SD3.5 all-in-one checkpoints (ComfyUI's CheckpointLoaderSimple files), loaded offline.

Lives here: `FLOW_LAYOUTS`, `flow_layout`, `load_flow_single_file`, `transformer_key_map`. May import: stdlib, torch, safetensors, diffusers,
transformers, memory, pipelines.paths, pipelines.diffusion.*, pipelines.quant.layouts (FLUX.1's BFL table,
torch only), pipelines.quant.split (8-bit storage, imported when asked for).

Layout (ComfyUI comfy/supported_models.py `Flux` / `SD3`, comfy/model_base.py `state_dict_for_saving`): the
transformer in its release names under `model.diffusion_model.`, the text encoders in transformers' names
under `text_encoders.clip_l.transformer.` / `clip_g.transformer.` / `t5xxl.transformer.`, the VAE in the LDM
layout under `vae.` (FLUX.1) or `first_stage_model.` (SD3). Weights may be fp8 (`flux1-schnell-fp8`) or
ComfyUI's fp8 "scaled" form (`sd3.5_large_fp8_scaled`): dequantized per tensor (`scaled_fp8`, `comfy_quant`).

Every component's key map is traced from the header through a converter (`lazy_load.trace_conversion`):
diffusers' own for SD3's MMDiT, CLIP, T5 and the VAE; for FLUX.1 the size-aware BFL table
(`pipelines.quant.layouts`; diffusers' converter hard-codes FLUX.1's 3072 width, so it cannot read a tiny
model: tests/test_single_file_flow.py checks the two agree at that width). The manager then fills each module
one tensor at a time from the memory-mapped file, as the SD1.x / SDXL single files are (`single_file`).

As in ComfyUI (`SD3ClipModel`, `FluxClipModel`: `return_projected_pooled=False`) and diffusers'
`create_diffusers_clip_model_from_ldm`, CLIP-L's pooled output is not projected: SD3's CLIP-L slot gets an
identity `text_projection`, whatever the file holds there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from memory import ComponentSpec, MemoryManager
from pipelines.diffusion.assembly import (
    LoadedModel,
    assemble_model,
    component_keys_for,
    read_json,
    resolve_precision,
    vae_dtype,
)
from pipelines.diffusion.comfy_layouts.common import KeyMapTensors, file_keys
from pipelines.diffusion.comfy_layouts.scaled_fp8 import dequantize_stubs, is_scaled_fp8
from pipelines.diffusion.families import (
    CHECKPOINT_LAYOUTS,
    UnsupportedModelError,
    denoiser_stream_blocks,
    detect_single_file_family,
)
from pipelines.diffusion.lazy_load import (
    CheckpointSource,
    KeyMap,
    Recipe,
    align_key_map,
    empty_module,
    trace_conversion,
)
from pipelines.diffusion.single_file import CONFIG_DIRS, ClipTokenizerSource
from pipelines.diffusion.values import TokenizerSource

FLOW_LAYOUTS = ("flux1", "sd3")  # the `CHECKPOINT_LAYOUTS` ids this module loads
DENOISER_PREFIX = "model.diffusion_model."
VAE_PREFIXES = ("vae.", "first_stage_model.")  # FLUX.1's, SD3's (diffusers' LDM_VAE_KEYS reads both)


class T5TokenizerSource(TokenizerSource):
    """The config folder's T5 tokenizer; a checkpoint carries none, so say where to put one."""

    def load(self) -> Any:
        if not (self.path / self.subfolder).is_dir():
            raise FileNotFoundError(
                f"no T5 tokenizer in {self.path / self.subfolder}: a checkpoint file carries none. Field "
                f"'config_dir': give a config folder with {self.subfolder}/ (spiece.model or tokenizer.json), "
                "e.g. the model's diffusers folder without its weights"
            )
        return super().load()


def _trace(
    path: Path, convert: Callable[[dict[str, Any]], dict[str, Any]], prefixes: tuple[str, ...]
) -> KeyMap:
    """`convert` traced over the file's tensors under `prefixes`, fp8 "scaled" weights dequantized first."""
    scaled = is_scaled_fp8(file_keys(path))
    return trace_conversion(
        path, lambda stubs: convert(dequantize_stubs(stubs) if scaled else stubs), prefixes
    )


def transformer_key_map(path: Path, layout: str) -> KeyMap:
    """diffusers name -> recipe of the file's transformer (`layout`: "flux1" or "sd3")."""
    if layout == "flux1":
        from pipelines.quant.layouts import flux_bfl_to_diffusers

        def convert(stubs: dict[str, Any]) -> dict[str, Any]:
            return flux_bfl_to_diffusers({k.removeprefix(DENOISER_PREFIX): v for k, v in stubs.items()})

        return _trace(path, convert, (DENOISER_PREFIX,))
    from diffusers.loaders.single_file_utils import convert_sd3_transformer_checkpoint_to_diffusers

    return _trace(path, convert_sd3_transformer_checkpoint_to_diffusers, (DENOISER_PREFIX,))


def _clip_key_map(path: Path, prefix: str, module: torch.nn.Module, *, projected: bool) -> KeyMap:
    from diffusers.loaders.single_file_utils import convert_ldm_clip_checkpoint

    key_map = _trace(path, lambda sd: convert_ldm_clip_checkpoint(sd, prefix), (prefix,))
    if not hasattr(module, "text_model"):  # transformers >= 5.6 flattened CLIPTextModel
        key_map = {k.removeprefix("text_model."): r for k, r in key_map.items()}
    projection = getattr(module, "text_projection", None)
    if projection is not None and not projected:
        n = projection.weight.shape[0]
        key_map["text_projection.weight"] = Recipe((), ("const", torch.eye(n)), (n, n), torch.float32)
    return align_key_map(key_map, module, path)


def _t5_key_map(path: Path, prefix: str, module: torch.nn.Module) -> KeyMap:
    from diffusers.loaders.single_file_utils import convert_sd3_t5_checkpoint_to_diffusers

    key_map = _trace(path, convert_sd3_t5_checkpoint_to_diffusers, (prefix,))
    if "encoder.embed_tokens.weight" not in key_map and "shared.weight" in key_map:
        key_map["encoder.embed_tokens.weight"] = key_map["shared.weight"]  # tied: ComfyUI stores it once
    return align_key_map(key_map, module, path)


def _checked(path: Path, key_map: KeyMap, module: torch.nn.Module, what: str, folder: Path) -> None:
    try:
        CheckpointSource(path, key_map).check(module)
    except ValueError as exc:
        raise UnsupportedModelError(
            f"{path.name}: its {what} does not fit the config in {folder} ({exc}); field 'config_dir': give "
            "the model's own config folder (a diffusers folder without weights is enough)"
        ) from exc


def flow_layout(path: Path) -> str | None:
    """ "flux1" / "sd3" for a ComfyUI all-in-one `.safetensors` of those families (its header only), else None."""
    from pipelines.weight_format import WeightFormat, sniff_weight_format

    # A pickle named .safetensors is not read here: the checkpoint loader refuses it by its real format.
    if path.suffix.lower() != ".safetensors" or sniff_weight_format(path) is not WeightFormat.SAFETENSORS:
        return None
    try:
        keys = file_keys(path)
    except Exception:  # noqa: BLE001 (a damaged file: the checkpoint loader names what is wrong with it)
        return None
    if not any(k.startswith(DENOISER_PREFIX + b) for k in keys for b in ("joint_blocks.", "double_blocks.")):
        return None
    try:
        found = detect_single_file_family(keys)
    except UnsupportedModelError:  # FLUX.2, a lone transformer: the SD loader says what it is
        return None
    return found if found in FLOW_LAYOUTS else None


def load_flow_single_file(
    mm: MemoryManager,
    path: Path,
    layout: str,
    *,
    config_dir: Path | None = None,
    dtype: str = "auto",
) -> LoadedModel:
    """A FLUX.1 (`layout` "flux1") or SD3 / SD3.5 ("sd3") all-in-one `.safetensors` as lazy handles.

    `config_dir`: the architecture (default: the shipped folder). With the shipped FLUX.1 folder (dev), the
    file's guidance embedder decides dev or schnell.
    """
    from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

    explicit_config = config_dir is not None
    config_dir = config_dir or CONFIG_DIRS[layout]
    if not (config_dir / "model_index.json").is_file():
        raise UnsupportedModelError(
            f"{path.name}: {config_dir} is no diffusers config folder (no model_index.json)"
        )
    checkpoint = CHECKPOINT_LAYOUTS[layout]
    family = checkpoint.family
    torch_dtype, storage = resolve_precision(dtype, family, mm.device)
    sub = family.denoiser_subfolder
    config = read_json(config_dir / sub / "config.json")
    denoiser_map = transformer_key_map(path, layout)
    if layout == "flux1" and not explicit_config:  # schnell has no guidance embedder; dev has
        config = {
            **config,
            "guidance_embeds": any(k.startswith("time_text_embed.guidance_") for k in denoiser_map),
        }
    vae_config = read_json(config_dir / "vae" / "config.json")
    vdtype = vae_dtype(family, vae_config, torch_dtype)
    if not any(k.startswith(VAE_PREFIXES) for k in file_keys(path)):
        raise UnsupportedModelError(
            f"{path.name}: no VAE in the checkpoint (vae.* / first_stage_model.*); load the VAE from its own file"
        )

    def register(name: str, kind: str, key_map: KeyMap, make: Callable[[], torch.nn.Module], dt: torch.dtype,
                 blocks: tuple[str, ...] = ()) -> Any:  # fmt: skip
        _checked(path, key_map, empty_module(make), name.replace("_", " "), config_dir)
        if storage:  # fp8 / int8: built whole from the recipes, then kept in 8 bits
            from pipelines.quant.split import register_built

            return register_built(
                mm, origin=path, part=name, name=name, kind=kind, make=make,
                tensors=lambda: KeyMapTensors(path, key_map), dtype=dt, storage=storage, source=str(path),
                blocks=blocks,
            )  # fmt: skip
        source = CheckpointSource(path, key_map)
        return mm.register(
            ComponentSpec(
                **component_keys_for(path, name, dt, "").spec_fields(),
                name=name,
                kind=kind,
                build=lambda: empty_module(make),  # empty: the manager fills it from `source`
                dtype=dt,
                blocks=blocks,
                source=source,
            )
        )

    denoiser = register(
        sub,
        "denoiser",
        denoiser_map,
        lambda: family.denoiser_class.from_config(config),
        torch_dtype,
        denoiser_stream_blocks(family, config),
    )
    handles, tokenizers = [], []
    for i, (slot, prefix) in enumerate(
        zip(family.text_encoders, checkpoint.text_encoder_prefixes, strict=True)
    ):
        te_config = slot.model_class.config_class.from_pretrained(
            config_dir, subfolder=slot.subfolder, local_files_only=True
        )

        def make(cls: type = slot.model_class, c: Any = te_config) -> torch.nn.Module:
            return cls(c)

        module = empty_module(make)
        if prefix.endswith("t5xxl.transformer."):
            key_map = _t5_key_map(path, prefix, module)
            tokenizers.append(T5TokenizerSource(config_dir, slot.tokenizer_subfolder, slot.model_class))
        else:
            key_map = _clip_key_map(path, prefix, module, projected=i > 0)  # CLIP-G's projection is used
            tokenizers.append(ClipTokenizerSource(config_dir, slot.tokenizer_subfolder, slot.model_class))
        handles.append(register(slot.subfolder, "text_encoder", key_map, make, torch_dtype))
    vae_map = _trace(path, lambda sd: convert_ldm_vae_checkpoint(sd, vae_config), VAE_PREFIXES)
    vae = register("vae", "vae", vae_map, lambda: family.vae_class.from_config(vae_config), vdtype)
    return assemble_model(
        family,
        config_dir,
        denoiser=denoiser,
        denoiser_config=config,
        text_encoders=handles,
        tokenizers=tokenizers,
        vae=vae,
        vae_config=vae_config,
        dtype=torch_dtype,
        vae_dtype=vdtype,
    )
