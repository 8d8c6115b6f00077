"""The config folders of the released models, written from the published sizes (configs only, no tokenizers).

Lives here: `RELEASED`, `write_released_folders`; run as `python -m pipelines.diffusion.comfy_layouts.released`
to rewrite them under resources/configs/. May import: stdlib, json, diffusers, transformers,
pipelines.paths, pipelines.diffusion.families_qwen21 (Turbo's grid).

The sizes are the published ones (the models' own config.json files, and ComfyUI's comfy/model_detection.py
for Z-Image: dim 3840, 30 heads, rotary axes 32/48/48 up to 1536/512/512, theta 256): where a diffusers class's
defaults are the released model they are used as they are. The tokenizers are not shipped (Qwen's and UMT5's
vocabularies are not ours to ship); with these folders a prompt needs `config_dir` pointing at a folder with a
`tokenizer/` (the loader says so). Shapes pick between these and the tiny demo folders (`variants`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pipelines.diffusion.comfy_layouts.class_config import diffusers_config
from pipelines.diffusion.comfy_layouts.qwen3_config import QWEN3_4B
from pipelines.diffusion.families_qwen21 import TURBO_SIGMAS
from pipelines.paths import RESOURCES_DIR

_FLOW_SCHEDULER = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000}
QWEN25_VL_7B = {  # Qwen/Qwen2.5-VL-7B-Instruct (Qwen-Image's text_encoder)
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "text_config": {
        "model_type": "qwen2_5_vl_text",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 128000,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "rope_type": "default", "mrope_section": [16, 24, 24]},
    },
    "vision_config": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2,
    },
    "vocab_size": 152064,
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
}
QWEN3_VL_8B = {  # Qwen/Qwen3-VL-8B-Instruct (Qwen-Image 2.1's text_encoder; its 4096 is the transformer's context)
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "model_type": "qwen3_vl",
    "text_config": {
        "model_type": "qwen3_vl_text",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
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
        "out_hidden_size": 4096,
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
# The pipeline's fallbacks for a resolution-dependent shift (QwenImage21Pipeline reads these keys with these
# defaults); the released scheduler_config.json was not at hand.
_QWEN21_SCHEDULER = {
    **_FLOW_SCHEDULER,
    "use_dynamic_shifting": True,
    "base_shift": 0.5,
    "max_shift": 1.15,
    "base_image_seq_len": 256,
    "max_image_seq_len": 4096,
}
QWEN3_VL_4B = {  # Qwen/Qwen3-VL-4B-Instruct (Krea 2's text_encoder, read into Qwen3VLModel; ComfyUI's qwen3vl_4b)
    "architectures": ["Qwen3VLModel"],
    "model_type": "qwen3_vl",
    "text_config": {
        "model_type": "qwen3_vl_text",
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
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
        "depth": 24,
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_heads": 16,
        "out_hidden_size": 2560,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [5, 11, 17],
    },
    "tie_word_embeddings": True,
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
}
# Krea 2's scheduler (the tiny demo's, demo_krea2): a resolution-dependent exponential shift up to 6400 tokens.
_KREA2_SCHEDULER = {
    **_FLOW_SCHEDULER,
    "shift": 1.0,
    "use_dynamic_shifting": True,
    "base_shift": 0.5,
    "max_shift": 1.15,
    "base_image_seq_len": 256,
    "max_image_seq_len": 6400,
    "time_shift_type": "exponential",
}
# The hidden states ComfyUI (comfy/text_encoders/krea2.py) and Krea2Pipeline tap: hidden_states[2, 5, ..., 35].
_KREA2_TAPS = [2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35]
UMT5_XXL = {  # google/umt5-xxl's encoder (Wan's text_encoder)
    "architectures": ["UMT5EncoderModel"],
    "model_type": "umt5",
    "d_model": 4096,
    "d_ff": 10240,
    "d_kv": 64,
    "num_layers": 24,
    "num_heads": 64,
    "vocab_size": 256384,
    "feed_forward_proj": "gated-gelu",
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "layer_norm_epsilon": 1e-6,
    "tie_word_embeddings": False,
}


CLIP_VIT_H = {  # laion/CLIP-ViT-H-14's vision tower (Wan 2.1 I2V's image_encoder)
    "architectures": ["CLIPVisionModel"],
    "model_type": "clip_vision_model",
    "hidden_act": "gelu",
    "hidden_size": 1280,
    "image_size": 224,
    "intermediate_size": 5120,
    "layer_norm_eps": 1e-05,
    "num_attention_heads": 16,
    "num_channels": 3,
    "num_hidden_layers": 32,
    "patch_size": 14,
    "projection_dim": 1024,
}
CLIP_PROCESSOR = {  # OpenAI CLIP's preprocessing at 224 px, as the Wan 2.1 I2V folder's image_processor
    "crop_size": {"height": 224, "width": 224},
    "do_center_crop": True,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_processor_type": "CLIPImageProcessor",
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"shortest_edge": 224},
}


def _wan(heads: int, ffn: int, layers: int, shift: float, **transformer: Any) -> dict[str, Any]:
    return {
        "model_index.json": {"_class_name": "WanPipeline"},
        "transformer": {"num_attention_heads": heads, "ffn_dim": ffn, "num_layers": layers, **transformer},
        "text_encoder": UMT5_XXL,
        "vae": {},
        "scheduler": {
            "_class_name": "UniPCMultistepScheduler",
            "prediction_type": "flow_prediction",
            "use_flow_sigmas": True,
            "num_train_timesteps": 1000,
            "flow_shift": shift,
        },
    }


# folder -> subfolder -> config (a diffusers class's keyword arguments over its defaults, or a transformers
# config.json); `vae: {}` is the class's defaults (the released VAE).
RELEASED: dict[str, dict[str, Any]] = {
    "zimage-turbo": {
        "model_index.json": {"_class_name": "ZImagePipeline"},
        "transformer": {"axes_lens": [1536, 512, 512]},  # ComfyUI's (and the release's) rotary lengths
        "text_encoder": QWEN3_4B,
        "vae": "flux",  # the FLUX.1 VAE, shipped in resources/configs/flux/vae
        "scheduler": {**_FLOW_SCHEDULER, "shift": 3.0, "use_dynamic_shifting": False},
    },
    "qwen-image": {
        "model_index.json": {"_class_name": "QwenImagePipeline"},
        "transformer": {},
        "text_encoder": QWEN25_VL_7B,
        "vae": {},
        "scheduler": {
            **_FLOW_SCHEDULER,
            "shift": 1.0,
            "use_dynamic_shifting": True,
            "base_shift": 0.5,
            "max_shift": 0.9,
            "base_image_seq_len": 256,
            "max_image_seq_len": 8192,
            "time_shift_type": "exponential",
            "shift_terminal": 0.02,
        },
    },
    # Qwen-Image 2.1 (and Turbo, its shipped sigma grid): the diffusers classes' defaults are the release's.
    "qwen-image-2.1": {
        "model_index.json": {"_class_name": "QwenImage21Pipeline"},
        "transformer": {},
        "text_encoder": QWEN3_VL_8B,
        "vae": {},
        "scheduler": _QWEN21_SCHEDULER,
    },
    "qwen-image-2.1-turbo": {
        "model_index.json": {"_class_name": "QwenImage21Pipeline", "sample_sigmas": list(TURBO_SIGMAS)},
        "transformer": {},
        "text_encoder": QWEN3_VL_8B,
        "vae": {},
        "scheduler": _QWEN21_SCHEDULER,
    },
    # Krea 2 (and Turbo, `is_distilled`: a fixed shift): the diffusers class's defaults are the release's (ComfyUI's
    # SingleStreamDiT defaults: width 6144, 48 heads / 12 kv heads, 28 blocks, text fusion 2 + 2 blocks at 2560).
    "krea-2": {
        "model_index.json": {"_class_name": "Krea2Pipeline", "text_encoder_select_layers": _KREA2_TAPS},
        "transformer": {},
        "text_encoder": QWEN3_VL_4B,
        "vae": {},
        "scheduler": _KREA2_SCHEDULER,
    },
    "krea-2-turbo": {
        "model_index.json": {
            "_class_name": "Krea2Pipeline",
            "text_encoder_select_layers": _KREA2_TAPS,
            "is_distilled": True,
        },
        "transformer": {},
        "text_encoder": QWEN3_VL_4B,
        "vae": {},
        "scheduler": _KREA2_SCHEDULER,
    },
    "wan2.1-t2v-1.3b": _wan(12, 8960, 30, 3.0),
    "wan2.1-t2v-14b": _wan(40, 13824, 40, 5.0),
    # Wan-AI/Wan2.2-I2V-A14B-Diffusers: each expert a 14B transformer over noise + mask (4) + frames (16).
    "wan2.2-i2v-a14b": _wan(40, 13824, 40, 5.0, in_channels=36),
    # Wan-AI/Wan2.1-I2V-14B-480P-Diffusers: the same input channels, cross-attention to CLIP ViT-H/14's states
    # (ComfyUI's clip_vision_h.safetensors, whose size and processor this folder also ships).
    "wan2.1-i2v-14b": {
        **_wan(40, 13824, 40, 3.0, in_channels=36, image_dim=1280, added_kv_proj_dim=5120),
        "image_encoder": CLIP_VIT_H,
        "image_processor": CLIP_PROCESSOR,
    },
    # Wan 2.1 FLF2V 14B 720P (diffusers' scripts/convert_wan_to_diffusers.py): the I2V transformer with the
    # first and last frames' CLIP positions (2 x 257 tokens) and flow shift 16.
    "wan2.1-flf2v-14b": {
        **_wan(
            40,
            13824,
            40,
            16.0,
            in_channels=36,
            image_dim=1280,
            added_kv_proj_dim=5120,
            pos_embed_seq_len=2 * 257,
        ),
        "image_encoder": CLIP_VIT_H,
        "image_processor": CLIP_PROCESSOR,
    },
}
_CLASSES = {  # the diffusers class of each subfolder, per pipeline
    "ZImagePipeline": {"transformer": "ZImageTransformer2DModel", "vae": "AutoencoderKL"},
    "QwenImagePipeline": {"transformer": "QwenImageTransformer2DModel", "vae": "AutoencoderKLQwenImage"},
    "WanPipeline": {"transformer": "WanTransformer3DModel", "vae": "AutoencoderKLWan"},
    "Krea2Pipeline": {"transformer": "Krea2Transformer2DModel", "vae": "AutoencoderKLQwenImage"},
    "QwenImage21Pipeline": {
        "transformer": "QwenImage21Transformer2DModel",
        "vae": "AutoencoderKLQwenImage21",
    },
}


def write_released_folders(root: Path | None = None) -> list[Path]:
    root = root or RESOURCES_DIR / "configs"
    written = []
    for name, parts in RELEASED.items():
        out = root / name
        index = parts["model_index.json"]
        classes = _CLASSES[index["_class_name"]]
        files: dict[str, dict[str, Any]] = {"model_index.json": index}
        for sub in ("transformer", "vae"):
            if parts[sub] == "flux":
                files[f"{sub}/config.json"] = json.loads(
                    (RESOURCES_DIR / "configs" / "flux" / sub / "config.json").read_text(encoding="utf-8")
                )
            else:
                files[f"{sub}/config.json"] = diffusers_config(classes[sub], parts[sub])
        files["text_encoder/config.json"] = parts["text_encoder"]
        files["scheduler/scheduler_config.json"] = parts["scheduler"]
        if "image_encoder" in parts:  # a CLIP vision encoder beside the transformer (Wan 2.1 I2V)
            files["image_encoder/config.json"] = parts["image_encoder"]
            files["image_processor/preprocessor_config.json"] = parts["image_processor"]
        for rel, data in files.items():
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append(out)
    from pipelines.diffusion.comfy_layouts.ltx2_released import write_ltx2_released
    from pipelines.diffusion.comfy_layouts.minimax_load import write_minimax_released

    written.append(write_minimax_released(root))  # MiniMax H3: two VAEs and two schedules
    from pipelines.diffusion.comfy_layouts.flux2_released import write_flux2_released

    written += write_flux2_released(root)  # FLUX.2 [klein] 4B and 9B
    return written + write_ltx2_released(root)  # LTX-2.0 19B: five diffusers parts and Gemma 3 12B


if __name__ == "__main__":
    for path in write_released_folders():
        print(path, file=sys.stderr)
