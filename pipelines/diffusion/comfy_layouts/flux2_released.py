"""The config folders of FLUX.2 [klein] 4B and 9B at their released sizes (configs only, no tokenizer).

Lives here: `QWEN3_8B`, `write_flux2_released`. May import: stdlib, json, diffusers (through
`class_config.diffusers_config`), pipelines.paths, pipelines.diffusion.comfy_layouts.qwen3_config (Qwen3-4B's size).

The transformer sizes are diffusers' `scripts/convert_flux2_to_diffusers.py` (`get_flux2_transformer_config`,
"klein-4b" and "klein-9b": width 3072 = 24 x 128 with 5 joint + 20 single blocks, width 4096 = 32 x 128 with
8 + 24; the text features are three Qwen3 hidden states side by side, 3 x 2560 and 3 x 4096). The VAE is
`AutoencoderKLFlux2`'s defaults, the class that script loads the released VAE into strictly. The text encoders
are Qwen3-4B and Qwen3-8B (their config.json sizes), read as `Qwen3ForCausalLM`; the scheduler is the one the
tiny Klein demo uses (the pipeline's resolution-dependent shift). FLUX.2 [dev] (the same script's "flux2-dev",
also `Flux2Transformer2DModel`'s defaults) is not shipped: its Mistral Small 3.2 24B text encoder's config was
not at hand to check here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipelines.paths import RESOURCES_DIR

_KLEIN_TRANSFORMER = {  # what both sizes share (the conversion script's common keys)
    "patch_size": 1,
    "in_channels": 128,
    "attention_head_dim": 128,
    "timestep_guidance_channels": 256,
    "mlp_ratio": 3.0,
    "axes_dims_rope": [32, 32, 32, 32],
    "rope_theta": 2000,
    "eps": 1e-6,
    "guidance_embeds": False,  # distilled without a guidance embedding (cfg is real CFG or off)
}
QWEN3_8B = {  # Qwen/Qwen3-8B (FLUX.2 [klein] 9B's text_encoder)
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000,
    "tie_word_embeddings": False,
}
_KLEIN_SCHEDULER = {  # the tiny demo's (pipelines/diffusion/demo_flux2.py)
    "_class_name": "FlowMatchEulerDiscreteScheduler",
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": True,
    "base_shift": 0.5,
    "max_shift": 1.15,
    "base_image_seq_len": 256,
    "max_image_seq_len": 4096,
    "time_shift_type": "exponential",
}


def _klein(heads: int, layers: int, single_layers: int, text: dict[str, Any]) -> dict[str, Any]:
    return {
        "model_index.json": {
            "_class_name": "Flux2KleinPipeline",
            "is_distilled": True,
        },  # 4B / 9B, not the -base
        "transformer": {
            **_KLEIN_TRANSFORMER,
            "num_attention_heads": heads,
            "num_layers": layers,
            "num_single_layers": single_layers,
            "joint_attention_dim": 3 * text["hidden_size"],
        },
        "text_encoder": text,
    }


def _released() -> dict[str, dict[str, Any]]:
    from pipelines.diffusion.comfy_layouts.qwen3_config import QWEN3_4B

    return {
        "flux2-klein-4b": _klein(24, 5, 20, {**QWEN3_4B, "architectures": ["Qwen3ForCausalLM"]}),
        "flux2-klein-9b": _klein(32, 8, 24, QWEN3_8B),
    }


def write_flux2_released(root: Path | None = None) -> list[Path]:
    from pipelines.diffusion.comfy_layouts.class_config import diffusers_config

    written = []
    for name, parts in _released().items():
        out = (root or RESOURCES_DIR / "configs") / name
        files = {
            "model_index.json": parts["model_index.json"],
            "transformer/config.json": diffusers_config("Flux2Transformer2DModel", parts["transformer"]),
            "vae/config.json": diffusers_config("AutoencoderKLFlux2", {}),
            "text_encoder/config.json": parts["text_encoder"],
            "scheduler/scheduler_config.json": _KLEIN_SCHEDULER,
        }
        for rel, data in files.items():
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append(out)
    return written
