"""Separate component files, the way users store them: a transformer/UNet file, text encoder files, a VAE.

Lives here: `load_denoiser_file`, `load_text_encoder_files`, `load_vae_file`, `SPLIT_CONFIG_DIRS`,
`T5TokenizerSource`. May import: stdlib, torch, diffusers, transformers, memory, pipelines.paths,
pipelines.diffusion, pipelines.quant.

Each function reads only headers now (names and shapes: what the file is), registers a lazy handle whose
builder fills a meta-device module tensor by tensor (`meta_load.build_from_tensors`), and returns the same
reference types a diffusers folder gives, plus a sentence saying what was detected. Architectures come from a
config-only diffusers folder: the one given, else the one shipped in `resources/configs/<family>/`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from memory import MemoryManager
from pipelines.diffusion.assembly import (
    denoiser_ref,
    read_json,
    resolve_precision,
    text_encoder_ref,
    vae_dtype,
    vae_ref,
)
from pipelines.diffusion.families import (
    FAMILIES,
    Family,
    UnsupportedModelError,
    denoiser_stream_blocks,
)
from pipelines.diffusion.family_detect import family_from_text_encoders
from pipelines.diffusion.single_file import ClipTokenizerSource
from pipelines.diffusion.values import DenoiserRef, TextEncoderRef, TokenizerSource, VaeRef
from pipelines.paths import RESOURCES_DIR, check_weights_format
from pipelines.quant.detect import clip_width, detect_denoiser, detect_text_encoder, detect_vae
from pipelines.quant.layouts import flux_bfl_to_diffusers, flux_config_from_shapes
from pipelines.quant.split import module_factory, register_built
from pipelines.quant.tensor_files import SafetensorsTensors

# The config-only folders shipped per family (the registry's `Family.config_folder`).
SPLIT_CONFIG_DIRS: dict[str, Path] = {
    f.name: RESOURCES_DIR / "configs" / f.config_folder for f in FAMILIES.values() if f.config_folder
}


class T5TokenizerSource(TokenizerSource):
    """A T5 tokenizer from the config folder, with a message saying where to put one when it is missing."""

    def load(self) -> Any:
        if not (self.path / self.subfolder).is_dir():
            raise FileNotFoundError(
                f"no T5 tokenizer in {self.path / self.subfolder}: a T5 file carries none. Give a config folder "
                f"with {self.subfolder}/ (spiece.model or tokenizer.json), e.g. the model's diffusers folder"
            )
        return super().load()


def _config_dir(family: str, config_dir: Path | None) -> Path:
    if config_dir is not None:
        return config_dir
    if family not in SPLIT_CONFIG_DIRS:
        raise UnsupportedModelError(
            f"no config folder is shipped for {FAMILIES[family].title}; field 'config_dir': give a "
            "diffusers folder of the model (configs only are enough)"
        )
    return SPLIT_CONFIG_DIRS[family]


def _family(choice: str, detected: str, what: str) -> Family:
    # A VAE's shapes don't tell its family (SD and SDXL VAEs are the same shape): the user's choice wins.
    if choice not in ("auto", detected) and what != "VAE":
        raise UnsupportedModelError(
            f"field 'family' says {FAMILIES[choice].title}, but the {what} file is {FAMILIES[detected].title}"
        )
    return FAMILIES[detected if choice == "auto" else choice]


def _resolve(dtype: str, family: Family, mm: MemoryManager) -> tuple[torch.dtype, str]:
    return resolve_precision(dtype, family, mm.device)


def _ldm_unet(tensors: Mapping[str, torch.Tensor], config: dict[str, Any]) -> dict[str, torch.Tensor]:
    from diffusers.loaders.single_file_utils import convert_ldm_unet_checkpoint

    return convert_ldm_unet_checkpoint({f"model.diffusion_model.{k}": tensors[k] for k in tensors}, config)


def _ldm_vae(tensors: Mapping[str, torch.Tensor], config: dict[str, Any]) -> dict[str, torch.Tensor]:
    from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

    return convert_ldm_vae_checkpoint({k: tensors[k] for k in tensors}, config)


def load_denoiser_file(
    mm: MemoryManager,
    path: Path,
    *,
    family: str = "auto",
    dtype: str = "auto",
    config_dir: Path | None = None,
    allow_pickle: bool = False,
    scheduler_config: dict[str, Any] | None = None,
) -> tuple[DenoiserRef, str]:
    """A transformer-only or UNet-only `.safetensors` (diffusers or the release's layout, any float/fp8 dtype)
    or `.gguf` file. Returns the reference and what was detected."""
    check_weights_format(path, allow_pickle=allow_pickle)
    suffix = path.suffix.lower()
    if suffix not in (".safetensors", ".gguf"):
        raise UnsupportedModelError(f"{path.name}: a denoiser file must be .safetensors or .gguf")
    is_gguf = suffix == ".gguf"
    if is_gguf:  # here: gguf_files subclasses diffusers' GGUFLinear (seconds of imports), safetensors needn't
        from pipelines.quant.gguf_files import gguf_shapes

        shapes = gguf_shapes(path)
    else:
        shapes = SafetensorsTensors((path,)).shapes()
    from pipelines.diffusion.comfy_layouts import loaders as comfy

    if comfy.denoiser_layout(list(shapes)) is not None:  # Z-Image, Qwen-Image, FLUX.2, Wan (ComfyUI's files)
        return comfy.load_comfy_denoiser(
            mm, path, family=family, dtype=dtype, config_dir=config_dir, scheduler_config=scheduler_config
        )
    found = detect_denoiser(shapes)
    fam = _family(family, found.family, "denoiser")
    folder = _config_dir(fam.name, config_dir)
    config = read_json(folder / fam.denoiser_subfolder / "config.json")
    message = f"{path.name}: {found.message}" + (", GGUF kept quantized" if is_gguf else "")
    if found.layout == "bfl":
        shaped = flux_config_from_shapes({k.removeprefix(found.prefix): v for k, v in shapes.items()})
        if config_dir is None:
            config = {**config, "guidance_embeds": shaped["guidance_embeds"]}
        wanted = {**config, "out_channels": config.get("out_channels") or config["in_channels"]}
        mismatch = [k for k, v in shaped.items() if k != "axes_dims_rope" and wanted.get(k) != v]
        if mismatch:
            raise UnsupportedModelError(
                f"{path.name}: the file's shapes differ from the config in {folder} ({', '.join(mismatch)}); "
                "field 'config_dir': give the model's own config folder"
            )
    source = None if is_gguf else SafetensorsTensors((path,), strip=found.prefix)

    def read() -> Mapping[str, torch.Tensor]:
        # GGUF: the quantized blocks are read into memory (they are the stored size); safetensors: mapped.
        if source is not None:
            return source
        from pipelines.quant.gguf_files import gguf_tensors

        return gguf_tensors(path, strip=found.prefix)

    builders: dict[str, Callable[[], Mapping[str, torch.Tensor]]] = {
        "diffusers": read,
        "bfl": lambda: flux_bfl_to_diffusers(read()),
    }
    if not is_gguf:
        builders["ldm"] = lambda: _ldm_unet(read(), config)
    if found.layout not in builders:
        raise UnsupportedModelError(
            f"{path.name}: {found.message}{' in GGUF' if is_gguf else ''} is not supported yet; "
            "use a diffusers-layout file"
        )
    torch_dtype, storage = _resolve(dtype, fam, mm)
    if is_gguf:
        if storage:
            message += f" (dtype {storage} ignored: a GGUF keeps its own quantization)"
        storage = "gguf"
    handle = register_built(
        mm,
        origin=path,
        part=fam.denoiser_subfolder,
        name=fam.denoiser_subfolder,
        kind="denoiser",
        make=lambda: fam.denoiser_class.from_config(config),
        tensors=builders[found.layout],
        dtype=torch_dtype,
        storage=storage,
        source=str(path),
        files=(path,) if (found.layout == "diffusers" and not found.prefix) else (),
        blocks=denoiser_stream_blocks(fam, config),
    )
    return denoiser_ref(handle, fam, config, folder, torch_dtype, scheduler_config), message


def load_text_encoder_files(
    mm: MemoryManager,
    paths: list[Path],
    *,
    family: str = "auto",
    dtype: str = "auto",
    config_dir: Path | None = None,
    allow_pickle: bool = False,
) -> tuple[TextEncoderRef, str]:
    """One to three text encoder files (CLIP-L, CLIP-G, T5-XXL in transformers' layout) for one family."""
    from pipelines.diffusion.comfy_layouts import ltx2_loaders
    from pipelines.diffusion.comfy_layouts import text_encoders as comfy_te

    for path in paths:  # before any header is read: a pickle under a .safetensors name is refused here
        check_weights_format(path, allow_pickle=allow_pickle)
    if ltx2_loaders.claims_text_encoder(paths, family):  # Gemma 3 + the LTX-2 checkpoint's connectors
        return ltx2_loaders.load_ltx2_text_encoder(mm, paths, dtype=dtype, config_dir=config_dir)
    if len(paths) == 1 and paths[0].suffix.lower() == ".safetensors":  # Qwen3 / Qwen2.5-VL / Mistral / UMT5
        check_weights_format(paths[0], allow_pickle=allow_pickle)
        if comfy_te.text_encoder_kind(list(SafetensorsTensors((paths[0],)).shapes())) is not None:
            return comfy_te.load_comfy_text_encoder(
                mm, paths[0], family=family, dtype=dtype, config_dir=config_dir
            )
    found = []
    for path in paths:
        check_weights_format(path, allow_pickle=allow_pickle)
        shapes = SafetensorsTensors((path,)).shapes()
        found.append((path, shapes, detect_text_encoder(shapes)))
    clips = [f for f in found if f[2].layout == "clip"]
    t5s = [f for f in found if f[2].layout == "t5"]
    matched = family_from_text_encoders(len(clips), len(t5s))
    detected = matched.name if matched is not None else ""
    if family == "auto" and not detected:
        raise UnsupportedModelError(
            f"{len(clips)} CLIP and {len(t5s)} T5 files match no family (sd1: CLIP-L; sdxl: CLIP-L + CLIP-G; "
            "flux: CLIP-L + T5; sd3: CLIP-L + CLIP-G + T5)"
        )
    fam = FAMILIES[detected if family == "auto" else family]
    if not fam.split_text_encoders:
        raise UnsupportedModelError(
            f"{fam.title}'s text encoder loads from its diffusers folder only, not from separate files"
        )
    wants = [s.model_ref.name.startswith("T5") for s in fam.text_encoders]
    if (sum(not w for w in wants), sum(wants)) != (len(clips), len(t5s)):
        raise UnsupportedModelError(
            f"{fam.title} takes {sum(not w for w in wants)} CLIP and {sum(wants)} T5 files; "
            f"got {len(clips)} CLIP and {len(t5s)} T5"
        )
    clips.sort(key=lambda f: clip_width(f[1]))  # CLIP-L (768) before CLIP-G (1280); stable for equal widths
    folder = _config_dir(fam.name, config_dir)
    torch_dtype, storage = _resolve(dtype, fam, mm)
    handles, tokenizers, names = [], [], []
    for slot, is_t5 in zip(fam.text_encoders, wants, strict=True):
        path, _, what = (t5s if is_t5 else clips).pop(0)
        source = SafetensorsTensors((path,))
        handles.append(
            register_built(
                mm,
                origin=path,
                part=slot.subfolder,
                name=slot.subfolder,
                kind="text_encoder",
                make=module_factory(slot.model_ref, folder / slot.subfolder),
                tensors=lambda source=source: source,
                dtype=torch_dtype,
                storage=storage,
                source=str(path),
            )
        )
        token_source = T5TokenizerSource if is_t5 else ClipTokenizerSource
        tokenizers.append(token_source(folder, slot.tokenizer_subfolder, slot.model_ref))
        names.append(f"{path.name}: {what.message}")
    return text_encoder_ref(
        handles, tokenizers, fam, torch_dtype
    ), f"{fam.title} text encoders: " + "; ".join(names)


def load_vae_file(
    mm: MemoryManager,
    path: Path,
    *,
    family: str = "auto",
    dtype: str = "auto",
    config_dir: Path | None = None,
    allow_pickle: bool = False,
) -> tuple[VaeRef, str]:
    """A VAE file: diffusers layout or the original one (`ae.safetensors`, `vae-ft-mse-840000`, ...)."""
    check_weights_format(path, allow_pickle=allow_pickle)
    from pipelines.diffusion.comfy_layouts import ltx2_loaders, minimax, minimax_load
    from pipelines.diffusion.comfy_layouts import vaes as comfy_vae

    if minimax.vae_kind(list(SafetensorsTensors((path,)).shapes())) is not None:  # MiniMax H3 video / audio
        return minimax_load.load_minimax_vae(mm, path, family=family, dtype=dtype, config_dir=config_dir)
    if family in ("auto", "ltx2") and ltx2_loaders.is_checkpoint_file(
        path
    ):  # LTXVAudioVAELoader's checkpoint
        return ltx2_loaders.load_ltx2_vae(mm, path, dtype=dtype, config_dir=config_dir)
    if comfy_vae.claims_vae(path, family, config_dir):  # Wan / Qwen-Image / FLUX.2 / Z-Image VAEs
        return comfy_vae.load_comfy_vae(mm, path, family=family, dtype=dtype, config_dir=config_dir)
    found = detect_vae(SafetensorsTensors((path,)).shapes())
    fam = _family(family, found.family, "VAE")
    folder = _config_dir(fam.name, config_dir)
    config = read_json(folder / "vae" / "config.json")
    source = SafetensorsTensors((path,), strip=found.prefix)
    torch_dtype, storage = _resolve(dtype, fam, mm)
    torch_dtype = vae_dtype(fam, config, torch_dtype)
    handle = register_built(
        mm,
        origin=path,
        part="vae",
        name="vae",
        kind="vae",
        make=lambda: fam.vae_class.from_config(config),
        tensors=(lambda: source) if found.layout == "diffusers" else (lambda: _ldm_vae(source, config)),
        dtype=torch_dtype,
        storage=storage,
        source=str(path),
        files=(path,) if (found.layout == "diffusers" and not found.prefix) else (),
    )
    return vae_ref(handle, fam, config, torch_dtype), f"{path.name}: {found.message}"
