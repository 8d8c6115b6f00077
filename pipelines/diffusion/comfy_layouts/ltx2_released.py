"""The config folder of LTX-2.0 at its released size (19B), for ComfyUI's `ltx-2-19b-*` checkpoints (configs
only, no tokenizer).

Lives here: `LTX2_19B`, `write_ltx2_released`. May import: stdlib, json, diffusers, transformers,
pipelines.paths.

The sizes are diffusers' `scripts/convert_ltx2_to_diffusers.py` "2.0" configs (transformer, connectors, video
VAE, audio VAE, vocoder), the LTX-2 scheduler settings of the tiny demo (the pipeline's), and Gemma 3 12B's
text and vision sizes (ComfyUI's comfy/text_encoders/llama.py `Gemma3_12B_Config`: 48 layers of 3840, 16
heads of 256, 8 KV heads, local rotary theta 10000 every layer but each sixth, global 1e6 with linear scale 8;
SigLIP 27 x 1152 at 896 px). The shapes then pick this folder for a 19B checkpoint (`variants`), as
`released` does for the other families. LTX-2.3 (22B) is not shipped: its sizes were not at hand here, so
such a file is refused naming field `config_dir` (the model's diffusers folder).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipelines.paths import RESOURCES_DIR

_TRANSFORMER = {
    "in_channels": 128,
    "out_channels": 128,
    "num_attention_heads": 32,
    "attention_head_dim": 128,
    "cross_attention_dim": 4096,
    "audio_in_channels": 128,
    "audio_out_channels": 128,
    "audio_num_attention_heads": 32,
    "audio_attention_head_dim": 64,
    "audio_cross_attention_dim": 2048,
    "num_layers": 48,
    "caption_channels": 3840,
    "rope_double_precision": True,
    "rope_type": "split",
}
_CONNECTORS = {
    "caption_channels": 3840,
    "text_proj_in_factor": 49,  # Gemma 3 12B's 48 layers + the embeddings, stacked
    "video_connector_num_attention_heads": 30,
    "video_connector_attention_head_dim": 128,
    "video_connector_num_layers": 2,
    "video_connector_num_learnable_registers": 128,
    "audio_connector_num_attention_heads": 30,
    "audio_connector_attention_head_dim": 128,
    "audio_connector_num_layers": 2,
    "audio_connector_num_learnable_registers": 128,
    "connector_rope_base_seq_len": 4096,
    "rope_double_precision": True,
    "rope_type": "split",
}
_AUDIO_VAE = {
    "base_channels": 128,
    "output_channels": 2,
    "ch_mult": [1, 2, 4],
    "num_res_blocks": 2,
    "in_channels": 2,
    "resolution": 256,
    "latent_channels": 8,
    "norm_type": "pixel",
    "causality_axis": "height",
    "mid_block_add_attention": False,
    "sample_rate": 16000,
    "mel_hop_length": 160,
    "is_causal": True,
    "mel_bins": 64,
    "double_z": True,
}
_VOCODER = {
    "in_channels": 128,
    "hidden_channels": 1024,
    "out_channels": 2,
    "upsample_kernel_sizes": [16, 15, 8, 4, 4],
    "upsample_factors": [6, 5, 2, 2, 2],
    "resnet_kernel_sizes": [3, 7, 11],
    "resnet_dilations": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "leaky_relu_negative_slope": 0.1,
    "output_sampling_rate": 24000,
}
_SCHEDULER = {
    "_class_name": "FlowMatchEulerDiscreteScheduler",
    "num_train_timesteps": 1000,
    "use_dynamic_shifting": True,
    "base_image_seq_len": 1024,
    "max_image_seq_len": 4096,
    "base_shift": 0.95,
    "max_shift": 2.05,
    "shift_terminal": 0.1,
    "time_shift_type": "exponential",
}
_GEMMA3_12B_TEXT = {
    "hidden_size": 3840,
    "intermediate_size": 15360,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "vocab_size": 262208,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "sliding_window": 1024,
    "query_pre_attn_scalar": 256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-6,
}
_GEMMA3_VISION = {
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "image_size": 896,
    "patch_size": 14,
    "vision_use_head": False,
}
# subfolder -> (diffusers class, its keyword arguments over the class defaults)
LTX2_19B: dict[str, tuple[str, dict[str, Any]]] = {
    "transformer": ("LTX2VideoTransformer3DModel", _TRANSFORMER),
    "connectors": ("LTX2TextConnectors", _CONNECTORS),
    "vae": ("AutoencoderKLLTX2Video", {}),  # the class's defaults are LTX-2.0's video VAE
    "audio_vae": ("AutoencoderKLLTX2Audio", _AUDIO_VAE),
    "vocoder": ("LTX2Vocoder", _VOCODER),
}


def _class(name: str) -> type:
    import diffusers
    from diffusers.pipelines import ltx2

    return getattr(diffusers, name, None) or getattr(ltx2, name)


def _config(class_name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The class's `__init__` defaults with `overrides`: the config.json its `from_config` reads."""
    import inspect

    params = inspect.signature(_class(class_name).__init__).parameters
    defaults = {
        k: v.default for k, v in params.items() if k != "self" and v.default is not inspect.Parameter.empty
    }
    defaults = {k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items()}
    return {"_class_name": class_name, **defaults, **overrides}


def write_ltx2_released(root: Path | None = None) -> list[Path]:
    from transformers import Gemma3Config

    out = (root or RESOURCES_DIR / "configs") / "ltx-2-19b"
    files: dict[str, dict[str, Any]] = {
        "model_index.json": {"_class_name": "LTX2Pipeline", "vocoder": ["ltx2", "LTX2Vocoder"]},
        "scheduler/scheduler_config.json": _SCHEDULER,
        "text_encoder/config.json": {
            **Gemma3Config(
                text_config=_GEMMA3_12B_TEXT, vision_config=_GEMMA3_VISION, mm_tokens_per_image=256
            ).to_dict(),
            "architectures": ["Gemma3ForConditionalGeneration"],
        },
    }
    for sub, (class_name, overrides) in LTX2_19B.items():
        files[f"{sub}/config.json"] = _config(class_name, overrides)
    for rel, data in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return [out]
