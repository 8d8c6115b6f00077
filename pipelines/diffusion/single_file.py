"""Single-file checkpoints (CompVis/SGM `.safetensors`, as shared on model sites), loaded offline.

Lives here: `load_single_file`, `read_checkpoint_keys`, `read_prefixed`, `CONFIG_DIRS`, `ClipTokenizerSource`.
May import: stdlib, torch, safetensors, diffusers, transformers, memory, pipelines.paths, pipelines.diffusion.*.

diffusers' `from_single_file` guesses the family and fetches its configs from the Hub unless it is given
`config=<local diffusers folder>` (FINDINGS). We detect the family from the tensor names, then point every
component at a config-only folder shipped in `resources/configs/<family>/` (configs and, where we can ship
it, the tokenizer; no weights). Each component's key map is traced from the header through diffusers'
converters (pipelines/diffusion/lazy_load.py); its tensors are read one at a time when the manager loads it.
ComfyUI's FLUX.1 / SD3 all-in-one files load the same way in `single_file_flow` (loading.load_model picks).
"""

from __future__ import annotations

import gzip
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from memory import ComponentSpec, MemoryManager
from pipelines.diffusion.assembly import (
    LoadedModel,
    assemble_model,
    component_keys_for,
    read_json,
    resolve_precision,
    vae_dtype,
)
from pipelines.diffusion.families import (
    CHECKPOINT_LAYOUTS,
    UnsupportedModelError,
    denoiser_stream_blocks,
    detect_single_file_family,
)
from pipelines.diffusion.lazy_load import (
    CheckpointSource,
    KeyMap,
    align_key_map,
    empty_module,
    rename_key_map,
    trace_conversion,
)
from pipelines.diffusion.values import TokenizerSource
from pipelines.paths import RESOURCES_DIR
from pipelines.weight_format import WeightFormat, check_weights_format, load_pickle_state_dict

# The config-only folder shipped per checkpoint layout (the registry's `CheckpointLayout.config_folder`).
CONFIG_DIRS: dict[str, Path] = {
    c.name: RESOURCES_DIR / "configs" / c.config_folder
    for c in CHECKPOINT_LAYOUTS.values()
    if c.config_folder
}

# Key prefixes of the denoiser and VAE inside an original-format checkpoint (text encoders: per layout).
UNET_PREFIX = "model.diffusion_model."
VAE_PREFIX = "first_stage_model."


def read_checkpoint_keys(path: Path, *, allow_pickle: bool) -> list[str]:
    """Tensor names without reading tensors (safetensors header); pickles must be fully loaded."""
    # The format comes from the content, never the name (a pickle named .SAFETENSORS is still a pickle).
    if check_weights_format(path, allow_pickle=allow_pickle) == WeightFormat.SAFETENSORS:
        with safe_open(str(path), framework="pt") as f:
            return list(f.keys())
    return list(load_pickle_state_dict(path, allow_pickle=allow_pickle))


def read_prefixed(path: Path, prefixes: tuple[str, ...], *, allow_pickle: bool) -> dict[str, torch.Tensor]:
    """The tensors whose names start with one of `prefixes`, keeping the original names."""
    if check_weights_format(path, allow_pickle=allow_pickle) == WeightFormat.SAFETENSORS:
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys() if k.startswith(prefixes)}
    state = load_pickle_state_dict(path, allow_pickle=allow_pickle)
    return {k: v for k, v in state.items() if k.startswith(prefixes)}


class ClipTokenizerSource(TokenizerSource):
    """The CLIP tokenizer for a single-file checkpoint, which carries none.

    Looks in order, never on the network: the config folder's tokenizer subfolder; OpenAI's BPE vocabulary
    file `bpe_simple_vocab_16e6.txt.gz` in resources/configs/clip/ or inside the `open_clip_torch` package if
    installed; a copy of `openai/clip-vit-large-patch14` already in the Hugging Face cache. All are the same
    vocabulary.
    SDXL's second tokenizer differs only in its pad token ("!").
    """

    def load(self) -> Any:
        if self._tokenizer is not None:
            return self._tokenizer
        if (self.path / self.subfolder / "tokenizer_config.json").exists():
            return super().load()
        pad_token = "!" if self.subfolder == "tokenizer_2" else "<|endoftext|>"
        bpe = _open_clip_bpe_file()
        if bpe is not None:
            self._tokenizer = clip_tokenizer_from_bpe(bpe, pad_token=pad_token)
            return self._tokenizer
        from transformers import CLIPTokenizer

        try:
            self._tokenizer = CLIPTokenizer.from_pretrained(
                "openai/clip-vit-large-patch14", local_files_only=True, pad_token=pad_token
            )
        except OSError as exc:
            raise FileNotFoundError(
                f"no CLIP tokenizer for this single-file checkpoint: {self.path / self.subfolder} has none, the "
                "open_clip_torch package (which ships the CLIP vocabulary) is not installed and "
                "openai/clip-vit-large-patch14 is not in the Hugging Face cache. Install open_clip_torch, or "
                f"copy a CLIP tokenizer (vocab.json, merges.txt, tokenizer_config.json) into {self.path / self.subfolder}."
            ) from exc
        return self._tokenizer


# Where a copy of OpenAI's CLIP BPE file may be shipped with Nodeloom (1.3 MB, MIT licence; not shipped yet).
SHIPPED_BPE = RESOURCES_DIR / "configs" / "clip" / "bpe_simple_vocab_16e6.txt.gz"


def _open_clip_bpe_file() -> Path | None:
    if SHIPPED_BPE.exists():
        return SHIPPED_BPE
    found = importlib.util.find_spec("open_clip")
    for location in (found.submodule_search_locations or []) if found else []:
        candidate = Path(location) / "bpe_simple_vocab_16e6.txt.gz"
        if candidate.exists():
            return candidate
    return None


def clip_tokenizer_from_bpe(bpe_gz: Path, *, pad_token: str = "<|endoftext|>") -> Any:
    """Build `CLIPTokenizer` from OpenAI's BPE merges file, as open_clip's SimpleTokenizer builds its vocab.

    Vocabulary order (same ids as the Hub's vocab.json): the 256 byte characters, the same with "</w>",
    one entry per merge, then <|startoftext|>, <|endoftext|>.
    """
    from transformers import CLIPTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    with gzip.open(bpe_gz) as f:
        lines = f.read().decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1 : 49152 - 256 - 2 + 1] if line.strip()]
    tokens = list(bytes_to_unicode().values())
    tokens += [t + "</w>" for t in tokens]
    tokens += ["".join(m) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    vocab = {t: i for i, t in enumerate(tokens)}
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77, pad_token=pad_token)


def _text_encoder_key_map(path: Path, detected: str, slot_index: int, module: torch.nn.Module) -> KeyMap:
    """diffusers' CLIP converters traced on header stubs; names aligned to the module as diffusers aligns them.

    The dispatch below mirrors `create_diffusers_clip_model_from_ldm` (which can't be given stubs: it loads
    the weights itself): OpenAI CLIP renames, OpenCLIP (SDXL's second encoder) splits `in_proj` and
    transposes the projection. `CLIPTextModel` lost its `text_model.` wrapper in transformers 5.6.
    """
    from diffusers.loaders.single_file_utils import convert_ldm_clip_checkpoint, convert_open_clip_checkpoint

    layout = CHECKPOINT_LAYOUTS[detected]
    prefix = layout.text_encoder_prefixes[slot_index]
    if slot_index in layout.open_clip_slots:
        key_map = trace_conversion(
            path, lambda sd: convert_open_clip_checkpoint(module, sd, prefix=prefix), (prefix,)
        )
    else:
        key_map = trace_conversion(path, convert_ldm_clip_checkpoint, (prefix,))
    if not hasattr(module, "text_model"):
        key_map = rename_key_map(key_map, lambda name: name.removeprefix("text_model."))
    return align_key_map(key_map, module, path)


def load_single_file(
    mm: MemoryManager,
    path: Path,
    *,
    dtype: str = "auto",
    allow_pickle: bool = False,
    config_dir: Path | None = None,
) -> LoadedModel:
    """An SD1.x or SDXL original-format checkpoint as lazy handles, with no network access.

    A `.safetensors` file: every component is registered with its exact bytes and a `CheckpointSource`
    (the key map traced from the header through diffusers' converters); the manager builds it empty and
    fills it one tensor at a time, or streams its blocks. A pickle (with `allow_pickle` only) has no
    header: each component is converted whole by diffusers, as before.
    """
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from diffusers.loaders.single_file_utils import convert_ldm_unet_checkpoint, convert_ldm_vae_checkpoint

    keys = read_checkpoint_keys(path, allow_pickle=allow_pickle)
    detected = detect_single_file_family(keys)
    if detected not in ("sd1", "sd2", "sdxl"):  # FLUX.1 / SD3 all-in-one: `single_file_flow`, via load_model
        raise UnsupportedModelError(f"{path.name}: a {detected} checkpoint; load it with loading.load_model")
    config_dir = config_dir or CONFIG_DIRS.get(detected)
    if config_dir is None or not (config_dir / "model_index.json").exists():
        raise UnsupportedModelError(
            f"{path.name}: detected a {detected} checkpoint, but no config folder is shipped for it; "
            "convert it to a diffusers folder, or pass a config folder"
        )
    from pipelines.quant.storage import apply_storage

    family = CHECKPOINT_LAYOUTS[detected].family
    torch_dtype, storage = resolve_precision(dtype, family, mm.device)  # fp8/int8: every component in 8 bits
    unet_config = read_json(config_dir / "unet" / "config.json")
    vae_config = read_json(config_dir / "vae" / "config.json")
    vdtype = vae_dtype(family, vae_config, torch_dtype)
    # 8-bit storage converts each component whole, then quantizes it (no per-tensor source for those yet).
    lazy = path.suffix == ".safetensors" and not storage
    if not lazy:
        builders = _whole_builders(path, detected, family, config_dir, torch_dtype, vdtype, allow_pickle)

    def lazy_component(
        key_map: KeyMap, factory: Callable[[], torch.nn.Module]
    ) -> tuple[Callable[[], torch.nn.Module], CheckpointSource]:
        source = CheckpointSource(path, key_map)

        def build() -> torch.nn.Module:
            module = empty_module(factory)
            source.check(module)
            return module  # empty: the manager fills it from `source`

        return build, source

    def register(name: str, kind: str, dt: torch.dtype, blocks: tuple[str, ...] = ()) -> Any:
        if lazy:
            build, source = components[name]
        else:
            build, source = builders[name], None
        if storage:
            whole = build
            build = lambda: apply_storage(whole(), storage, dt)  # noqa: E731
        return mm.register(
            ComponentSpec(
                **component_keys_for(path, name, dt, storage).spec_fields(),
                name=name,
                kind=kind,
                build=build,
                dtype=dt,
                blocks=blocks,
                source=source,
                storage=storage,
            )
        )

    if lazy:
        components = {
            "unet": lazy_component(
                trace_conversion(
                    path, lambda sd: convert_ldm_unet_checkpoint(sd, unet_config), (UNET_PREFIX,)
                ),
                lambda: UNet2DConditionModel.from_config(unet_config),
            ),
            "vae": lazy_component(
                trace_conversion(path, lambda sd: convert_ldm_vae_checkpoint(sd, vae_config), (VAE_PREFIX,)),
                lambda: AutoencoderKL.from_config(vae_config),
            ),
        }
        for i, slot in enumerate(family.text_encoders):
            config = slot.model_class.config_class.from_pretrained(
                config_dir, subfolder=slot.subfolder, local_files_only=True
            )

            def factory(cls: type = slot.model_class, config: Any = config) -> torch.nn.Module:
                return cls(config)

            key_map = _text_encoder_key_map(path, detected, i, empty_module(factory))
            components[slot.subfolder] = lazy_component(key_map, factory)

    return assemble_model(
        family,
        config_dir,
        denoiser=register("unet", "denoiser", torch_dtype, denoiser_stream_blocks(family, unet_config)),
        denoiser_config=unet_config,
        text_encoders=[
            register(slot.subfolder, "text_encoder", torch_dtype) for slot in family.text_encoders
        ],
        tokenizers=[
            ClipTokenizerSource(config_dir, slot.tokenizer_subfolder, slot.model_class)
            for slot in family.text_encoders
        ],
        vae=register("vae", "vae", vdtype),
        vae_config=vae_config,
        dtype=torch_dtype,
        vae_dtype=vdtype,
    )


def _whole_builders(
    path: Path,
    detected: str,
    family: Any,
    config_dir: Path,
    torch_dtype: torch.dtype,
    vdtype: torch.dtype,
    allow_pickle: bool,
) -> dict[str, Callable[[], torch.nn.Module]]:
    """Pickle checkpoints (opt-in): each component's tensors read whole and converted by diffusers."""
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from diffusers.loaders.single_file_utils import create_diffusers_clip_model_from_ldm

    def build_unet() -> torch.nn.Module:
        state = read_prefixed(path, (UNET_PREFIX,), allow_pickle=allow_pickle)
        return UNet2DConditionModel.from_single_file(
            state, config=str(config_dir), subfolder="unet", dtype=torch_dtype, local_files_only=True
        )

    def build_vae() -> torch.nn.Module:
        state = read_prefixed(path, (VAE_PREFIX,), allow_pickle=allow_pickle)
        return AutoencoderKL.from_single_file(
            state, config=str(config_dir), subfolder="vae", dtype=vdtype, local_files_only=True
        )

    def text_encoder_builder(slot_index: int) -> Callable[[], torch.nn.Module]:
        slot = family.text_encoders[slot_index]
        prefix = CHECKPOINT_LAYOUTS[detected].text_encoder_prefixes[slot_index]

        def build() -> torch.nn.Module:
            state = read_prefixed(path, (prefix,), allow_pickle=allow_pickle)
            return create_diffusers_clip_model_from_ldm(
                slot.model_class,
                checkpoint=state,
                config=str(config_dir),
                subfolder=slot.subfolder,
                torch_dtype=torch_dtype,
                local_files_only=True,
            )

        return build

    builders = {"unet": build_unet, "vae": build_vae}
    for i, slot in enumerate(family.text_encoders):
        builders[slot.subfolder] = text_encoder_builder(i)
    return builders
