"""Loading MiniMax H3's ComfyUI files: the two VAE files, the transformer's schedules, and the shipped configs.

Lives here: `CurveTimeEmbedding`, `denoiser_builder`, `scheduler_config`, `load_minimax_vae`, `MINIMAX_RELEASED`,
`write_minimax_released`, `write_minimax_tiny_config`. May import: stdlib, torch, safetensors, diffusers,
transformers, memory, pipelines.paths, pipelines.diffusion, pipelines.quant.

The transformer goes through the shared ComfyUI loader (`loaders.load_comfy_denoiser`, names converted by
`minimax.transformer_to_diffusers`); here is what it needs beyond that: the module for the pruned curve form
(ComfyUI's `use_adaln_curves`: `adaln_t_table` rows linearly interpolated at t stand for the time embedding,
the AdaLN projections read them without a SiLU), and the audio rows' own schedule beside the video one. The text encoder is `text_encoders`'
Qwen3-VL loader (the config folders' Qwen3-VL stops at layer 50, as ComfyUI's file does).

A ComfyUI template loads the video VAE and the audio VAE as two VAE files (VAEDecode and VAEDecodeAudio each
get one), where a diffusers folder holds both. So the video VAE's value carries the config folder's audio VAE
config (the latent's sound-track shape needs its channels), and the audio VAE's value is an audio decoder
alone (`minimax_vae.AUDIO_ONLY_KEY`: VAE Decode refuses it by name). The latent statistics come from the file
when it has them (ComfyUI keeps them as buffers), else from the config folder.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from memory import MemoryManager
from pipelines.diffusion.assembly import read_json, resolve_precision, vae_dtype
from pipelines.diffusion.comfy_layouts.common import (
    KeyMapTensors,
    aligned,
    config_of,
    converted_shapes,
    file_key_map,
    file_keys,
)
from pipelines.diffusion.comfy_layouts.minimax import (
    LATENT_STATS,
    TEXT_LAYERS,
    audio_vae_to_diffusers,
    vae_kind,
    video_vae_to_diffusers,
)
from pipelines.diffusion.comfy_layouts.variants import (
    Variant,
    fits,
    module_shapes,
    pick_variant,
    variants_for,
)
from pipelines.diffusion.families import FAMILIES, UnsupportedModelError
from pipelines.diffusion.lazy_load import KeyMap
from pipelines.diffusion.values import AudioDecoderRef, VaeRef
from pipelines.paths import RESOURCES_DIR


class CurveTimeEmbedding(torch.nn.Module):
    """The curve form's time embedding: t in [0, 1] -> a row interpolated in the (grid, r) table (t clamped to
    the ends, t = 1 on the last interval), as ComfyUI's MiniMaxH3Model computes it."""

    def __init__(self, grid: int, dim: int) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.zeros(grid, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        table = self.table
        position = t.to(table.dtype).clamp(0.0, 1.0) * (table.shape[0] - 1)
        lower = position.floor().long().clamp(max=table.shape[0] - 2)
        return torch.lerp(table[lower], table[lower + 1], (position - lower).unsqueeze(1))


def _no_silu_classes() -> tuple[type, type]:
    from diffusers.models.modeling_utils import get_parameter_dtype
    from diffusers.models.transformers.transformer_minimax_h3 import (
        MiniMaxH3AdaLayerNormModulation,
        MiniMaxH3AdaLayerNormOut,
    )

    class CurveModulation(MiniMaxH3AdaLayerNormModulation):
        """diffusers' block modulation reading the curve's coordinates as they are (no SiLU)."""

        def forward(self, temb: torch.Tensor) -> tuple[torch.Tensor, ...]:
            out = self.linear(temb.to(get_parameter_dtype(self.linear))).view(-1, 6 * self.hidden_size)
            return out.chunk(6, dim=-1)

    class CurveNormOut(MiniMaxH3AdaLayerNormOut):
        def forward(self, hidden_states: torch.Tensor, temb: torch.Tensor, timestep_indices: torch.Tensor):
            shift, scale = self.linear(temb.to(get_parameter_dtype(self.linear))).chunk(2, dim=-1)
            hidden_states = self.norm(hidden_states)
            return hidden_states * (1.0 + scale.index_select(0, timestep_indices)) + shift.index_select(
                0, timestep_indices
            )

    return CurveModulation, CurveNormOut


def curve_transformer(config: dict[str, Any], grid: int, dim: int) -> torch.nn.Module:
    """`MiniMaxH3Transformer3DModel` with the curve form's time embedding: the projections `dim` wide, the
    sinusoid and the time MLP replaced by the table (`time_embedder` keeps its name, so it stays float32)."""
    from diffusers import MiniMaxH3Transformer3DModel

    model = MiniMaxH3Transformer3DModel.from_config({**config, "time_embed_dim": dim})
    modulation, norm_out = _no_silu_classes()
    model.time_proj = torch.nn.Identity()  # the table is read at t itself
    model.time_embedder = CurveTimeEmbedding(grid, dim)
    for block in model.transformer_blocks:
        block.adaln_proj.__class__ = modulation  # the same parameters, read without the SiLU
    model.norm_out.__class__ = norm_out
    return model


def denoiser_builder(path: Path) -> Callable[[dict[str, Any]], torch.nn.Module]:
    """How to build the module a MiniMax H3 transformer file fills: diffusers' class, or its curve form."""
    from diffusers import MiniMaxH3Transformer3DModel
    from safetensors import safe_open

    if path.suffix.lower() != ".safetensors":
        return MiniMaxH3Transformer3DModel.from_config
    with safe_open(str(path), framework="pt") as f:
        name = next((k for k in f.keys() if k.endswith("adaln_t_table")), None)
        shape = f.get_slice(name).get_shape() if name else None
    if shape is None:
        return MiniMaxH3Transformer3DModel.from_config
    grid, dim = int(shape[0]), int(shape[1])
    return lambda config: curve_transformer(config, grid, dim)


def scheduler_config(folder: Path) -> dict[str, Any]:
    """The video schedule with the audio one under `AUDIO_SCHEDULER_KEY`, as the folder loader gives them."""
    from pipelines.diffusion.minimax_layout import AUDIO_SCHEDULER_KEY

    audio = read_json(folder / "audio_scheduler" / "scheduler_config.json")
    return {**read_json(folder / "scheduler" / "scheduler_config.json"), AUDIO_SCHEDULER_KEY: audio}


def _file_stats(path: Path) -> dict[str, list[float]]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        names = set(f.keys())
        return {s: f.get_tensor(s).float().tolist() for s in LATENT_STATS if s in names}


def _fitting(path: Path, kind: str, config_dir: Path | None) -> tuple[Variant, dict[str, Any], KeyMap]:
    from diffusers import AutoencoderKLMiniMaxH3, AutoencoderKLMiniMaxH3Audio

    sub = "vae" if kind == "video" else "audio_vae"
    cls = AutoencoderKLMiniMaxH3 if kind == "video" else AutoencoderKLMiniMaxH3Audio
    stats = _file_stats(path)
    candidates = variants_for(["minimax"], config_dir)

    def wanted(v: Variant) -> dict[str, tuple[int, ...]]:
        config = {**config_of(v, sub), **stats}
        return module_shapes(lambda: cls.from_config(config))

    for v in candidates:
        config = {**config_of(v, sub), **stats}
        want = wanted(v)
        try:
            # file_key_map: the shared ComfyUI reading (its dequantizations) before the names change
            key_map = file_key_map(
                path,
                lambda s, c=config, w=want: (
                    video_vae_to_diffusers(s, c) if kind == "video" else audio_vae_to_diffusers(s, list(w))
                ),
            )
        except (KeyError, IndexError, ValueError, RuntimeError):
            continue  # another size's head counts cannot split this file's qkv
        if fits(converted_shapes(key_map), want):
            return v, config, aligned(key_map, want)
    pick_variant(candidates, {}, wanted, what=f"{kind} VAE", file_name=path.name)  # raises, naming the sizes
    raise AssertionError("unreachable: pick_variant raises when nothing fits")


def load_minimax_vae(
    mm: MemoryManager,
    path: Path,
    *,
    family: str = "auto",
    dtype: str = "auto",
    config_dir: Path | None = None,
) -> tuple[VaeRef, str]:
    """ComfyUI's MiniMax H3 video VAE or audio VAE file (`models/vae/`)."""
    from diffusers import AutoencoderKLMiniMaxH3, AutoencoderKLMiniMaxH3Audio

    from pipelines.diffusion.minimax_vae import AUDIO_ONLY_KEY, AUDIO_VAE_CONFIG_KEY
    from pipelines.quant.split import register_built

    kind = vae_kind(file_keys(path))
    assert kind is not None, "load_minimax_vae is called for MiniMax H3 VAE files only"
    if family not in ("auto", "minimax"):
        raise UnsupportedModelError(
            f"field 'family' says {FAMILIES[family].title}, but {path.name} is MiniMax H3's {kind} VAE"
        )
    fam = FAMILIES["minimax"]
    variant, config, key_map = _fitting(path, kind, config_dir)
    cls = AutoencoderKLMiniMaxH3 if kind == "video" else AutoencoderKLMiniMaxH3Audio
    torch_dtype, storage = resolve_precision(dtype, fam, mm.device)
    torch_dtype = vae_dtype(fam, config, torch_dtype)
    sub = "vae" if kind == "video" else "audio_vae"
    handle = register_built(
        mm,
        origin=path,
        part=sub,
        name=sub,
        kind="vae",
        make=lambda: cls.from_config(config),
        tensors=lambda: KeyMapTensors(path, key_map),
        dtype=torch_dtype,
        storage=storage,
        source=str(path),
    )
    message = f"{path.name}: MiniMax H3 {kind} VAE, config: {variant.title}"
    if kind == "video":  # the sound track's shape comes from the audio VAE: its config rides along
        audio_config = config_of(variant, "audio_vae")
        return VaeRef(handle, fam, {**config, AUDIO_VAE_CONFIG_KEY: audio_config}, torch_dtype), message
    audio = AudioDecoderRef(vae=handle, vae_config=config, vocoder=None, vocoder_config={}, dtype=torch_dtype)
    return VaeRef(handle, fam, {**config, AUDIO_ONLY_KEY: True}, torch_dtype, audio=audio), message


# --- shipped config folders -----------------------------------------------------------------------------

# The released sizes. The transformer's and both VAEs' diffusers defaults are the release's
# (scripts/convert_minimax_h3_to_diffusers.py); the video latent statistics are ComfyUI's
# (comfy/ldm/minimax/vae.py: its file carries them too, and they win when present). Qwen3-VL-32B-Instruct's
# sizes, cut after layer 50 as ComfyUI's qwen3vl_32b_minimax_h3 file is.
_VIDEO_MEAN = (
    0.858090341091156, -0.9606591463088989, 1.0661640167236328, -0.5090325474739075, -0.2727581858634949,
    -1.3675414323806763, -0.2553254961967468, -0.26907554268836975, -0.5376840829849243, -0.0464097298681736,
    0.6657370328903198, 0.19690127670764923, -0.5460608005523682, -0.4035342037677765, -0.23683024942874908,
    0.25928452610969543, -0.30133944749832153, 0.211341992020607, -1.1206848621368408, 0.3581933379173279,
    -0.04225143790245056, 0.2604829967021942, 0.22864092886447906, 0.7056031823158264,
)  # fmt: skip
_VIDEO_STD = (
    1.2223774194717407, 1.2767263650894165, 1.68317747116088865, 1.7549455165863037, 1.5636216402053833,
    2.194143533706665, 0.96531379222869875, 1.05698859691619875, 0.841948926448822, 0.7729952931404114,
    1.8955937623977661, 0.946841835975647, 0.7996809482574463, 0.44988900423049925, 0.7197399735450745,
    0.69362932443618775, 2.961095094680786, 2.7694199085235595, 3.0496184825897215, 2.1088054180145265,
    3.276226282119751, 3.1627357006073, 2.28168129920959475, 2.6127843856811525,
)  # fmt: skip
QWEN3_VL_32B_TO_50 = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "model_type": "qwen3_vl",
    "text_config": {
        "model_type": "qwen3_vl_text",
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "num_hidden_layers": TEXT_LAYERS,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 5000000,
            "mrope_section": [24, 20, 20],
            "mrope_interleaved": True,
        },
    },
    "vision_config": {
        "depth": 27,
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_heads": 16,
        "out_hidden_size": 5120,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [8, 16, 24],
    },
    "tie_word_embeddings": False,
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
}
MINIMAX_RELEASED: dict[str, dict[str, Any]] = {
    "model_index.json": {"_class_name": "MiniMaxH3ModularPipeline"},
    "transformer/config.json": ("MiniMaxH3Transformer3DModel", {}),
    "vae/config.json": ("AutoencoderKLMiniMaxH3", {"latents_mean": _VIDEO_MEAN, "latents_std": _VIDEO_STD}),
    "audio_vae/config.json": ("AutoencoderKLMiniMaxH3Audio", {}),
    "text_encoder/config.json": QWEN3_VL_32B_TO_50,
    "scheduler/scheduler_config.json": {"_class_name": "MiniMaxH3Scheduler", "shift": 12.0},
    "audio_scheduler/scheduler_config.json": {"_class_name": "MiniMaxH3Scheduler", "shift": 3.0},
}


def write_minimax_released(root: Path | None = None) -> Path:
    """resources/configs/minimax-h3 from `MINIMAX_RELEASED` (configs only; the tokenizer is not shipped)."""
    from pipelines.diffusion.comfy_layouts.class_config import diffusers_config

    out = (root or RESOURCES_DIR / "configs") / "minimax-h3"
    for rel, spec in MINIMAX_RELEASED.items():
        data = diffusers_config(*spec) if isinstance(spec, tuple) else spec
        data = json.loads(json.dumps(data))  # tuples -> lists
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def write_minimax_tiny_config(work: Path, root: Path | None = None) -> Path:
    """resources/configs/minimax-tiny: `demo:tiny-minimax`'s configs, tokenizer and processor, its Qwen3-VL cut
    after layer 50 as ComfyUI's file is (the fixture writer cuts the weights the same way)."""
    from pipelines.diffusion.comfy_layouts.writer import write_config_folder
    from pipelines.diffusion.demo_models import save_demo_model

    out = write_config_folder(
        save_demo_model("tiny-minimax", work / "tiny-minimax"),
        (root or RESOURCES_DIR / "configs") / "minimax-tiny",
    )
    # The split files' transformer is whichever file was loaded (fl2va or ref2va: one class, one config), so the
    # demo's ref2va partition has no place here.
    shutil.rmtree(out / "transformer_ref", ignore_errors=True)
    index_path = out / "model_index.json"
    index = json.loads(index_path.read_text(encoding="utf-8"))
    if index.pop("transformer_ref", None) is not None:
        index_path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    config_path = out / "text_encoder" / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["text_config"]["num_hidden_layers"] = TEXT_LAYERS
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


if __name__ == "__main__":
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print(write_minimax_tiny_config(Path(tmp)), write_minimax_released(), file=sys.stderr)
