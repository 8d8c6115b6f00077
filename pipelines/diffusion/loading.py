"""Loading a diffusers-format folder or separate component files as lazy handles.

Lives here: `load_model`, `load_diffusers_folder`, `load_component_file`, `component_weight_files`
(`LoadedModel`, `read_json`, `vae_dtype` are `pipelines.diffusion.assembly`'s, re-exported).
May import: stdlib, torch, diffusers, transformers, memory, pipelines.paths, pipelines.diffusion.*.

Nothing here reads weights. Each component becomes a `memory.ComponentSpec` built only when a node enters
`mm.use(handle)`: diffusers models empty, filled by the manager tensor by tensor from their safetensors
files; others through `from_pretrained` (memory-mapped). The manager counts bytes from the headers. Configs and scheduler settings (small JSON) are read now,
so that nodes downstream know channels, scale factors and the family without loading a model.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from memory import ComponentSpec, MemoryManager, ModelHandle
from memory.weights import SafetensorsSource, header_entries
from pipelines.diffusion.assembly import (  # LoadedModel, read_json, vae_dtype: re-exported
    LoadedModel,
    assemble_model,
    component_keys_for,
    read_json,
    resolve_precision,
    vae_dtype,
)
from pipelines.diffusion.families import (
    Family,
    denoiser_stream_blocks,
    family_for_pipeline_class,
    resolve_dtype,
)
from pipelines.diffusion.family_types import ClassRef
from pipelines.diffusion.lazy_load import CheckpointSource, component_key_map, empty_module
from pipelines.diffusion.values import DenoiserRef, TokenizerSource
from pipelines.paths import PICKLE_SUFFIXES, check_weights_format


def component_weight_files(folder: Path, *, allow_pickle: bool) -> tuple[tuple[Path, ...], bool]:
    """The weight files of one component subfolder and whether they are safetensors.

    Prefers `*.safetensors` (non-variant names first, then e.g. `.fp16.safetensors`). Falls back to pickle
    files (`.bin`, `.ckpt`) only with `allow_pickle`; `check_weights_format` raises otherwise.
    """
    safetensors = sorted(folder.glob("*.safetensors"))
    plain = [p for p in safetensors if len(p.suffixes) == 1]
    if plain or safetensors:
        for p in plain or safetensors:  # by content: a pickle renamed .safetensors is refused here
            check_weights_format(p, allow_pickle=allow_pickle)
        return tuple(plain or safetensors), True
    pickles = sorted(p for p in folder.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES)
    if not pickles:
        raise FileNotFoundError(f"{folder}: no weight files (*.safetensors)")
    for p in pickles:
        check_weights_format(p, allow_pickle=allow_pickle)
    return tuple(pickles), False


def _variant(files: tuple[Path, ...]) -> str | None:
    # "diffusion_pytorch_model.fp16.safetensors" -> "fp16"
    # sharded: "diffusion_pytorch_model.fp16-00001-of-00002.safetensors" -> "fp16"
    suffixes = files[0].suffixes
    return suffixes[-2].lstrip(".").split("-")[0] if len(suffixes) > 1 else None


def _register_pretrained(
    mm: MemoryManager,
    root: Path,
    subfolder: str,
    model_ref: ClassRef | type,
    *,
    kind: str,
    dtype: torch.dtype,
    allow_pickle: bool,
    blocks: tuple[str, ...] = (),
    storage: str = "",
) -> ModelHandle:
    """Register `model_ref`'s `from_pretrained(root, subfolder=...)` with the manager; loads nothing.

    The class is imported only when the component is built (`app plan` registers models without importing
    diffusers or transformers: headers and configs only).

    diffusers models in safetensors are built empty instead and filled by the manager from the files one
    tensor at a time (or streamed block by block): `from_pretrained` would cast a float16 file to float32
    whole, holding the UNet twice for a moment and never letting `stream` bound the process.
    With `storage` (fp8/int8, pipelines.quant.storage) the weights are kept in 8 bits and upcast per layer.
    """
    if isinstance(model_ref, type):  # an imported class (video families' extras); not all are top-level names
        model_ref = ClassRef(model_ref.__module__, model_ref.__name__)
    files, safe = component_weight_files(root / subfolder, allow_pickle=allow_pickle)
    variant = _variant(files) if safe else None
    if storage and safe:
        from pipelines.quant.split import register_quantized_folder_component

        return register_quantized_folder_component(
            mm,
            root,
            subfolder,
            model_ref.load(),
            files,
            kind=kind,
            dtype=dtype,
            storage=storage,
            blocks=blocks,
        )
    source = SafetensorsSource(files) if safe and _lazy_loadable(model_ref, files) else None

    def build() -> torch.nn.Module:
        model_class = model_ref.load()
        if source is not None:
            config = model_class.load_config(str(root), subfolder=subfolder, local_files_only=True)
            return _empty_stored_buffers(empty_module(lambda: model_class.from_config(config)), files)
        return model_class.from_pretrained(
            str(root),
            subfolder=subfolder,
            dtype=dtype,
            local_files_only=True,
            use_safetensors=safe,
            variant=variant,
        )

    return mm.register(
        ComponentSpec(
            **component_keys_for(root, subfolder, dtype, files=files).spec_fields(),
            name=subfolder,
            kind=kind,
            build=build,
            files=files if safe else (),
            dtype=dtype,
            blocks=blocks,
            source=source,
        )
    )


# Attention names diffusers renamed in 0.14; `from_pretrained` converts folders that still use them.
_DEPRECATED_ATTENTION = (".query.", ".key.", ".value.", ".proj_attn.")


def _empty_stored_buffers(module: torch.nn.Module, files: tuple[Path, ...]) -> torch.nn.Module:
    """Persistent buffers the files hold (a BatchNorm's running statistics: FLUX.2's VAE) go to the meta device
    too, so the manager loads them from the files like the parameters; `empty_module` keeps buffers real
    (non-persistent ones are made by the constructor), which would leave stored ones at their initial values."""
    stored = {key for _, key, _, _ in header_entries(files)}
    for prefix, sub in module.named_modules():
        for attr, buf in list(sub._buffers.items()):
            name = f"{prefix}.{attr}" if prefix else attr
            if buf is not None and attr not in sub._non_persistent_buffers_set and name in stored:
                sub._buffers[attr] = torch.empty_like(buf, device="meta")
    return module


def _lazy_loadable(model_ref: ClassRef, files: tuple[Path, ...]) -> bool:
    """A diffusers model whose file keys are its own names (transformers models keep `from_pretrained`:
    tied embeddings and per-model loading rules live there). Every class the families name from diffusers is
    a `ModelMixin` (denoisers and VAEs), so the module name decides without importing it."""
    if model_ref.module.split(".")[0] != "diffusers":
        return False
    return not any(any(d in key for d in _DEPRECATED_ATTENTION) for _, key, _, _ in header_entries(files))


def load_diffusers_folder(
    mm: MemoryManager,
    root: Path,
    *,
    dtype: str = "auto",
    allow_pickle: bool = False,
) -> LoadedModel:
    """A folder with `model_index.json` (what `DiffusionPipeline.save_pretrained` writes), or a modular
    pipeline's `modular_model_index.json` with the components in subfolders."""
    from pipelines.diffusion.family_detect import folder_index

    index = read_json(folder_index(root) or root / "model_index.json")
    family = family_for_pipeline_class(index["_class_name"])
    torch_dtype, storage = resolve_precision(dtype, family, mm.device)  # "int8": "auto", kept in int8

    denoiser_config = read_json(root / family.denoiser_subfolder / "config.json")
    vae_config = read_json(root / "vae" / "config.json")
    vdtype = vae_dtype(family, vae_config, torch_dtype)
    loaded = assemble_model(
        family,
        root,
        denoiser=_register_pretrained(
            mm,
            root,
            family.denoiser_subfolder,
            family.denoiser_ref,
            kind="denoiser",
            dtype=torch_dtype,
            allow_pickle=allow_pickle,
            blocks=denoiser_stream_blocks(family, denoiser_config),
            storage=storage,
        ),
        denoiser_config=denoiser_config,
        text_encoders=[
            _register_pretrained(
                mm,
                root,
                slot.subfolder,
                slot.model_ref,
                kind="text_encoder",
                dtype=torch_dtype,
                allow_pickle=allow_pickle,
                blocks=slot.blocks,
                storage=storage,
            )
            for slot in family.text_encoders
        ],
        tokenizers=[
            TokenizerSource(root, slot.tokenizer_subfolder, slot.model_ref) for slot in family.text_encoders
        ],
        vae=_register_pretrained(
            mm,
            root,
            "vae",
            family.vae_ref,
            kind="vae",
            dtype=vdtype,
            allow_pickle=allow_pickle,
            storage=storage,
        ),
        vae_config=vae_config,
        dtype=torch_dtype,
        vae_dtype=vdtype,
    )

    def partition(base: DenoiserRef, subfolder: str) -> DenoiserRef:
        """Another transformer of the same class in its own subfolder: `base` with that component's weights."""
        handle = _register_pretrained(
            mm,
            root,
            subfolder,
            family.denoiser_ref,
            kind="denoiser",
            dtype=torch_dtype,
            allow_pickle=allow_pickle,
            blocks=family.denoiser_blocks,
            storage=storage,
        )
        return replace(base, handle=handle, config=read_json(root / subfolder / "config.json"))

    if index.get(
        "expand_timesteps"
    ):  # Wan 2.2 TI2V-5B: a timestep per video token (its 48-channel VAE is config)
        loaded = replace(loaded, denoiser=replace(loaded.denoiser, expand_timesteps=True))
    if index.get("boundary_ratio") is not None and (root / "transformer_2" / "config.json").is_file():
        # Wan 2.2's low-noise expert: a second denoiser component, used below the boundary timestep
        second = partition(loaded.denoiser, "transformer_2")
        denoiser = replace(loaded.denoiser, low_noise=second, boundary_ratio=float(index["boundary_ratio"]))
        loaded = replace(loaded, denoiser=denoiser)
    if family.denoiser_call == "wan" and (root / "image_encoder" / "config.json").is_file():
        loaded = replace(loaded, denoiser=_with_image_encoder(mm, root, loaded.denoiser, allow_pickle))
    if family.name == "ltx2":  # the sound track's decoder travels with the video VAE
        from pipelines.diffusion.ltx2_vae import register_audio_decoder

        audio = register_audio_decoder(mm, root, torch_dtype, _register_pretrained, allow_pickle=allow_pickle)
        loaded = replace(loaded, vae=replace(loaded.vae, audio=audio))
    if family.name == "minimax":  # the stereo sound track's VAE, and the audio rows' own schedule
        from pipelines.diffusion.minimax_layout import AUDIO_SCHEDULER_KEY
        from pipelines.diffusion.minimax_vae import register_minimax_audio

        audio = register_minimax_audio(mm, root, torch_dtype, _register_pretrained, allow_pickle=allow_pickle)
        audio_scheduler = read_json(root / "audio_scheduler" / "scheduler_config.json")
        schedulers = {**loaded.denoiser.scheduler_config, AUDIO_SCHEDULER_KEY: audio_scheduler}
        denoiser = replace(loaded.denoiser, scheduler_config=schedulers)
        if (root / "transformer_ref" / "config.json").is_file():  # the ref2va partition, its own component
            denoiser = replace(denoiser, reference=partition(denoiser, "transformer_ref"))
        loaded = replace(loaded, vae=replace(loaded.vae, audio=audio), denoiser=denoiser)
    return loaded


def _with_image_encoder(
    mm: MemoryManager, root: Path, denoiser: DenoiserRef, allow_pickle: bool
) -> DenoiserRef:
    """Wan 2.1 I2V's CLIP vision encoder as its own lazy component (kind `image_encoder`), in float32 as the
    pipeline's examples load it (it is small beside the transformer)."""
    from pipelines.diffusion.wan_image import ImageEncoderRef

    handle = _register_pretrained(
        mm,
        root,
        "image_encoder",
        ClassRef("transformers", "CLIPVisionModel"),  # imported when built: `app plan` never imports it
        kind="image_encoder",
        dtype=torch.float32,
        allow_pickle=allow_pickle,
    )
    config = read_json(root / "image_encoder" / "config.json")
    return replace(denoiser, image_encoder=ImageEncoderRef(handle, root, config, torch.float32))


def load_model(
    mm: MemoryManager,
    spec: str | Path,
    *,
    kind: str = "auto",
    dtype: str = "auto",
    allow_pickle: bool = False,
    config_dir: Path | None = None,
) -> LoadedModel:
    """Resolve a workflow's model reference and load it as a folder or a single-file checkpoint.

    `spec`: "builtin:NAME", "demo:NAME" (built offline on first use) or a path. `kind`: "auto" | "folder" |
    "single_file". `config_dir`: a config-only diffusers folder for single files (default: the one shipped
    for the detected family in resources/configs/). The memory manager reports the bytes as they are read.
    """
    # Imported here: single_file pulls diffusers' conversion utilities, demo_models builds models (with
    # diffusers and transformers: imported only when a demo model is still to be built, see `app plan`).
    from pipelines.paths import demo_models_dir, resolve_model_path

    spec = str(spec)
    built = demo_models_dir() / spec.removeprefix("demo:")
    if spec.startswith("demo:") and (built / "model_index.json").exists():
        path = built  # what `ensure_demo_model` returns once the model is built
    elif spec.startswith("demo:"):
        from pipelines.diffusion.demo_models import DEMO_MODELS, ensure_demo_model

        name = spec.removeprefix("demo:")
        path = ensure_demo_model(name) if name in DEMO_MODELS else resolve_model_path(spec)
    else:
        path = resolve_model_path(spec)
    if kind == "auto":
        kind = "folder" if path.is_dir() else "single_file"
    if kind == "folder":
        from pipelines.diffusion.family_detect import folder_index

        if folder_index(path) is None:
            raise FileNotFoundError(f"{path}: not a diffusers folder (no model_index.json)")
        return load_diffusers_folder(mm, path, dtype=dtype, allow_pickle=allow_pickle)
    if kind == "single_file":
        if path.is_dir():
            raise IsADirectoryError(f"{path}: a folder was given but kind is single_file")
        from pipelines.diffusion.comfy_layouts import ltx2_loaders
        from pipelines.diffusion.single_file import load_single_file

        if ltx2_loaders.is_checkpoint_file(path):  # ComfyUI's LTX-2 checkpoint
            return ltx2_loaders.load_ltx2_checkpoint(mm, path, dtype=dtype, config_dir=config_dir)
        from pipelines.diffusion import single_file_flow

        if (layout := single_file_flow.flow_layout(path)) is not None:  # ComfyUI's FLUX.1 / SD3 all-in-one
            return single_file_flow.load_flow_single_file(
                mm, path, layout, dtype=dtype, config_dir=config_dir
            )
        return load_single_file(mm, path, dtype=dtype, allow_pickle=allow_pickle, config_dir=config_dir)
    raise ValueError(f"unknown loader kind {kind!r} (auto, folder, single_file)")


def load_component_file(
    mm: MemoryManager,
    path: Path,
    *,
    component: str,
    config_dir: Path,
    family: Family,
    dtype: str = "auto",
    allow_pickle: bool = False,
) -> ModelHandle:
    """A separate denoiser or VAE file (a fine-tuned UNet, a standalone VAE) as a lazy handle.

    `component` is "unet", "transformer" or "vae"; the architecture comes from `config_dir/component`.
    Both diffusers-format and original (CompVis, Flux, SD3) key names load, so e.g.
    `vae-ft-mse-840000-ema-pruned.safetensors` loads as well as a diffusers `save_pretrained` file: the key
    map is traced from the header (`lazy_load.component_key_map`) and the module filled per tensor.
    """
    check_weights_format(path, allow_pickle=allow_pickle)
    torch_dtype = resolve_dtype(dtype, family, mm.device)
    classes = {
        family.denoiser_subfolder: (family.denoiser_class, "denoiser"),
        "vae": (family.vae_class, "vae"),
    }
    if component not in classes:
        raise ValueError(
            f"{family.title}: a separate file can hold {' or '.join(classes)}, not {component!r}"
        )
    model_class, kind = classes[component]
    if component == "vae":
        torch_dtype = vae_dtype(family, read_json(config_dir / "vae" / "config.json"), torch_dtype)

    config = read_json(config_dir / component / "config.json")
    key_map = component_key_map(path, model_class, config) if path.suffix == ".safetensors" else None
    source = CheckpointSource(path, key_map) if key_map is not None else None

    def build() -> torch.nn.Module:
        if source is not None:  # built empty; the manager fills it from `source` tensor by tensor
            module = empty_module(lambda: model_class.from_config(config))
            source.check(module)
            return module
        return model_class.from_single_file(
            str(path), config=str(config_dir), subfolder=component, dtype=torch_dtype, local_files_only=True
        )

    return mm.register(
        ComponentSpec(
            **component_keys_for(path, component, torch_dtype).spec_fields(),
            name=component,
            kind=kind,
            build=build,
            files=(path,) if path.suffix == ".safetensors" and source is None else (),
            dtype=torch_dtype,
            source=source,
            blocks=denoiser_stream_blocks(family, read_json(config_dir / component / "config.json"))
            if kind == "denoiser"
            else (),
        )
    )
