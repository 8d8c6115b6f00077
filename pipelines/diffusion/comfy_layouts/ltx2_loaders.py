"""Loading ComfyUI's LTX-2 files: the one-file checkpoint and the Gemma 3 text encoder file.

Lives here: `load_ltx2_checkpoint` (CheckpointLoaderSimple), `load_ltx2_vae` (LTXVAudioVAELoader: the video VAE
with its sound track's decoder), `load_ltx2_text_encoder` (LTXAVTextEncoderLoader: Gemma from its file, the
connectors from the checkpoint), `is_checkpoint_file`, `claims_text_encoder`. May import: stdlib, torch, safetensors, diffusers,
transformers, memory, pipelines.diffusion, pipelines.quant.

Headers only at load: each component's names go through `ltx2` (fp8 "scaled" weights dequantized in the same
recipes, `scaled_fp8`), the transformer's shapes pick the shipped config folder (`variants`: the tiny demo's,
LTX-2.0 19B's) and every other component is checked against that folder's module. A plain checkpoint is
filled tensor by tensor (or its transformer streamed by blocks) by the memory manager. The checkpoint, the
audio VAE loader and the text encoder loader register the same ledger keys for the parts they share, so a
template's three loaders of one file hold each component once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from memory import ComponentSpec, MemoryManager, ModelHandle
from pipelines.diffusion.assembly import (
    LoadedModel,
    component_keys_for,
    denoiser_ref,
    resolve_precision,
    text_encoder_ref,
)
from pipelines.diffusion.comfy_layouts import ltx2
from pipelines.diffusion.comfy_layouts.common import (
    KeyMapTensors,
    config_of,
    converted_shapes,
    file_form,
    file_key_map,
    file_keys,
)
from pipelines.diffusion.comfy_layouts.text_encoders import ShippedTokenizerSource
from pipelines.diffusion.comfy_layouts.variants import (
    Variant,
    fits,
    folder_of,
    module_shapes,
    pick_variant,
    variants_for,
)
from pipelines.diffusion.families import FAMILIES, UnsupportedModelError, denoiser_stream_blocks
from pipelines.diffusion.lazy_load import KeyMap, Recipe, empty_module
from pipelines.diffusion.values import AudioDecoderRef, TextEncoderRef, VaeRef

_FAMILY = "ltx2"
# Parts of Gemma 3 a text prompt never runs: the file may leave them out (zeros stand in) or name them its own way.
_VISION = ("model.vision_tower.", "model.multi_modal_projector.")


def _fam() -> Any:
    return FAMILIES[_FAMILY]


def _key_map(path: Path, part: str, module_keys: list[str] | None = None) -> KeyMap:
    """One part's recipes over the checkpoint, through the shared reader (`common.file_key_map`: fp8 scales
    applied first, and any other stored form it learns to read)."""

    def convert(stubs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        keys = set(ltx2.part_keys(part, list(stubs)))
        return ltx2.part_to_diffusers(part, {k: v for k, v in stubs.items() if k in keys}, module_keys)

    return file_key_map(path, convert)


def _classes(folder: Path) -> dict[str, Callable[[dict[str, Any]], torch.nn.Module]]:
    """Each checkpoint part's diffusers class, built from a config (the vocoder's from model_index.json)."""
    from diffusers import AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, LTX2VideoTransformer3DModel
    from diffusers.pipelines.ltx2 import LTX2TextConnectors

    from pipelines.diffusion.ltx2_vae import _vocoder_class

    vocoder = _vocoder_class(folder).load()  # a ClassRef: the plan names it; building needs the class
    return {
        "transformer": LTX2VideoTransformer3DModel.from_config,
        "connectors": LTX2TextConnectors.from_config,
        "vae": AutoencoderKLLTX2Video.from_config,
        "audio_vae": AutoencoderKLLTX2Audio.from_config,
        "vocoder": vocoder.from_config,
    }


def _maker(folder: Path, part: str) -> Callable[[], torch.nn.Module]:
    config = config_of(Variant(str(folder), _FAMILY, ""), part)
    build = _classes(folder)[part]
    return lambda: build(config)


def _check_ltx2(path: Path) -> list[str]:
    keys = file_keys(path)
    if not ltx2.is_ltx2_checkpoint(keys):
        raise UnsupportedModelError(
            f"{path.name}: not an LTX-2 checkpoint (no model.diffusion_model.av_ca_* tensors)"
        )
    return keys


def _variant(path: Path, config_dir: Path | None) -> Variant:
    """The shipped config folder (or `config_dir`) whose transformer the checkpoint's fits."""
    shapes = converted_shapes(_key_map(path, "transformer"))
    return pick_variant(
        variants_for([_FAMILY], config_dir),
        shapes,
        lambda v: module_shapes(_maker(folder_of(v), "transformer")),
        what="checkpoint",
        file_name=path.name,
    )


def _register(
    mm: MemoryManager,
    path: Path,
    part: str,
    kind: str,
    folder: Path,
    dtype: torch.dtype,
    storage: str,
    blocks: tuple[str, ...] = (),
) -> ModelHandle:
    """One checkpoint part as a lazy handle, its names and shapes checked against the folder's module now."""
    from pipelines.diffusion.comfy_layouts.loaders import _register_source
    from pipelines.quant.split import register_built

    make = _maker(folder, part)
    module_keys = list(module_shapes(make)) if part == "vae" else None
    key_map = _key_map(path, part, module_keys)
    if storage:
        from pipelines.diffusion.lazy_load import CheckpointSource

        CheckpointSource(path, key_map).check(empty_module(make))
        return register_built(
            mm,
            origin=path,
            part=part,
            name=part,
            kind=kind,
            make=make,
            tensors=lambda: KeyMapTensors(path, key_map),
            dtype=dtype,
            storage=storage,
            source=str(path),
            blocks=blocks,
        )
    return _register_source(mm, path, part, kind, make, key_map, dtype, blocks)


def _vae(mm: MemoryManager, path: Path, folder: Path, dtype: torch.dtype, storage: str) -> VaeRef:
    from pipelines.diffusion.assembly import read_json

    fam = _fam()
    audio = AudioDecoderRef(
        vae=_register(mm, path, "audio_vae", "vae", folder, dtype, storage),
        vae_config=read_json(folder / "audio_vae" / "config.json"),
        vocoder=_register(mm, path, "vocoder", "vae", folder, dtype, storage),
        vocoder_config=read_json(folder / "vocoder" / "config.json"),
        dtype=dtype,
    )
    vae_config = read_json(folder / "vae" / "config.json")
    handle = _register(mm, path, "vae", "vae", folder, dtype, storage)
    return VaeRef(handle=handle, family=fam, config=vae_config, dtype=dtype, audio=audio)


def _no_gemma(mm: MemoryManager, path: Path, dtype: torch.dtype) -> ModelHandle:
    """The checkpoint's text encoder output: it holds the connectors, not Gemma, so using it says where Gemma is."""

    def refuse() -> torch.nn.Module:
        raise UnsupportedModelError(
            f"{path.name}: an LTX-2 checkpoint holds no Gemma 3 text encoder; load it with Load Text Encoder "
            f"Files (field 'path': the Gemma 3 file, field 'path_2': {path.name})"
        )

    keys = component_keys_for(path, "text_encoder", dtype)
    return mm.register(
        ComponentSpec(**keys.spec_fields(), name="text_encoder", kind="text_encoder", build=refuse)
    )


def load_ltx2_checkpoint(
    mm: MemoryManager, path: Path, *, dtype: str = "auto", config_dir: Path | None = None
) -> LoadedModel:
    """ComfyUI's LTX-2 checkpoint (CheckpointLoaderSimple): the transformer, and the video VAE with its sound
    track's decoder; the text encoder wire refuses when used (Gemma is its own file)."""
    _check_ltx2(path)
    fam = _fam()
    variant = _variant(path, config_dir)
    folder = folder_of(variant)
    torch_dtype, storage = resolve_precision(dtype, fam, mm.device)
    config = config_of(variant, "transformer")
    handle = _register(
        mm, path, "transformer", "denoiser", folder, torch_dtype, storage, denoiser_stream_blocks(fam, config)
    )
    tokenizer = ShippedTokenizerSource(folder, "tokenizer", fam.text_encoders[0].model_ref)
    return LoadedModel(
        denoiser=denoiser_ref(handle, fam, config, folder, torch_dtype),
        text_encoder=text_encoder_ref([_no_gemma(mm, path, torch_dtype)], [tokenizer], fam, torch_dtype),
        vae=_vae(mm, path, folder, torch_dtype, storage),
    )


def load_ltx2_vae(
    mm: MemoryManager, path: Path, *, dtype: str = "auto", config_dir: Path | None = None
) -> tuple[VaeRef, str]:
    """The checkpoint's video VAE with its audio VAE and vocoder (LTXVAudioVAELoader, or a Load VAE of it)."""
    _check_ltx2(path)
    variant = _variant(path, config_dir)
    torch_dtype, storage = resolve_precision(dtype, _fam(), mm.device)
    vae = _vae(mm, path, folder_of(variant), torch_dtype, storage)
    return (
        vae,
        f"{path.name}: LTX-2 video VAE, audio VAE and vocoder ({file_form(path)}), config: {variant.title}",
    )


def is_checkpoint_file(path: Path) -> bool:
    """Whether `path` is LTX-2's one-file checkpoint (a safetensors header read; other files: False).

    The format comes from the file's bytes, not its suffix: a pickle named `.safetensors` (or a damaged file)
    is for the single-file loader to refuse with its own message, never opened here."""
    from pipelines.weight_format import DamagedWeightsError, WeightFormat, sniff_weight_format

    try:
        if sniff_weight_format(path) is not WeightFormat.SAFETENSORS:
            return False
    except DamagedWeightsError:
        return False
    return ltx2.is_ltx2_checkpoint(file_keys(path))


def claims_text_encoder(paths: list[Path], family: str) -> bool:
    """Whether `load_ltx2_text_encoder` is the loader: any Gemma 3 file (with the LTX-2 checkpoint, or the missing
    checkpoint is reported)."""
    if family not in ("auto", _FAMILY) or not all(p.suffix.lower() == ".safetensors" for p in paths):
        return False
    return "gemma3" in [_kind(p) for p in paths]  # no other family here runs Gemma 3


def _kind(path: Path) -> str:
    keys = file_keys(path)
    return "checkpoint" if ltx2.is_ltx2_checkpoint(keys) else "gemma3" if ltx2.is_gemma3_file(keys) else ""


def _gemma_key_map(path: Path, wanted: dict[str, tuple[int, ...]]) -> tuple[KeyMap, bool]:
    """The Gemma file's key map in the module's names; its vision tower kept only where every name matches
    (a text prompt never runs it), else zeros: (key map, whether zeros stand in)."""
    raw = file_key_map(path, ltx2.gemma_to_diffusers)
    text = {k: r for k, r in raw.items() if not k.startswith(_VISION)}
    vision = {k: r for k, r in raw.items() if k.startswith(_VISION)}
    wanted_vision = {k: s for k, s in wanted.items() if k.startswith(_VISION)}
    if vision and {k: r.shape for k, r in vision.items()} == wanted_vision:
        return {**text, **vision}, False
    zeros = {k: Recipe((), ("const", torch.zeros(s)), s, torch.float32) for k, s in wanted_vision.items()}
    return {**text, **zeros}, True


@dataclass(frozen=True)
class FittedGemma:
    """A Gemma 3 file read at one variant's text-encoder size: its module factory and key map."""

    make: Callable[[], torch.nn.Module]
    key_map: KeyMap
    zeros: bool  # the file's vision tower did not fit: zeros stand in (text prompts only)


def fitted_gemma(gemma: Path, variant: Variant) -> FittedGemma | None:
    """The Gemma 3 file at `variant`'s text-encoder size; None when the file is another size."""
    from pipelines.quant.split import module_factory

    slot = _fam().text_encoders[0]
    make = module_factory(slot.model_class, folder_of(variant) / slot.subfolder)
    wanted = module_shapes(make)
    key_map, zeros = _gemma_key_map(gemma, wanted)
    if not fits(converted_shapes(key_map), wanted, optional=("lm_head.",)):
        return None
    return FittedGemma(make, key_map, zeros)


def register_gemma(
    mm: MemoryManager, gemma: Path, fitted: FittedGemma, dtype: torch.dtype, storage: str
) -> ModelHandle:
    """The Gemma 3 file's one ledger entry. LTX-2's text encoder and Load LLM (pipelines.llm.comfy_te) both
    register it here, so the two roles get the same key and share one copy."""
    from pipelines.quant.split import register_built

    slot = _fam().text_encoders[0]
    return register_built(
        mm,
        origin=gemma,
        part=slot.subfolder,
        name=slot.subfolder,
        kind="text_encoder",
        make=fitted.make,
        tensors=lambda: KeyMapTensors(gemma, fitted.key_map),
        dtype=dtype,
        storage=storage,
        source=str(gemma),
        blocks=slot.blocks,
    )


def load_ltx2_text_encoder(
    mm: MemoryManager, paths: list[Path], *, dtype: str = "auto", config_dir: Path | None = None
) -> tuple[TextEncoderRef, str]:
    """Gemma 3 from ComfyUI's file and the text connectors from the LTX-2 checkpoint (LTXAVTextEncoderLoader)."""
    kinds = {_kind(p): p for p in paths}
    if "checkpoint" not in kinds:
        raise UnsupportedModelError(
            f"{paths[0].name}: LTX-2's text encoder is Gemma 3 plus the checkpoint's text connectors; field "
            "'path_2': give the LTX-2 checkpoint"
        )
    if "gemma3" not in kinds:
        raise UnsupportedModelError(
            f"{kinds['checkpoint'].name}: field 'path': give the Gemma 3 text encoder file"
        )
    gemma, ckpt = kinds["gemma3"], kinds["checkpoint"]
    fam = _fam()
    variant = _variant(ckpt, config_dir)
    folder = folder_of(variant)
    fitted = fitted_gemma(gemma, variant)
    if fitted is None:
        raise UnsupportedModelError(
            f"{gemma.name}: a Gemma 3 file, but not the size {variant.title} takes (its text_encoder config); "
            "field 'config_dir': give the model's diffusers folder"
        )
    torch_dtype, storage = resolve_precision(dtype, fam, mm.device)
    gemma_handle = register_gemma(mm, gemma, fitted, torch_dtype, storage)
    zeros = fitted.zeros
    connectors = _register(mm, ckpt, "connectors", "text_encoder", folder, torch_dtype, storage)
    tokenizers = [
        ShippedTokenizerSource(folder, s.tokenizer_subfolder, s.model_ref) for s in fam.text_encoders
    ]
    message = (
        f"{gemma.name}: Gemma 3 ({file_form(gemma)}), text connectors from {ckpt.name}, config: {variant.title}"
        + (" (no vision tower read from the file: text prompts only)" if zeros else "")
    )
    return text_encoder_ref([gemma_handle, connectors], tokenizers, fam, torch_dtype), message
