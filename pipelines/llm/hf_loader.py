"""Model folders for causal LLMs: find the files, refuse pickles, build the transformers model.

Lives here: `LLMFiles`, `prepare_llm_files` (a GGUF file or a transformers folder -> a folder with
config, tokenizer and weight files), `load_config`, `load_tokenizer`, `end_of_turn_ids`, `build_causal_lm`.
Imports `pipelines.paths`, `pipelines.llm.gguf_cache`, transformers, safetensors; nothing from nodes/ or Qt.

Building: the model class is made empty from its config and the memory-mapped safetensors are
assigned to it (~0.1 s for SmolLM2, vs ~1.5 s through `from_pretrained`); anything unusual (pickles,
renamed keys) falls back to `from_pretrained`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedTokenizerBase,
)

from pipelines.llm.gguf_cache import OnPlan, ensure_gguf_converted
from pipelines.load_progress import OnProgress, files_bytes
from pipelines.paths import PICKLE_SUFFIXES, check_weights_format


@dataclass(frozen=True)
class LLMFiles:
    """A loadable transformers folder and what it was made from."""

    source: Path  # what the user named: a .gguf file or a folder
    folder: Path  # config.json + tokenizer + weights
    weight_files: tuple[Path, ...]
    from_gguf: bool

    @property
    def uses_pickle(self) -> bool:
        return any(f.suffix.lower() in PICKLE_SUFFIXES for f in self.weight_files)


def _weight_files(folder: Path) -> tuple[Path, ...]:
    """The files holding the weights: safetensors if there are any, else pickles."""
    safe = sorted(folder.glob("*.safetensors"))
    if safe:
        return tuple(safe)
    return tuple(sorted(p for p in folder.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES))


def prepare_llm_files(
    path: Path,
    *,
    allow_pickle: bool = False,
    on_plan: OnPlan | None = None,
    on_progress: OnProgress | None = None,
) -> LLMFiles:
    """Make `path` loadable: convert a GGUF once (cached), or check a transformers folder.

    `on_plan(nbytes)` is called before a conversion dequantizes anything; `on_progress(stage, done, total)`
    follows the conversion's stages (see `gguf_cache`)."""
    path = Path(path)
    # The format comes from the content: a GGUF is a GGUF whatever its name, a pickle named .gguf is refused.
    if path.is_file() and check_weights_format(path, allow_pickle=allow_pickle) == "gguf":
        folder = ensure_gguf_converted(path, on_plan=on_plan, on_progress=on_progress)
        return LLMFiles(path, folder, (folder / "model.safetensors",), from_gguf=True)
    if path.is_file():
        raise ValueError(
            f"{path.name}: expected a .gguf file or a transformers model folder (with config.json)"
        )
    if not (path / "config.json").is_file():
        raise ValueError(f"{path}: not a transformers model folder (no config.json)")
    weights = _weight_files(path)
    if not weights:
        raise ValueError(f"{path}: no weight files (*.safetensors) in the folder")
    for weight_file in weights:
        check_weights_format(weight_file, allow_pickle=allow_pickle)
    return LLMFiles(path, path, weights, from_gguf=False)


# Every from_pretrained here gets local_files_only=True: `files.folder` is a local path, and if it were
# missing, transformers would otherwise take the string for a Hub repo id and try to download it.


def load_config(files: LLMFiles) -> PretrainedConfig:
    return AutoConfig.from_pretrained(files.folder, local_files_only=True)


def load_tokenizer(files: LLMFiles) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(files.folder, local_files_only=True)


def end_of_turn_ids(files: LLMFiles, config: PretrainedConfig) -> tuple[int, ...]:
    """Token ids that end a reply: generation_config.json's eos if present, else the config's."""
    eos: int | list[int] | None = None
    generation = files.folder / "generation_config.json"
    if generation.is_file():
        eos = json.loads(generation.read_text()).get("eos_token_id")
    if eos is None:
        eos = getattr(config, "eos_token_id", None)
    if eos is None:
        return ()
    return tuple(eos) if isinstance(eos, list | tuple) else (int(eos),)


def _tied_keys(model: torch.nn.Module) -> set[str]:
    """Parameter names that share storage with an earlier one (e.g. lm_head tied to the embedding), or that
    `tie_weights` will tie: a model built on the meta device is not tied yet (transformers 5)."""
    seen: dict[int, str] = {}
    tied: set[str] = set(getattr(model, "all_tied_weights_keys", None) or {})
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            tied.add(name)
        seen.setdefault(id(param), name)
    return tied


def _read_state(
    files: LLMFiles, dtype: torch.dtype, on_progress: OnProgress | None
) -> dict[str, torch.Tensor]:
    """Every tensor of the safetensors files (memory-mapped where already at `dtype`), reporting bytes."""
    total, done = files_bytes(files.weight_files, dtype), 0
    state: dict[str, torch.Tensor] = {}
    for weight_file in files.weight_files:
        with safe_open(str(weight_file), framework="pt") as f:
            for key in f.keys():
                t = f.get_tensor(key)
                state[key] = t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t
                done += state[key].numel() * state[key].element_size()
                if on_progress is not None:
                    on_progress("llm", min(done, total), total)
    return state


def _build_from_safetensors(
    files: LLMFiles, dtype: torch.dtype, on_progress: OnProgress | None = None, auto_class: Any = None
) -> torch.nn.Module | None:
    """Build the model empty from its config and assign the memory-mapped tensors (~0.1 s for 135M
    parameters, vs ~1.5 s through `from_pretrained`). None when the files do not cover every weight."""
    from accelerate import init_empty_weights
    from transformers.initialization import no_init_weights

    if on_progress is not None:  # at once: importing and building the model class takes a second
        on_progress("llm", 0, files_bytes(files.weight_files, dtype))
    config = load_config(files)
    # Parameters on the meta device: allocating them for real only to replace them cost ~1.4 s for SmolLM2
    # (buffers such as the rotary frequencies stay real: the files don't hold them).
    with init_empty_weights(), no_init_weights():
        model = (auto_class or AutoModelForCausalLM).from_config(
            config, dtype=dtype, attn_implementation="sdpa"
        )
    state = _read_state(files, dtype, on_progress)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if unexpected or set(missing) - _tied_keys(model):
        return None  # names differ from the model's (an older layout): let from_pretrained map them
    model.tie_weights()
    if (files.folder / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(files.folder, local_files_only=True)
    return model


def build_causal_lm(
    files: LLMFiles,
    dtype: torch.dtype = torch.float32,
    on_progress: OnProgress | None = None,
    auto_class: Any = None,
) -> torch.nn.Module:
    """The model on CPU in `dtype`, in eval mode (float32 on CPU: bf16/fp16 are ~55x slower here).

    `on_progress("llm", bytes, total)` follows the weights as they are read (safetensors files). `auto_class`:
    the transformers auto class to build with (default `AutoModelForCausalLM`; vision models use another)."""
    model = None if files.uses_pickle else _build_from_safetensors(files, dtype, on_progress, auto_class)
    if model is None:
        model = (auto_class or AutoModelForCausalLM).from_pretrained(
            files.folder,
            dtype=dtype,
            use_safetensors=not files.uses_pickle,
            attn_implementation="sdpa",
            local_files_only=True,
        )
    model.eval()
    return model
